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

PYDANTIC_AI_RUN = "pydantic-ai/run"
"""A pydantic-ai run's record (``RunRecord``): log-only."""

PYDANTIC_AI_STEP = "pydantic-ai/step"
"""A pydantic-ai step event (``StepEvent``): log-only."""

PYDANTIC_AI_SNAPSHOT = "pydantic-ai/snapshot"
"""A continuable snapshot, its history as the seqs of the events keeping its messages."""

PYDANTIC_AI_EFFECT = "pydantic-ai/tool-effect"
"""A tool-effect record (``ToolEffectRecord``): log-only, the latest per tool call holds."""

PYDANTIC_AI_REVISION = "pydantic-ai/revision"
"""A later version of a model message on the surface that renders the same: ``{of, message}``
(log-only; pydantic-ai fills in a request's timestamp when it sends it)."""

PYDANTIC_AI_MESSAGE = "pydantic-ai/message"
"""A pydantic-ai model message no core message holds: on the surface, its message is itself."""

CATALOG = Catalog(
    [
        ADK_STATE,
        CLAUDE_ENTRY,
        CLAUDE_SUMMARY,
        PYDANTIC_AI_RUN,
        PYDANTIC_AI_STEP,
        PYDANTIC_AI_SNAPSHOT,
        PYDANTIC_AI_EFFECT,
        PYDANTIC_AI_REVISION,
    ],
    items=[OPENAI_AGENTS_ITEM, ADK_EVENT, PYDANTIC_AI_MESSAGE],
)
"""The integrations' catalog types (added to every store's default catalog)."""

__all__ = [
    "ADK_EVENT",
    "ADK_STATE",
    "CATALOG",
    "CLAUDE_ENTRY",
    "CLAUDE_SUMMARY",
    "OPENAI_AGENTS_ITEM",
    "PYDANTIC_AI_EFFECT",
    "PYDANTIC_AI_MESSAGE",
    "PYDANTIC_AI_REVISION",
    "PYDANTIC_AI_RUN",
    "PYDANTIC_AI_SNAPSHOT",
    "PYDANTIC_AI_STEP",
]
