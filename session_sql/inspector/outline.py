"""What a session page draws beside its page of log: turns, token usage, replacements, tool pairs.

The log of a large session is shown a page at a time, but the timeline, the token chart and
the links between a replacement and what it shadows need facts from the whole log. They come
from one narrow query over the session's events through the read-only ORM models
(``session_sql.orm``): the turn and step boundaries, each reply's ``usage`` (extracted by the
database, not the whole message), and the replacing events with their ``sourceEventSeqs`` —
never the data of the other events, so the cost follows the number of events, not their size.
Tool calls meet their results through the store's computed ``call_id`` column.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session as OrmSession

from session_sql import InvalidEventError, SessionNotFoundError, SessionStore, SurfaceMessage
from session_sql.messages import project_data
from session_sql.orm import orm_models

__all__ = [
    "Outline",
    "Replacement",
    "SurfacePage",
    "Turn",
    "call_partners",
    "outline",
    "session_key",
    "surface_page",
]

BOUNDARY_TYPES = ("turn/start", "turn/end", "step/start", "assistant/message")
APPEND_OP = '"append"'


@dataclass
class Turn:
    """One turn: its boundaries, how many steps it took, and the tokens its replies used."""

    turn: int
    start_seq: int
    end_seq: int | None = None
    reason: str | None = None
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class Replacement:
    """A replacing event (a summary, a pruned tool result, a removal) and what it cites."""

    seq: int
    type: str
    start: int
    end: int
    sources: tuple[int, ...]


@dataclass
class Outline:
    """The whole-log facts of one session page."""

    turns: list[Turn] = field(default_factory=list)
    replacements: list[Replacement] = field(default_factory=list)
    skipped_tokens: int = 0
    """Token counts in ``usage`` that are not an integer from 0 to ``MAX_TOKENS`` (``1.5``,
    ``"abc"``, ``-5``): free-form JSON the chart does not draw, and says so."""
    turns_from: int = 0
    """The first seq the turns were read from (0: the whole log)."""

    def shadowed_by(self, seqs: Iterable[int]) -> dict[int, list[int]]:
        """For each of ``seqs`` cited by a replacement, the replacements that cite it."""
        wanted = set(seqs)
        found: dict[int, list[int]] = {}
        for rep in self.replacements:
            for source in rep.sources:
                if source in wanted:
                    found.setdefault(source, []).append(rep.seq)
        return found


def _session_key(orm: OrmSession, models: Any, store: SessionStore, session_id: str) -> int:
    row = models.SessionRow
    key = orm.execute(
        select(row.session_key).where(row.tenant == store.tenant, row.id == session_id)
    ).scalar()
    if key is None:
        raise SessionNotFoundError.for_session(session_id)
    return int(key)


MAX_TOKENS = 9_999_999_999
"""The largest token count the chart draws (as ``stats`` sums, ``Backend.json_count``)."""


def _tokens(value: Any) -> int | None:
    """A token count as JSON gave it: an integer from 0 to ``MAX_TOKENS``, else ``None``."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS:
        return value
    return None


session_key = _session_key
"""The session's internal key in the tenant (``SessionNotFoundError`` when it has none)."""


def _int(value: Any) -> int:
    """A token count or turn number as JSON gave it (anything else counts as 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def outline(
    store: SessionStore, session_id: str, *, turns_from: int = 0, turns_to: int | None = None
) -> Outline:
    """The replacements of the whole log, and the turns (with steps and token usage) that
    start in seqs ``[turns_from, turns_to)``: the replacements are few and need no JSON
    read, while the turns are a scan of their window (the page bounds it)."""
    models = orm_models(store.schema)
    ev: Any = models.Event  # (the JSON paths and call_id are not in the stub types)
    with OrmSession(store.engine) as orm:
        key = _session_key(orm, models, store, session_id)
        replacing = orm.execute(
            select(ev.seq, ev.type, ev.surface_op, ev.source_event_seqs)
            .where(ev.session_key == key, ev.surface_op.is_not(None), ev.surface_op != APPEND_OP)
            .order_by(ev.seq)
        ).all()
        window = [ev.session_key == key, ev.seq >= turns_from, ev.type.in_(BOUNDARY_TYPES)]
        if turns_to is not None:
            window.append(ev.seq < turns_to)
        rows = orm.execute(
            select(
                ev.seq,
                ev.type,
                ev.data["turn"],
                ev.data["usage"],
                ev.data[("reason", "kind")],
            )
            .where(*window)
            .order_by(ev.seq)
        ).all()
    result = Outline(turns_from=turns_from)
    for seq, type_, op_text, sources_text in replacing:
        op = json.loads(op_text)
        sources = tuple(json.loads(sources_text)) if sources_text else ()
        if isinstance(op, dict):
            result.replacements.append(
                Replacement(int(seq), type_, int(op["start"]), int(op["end"]), sources)
            )
    by_number: dict[int, Turn] = {}
    current: Turn | None = None
    for seq, type_, turn_value, usage, reason in rows:
        number = _int(turn_value)
        if type_ == "turn/start":
            current = Turn(turn=number, start_seq=int(seq))
            result.turns.append(current)
            by_number[number] = current
            continue
        target = by_number.get(number, current)
        if target is None:  # a turn that started before the window
            continue
        if type_ == "turn/end":
            if target.end_seq is None:
                target.end_seq = int(seq)
                target.reason = reason if isinstance(reason, str) else None
        elif type_ == "step/start":
            target.steps += 1
        elif type_ == "assistant/message" and isinstance(usage, Mapping):
            given = (usage.get("inputTokens"), usage.get("outputTokens"))
            counts = [_tokens(value) for value in given]
            result.skipped_tokens += sum(
                1 for v, c in zip(given, counts, strict=True) if v is not None and c is None
            )
            target.input_tokens += counts[0] or 0
            target.output_tokens += counts[1] or 0
    return result


def call_partners(
    store: SessionStore, session_id: str, call_ids: Sequence[str]
) -> dict[str, dict[str, int]]:
    """For each call id, the seq of its ``tool/call`` and of its appended ``tool/result``."""
    if not call_ids:
        return {}
    models = orm_models(store.schema)
    ev: Any = models.Event
    found: dict[str, dict[str, int]] = {}
    with OrmSession(store.engine) as orm:
        key = _session_key(orm, models, store, session_id)
        for start in range(0, len(call_ids), 500):
            chunk = list(call_ids[start : start + 500])
            rows = orm.execute(
                select(ev.call_id, ev.type, ev.seq).where(
                    ev.session_key == key,
                    ev.call_id.in_(chunk),
                    or_(ev.type == "tool/call", ev.surface_op == APPEND_OP),
                )
            ).all()
            for call_id, type_, seq in rows:
                kind = "call" if type_ == "tool/call" else "result"
                found.setdefault(str(call_id), {}).setdefault(kind, int(seq))
    return found


@dataclass
class SurfacePage:
    """A page of the surface, and which events of a page of the log are on the surface."""

    length: int
    """How many nodes the whole surface has."""
    first: int
    """The ordinal (1-based) of the first node of ``nodes``."""
    nodes: list[SurfaceMessage]
    on_surface: frozenset[int]


def surface_page(
    store: SessionStore,
    session_id: str,
    *,
    first: int | None,
    limit: int | None,
    seqs: tuple[int, int | None] = (0, 0),
) -> SurfacePage:
    """``limit`` surface nodes (None: all) from the ``first``-th (1-based; None: the last
    page), and which events of seqs ``[start, stop)`` are on the surface (none by default).

    Read by offset along the surface's key, so any page costs about the same; positions
    (``pos``) have gaps where replacements took nodes off, ordinals do not.
    """
    models = orm_models(store.schema)
    node: Any = models.SurfaceNode
    ev: Any = models.Event
    items = store.catalog.item_types
    start, stop = seqs
    with OrmSession(store.engine) as orm:
        key = _session_key(orm, models, store, session_id)
        length = orm.execute(select(func.count()).where(node.session_key == key)).scalar_one()
        if limit is None:
            offset = 0
        elif first is None:
            offset = max(0, length - limit)
        else:
            offset = min(first - 1, length)  # (past the end: an empty page, no huge OFFSET)
        # The page's positions first, along the surface's key alone; then their events.
        positions = (
            select(node.pos, node.event_seq)
            .where(node.session_key == key)
            .order_by(node.pos)
            .offset(offset)
        )
        page = (positions if limit is None else positions.limit(limit)).subquery()
        rows = orm.execute(
            select(page.c.pos, ev.seq, ev.type, ev.data)
            .join(ev, and_(ev.session_key == key, ev.seq == page.c.event_seq))
            .order_by(page.c.pos)
        ).all()
        shown = [node.session_key == key, node.event_seq >= start]
        if stop is not None:
            shown.append(node.event_seq < stop)
        on_surface = frozenset(
            int(s) for s in orm.execute(select(node.event_seq).where(*shown)).scalars()
        )
    nodes = []
    for pos, seq, type_, data in rows:
        try:
            message = project_data(type_, data, int(seq), checked=False, items=items)
        except (InvalidEventError, KeyError, TypeError):
            message = None  # (malformed: shown as no message; ``verify`` names it)
        nodes.append(SurfaceMessage(int(pos), int(seq), str(type_), message))
    return SurfacePage(int(length), offset + 1, nodes, on_surface)
