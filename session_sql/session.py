"""The in-memory session: seeds, readers, fork, and appends (SPEC §7) through
``pending.PendingAppend``, the append protocol."""

from __future__ import annotations

import time as _time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, TypeVar, overload

from session_sql._gc import paused_for
from session_sql.arguments import check_last
from session_sql.catalog import Catalog, default_catalog
from session_sql.errors import (
    ForkError,
    InvalidEventError,
    InvalidHeaderError,
    InvalidSeedError,
    NotJSONError,
    SessionFormatUnsupportedError,
    SurfaceError,
)
from session_sql.events import (
    Replace,
    SessionEvent,
    SurfaceOp,
    check_header,
    check_session_id,
    make_header,
    parse_envelope,
)
from session_sql.jsoncodec import check_json_size, dumps_frozen, snapshot_stored
from session_sql.jsonvalue import FrozenDict, snapshot_json
from session_sql.messages import SurfaceMessage, project
from session_sql.pending import Item, PendingAppend, batch_items
from session_sql.repair import interrupted_turn_closers
from session_sql.rules import check_data, check_inherited_marker
from session_sql.surface import Replay, Step, Surface, is_exempt, replay

END_SEED = "session/end-seed"
DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024

Validator = Callable[["Session", SessionEvent], object]
Observer = Callable[["Session", SessionEvent], object]

S = TypeVar("S", bound="Session")


class Clock(Protocol):
    def __call__(self) -> int: ...


def now_ms() -> int:
    return _time.time_ns() // 1_000_000


def new_session_id() -> str:
    return uuid.uuid4().hex


class _SeedSurfaceError(InvalidSeedError, SurfaceError):
    """A seed event breaks a surface rule: both an ``InvalidSeedError`` and a ``SurfaceError``."""


class EventLog(Protocol):
    """What a session keeps its log in: a list, or a store handle's lazily read log."""

    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: int) -> SessionEvent: ...
    @overload
    def __getitem__(self, index: slice) -> list[SessionEvent]: ...
    def append(self, event: SessionEvent) -> None: ...
    def extend(self, events: Iterable[SessionEvent]) -> None: ...
    def __delitem__(self, index: slice) -> None: ...


class EventsView(Sequence[SessionEvent]):
    """An immutable view of a log prefix; it never grows, even when the log does."""

    __slots__ = ("_len", "_log")

    def __init__(self, log: EventLog, length: int) -> None:
        self._log = log
        self._len = length

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> SessionEvent: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[SessionEvent, ...]: ...
    def __getitem__(self, index: int | slice) -> SessionEvent | tuple[SessionEvent, ...]:
        if isinstance(index, slice):
            return tuple(self._log[: self._len][index])
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("event index out of range")
        return self._log[index]

    def __iter__(self) -> Iterator[SessionEvent]:
        log = self._log
        for i in range(self._len):
            yield log[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self._len and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EventsView({self._len} events)"


def check_logged(
    raw: SessionEvent | Mapping[str, Any], seq: int, catalog: Catalog, *, parsed: bool = False
) -> SessionEvent:
    """Envelope, expected seq, unknown-event gate and data rules of one logged event.

    ``parsed`` marks events that the store's row seam already built and envelope-checked.
    """
    if parsed and isinstance(raw, SessionEvent):
        event = raw
    elif isinstance(raw, SessionEvent):
        # Field by field rather than through to_json(), which trusts the field types: a
        # hand-built SessionEvent may hold anything and is refused like a wire dict would be.
        op, sources = raw.surface_op, raw.source_event_seqs
        wire: dict[str, Any] = {
            "type": raw.type,
            "seq": raw.seq,
            "time": raw.time,
            "data": snapshot_json(raw.data, root="data"),
        }
        if op is not None:
            wire["surfaceOp"] = op.to_json() if isinstance(op, Replace) else op
        if sources is not None:
            wire["sourceEventSeqs"] = sources
        if raw.ignorable is not False:
            wire["ignorable"] = raw.ignorable
        event = parse_envelope(wire)
    else:
        event = parse_envelope(snapshot_json(raw, root="event"))
    if event.seq != seq:
        raise InvalidEventError(f"seq {event.seq} must equal its position {seq}", seq=event.seq)
    if event.type not in catalog:
        if not event.ignorable:
            raise SessionFormatUnsupportedError(
                f"unknown event type {event.type!r} at seq {event.seq}: this build's catalog "
                "does not know it and it is not ignorable",
            )
    else:
        check_data(event)
    return event


def replay_checked(
    events: Iterable[SessionEvent | Mapping[str, Any]],
    state: Replay,
    catalog: Catalog,
    *,
    parsed: bool = False,
    lookup: Callable[[int], SessionEvent] | None = None,
) -> Iterator[Step]:
    """Check logged events one by one and fold each onto ``state``, yielding its ``Step``.

    Used for seeds, stored logs, refreshes and ``verify``: envelope, contiguous seqs (from
    ``state.length``), the unknown-event gate, data rules and the surface transition, each event
    planned once. ``lookup`` finds earlier events (else ``state`` keeps the surface's). Raises
    ``InvalidSeedError`` (``index`` counts from the first event given) or
    ``SessionFormatUnsupportedError``; the caller discards ``state``.
    """
    for index, raw in enumerate(events):
        seq = state.length
        try:
            step = state.fold(check_logged(raw, seq, catalog, parsed=parsed), catalog, lookup)
        except SessionFormatUnsupportedError:
            raise
        except (InvalidEventError, NotJSONError) as exc:
            raise _seed_error(exc, index, seq) from exc
        yield step


def fold_checked(
    events: Iterable[SessionEvent | Mapping[str, Any]],
    log: EventLog,
    state: Replay,
    catalog: Catalog,
    *,
    parsed: bool = False,
) -> None:
    """``replay_checked`` that also appends each event to ``log`` (``state``'s log so far)."""
    # replay_checked's loop without its generator: once per event of every load and seed.
    lookup, append, take = log.__getitem__, log.append, state.take
    for index, raw in enumerate(events):
        seq = state.length
        try:
            event = check_logged(raw, seq, catalog, parsed=parsed)
            take(event, catalog, lookup)
        except SessionFormatUnsupportedError:
            raise
        except (InvalidEventError, NotJSONError) as exc:
            raise _seed_error(exc, index, seq) from exc
        append(event)


def _seed_error(exc: InvalidEventError | NotJSONError, index: int, seq: int) -> InvalidSeedError:
    """What a seed or stored log event's failure is raised as (its index and seq named)."""
    if isinstance(exc, SurfaceError):
        return _SeedSurfaceError(f"seed event {index}: {exc}", index=index, seq=seq)
    return InvalidSeedError(f"seed event {index}: {exc}", index=index, seq=seq)


class Session:
    """An append-only log of typed events with its surface and derived messages."""

    def __init__(
        self,
        session_id: str | None = None,
        *,
        seed: Iterable[SessionEvent | Mapping[str, Any]] | None = None,
        header: Mapping[str, Any] | None = None,
        inherited_event_count: int = 0,
        catalog: Catalog | None = None,
        clock: Clock | None = None,
        max_event_bytes: int | None = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._catalog = default_catalog() if catalog is None else catalog
        self._clock: Clock = now_ms if clock is None else clock
        self._max_event_bytes = max_event_bytes
        frozen_header = self._resolve_header(session_id, header, seed, inherited_event_count)
        log: list[SessionEvent] = []
        state = Replay()
        if seed is not None:
            if not isinstance(seed, Iterable):
                raise InvalidSeedError(
                    f"a seed must be a list of events, got {type(seed).__name__}", index=None
                )
            fold_checked(seed, log, state, self._catalog)
            seeded = bool(frozen_header["isSeeded"])
            for index, event in enumerate(log):
                try:
                    check_inherited_marker(event, seeded, inherited_event_count)
                except InvalidEventError as exc:
                    raise InvalidSeedError(
                        f"seed event {index}: {exc}", index=index, seq=event.seq
                    ) from exc
        self._adopt(frozen_header, log, state, inherited_event_count)
        # §7.1: the seed length; the end-of-seed marker appended next is the first live event.
        self.first_live_seq = len(self._log)
        if seed is not None:
            self._mark_end_of_seed()

    def _mark_end_of_seed(self) -> None:
        """Append the end-of-seed marker unless the log already ends with one (§7.1)."""
        log = self._log
        if log and log[-1].type == END_SEED:
            return
        cut = bool(self._header["isSeeded"]) and self.inherited_event_count == len(log)
        data = snapshot_json({"inherited": True} if cut else {})
        marker = SessionEvent(END_SEED, len(log), self._clock(), data)
        log.append(marker)
        self._state.advance(marker, None)  # off the surface: only the log length moves

    # -- construction ---------------------------------------------------------------------

    def _resolve_header(
        self,
        session_id: str | None,
        header: Mapping[str, Any] | None,
        seed: object,
        inherited_event_count: int,
    ) -> FrozenDict:
        if header is None:
            sid = new_session_id() if session_id is None else check_session_id(session_id)
            frozen = make_header(sid, self._clock())
        else:
            # Anything but a mapping goes to check_header, which refuses it as a header error.
            frozen = check_header(dict(header) if isinstance(header, Mapping) else header)
            if session_id is not None and session_id != frozen["id"]:
                raise InvalidHeaderError(
                    f"session id {session_id!r} differs from header id {frozen['id']!r}"
                )
        count = inherited_event_count
        if type(count) is not int or count < 0:
            raise InvalidHeaderError(f"inherited_event_count must be an int >= 0, got {count!r}")
        if frozen["isSeeded"]:
            if seed is None:
                raise InvalidHeaderError("a seeded header (isSeeded: true) requires a seed")
            if count < 1:
                raise InvalidHeaderError(
                    "a seeded header requires inherited_event_count (the inherited prefix)"
                )
        elif count:
            raise InvalidHeaderError(
                "inherited_event_count is only meaningful with a seeded header (isSeeded: true)"
            )
        return frozen

    def _adopt(
        self,
        header: FrozenDict,
        log: EventLog,
        state: Replay,
        inherited_event_count: int,
    ) -> None:
        if inherited_event_count > len(log):
            raise InvalidHeaderError(
                f"inherited_event_count {inherited_event_count} exceeds the seed length {len(log)}"
            )
        self._header = header
        self._log = log
        self._state = state  # the surface, with the stored position of each node
        self.inherited_event_count = inherited_event_count
        self._validators: list[Validator] = []
        self._observers: list[Observer] = []
        self._busy = False
        self._messages: list[Any] = []
        self._projected = 0  # surface nodes already projected into _messages
        self._projected_generation = state.replace_generation
        self._request_header: Any = None
        self._request_header_seq = -1

    # -- readers --------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return str(self._header["id"])

    @property
    def header(self) -> FrozenDict:
        return self._header

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    @property
    def seq(self) -> int:
        """The next seq (the log length)."""
        return len(self._log)

    @property
    def events(self) -> EventsView:
        return EventsView(self._log, len(self._log))

    @property
    def surface(self) -> Surface:
        return self._state.surface

    def messages(self, *, last: int | None = None) -> list[Any]:
        """The messages a model sees, in surface order (a new list of shared frozen objects).

        ``last=N`` gives the final N messages (nodes that project to none do not count); it
        walks the surface from the end, so its cost follows N, not the surface.
        """
        count = check_last(last)
        if count is not None:
            return self._last_messages(count)
        surface = self._state.surface
        nodes = surface.node_list()
        if self._projected_generation != surface.replace_generation:
            self._messages = []
            self._projected = 0
            self._projected_generation = surface.replace_generation
        if self._projected < len(nodes):
            log = self._log
            out = self._messages
            items = self._catalog.item_types
            for seq in nodes[self._projected :]:
                message = project(log[seq], items)
                if message is not None:
                    out.append(message)
            self._projected = len(nodes)
        return list(self._messages)

    def _last_messages(self, count: int) -> list[Any]:
        out: list[Any] = []
        nodes, log = self._state.surface.node_list(), self._log
        items = self._catalog.item_types
        i = len(nodes) - 1
        while len(out) < count and i >= 0:
            message = project(log[nodes[i]], items)
            if message is not None:
                out.append(message)
            i -= 1
        out.reverse()
        return out

    def surface_messages(self, *, last: int | None = None) -> list[SurfaceMessage]:
        """Every surface node as ``SurfaceMessage(pos, seq, type, message)``, in surface order.

        ``pos`` is the node's position in the store's ``surface`` table; ``message`` is None
        for a node that projects to none. ``last=N`` gives the final N nodes.
        """
        count = check_last(last)
        state, log = self._state, self._log
        nodes = state.surface.node_list()
        start = 0 if count is None else max(len(nodes) - count, 0)
        items = self._catalog.item_types
        return [
            SurfaceMessage(pos, seq, log[seq].type, project(log[seq], items))
            for pos, seq in zip(state.positions[start:], nodes[start:], strict=True)
        ]

    def message_for(self, event: SessionEvent) -> Any:
        """The message ``event`` projects to, or None."""
        if is_exempt(event, self._catalog):
            return None
        return project(event, self._catalog.item_types)

    def request_header(self) -> Any:
        """The data of the latest ``request/header``, or None."""
        log = self._log
        for i in range(len(log) - 1, self._request_header_seq, -1):
            if log[i].type == "request/header":
                self._request_header = log[i].data
                self._request_header_seq = i
                break
        else:
            self._request_header_seq = len(log) - 1
        return self._request_header

    # -- registration ---------------------------------------------------------------------

    def add_validator(self, fn: Validator) -> Callable[[], None]:
        """Run ``fn(session, candidate)`` before each commit; any exception vetoes it."""
        self._validators.append(fn)
        return lambda: self._remove(self._validators, fn)

    def subscribe(self, fn: Observer) -> Callable[[], None]:
        """Call ``fn(session, event)`` after each commit; its failures are logged, not raised."""
        self._observers.append(fn)
        return lambda: self._remove(self._observers, fn)

    @staticmethod
    def _remove(registry: list[Any], fn: Any) -> None:
        for i, registered in enumerate(registry):
            if registered is fn:
                del registry[i]
                return

    # -- appending ------------------------------------------------------------------------

    def append(
        self,
        type: str,
        data: Any = None,
        *,
        surface_op: SurfaceOp | Mapping[str, Any] | None = None,
        source_event_seqs: Sequence[int] | None = None,
        ignorable: bool = False,
    ) -> SessionEvent:
        """Validate, commit and publish one event (SPEC §7.2)."""
        return self._append_batch([(type, data, surface_op, source_event_seqs, ignorable, None)])[0]

    def append_many(self, items: Iterable[Mapping[str, Any]]) -> list[SessionEvent]:
        """Append several events atomically: all commit or none does."""
        batch = batch_items(items)
        if not batch:
            return []
        return self._append_batch(batch)

    def _append_events(self, events: Iterable[SessionEvent]) -> list[SessionEvent]:
        """Append prepared events (closers) through the whole pipeline, keeping their times."""
        batch: list[Item] = [
            (e.type, e.data, e.surface_op, e.source_event_seqs, e.ignorable, e.time) for e in events
        ]
        return self._append_batch(batch) if batch else []

    def _append_batch(self, batch: list[Item]) -> list[SessionEvent]:
        with self._paused_append(len(batch)):
            pending = PendingAppend(self, batch)
            try:
                self._persist(pending)
            except BaseException:
                pending.abandon()
                raise
            return pending.commit()

    def _paused_append(self, size: int) -> AbstractContextManager[None]:
        """The cyclic collector paused for the whole of a big append (building, persisting,
        committing: every event it builds is kept, see ``_gc``), unless validators or
        observers are registered: user code runs with the collector as it was, so only the
        building is paused then (``pending._plan``)."""
        if self._validators or self._observers:
            return nullcontext()
        return paused_for(size)

    def _begin_append(self: S, batch: list[Item], face: Any = None) -> PendingAppend[S]:
        """The batch checked, planned and validated, the reentrancy flag held (see
        ``PendingAppend``); the caller persists it, then commits or abandons it."""
        return PendingAppend(self, batch, face)

    def _data_snapshot(self) -> Callable[..., Any]:
        """How an append snapshots its events' data: keeping the text it wrote while checking
        (``snapshot_stored``) when that text will be wanted, here by the size limit."""
        return snapshot_json if self._max_event_bytes is None else snapshot_stored

    def _check_event_size(self, event: SessionEvent) -> None:
        """The event-size limit; a store checks it on the text it writes instead."""
        if self._max_event_bytes is not None:
            check_json_size(dumps_frozen(event.data), self._max_event_bytes, event.seq)

    def _persist(self, pending: PendingAppend[Any]) -> None:
        """Make the events durable before they become visible; a store overrides this."""

    # -- fork -----------------------------------------------------------------------------

    def fork(self, boundary: int | None = None, child_id: str | None = None) -> Session:
        """A child session inheriting events ``0..boundary`` (default: the last)."""
        seed, header, inherited = fork_seed(self, boundary, child_id, self._clock())
        return Session._from_checked(
            header, seed, inherited, self._catalog, self._clock, self._max_event_bytes
        )

    @classmethod
    def _bare(cls, catalog: Catalog, clock: Clock, max_event_bytes: int | None) -> Session:
        """An instance with its settings only; the caller ``_adopt``s a log and a state."""
        session = cls.__new__(cls)
        session._catalog = catalog
        session._clock = clock
        session._max_event_bytes = max_event_bytes
        return session

    @classmethod
    def _from_checked(
        cls,
        header: FrozenDict,
        log: list[SessionEvent],
        inherited_event_count: int,
        catalog: Catalog,
        clock: Clock,
        max_event_bytes: int | None,
        *,
        state: Replay | None = None,
        seeded: bool = False,
    ) -> Session:
        """Build a session from a log this build already checked (fork, store).

        ``state`` is the log's replay when the caller has it; ``seeded`` adds the end-of-seed
        marker as ``Session(seed=log)`` would.
        """
        session = cls._bare(catalog, clock, max_event_bytes)
        if state is None:
            state = Replay()
            for _ in replay(log, state, catalog, log.__getitem__):
                pass
        session._adopt(header, list(log), state, inherited_event_count)
        session.first_live_seq = len(session._log)
        if seeded:
            session._mark_end_of_seed()
        return session

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, seq={self.seq})"


def fork_seed(
    parent: Session, boundary: int | None, child_id: str | None, now: int
) -> tuple[list[SessionEvent], FrozenDict, int]:
    """The child's log, header and inherited count for a fork of ``parent`` (SPEC §7.5)."""
    length = parent.seq
    if length == 0:
        raise ForkError(f"session {parent.id!r} is empty: there is nothing to fork", code="empty")
    if boundary is None:
        boundary = length - 1
    if type(boundary) is not int or not 0 <= boundary < length:
        raise ForkError(
            f"fork boundary {boundary!r} is outside 0..{length - 1} of session {parent.id!r}",
            code="out_of_range",
        )
    cid = new_session_id() if child_id is None else check_session_id(child_id)
    if cid == parent.id:
        raise ForkError(f"a fork cannot reuse its parent's id {cid!r}", code="same_id")
    prefix = list(parent.events[: boundary + 1])
    time = prefix[-1].time
    marker = SessionEvent(END_SEED, boundary + 1, time, snapshot_json({"inherited": True}))
    closers = interrupted_turn_closers([*prefix, marker], reason="forked")
    header = make_header(cid, now, is_seeded=True, parent_session=parent.id)
    return [*prefix, marker, *closers], header, boundary + 1
