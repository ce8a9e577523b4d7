"""The append protocol (SPEC §7.2) as one object, with no I/O: ``PendingAppend``.

An append is: take the session's reentrancy flag; snapshot, check and plan the batch and run
the validators; persist it (a store's transaction; nothing for an in-memory session); then
either commit it into memory, release the flag and notify the observers, or release the flag
and change nothing. ``PendingAppend`` owns every step but the persisting, which is the
caller's: ``Session`` persists nothing, ``StoredSession`` runs a transaction, the async
handle awaits one, and ``append_together`` persists several sessions' in one. Like psycopg's
generators, it says what is to be written and is told how that went; it never does I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from session_sql._gc import paused_for
from session_sql.errors import InvalidEventError, ReentrantAppendError
from session_sql.events import SessionEvent, check_type_name, parse_source_seqs, parse_surface_op
from session_sql.jsonvalue import JSONValue
from session_sql.rules import check_data, check_inherited_marker
from session_sql.surface import Surface, Transition, plan

if TYPE_CHECKING:
    from session_sql.session import Session

log = logging.getLogger("session_sql")

S = TypeVar("S", bound="Session")

Item = tuple[Any, Any, Any, Any, Any, int | None]
"""One event to append: (type, data, surface_op, source_event_seqs, ignorable, time or None
for "now"), as ``append`` was given it."""

building_paused = paused_for
"""For a client that builds a big batch before handing it to ``append_many`` (an integration
mapping its items to events): ``building_paused(len(batch))`` pauses the cyclic collector as
the append pauses it for its own building (see ``session_sql._gc``), from
``PAUSE_MIN_EVENTS`` events on; every container built for the batch is kept until the
append, and scanning them again and again costs more than building them."""

_ITEM_KEYS = frozenset({"type", "data", "surface_op", "source_event_seqs", "ignorable"})
"""The keys an ``append_many`` item may have: ``append``'s argument names."""


def batch_items(items: Iterable[Mapping[str, Any]]) -> list[Item]:
    """``append_many``'s items as pipeline items; refuses anything but append's names."""
    if not isinstance(items, Iterable) or isinstance(items, str | bytes | Mapping):
        raise InvalidEventError(f"append_many takes a list of dicts, got {items!r}")
    batch: list[Item] = []
    for i, item in enumerate(items):
        if type(item) is not dict and not isinstance(item, Mapping):
            raise InvalidEventError(f"append_many item {i} must be a dict, got {item!r}")
        if "type" not in item or not _ITEM_KEYS.issuperset(item.keys()):
            unknown = item.keys() - _ITEM_KEYS
            raise InvalidEventError(
                f"append_many item {i} needs 'type' and only append's keyword names; "
                f"unexpected {sorted(unknown)}"
            )
        batch.append(
            (
                item["type"],
                item.get("data"),
                item.get("surface_op"),
                item.get("source_event_seqs"),
                item.get("ignorable", False),
                None,
            )
        )
    return batch


class PendingAppend(Generic[S]):
    """A batch validated and planned for ``session``, not yet in its memory.

    Made from a session's batch (``Session._begin_append``); it holds the session's
    reentrancy flag from then until the batch is committed or abandoned: an append from a
    validator or an observer (or from anything else while the batch is persisted) raises
    ``ReentrantAppendError``. ``events``
    and ``transitions`` are what to persist. Used as a context manager, leaving the block
    commits and an error in it abandons. ``face`` is what validators and observers are
    handed: the session, or the async handle that wraps it.
    """

    __slots__ = ("_face", "_open", "events", "session", "transitions")

    def __init__(self, session: S, batch: list[Item], face: Any = None) -> None:
        if session._busy:
            raise ReentrantAppendError(
                f"append on session {session.id!r} while it is validating or notifying; "
                "an observer must not append to the session it observes"
            )
        self.session = session
        self._face = session if face is None else face
        session._busy = True
        try:
            self.events, self.transitions = _plan(session, batch)
            for event in self.events:
                for validator in session._validators:
                    validator(self._face, event)
        except BaseException:
            session._busy = False
            raise
        self._open = True

    def commit(self) -> list[SessionEvent]:
        """The batch is durable: into memory, the flag released, then the observers told."""
        try:
            self._apply()
        finally:
            if self._open:
                self._open = False
                self.session._busy = False
        self._notify()
        return self.events

    def abandon(self) -> None:
        """The batch was not persisted: release the flag; nothing changed. Again: nothing."""
        if self._open:
            self._open = False
            self.session._busy = False

    def __enter__(self) -> PendingAppend[S]:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abandon()

    def _apply(self) -> None:
        """Step 4: the events join the log, the transitions the surface."""
        if not self._open:
            raise RuntimeError("this pending append was already committed or abandoned")
        session = self.session
        session._log.extend(self.events)
        state = session._state
        for event, transition in zip(self.events, self.transitions, strict=True):
            state.advance(event, transition)

    def _notify(self) -> None:
        """Step 5: each observer sees each event; its failure is logged, not raised."""
        session = self.session
        session._busy = True
        try:
            for event in self.events:
                for observer in list(session._observers):
                    try:
                        observer(self._face, event)
                    except Exception:
                        log.warning(
                            "observer %r failed on session %s seq %d",
                            observer,
                            session.id,
                            event.seq,
                            exc_info=True,
                        )
        finally:
            session._busy = False


def begin_all(batches: Iterable[tuple[S, list[Item], Any]]) -> list[PendingAppend[S]]:
    """A pending append per (session, batch, face), in order; if one is refused, those begun
    are abandoned before the refusal is raised."""
    pending: list[PendingAppend[S]] = []
    try:
        for session, batch, face in batches:
            pending.append(session._begin_append(batch, face))
    except BaseException:
        abandon_all(pending)
        raise
    return pending


def commit_all(pending: Sequence[PendingAppend[Any]]) -> None:
    """Commit batches persisted together: every one into memory first, then the flags
    released, then each one's observers, in order (so an observer of one session sees the
    others committed too)."""
    try:
        for one in pending:
            one._apply()
    finally:
        for one in pending:
            if one._open:
                one._open = False
                one.session._busy = False
    for one in pending:
        one._notify()


def abandon_all(pending: Iterable[PendingAppend[Any]]) -> None:
    """Release the flags of batches that were not persisted; nothing else changes."""
    for one in pending:
        if one._open:
            one._open = False
            one.session._busy = False


def _coerce_candidate(
    type_: Any,
    data: Any,
    surface_op: Any,
    source_event_seqs: Any,
    ignorable: Any,
    seq: int,
    time: int,
    snapshot: Callable[..., JSONValue],
) -> SessionEvent:
    """Step 1 of the pipeline: snapshot and type every argument into a frozen candidate
    (``snapshot``: the session's ``_data_snapshot``)."""
    check_type_name(type_, seq=seq)
    frozen = snapshot(data, root="data")
    op = None if surface_op is None else parse_surface_op(surface_op, seq=seq)
    sources = None if source_event_seqs is None else parse_source_seqs(source_event_seqs, seq=seq)
    if type(ignorable) is not bool:
        raise InvalidEventError(f"ignorable must be a bool, got {ignorable!r}", seq=seq)
    return SessionEvent(type_, seq, time, frozen, op, sources, ignorable)


def _plan(session: Session, batch: list[Item]) -> tuple[list[SessionEvent], list[Transition]]:
    """Steps 1–2: snapshot, rules and the surface plan of each event. Nothing changes here."""
    catalog = session._catalog
    base = len(session._log)
    now = session._clock()
    events: list[SessionEvent] = []
    transitions: list[Transition] = []
    nodes: Sequence[int] = session._state.surface.node_list()
    staged: list[int] | None = None  # a private copy once the batch holds a replace
    seeded = bool(session._header["isSeeded"])
    logged = session._log
    snapshot = session._data_snapshot()

    def lookup(seq: int) -> SessionEvent:
        return logged[seq] if seq < base else events[seq - base]

    # A big batch keeps every container it builds: the cyclic collector would only scan
    # them again and again (see _gc). Validators run after it, with the collector as it was
    # (an append without validators or observers is paused as a whole: _paused_append).
    with paused_for(len(batch)):
        for type_, data, surface_op, sources, ignorable, time in batch:
            seq = base + len(events)
            event = _coerce_candidate(
                type_,
                data,
                surface_op,
                sources,
                ignorable,
                seq,
                now if time is None else time,
                snapshot,
            )
            session._check_event_size(event)
            if event.type not in catalog:
                if not event.ignorable:
                    raise InvalidEventError(
                        f"event type {event.type!r} is not in this session's catalog; pass "
                        "ignorable=True to log it for readers that may not know it",
                        seq=seq,
                    )
                transition: Transition = None
            else:
                check_data(event)
                check_inherited_marker(event, seeded, session.inherited_event_count)
                if len(batch) > 1 and staged is None:
                    staged = list(nodes)
                    nodes = staged
                transition = plan(nodes, event, lookup, catalog.item_types)
                if staged is not None and transition is not None:
                    Surface.apply_to(staged, transition)
            events.append(event)
            transitions.append(transition)
    return events, transitions
