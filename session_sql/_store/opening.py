"""What ``open_session`` reads: the planner's state without a replay, and a lazily read log.

To accept the next append, the planner and the session's rules need the surface (its seqs and
stored positions), the two counters and the head of the session row, the header's
``isSeeded`` and ``inherited_event_count`` (the inherited-marker rule), and, for the
tool/result replacement rule, the events still on the surface (a replace can only shadow
those). ``resume`` needs the last event's type. None of it needs the rest of the log, so a
write handle reads the ``surface`` table joined to its events, the session row and the head
event: O(surface), whatever the length of the log.

Instead of replaying, the reads are checked against the session row: ``surface_digest``
(every write keeps it) must be the digest of the surface rows read and of the counters, the
head event must exist with nothing past it, every surface event must be a valid node. The
rest of the log is read on first use (``StoredLog``), each event checked as a load checks it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, cast, overload

from session_sql._store import reader
from session_sql._store.context import MISSING, OPEN_ROW_COLUMNS, OpenRow, StoreContext
from session_sql._store.database import fetch_rows, snapshot_tx, translate_errors
from session_sql._store.reader import event_rows_in
from session_sql._store.stored import event_from_row
from session_sql.catalog import NODE_TYPES
from session_sql.errors import (
    CorruptSessionError,
    InvalidEventError,
    NotJSONError,
    SessionNotFoundError,
)
from session_sql.events import Replace, SessionEvent
from session_sql.session import check_logged
from session_sql.surface import Replay, Surface


class Opened(NamedTuple):
    """A stored session as a write handle reads it: its row, its state, its known events."""

    row: Any
    state: Replay
    known: dict[int, SessionEvent]
    """The surface's events and the head event, checked, by seq."""


def read_open(ctx: StoreContext, session_id: str) -> Opened:
    """Read (one snapshot) and check what a write handle needs; ``CorruptSessionError`` when
    the reads disagree with the session row, ``SessionNotFoundError`` when there is no row.

    Every event it reads is checked as a load checks it (envelope, catalog gate, data rules):
    a handle never writes on top of an event this build would refuse.
    """
    with translate_errors(session_id):
        read = _parts(reader.by_kept_key_alone(ctx, session_id, ctx.compiled.opening))
    if read is None:  # no key kept, or a stale one: the key by the id, then the same read
        with translate_errors(session_id), snapshot_tx(ctx.engine) as conn:
            key = reader.session_key(conn, ctx, session_id)
            c = ctx.compiled.opening
            read = _parts(fetch_rows(conn, c, {**c.defaults, "b_key": key}))
        if read is None:  # the row went after its id was read: deleted in between
            raise SessionNotFoundError.for_session(session_id)
    row, nodes, ends = read
    head = row.head_seq
    known: dict[int, SessionEvent] = {}
    if head >= 0:
        if not ends or ends[0][0] != head:  # its seq
            raise _corrupt(session_id, f"the event at head_seq {head} is missing", seq=head)
        known[head] = kept_event(ctx, session_id, tuple(ends[0]))
    if len(ends) > (1 if head >= 0 else 0):
        raise _corrupt(session_id, f"events are stored past head_seq {head}")
    positions: list[int] = []
    seqs: list[int] = []
    for node in nodes:
        pos, seq, type_ = node[0], node[1], node[2]
        if seq > head or pos >= row.surface_next_pos:
            raise _corrupt(
                session_id,
                f"surface row (pos {pos}, seq {seq}) lies past the session row's "
                f"head_seq {head} or surface_next_pos {row.surface_next_pos}",
            )
        if type_ not in NODE_TYPES and type_ not in ctx.catalog.item_types:
            raise _corrupt(session_id, f"a {type_} event is on the surface", seq=seq)
        event = known[seq] if seq == head else kept_event(ctx, session_id, node[1:])
        op = event.surface_op
        # What plan() asked of it when it went on: a surfaceOp, a range before it.
        if op is None or (isinstance(op, Replace) and max(op) >= seq):
            raise _corrupt(
                session_id, f"surface event seq {seq} has no valid surfaceOp ({op!r})", seq=seq
            )
        known[seq] = event
        positions.append(pos)
        seqs.append(seq)
    state = Replay(Surface(seqs, row.replace_generation), positions, row.surface_next_pos, head + 1)
    if state.digest != row.surface_digest:
        raise _corrupt(
            session_id,
            "the surface table, surface_next_pos or replace_generation disagrees with "
            f"surface_digest {row.surface_digest}",
        )
    return Opened(row, state, known)


def _parts(rows: list[Any] | None) -> tuple[OpenRow, list[Any], list[Any]] | None:
    """``Statements.opening``'s rows as the session row, its surface rows with their events
    and its head event (and anything past it); None without rows or without the session row
    (a key that is stale: the session was deleted, perhaps created again under its id)."""
    if not rows or rows[0][0] != 0:
        return None
    wide = len(OPEN_ROW_COLUMNS) + 1  # the part, then the row's columns,
    node_end = wide + 1 + (len(rows[0]) - wide - 1) // 2  # a node's pos and event, an event
    row = OpenRow(*rows[0][1:wide])
    nodes = [r[wide:node_end] for r in rows if r[0] == 1]
    ends = [r[node_end:] for r in rows if r[0] == 2]
    return row, nodes, ends


def checked_event(ctx: StoreContext, session_id: str, event_row: Any) -> SessionEvent:
    """A stored event, checked as a load checks it (envelope, catalog gate, data rules)."""
    event = event_from_row(session_id, event_row)
    try:
        return check_logged(event, event.seq, ctx.catalog, parsed=True)
    except (InvalidEventError, NotJSONError) as exc:
        raise CorruptSessionError(
            f"session {session_id!r} seq {event.seq}: stored event is invalid: {exc}",
            session_id=session_id,
            seq=event.seq,
        ) from exc


def kept_event(ctx: StoreContext, session_id: str, event_row: tuple[Any, ...]) -> SessionEvent:
    """``checked_event`` through the store's kept events (``ctx.checked``).

    An event read at an earlier open of the session, with the very same row (seq, type, time,
    data text, surface op, sources, ignorable), is taken as it was checked then: checking is a
    pure function of the row and the store's catalog, so the guarantee is the same; a row
    changed since is checked again (and refused when invalid: failures are never kept).
    """
    text, sources = event_row[3], event_row[4]
    if type(text) is not str or not (sources is None or type(sources) is str):
        return checked_event(ctx, session_id, event_row)
    key = (session_id, event_row)
    kept = ctx.checked.get(key)
    if kept is not MISSING:
        return cast(SessionEvent, kept)
    event = checked_event(ctx, session_id, event_row)
    ctx.checked.put(key, event, len(text) + (0 if sources is None else len(sources)))
    return event


def _corrupt(session_id: str, why: str, *, seq: int | None = None) -> CorruptSessionError:
    return CorruptSessionError(
        f"session {session_id!r}: {why}; run verify (refusing to write on top of it)",
        session_id=session_id,
        seq=seq,
    )


def read_log(
    ctx: StoreContext, session_id: str, incarnation: str, count: int
) -> list[SessionEvent]:
    """Events ``0..count-1`` of a stored session, each checked, from one snapshot.

    ``SessionNotFoundError`` when the session was deleted (or recreated) since the handle
    opened it; ``CorruptSessionError`` when an event is missing or invalid.
    """
    events: list[SessionEvent] = []
    with translate_errors(session_id), snapshot_tx(ctx.engine) as conn:
        try:
            row = reader.session_row(conn, ctx, session_id)
        except SessionNotFoundError:
            row = None
        if row is None or row.incarnation != incarnation:
            raise SessionNotFoundError.deleted_since_opened(session_id, recreated=False)
        for event_row in event_rows_in(conn, ctx, row.session_key, count - 1):
            if event_row[0] != len(events):  # its seq
                break
            events.append(checked_event(ctx, session_id, event_row))
    if len(events) != count:
        raise _corrupt(
            session_id, f"event seq {len(events)} is missing below the head", seq=len(events)
        )
    return events


class StoredLog:
    """A write handle's log: what ``open_session`` read, the rest read on first use.

    Holds the stored length at open, the events read then (the surface's and the head), and
    the events appended or refreshed since. Any access to another stored event reads every
    stored event once (``read``); the events already held keep their identity. Only what a
    session does with its log is supported (``EventLog``).
    """

    __slots__ = ("_known", "_new", "_read", "fetch", "session_id", "stored")

    def __init__(
        self,
        session_id: str,
        stored: int,
        known: dict[int, SessionEvent],
        fetch: Callable[[int], list[SessionEvent]],
    ) -> None:
        self.session_id = session_id
        self.stored = stored
        self._known = known
        self._read: list[SessionEvent] | None = None
        self._new: list[SessionEvent] = []
        self.fetch = fetch
        """Reads stored events ``0..count-1``; the async handle swaps in its own way."""
        if len(known) == stored:
            self.adopt([known[seq] for seq in range(stored)])

    @property
    def is_read(self) -> bool:
        """Whether every stored event is in memory."""
        return self._read is not None

    def adopt(self, events: list[SessionEvent]) -> None:
        """Take the stored events read elsewhere; keeps the objects already held."""
        if len(events) != self.stored:
            raise ValueError(f"expected {self.stored} stored events, got {len(events)}")
        for seq, event in self._known.items():
            if events[seq] != event:
                raise CorruptSessionError(
                    f"session {self.session_id!r}: stored event seq {seq} changed since the "
                    "handle opened the session; run verify",
                    session_id=self.session_id,
                    seq=seq,
                )
            events[seq] = event
        self._read = events
        self._known = {}

    def read(self) -> list[SessionEvent]:
        if self._read is None:
            self.adopt(self.fetch(self.stored))
        assert self._read is not None
        return self._read

    def __len__(self) -> int:
        return self.stored + len(self._new)

    @overload
    def __getitem__(self, index: int) -> SessionEvent: ...
    @overload
    def __getitem__(self, index: slice) -> list[SessionEvent]: ...
    def __getitem__(self, index: int | slice) -> SessionEvent | list[SessionEvent]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("event index out of range")
        if index >= self.stored:
            return self._new[index - self.stored]
        if self._read is not None:
            return self._read[index]
        event = self._known.get(index)
        return self.read()[index] if event is None else event

    def __iter__(self) -> Iterator[SessionEvent]:
        for i in range(len(self)):
            yield self[i]

    def append(self, event: SessionEvent) -> None:
        self._new.append(event)

    def extend(self, events: Iterable[SessionEvent]) -> None:
        self._new.extend(events)

    def __delitem__(self, index: slice) -> None:
        """Drop events taken in since open (a refresh that failed); never stored ones."""
        start = index.start if index.start is not None else 0
        if index.stop is not None or index.step is not None or start < self.stored:
            raise ValueError("only events taken in since the handle opened can be dropped")
        del self._new[start - self.stored :]

    def __repr__(self) -> str:
        held = "all" if self._read is not None else f"{len(self._known)} of"
        return f"StoredLog({held} {self.stored} stored events read, {len(self._new)} since)"
