"""Storage for agent frameworks, built on session_sql's public API (optional extras).

Each integration lives in its own module and imports its framework; importing this package
imports none. ``CATALOG`` holds the catalog types the integrations write: the
``session_sql.event_types`` entry point contributes it, so every store knows them and can read
a framework's sessions (the CLI, ``verify``, an analyst's store) without the framework.
"""

from __future__ import annotations

from session_sql.catalog import Catalog

OPENAI_AGENTS_ITEM = "openai-agents/item"
"""An OpenAI Agents SDK history item: on the surface, its message is the item itself."""

ADK_EVENT = "adk/event"
"""A Google ADK event no core message holds: on the surface, its message is the event's JSON."""

ADK_STATE = "adk/state"
"""A change of ADK app or user state: log-only, ``{delta, state, cause?}``."""

CATALOG = Catalog([ADK_STATE], items=[OPENAI_AGENTS_ITEM, ADK_EVENT])
"""The integrations' catalog types (added to every store's default catalog)."""

__all__ = ["ADK_EVENT", "ADK_STATE", "CATALOG", "OPENAI_AGENTS_ITEM"]
