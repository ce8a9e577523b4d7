"""``session-sql stats``: how the store's aggregates (``SessionStore.stats``) are printed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from session_sql.cli._support import counted

if TYPE_CHECKING:  # a type only: importing it would load the store
    from session_sql import StoreStats

__all__ = ["headline", "skipped_line", "tables"]


def headline(stats: StoreStats) -> str:
    scope = f"session {stats.session_id}" if stats.session_id else "all sessions"
    sessions = counted(stats.sessions, "session")
    forks, events = counted(stats.forks, "fork"), counted(stats.events, "event")
    return f"{scope}: {sessions} ({forks}), {events}"


def tables(stats: StoreStats) -> list[tuple[str, list[str], list[list[str]]]]:
    """``(title, headers, rows)`` of each table ``session-sql stats`` prints."""
    return [
        (
            "Events by type",
            ["TYPE", "EVENTS"],
            [[t, str(n)] for t, n in stats.events_by_type.items()],
        ),
        (
            "Tool calls",
            ["TOOL", "CALLS", "ERRORS", "ERROR RATE"],
            [
                [t.tool, str(t.calls), str(t.errors), f"{t.errors / t.calls:.0%}"]
                for t in stats.tools
            ],
        ),
        (
            "Tokens (assistant/message usage)",
            ["MODEL", "MESSAGES", "INPUT", "OUTPUT"],
            [
                [m.model, str(m.messages), f"{m.input_tokens:,}", f"{m.output_tokens:,}"]
                for m in stats.tokens
            ],
        ),
        (
            "Replacements",
            ["REPLACING TYPE", "COUNT"],
            [[t, str(n)] for t, n in stats.replacements.items()],
        ),
    ]


def skipped_line(stats: StoreStats) -> str | None:
    """The line that says how many token counts were not summed (not sane integers)."""
    skipped = sum(m.skipped_token_counts for m in stats.tokens)
    if not skipped:
        return None
    return f"token counts skipped (not an integer from 0 to 9,999,999,999): {skipped}"
