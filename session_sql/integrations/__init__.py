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

CLAUDE_ENTRY = "claude-agent-sdk/entry"
"""One line of a Claude Agent SDK transcript, kept verbatim: log-only, its data is the entry."""

CLAUDE_SUMMARY = "claude-agent-sdk/summary"
"""The SDK's folded summary of a Claude transcript after a batch: log-only, opaque data."""

CATALOG = Catalog([ADK_STATE, CLAUDE_ENTRY, CLAUDE_SUMMARY], items=[OPENAI_AGENTS_ITEM, ADK_EVENT])
"""The integrations' catalog types (added to every store's default catalog)."""

__all__ = [
    "ADK_EVENT",
    "ADK_STATE",
    "CATALOG",
    "CLAUDE_ENTRY",
    "CLAUDE_SUMMARY",
    "OPENAI_AGENTS_ITEM",
]
