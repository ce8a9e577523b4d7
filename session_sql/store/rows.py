"""The one seam between ``events`` rows and ``SessionEvent``s (and the surface positions).

Rows never leak: a row becomes a wire dict or an event here, and a row that cannot becomes a
``CorruptSessionError`` naming the session and seq.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple

from session_sql.catalog import Catalog
from session_sql.errors import CorruptSessionError, InvalidEventError, NotJSONError
from session_sql.events import Replace, SessionEvent
from session_sql.surface import (
    AppendNode,
    ReplaceNodes,
    Surface,
    Transition,
    is_exempt,
    plan,
)


def event_row(session_id: str, event: SessionEvent) -> dict[str, Any]:
    """The ``events`` row of an event (``data`` is serialised by the column type)."""
    op = event.surface_op
    return {
        "session_id": session_id,
        "seq": event.seq,
        "type": event.type,
        "time": event.time,
        "data": event.data,
        "source_event_seqs": (
            None if event.source_event_seqs is None else json.dumps(list(event.source_event_seqs))
        ),
        "surface_op": (
            None if op is None else json.dumps(op.to_json() if isinstance(op, Replace) else op)
        ),
        "ignorable": True if event.ignorable else None,
    }


def wire_from_row(session_id: str, row: Any) -> dict[str, Any]:
    """The wire dict stored in a row (not yet validated)."""
    try:
        wire: dict[str, Any] = {
            "type": row.type,
            "seq": row.seq,
            "time": row.time,
            "data": row.data,
        }
        if row.surface_op is not None:
            wire["surfaceOp"] = json.loads(row.surface_op)
        if row.source_event_seqs is not None:
            wire["sourceEventSeqs"] = json.loads(row.source_event_seqs)
        if row.ignorable is not None:
            wire["ignorable"] = row.ignorable
    except ValueError as exc:
        raise CorruptSessionError(
            f"session {session_id!r} seq {row.seq}: unreadable surface metadata: {exc}",
            session_id=session_id,
            seq=row.seq,
        ) from exc
    return wire


def event_from_row(session_id: str, row: Any) -> SessionEvent:
    """An envelope-checked, frozen event from a row, or ``CorruptSessionError``."""
    try:
        return SessionEvent.from_json(wire_from_row(session_id, row))
    except (InvalidEventError, NotJSONError) as exc:
        raise CorruptSessionError(
            f"session {session_id!r} seq {row.seq}: stored event is invalid: {exc}",
            session_id=session_id,
            seq=row.seq,
        ) from exc


class SurfaceRows(NamedTuple):
    """The ``surface`` table content a log implies: ``(pos, event_seq)`` in surface order."""

    rows: list[tuple[int, int]]
    next_pos: int
    replace_generation: int


def advance_positions(rows: list[tuple[int, int]], next_pos: int, transition: Transition) -> int:
    """Apply a transition to positioned rows, exactly as the writer applies it to the table.

    An append takes ``next_pos``; a replace keeps the start row's position for the new seq and
    drops the rest of the range. Returns the new ``next_pos``.
    """
    if type(transition) is AppendNode:
        rows.append((next_pos, transition.seq))
        return next_pos + 1
    if type(transition) is ReplaceNodes:
        start_pos = rows[transition.start_pos][0]
        rows[transition.start_pos : transition.end_pos + 1] = [(start_pos, transition.seq)]
    return next_pos


def surface_rows(events: Iterable[SessionEvent], catalog: Catalog) -> SurfaceRows:
    """Replay a checked log into the surface rows the store keeps for it."""
    log: list[SessionEvent] = []
    rows: list[tuple[int, int]] = []
    nodes: list[int] = []
    next_pos = generation = 0
    for event in events:
        log.append(event)
        if is_exempt(event, catalog):
            continue
        transition = plan(nodes, event, log.__getitem__)
        if transition is None:
            continue
        next_pos = advance_positions(rows, next_pos, transition)
        if Surface.apply_to(nodes, transition):
            generation += 1
    return SurfaceRows(rows, next_pos, generation)
