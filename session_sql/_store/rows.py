"""The encoding half of the seam between ``events`` rows and ``SessionEvent``s.

An event becomes its stored row here (``event_values``, the one codec every writer binds),
and the columns a reader selects are named here (``event_columns``); a row becomes an event
in ``stored`` (``event_from_row``), which needs no SQLAlchemy, so that the command line's
quick SQLite reads decode rows exactly as the store does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import Table, Text, cast

from session_sql.errors import (
    InvalidEventError,
    InvalidHeaderError,
)
from session_sql.events import (
    SessionEvent,
)
from session_sql.jsoncodec import check_json_size, dumps_frozen
from session_sql.jsoncodec import dumps_compact as dumps_json
from session_sql.jsonvalue import json_depth
from session_sql.surface import Replay

MAX_STORED_DEPTH = 512
"""Data nested deeper is refused by the store: every backend must be able to read it back."""

EVENT_VALUE_COLUMNS: Final = (
    "session_key",
    "seq",
    "time",
    "ignorable",
    "tenant",
    "type",
    "surface_op",
    "source_event_seqs",
    "data",
)
"""The ``events`` columns a writer writes, in the table's order: the order of
:func:`event_values` (the database computes the others)."""

SURFACE_COLUMNS: Final = ("session_key", "pos", "event_seq", "tenant")
"""The ``surface`` columns a writer writes, in the order of its rows."""

_APPEND_TEXT: Final = json.dumps("append")


def event_values(
    tenant: str, session_key: int, event: SessionEvent, max_event_bytes: int | None
) -> tuple[Any, ...]:
    """The stored ``events`` row of an event, in ``EVENT_VALUE_COLUMNS`` order: the one codec.

    Every writer binds these tuples, as they are or as the column arrays of an ``unnest``
    (the appends, the bulk writer and ``COPY``, the import, create and fork), so a row is
    spelled one way whatever wrote it. ``data`` is serialised here and checked against the
    store's limits: raises ``InvalidEventError`` for data above ``max_event_bytes`` or nested
    deeper than ``MAX_STORED_DEPTH``, before any transaction starts.
    """
    text = dumps_frozen(event.data)  # event data is validated and frozen
    check_stored_text(text, event, max_event_bytes)
    op = event.surface_op
    seqs = event.source_event_seqs
    return (
        session_key,
        event.seq,
        event.time,
        True if event.ignorable else None,
        tenant,
        event.type,
        None if op is None else _APPEND_TEXT if isinstance(op, str) else json.dumps(op.to_json()),
        # Checked ints (never bools): what json.dumps writes for the list.
        None if seqs is None else "[" + ", ".join(map(str, seqs)) + "]",
        text,
    )


NEW_SESSION_KEY: Final = 0
"""The ``session_key`` of rows built before their session's row exists (a creation's, an
import's): :func:`with_session_key` gives them the key the row insert returned. Never a
stored key (keys start at 1)."""


def with_session_key(rows: Sequence[tuple[Any, ...]], key: int) -> list[tuple[Any, ...]]:
    """``rows`` (``event_values`` tuples) with their ``session_key`` set to ``key``."""
    return [(key, *row[1:]) for row in rows]


def check_stored_text(text: str, event: SessionEvent, max_event_bytes: int | None) -> None:
    """The store's limits on an event's serialised ``data`` (``text``): size and depth.

    Raises ``InvalidEventError``; :func:`event_values` checks every event's data with it.
    """
    check_json_size(text, max_event_bytes, event.seq)
    # Brackets bound the depth from above; only a bracket-heavy event pays for the real walk.
    if len(text) > MAX_STORED_DEPTH and text.count("[") + text.count("{") > MAX_STORED_DEPTH:
        depth = json_depth(event.data)
        if depth > MAX_STORED_DEPTH:
            raise InvalidEventError(
                f"event data nests {depth} levels deep; the store keeps at most "
                f"{MAX_STORED_DEPTH} so that every backend can read it back",
                seq=event.seq,
            )


def check_header_limits(header: Any, max_event_bytes: int | None) -> None:
    """The store's limits on a session header: size and depth, as for event data.

    Raises ``InvalidHeaderError`` before any transaction starts: the header's extra keys are
    arbitrary JSON, and a header the store could not read back would lock the session out.
    """
    text = dumps_json(header)
    if max_event_bytes is not None and len(text) * 4 > max_event_bytes:
        size = len(text.encode("utf-8"))
        if size > max_event_bytes:
            raise InvalidHeaderError(
                f"session header is {size} bytes of JSON, above the limit of "
                f"{max_event_bytes} bytes"
            )
    if text.count("[") + text.count("{") > MAX_STORED_DEPTH:
        depth = json_depth(header)
        if depth > MAX_STORED_DEPTH:
            raise InvalidHeaderError(
                f"session header nests {depth} levels deep; the store keeps at most "
                f"{MAX_STORED_DEPTH} so that every backend can read it back"
            )


def event_columns(e: Table) -> list[Any]:
    """The columns of events table ``e`` a reader selects; ``data`` arrives as JSON text."""
    # As text, not parsed by the driver: loads_frozen parses, validates and freezes in one go.
    return [
        e.c.seq,
        e.c.type,
        e.c.time,
        cast(e.c.data, Text).label("data"),
        e.c.source_event_seqs,
        e.c.surface_op,
        e.c.ignorable,
    ]


def stored_problems(
    row: Any, state: Replay, table: list[tuple[int, int]] | None = None
) -> list[str]:
    """How the stored session row, and the ``surface`` rows when given, differ from a replay.

    ``row`` has ``head_seq``, ``surface_next_pos``, ``replace_generation`` and
    ``surface_digest``; ``state`` is the
    replay of the log; ``table`` is the surface table as ``(pos, event_seq)`` in ``pos`` order.
    Empty when they match: the one "stored rows match the log" check, for ``verify``, for a
    writer's load and for ``refresh``.
    """
    problems: list[str] = []
    if table is not None:
        expected = state.rows()
        if table != expected:
            problems.append(_surface_diff(table, expected))
    for column, want in (
        ("head_seq", state.length - 1),
        ("surface_next_pos", state.next_pos),
        ("replace_generation", state.replace_generation),
        ("surface_digest", state.digest),
    ):
        if getattr(row, column) != want:
            problems.append(f"sessions.{column} is {getattr(row, column)}, the log implies {want}")
    return problems


def _surface_diff(table: list[tuple[int, int]], expected: list[tuple[int, int]]) -> str:
    extra = sorted(set(table) - set(expected))
    missing = sorted(set(expected) - set(table))
    if not extra and not missing:
        return "surface table rows are out of order"
    return f"surface table differs from the fold: extra (pos, seq) {extra}, missing {missing}"
