"""``StoredSession``: the core session whose commits go through one SQL transaction each.

The in-memory pipeline (``PendingAppend``: snapshot → rules → plan → validators) runs
unchanged; its commit is preceded by ``_persist``, which writes the candidate events and applies
the planner's very Transitions to the ``surface`` side table. Memory changes only after the
transaction commits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection

from session_sql._store import bulk, statistics
from session_sql._store.context import StoreContext
from session_sql._store.database import read_tx, translate_errors
from session_sql._store.metadata import title_of
from session_sql._store.opening import StoredLog, read_log, read_open
from session_sql._store.rows import stored_problems
from session_sql._store.stored import event_from_row, frozen_header
from session_sql._store.transactions import AppendPart
from session_sql.errors import (
    ConcurrencyError,
    CorruptSessionError,
    InvalidArgumentError,
    InvalidSeedError,
    SessionNotFoundError,
)
from session_sql.events import SessionEvent
from session_sql.jsoncodec import snapshot_stored
from session_sql.jsonvalue import FrozenDict
from session_sql.pending import Item, PendingAppend, abandon_all, batch_items, begin_all, commit_all
from session_sql.session import Session, fold_checked
from session_sql.surface import Replay


class StoredSession(Session):
    """A write handle on a stored session: ``Session``'s API plus ``refresh()``.

    Several processes may hold handles on one session; each append succeeds only if nobody
    appended since this handle last saw the log (``ConcurrencyError`` otherwise).
    """

    _ctx: StoreContext
    _incarnation: str
    _session_key: int

    @classmethod
    def _attach(
        cls,
        ctx: StoreContext,
        header: FrozenDict,
        log: list[SessionEvent],
        inherited_event_count: int,
        incarnation: str,
        session_key: int,
        state: Replay,
    ) -> StoredSession:
        """A handle on a stored log; ``state`` is its replay (the stored rows' positions)."""
        session = cls._from_checked(
            header,
            log,
            inherited_event_count,
            ctx.catalog,
            ctx.clock,
            ctx.max_event_bytes,
            state=state,
        )
        assert isinstance(session, StoredSession)
        session._ctx = ctx
        session._incarnation = incarnation
        session._session_key = session_key
        return session

    @classmethod
    def _open(cls, ctx: StoreContext, session_id: str) -> StoredSession:
        """A handle on a stored session without a replay (see ``opening``): O(surface).

        Its log is a ``StoredLog``: the surface's events and the head are in memory, the
        rest is read (and checked) on first use of ``events``, ``request_header()`` or
        ``fork()``.
        """
        row, state, known = read_open(ctx, session_id)
        header = frozen_header(session_id, row.header)
        incarnation = row.incarnation
        fetch = functools.partial(read_log, ctx, session_id, incarnation)
        log = StoredLog(session_id, state.length, known, fetch)
        session = cls._bare(ctx.catalog, ctx.clock, ctx.max_event_bytes)
        assert isinstance(session, StoredSession)
        session._adopt(header, log, state, row.inherited_event_count)
        session.first_live_seq = len(log)
        session._ctx = ctx
        session._incarnation = incarnation
        session._session_key = row.session_key
        return session

    def _data_snapshot(self) -> Callable[..., Any]:
        """The text written while the data is checked is the text stored (``event_values``)."""
        return snapshot_stored

    def _check_event_size(self, event: SessionEvent) -> None:
        """Checked by the writer on the very text it stores (one serialisation per event)."""

    def _persist(self, pending: PendingAppend[Any]) -> None:
        persist_together([pending])

    def _append_part(self, pending: PendingAppend[Any]) -> AppendPart:
        """This handle's share of an append transaction: its rows and its conditional update."""
        ctx = self._ctx
        events, transitions = pending.events, pending.transitions
        head = events[-1].seq
        state = self._state  # advanced by the commit, once the transaction has committed
        next_pos, generation, digest = state.counters_after(transitions)
        advance = {
            "b_tenant": ctx.tenant,
            "b_key": self._session_key,
            "b_incarnation": self._incarnation,
            "b_expected_head": self.seq - 1,
            "b_expected_pos": state.next_pos,
            "b_expected_gen": state.replace_generation,
            "b_head": head,
            "b_pos": next_pos,
            "b_gen": generation,
            "b_digest": digest,
            "b_now": ctx.clock(),
            "b_title": title_of(events),
        }
        return AppendPart(
            self.id, self._session_key, advance, events, transitions, state.next_pos, head
        )

    def _raise_lost_race(self, conn: Connection) -> None:
        row = conn.execute(self._ctx.statements.session_row, {"b_key": self._session_key})
        row = self._this_session(conn, row.first(), opened=True)
        if row.head_seq == self.seq - 1:
            raise CorruptSessionError(
                f"session {self.id!r}: the session row disagrees with the log (surface_next_pos "
                f"{row.surface_next_pos} != {self._state.next_pos} or replace_generation "
                f"{row.replace_generation} != {self._state.replace_generation}); "
                "run verify; refusing to append",
                session_id=self.id,
            )
        raise ConcurrencyError.appended_first(self.id, head=row.head_seq, expected=self.seq - 1)

    def _gone(self, conn: Connection, *, opened: bool) -> SessionNotFoundError:
        """The error for this handle's session row missing: its key is this creation's
        alone, so the session was deleted, and perhaps created again under its id."""
        again = conn.execute(self._ctx.statements.key_of, {"b_id": self.id}).first()
        if not opened and again is None:
            return SessionNotFoundError.for_session(self.id)
        return SessionNotFoundError.deleted_since_opened(self.id, recreated=again is not None)

    def refresh(self) -> list[SessionEvent]:
        """Load (and fully validate) what other writers appended; returns the new events."""
        row, rows = self._read_new()
        return self._fold_new(row, rows)

    def _read_new(self) -> tuple[Any, Sequence[Any]]:
        """``refresh``'s I/O: the session row and the event rows past this handle's log.

        Two Core reads in one read transaction (the row alone when nothing is new); the async
        store on PostgreSQL reads both in one query instead (``transactions.refresh_flow``).
        """
        ctx = self._ctx
        st = ctx.statements
        with translate_errors(self.id), read_tx(ctx.engine) as conn:
            row = conn.execute(st.session_row, {"b_key": self._session_key}).first()
            row = self._this_session(conn, row, opened=False)
            if row.head_seq < self.seq:
                return row, ()  # nothing new (a head that went back is refused by the fold)
            # Bounded by the head read first: on PostgreSQL each statement has its own
            # snapshot, and every event up to a committed head is committed with it.
            rows = conn.execute(
                st.events_from,
                {"b_key": self._session_key, "b_from": self.seq, "b_to": row.head_seq},
            ).all()
        return row, rows

    def _this_session(self, conn: Connection, row: Any, *, opened: bool) -> Any:
        """The session row read by this handle's key, if it is this handle's session still."""
        if row is None:
            raise self._gone(conn, opened=opened)
        return self._same_creation(row)

    def _same_creation(self, row: Any) -> Any:
        """``row`` if its incarnation is this handle's (a row edited underneath: its key is)."""
        if row.incarnation != self._incarnation:
            raise SessionNotFoundError.deleted_since_opened(self.id, recreated=True)
        return row

    def _fold_new(self, row: Any, rows: Sequence[Any]) -> list[SessionEvent]:
        """``refresh``'s checks (no I/O): fold the new rows, or change nothing and raise."""
        ctx = self._ctx
        if not rows and not stored_problems(row, self._state):
            return []  # otherwise the row moved without events: the check below refuses it
        log, base = self._log, len(self._log)
        state = self._state.copy()
        try:
            fold_checked(
                (event_from_row(self.id, r) for r in rows), log, state, ctx.catalog, parsed=True
            )
        except InvalidSeedError as exc:
            del log[base:]
            raise CorruptSessionError(
                f"session {self.id!r} seq {exc.seq}: stored event is invalid: {exc}",
                session_id=self.id,
                seq=exc.seq,
            ) from exc
        except BaseException:
            del log[base:]
            raise
        if stored_problems(row, state):
            del log[base:]
            raise CorruptSessionError(
                f"session {self.id!r}: the session row (head_seq {row.head_seq}, "
                f"surface_next_pos {row.surface_next_pos}, replace_generation "
                f"{row.replace_generation}, surface_digest {row.surface_digest}) disagrees with "
                "its log; run verify",
                session_id=self.id,
            )
        self._state = state
        return log[base:]


Prepared = PendingAppend[StoredSession]
"""One handle's pending batch, begun by ``begin_together``."""


def persist_together(writes: Sequence[Prepared]) -> None:
    """Write pending batches of several handles (of one store) in one transaction.

    Nothing is written unless every handle's head is still the stored one; otherwise the
    handle that lost raises (``ConcurrencyError``, ``SessionNotFoundError`` or
    ``CorruptSessionError``, naming its session). Memory is not touched: the callers commit.
    """
    ctx = writes[0].session._ctx
    parts = [pending.session._append_part(pending) for pending in writes]
    with translate_errors(writes[0].session.id if len(writes) == 1 else None):
        failed = append_parts(ctx, parts)
    if failed is not None:
        loser = writes[failed].session
        with translate_errors(loser.id), read_tx(ctx.engine) as conn:
            loser._raise_lost_race(conn)


Checked = list[tuple[Any, StoredSession, list[Item]]]
"""``append_together``'s writes, checked: (the handle given, the ``StoredSession`` it writes
through, the batch) per non-empty batch."""


def check_together(
    ctx: StoreContext, writes: Any, unwrap: Callable[[Any], Any] | None = None
) -> Checked:
    """``append_together``'s argument: (handle of this store, append_many items) pairs, one
    per session; refused with ``InvalidArgumentError`` before anything is prepared.
    ``unwrap(handle)`` is the ``StoredSession`` a given handle writes through (the async
    store's handles wrap one)."""
    if not isinstance(writes, Sequence) or isinstance(writes, str | bytes):
        raise InvalidArgumentError(
            f"writes must be a list of (handle, items) pairs, got {writes!r}", argument="writes"
        )
    checked: Checked = []
    seen: set[str] = set()
    for i, pair in enumerate(writes):
        if not (isinstance(pair, Sequence) and len(pair) == 2):
            raise InvalidArgumentError(
                f"writes[{i}] must be a (handle, items) pair, got {pair!r}", argument="writes"
            )
        given, items = pair
        handle = given if unwrap is None else unwrap(given)
        if not isinstance(handle, StoredSession) or handle._ctx is not ctx:
            raise InvalidArgumentError(
                f"writes[{i}]: {given!r} is not a write handle of this store", argument="writes"
            )
        if handle.id in seen:
            raise InvalidArgumentError(
                f"writes[{i}]: session {handle.id!r} appears twice; give it one list of items",
                argument="writes",
            )
        seen.add(handle.id)
        batch = batch_items(items)
        if batch:
            checked.append((given, handle, batch))
    return checked


def begin_together(checked: Checked) -> list[Prepared]:
    """Begin every batch (rules, plans, validators; each handle given is what its validators
    and observers see); on a refusal release what was begun."""
    return begin_all((handle, batch, given) for given, handle, batch in checked)


def append_together(ctx: StoreContext, writes: Any) -> list[list[SessionEvent]]:
    """``SessionStore.append_together``: one transaction, then each handle commits in order."""
    prepared = begin_together(check_together(ctx, writes))
    if not prepared:
        return [[] for _ in writes]
    try:
        persist_together(prepared)
    except BaseException:
        abandon_all(prepared)
        raise
    commit_all(prepared)
    return committed_lists(writes, prepared)


def committed_lists(writes: Any, prepared: list[Prepared]) -> list[list[SessionEvent]]:
    """The committed events of each pair of ``writes``, in its order (empty batches: [])."""
    by_id = {pending.session.id: pending.events for pending in prepared}
    return [by_id.get(pair[0].id, []) for pair in writes]


def append_parts(ctx: StoreContext, parts: Sequence[AppendPart]) -> int | None:
    """Append to several sessions in one transaction (the database's, ``Backend.append_parts``):
    all commit or none does. ``None`` once committed, or the index of the first part whose
    head update matched no row (nothing written: that session's writer lost a race)."""
    if ctx.engine.dialect.is_async:  # the async store's engine, in its runner
        lost = bulk.append_in_transaction(ctx, parts)
    else:
        lost = ctx.backend.append_parts(ctx, parts)
    if lost is None:
        statistics.appended(ctx, sum(len(p.events) for p in parts))
    return lost
