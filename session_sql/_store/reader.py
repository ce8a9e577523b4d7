"""Read paths: the surface and its messages, streamed events, and following a live session."""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine

from session_sql._gc import PAUSE_MIN_EVENTS, gc_paused
from session_sql._store.context import MISSING, Compiled, StoreContext
from session_sql._store.database import fetch_rows, read_tx, snapshot_tx, translate_errors
from session_sql._store.following import Follower, Read, Sleep, Wait
from session_sql._store.idle import IdleConnection
from session_sql._store.stored import event_from_row, project_row
from session_sql.errors import (
    CorruptSessionError,
    SessionNotFoundError,
)
from session_sql.events import SessionEvent
from session_sql.jsoncodec import loads_plain, loads_vouched, plain_texts
from session_sql.jsonvalue import FrozenList
from session_sql.messages import SurfaceMessage

if TYPE_CHECKING:
    from session_sql._store.idle import IdleConnection

FOLLOW_BATCH = 500
STREAM_BATCH = 1000
MAX_SEQ = 2**63 - 1  # the largest BIGINT: no stored seq lies above it


def require_session(conn: Connection, ctx: StoreContext, session_id: str) -> None:
    session_key(conn, ctx, session_id)


def session_key(conn: Connection, ctx: StoreContext, session_id: str) -> int:
    """The session's key, read from ``session_ids`` (``SessionNotFoundError`` when there is
    none): every statement of one session addresses it by its key; a stream pins it."""
    c = ctx.compiled.key_of  # compiled once per process, not once per engine (a new store)
    rows = fetch_rows(conn, c, {**c.defaults, "b_id": session_id})
    if not rows:
        ctx.keys.pop(session_id, None)
        raise SessionNotFoundError.for_session(session_id)
    key = ctx.keys[session_id] = int(rows[0][0])
    return key


def by_kept_key(
    conn: Connection, ctx: StoreContext, session_id: str, read: Callable[[int], list[Any]]
) -> list[Any]:
    """``read(key)`` of the session's key: the kept one (``StoreContext.keys``), so that a read
    is one statement, or, when that finds nothing (no rows, or a session deleted and created
    again under its id), the key read from ``session_ids`` (``SessionNotFoundError`` when
    there is none)."""
    kept = ctx.keys.get(session_id)
    if kept is not None:
        rows = read(kept)
        if rows:
            return rows
    key = session_key(conn, ctx, session_id)
    return [] if key == kept else read(key)


def session_row(conn: Connection, ctx: StoreContext, session_id: str) -> Any:
    """The session row (``header`` as JSON text; ``session_key`` among its columns), read by
    the kept key when there is one (``StoreContext.keys``: one statement), else by the key
    read from ``session_ids`` first; ``SessionNotFoundError`` when there is none."""
    statement = ctx.statements.session_row

    def read(key: int) -> list[Any]:
        return list(conn.execute(statement, {"b_key": key}).all())

    rows = by_kept_key(conn, ctx, session_id, read)
    if not rows:  # the row went after its id was read: deleted in between
        raise SessionNotFoundError.for_session(session_id)
    return rows[0]


def require_key(conn: Connection, ctx: StoreContext, session_id: str, key: int) -> None:
    """Raise ``SessionNotFoundError`` unless the session a stream pinned still exists.

    Read after the page it vouches for: a page cut short by the deletion of the session
    is then always followed by this check seeing the deletion."""
    if conn.execute(ctx.statements.key_alive, {"b_key": key}).first() is None:
        raise SessionNotFoundError.deleted_while_read(session_id)


def _project_kept(ctx: StoreContext, session_id: str, seq: int, type_: str, data: Any) -> Any:
    """``stored.project_row`` for tail reads, through the store's kept projections (``ctx.parsed``):
    the rows an agent reads again every turn are parsed and checked once (failures are never
    kept)."""
    items = ctx.catalog.item_types
    if type(data) is not str:
        return project_row(session_id, seq, type_, data, items)
    key = (type_, data)
    message = ctx.parsed.get(key)
    if message is MISSING:
        message = project_row(session_id, seq, type_, data, items)
        ctx.parsed.put(key, message, len(data))
    return message


def _surface_rows(
    ctx: StoreContext, conn: Connection, key: int, before: int, limit: int | None
) -> list[Any]:
    """``(pos, seq, type, data)`` rows of the session ``key`` in surface order: all, or the
    last ``limit`` before position ``before`` (read backwards along the surface key, then
    reversed)."""
    q = ctx.statements
    if limit is None:  # the whole surface: plain tuples from the driver (``fetch_rows``)
        whole = ctx.compiled.surface_messages
        return fetch_rows(conn, whole, {**whole.defaults, "b_key": key})
    params = {"b_key": key, "b_before": before, "b_limit": limit}
    rows = list(conn.execute(q.surface_tail, params).all())
    rows.reverse()
    return rows


def surface_messages(
    ctx: StoreContext, session_id: str, last: int | None = None, *, plain: bool = False
) -> list[SurfaceMessage]:
    """Every surface node (or the last ``last``) with its projected message, in order.

    ``plain``: for a caller that copies the messages out. A long read (``PAUSE_MIN_EVENTS``
    nodes or more) then decodes them as plain values the caller owns (``stored.project_row``),
    never frozen; a shorter tail still gives the kept frozen projections (``ctx.parsed``:
    cheaper than decoding again, and the caller copies only what it takes). Tell them apart
    by type.
    """
    if last == 0:
        with translate_errors(session_id), read_tx(ctx.read_engine()) as conn:
            require_session(conn, ctx, session_id)
        return []
    if last is not None:
        with translate_errors(session_id):
            rows = surface_tail(ctx, session_id, MAX_SEQ, last)
        rows.reverse()
    else:
        with translate_errors(session_id), read_tx(ctx.read_engine()) as conn:
            rows = by_kept_key(
                conn, ctx, session_id, lambda key: _surface_rows(ctx, conn, key, MAX_SEQ, None)
            )
    if last is not None and (not plain or len(rows) < PAUSE_MIN_EVENTS):
        return [
            SurfaceMessage(pos, seq, type_, _project_kept(ctx, session_id, seq, type_, data))
            for pos, seq, type_, data in rows
        ]
    items = ctx.catalog.item_types
    with _paused_for(rows):
        if not plain:
            return [
                SurfaceMessage(pos, seq, type_, project_row(session_id, seq, type_, data, items))
                for pos, seq, type_, data in rows
            ]
        vouched = plain_texts([row[3] for row in rows])
        return [
            SurfaceMessage(
                pos,
                seq,
                type_,
                project_row(
                    session_id, seq, type_, data, items, loads_vouched if ok else loads_plain
                ),
            )
            for (pos, seq, type_, data), ok in zip(rows, vouched, strict=True)
        ]


def _paused_for(rows: list[Any]) -> AbstractContextManager[None]:
    """The cyclic collector paused while the messages of many ``rows`` are built (``_gc``):
    every container of them is kept, and the collector would scan them again and again."""
    return gc_paused() if len(rows) >= PAUSE_MIN_EVENTS else nullcontext()


def messages(ctx: StoreContext, session_id: str, last: int | None = None) -> list[Any]:
    """The messages a model sees, read from the ``surface`` side table (no replay).

    ``last=N``: the final N messages. Nodes that project to none do not count, so the surface
    is read backwards in pages (N rows, then twice as many each time) until N are found; one
    snapshot, so a concurrent replace cannot tear the pages apart.
    """
    if last is None:
        with translate_errors(session_id), read_tx(ctx.read_engine()) as conn:
            rows = by_kept_key(
                conn, ctx, session_id, lambda key: _surface_rows(ctx, conn, key, MAX_SEQ, None)
            )
        items = ctx.catalog.item_types
        projected = (project_row(session_id, seq, t, data, items) for _, seq, t, data in rows)
        with _paused_for(rows):
            return [m for m in projected if m is not None]
    found: list[Any] = []  # newest first
    if last:
        # Most tail reads take one statement: the last ``last`` nodes hold enough messages,
        # or are the whole surface. Otherwise (no rows: does the session exist? more pages
        # needed) the read starts again in one snapshot.
        with translate_errors(session_id):
            newest = surface_tail(ctx, session_id, MAX_SEQ, last)
        for _, seq, type_, data in newest:
            message = _project_kept(ctx, session_id, seq, type_, data)
            if message is not None and len(found) < last:
                found.append(message)
        if newest and (len(found) == last or len(newest) < last):
            found.reverse()
            return found
        found = []
    with translate_errors(session_id), snapshot_tx(ctx.read_engine()) as conn:
        key = session_key(conn, ctx, session_id)
        before, page = MAX_SEQ, last
        while len(found) < last:
            rows = _surface_rows(ctx, conn, key, before, page)
            for _, seq, type_, data in reversed(rows):
                message = _project_kept(ctx, session_id, seq, type_, data)
                if message is not None and len(found) < last:
                    found.append(message)
            if len(rows) < page:
                break
            before, page = rows[0][0], min(page * 2, MAX_SEQ)
    found.reverse()
    return found


def surface(ctx: StoreContext, session_id: str, last: int | None = None) -> tuple[int, ...]:
    """The surface's event seqs in order (or the last ``last``), from the side table."""
    q = ctx.statements
    if last is None:
        query, limit = q.surface_seqs, {}
    else:
        query, limit = q.surface_seqs_tail, {"b_limit": last}
    with translate_errors(session_id), read_tx(ctx.read_engine()) as conn:
        if last == 0:
            require_session(conn, ctx, session_id)
            return FrozenList(())

        def read(key: int) -> list[Any]:
            return list(conn.execute(query, {"b_key": key, **limit}).scalars())

        seqs = by_kept_key(conn, ctx, session_id, read)
    if last is not None:
        seqs.reverse()
    return FrozenList(seqs)


def stream_events(
    ctx: StoreContext,
    session_id: str,
    from_seq: int = 0,
    to_seq: int | None = None,
    engine: Engine | None = None,
) -> Iterator[SessionEvent]:
    """Events in seq order (``to_seq`` exclusive), one read per page so memory stays bounded.

    The pages are fetched as plain tuples (``database.fetch_rows``). The first page's
    transaction reads the session's key, and every page is read by that key: a session
    deleted and created again under its id mid-stream is never spliced in. The last page
    (a short one) is followed by a check that the session still exists, so a stream whose
    session was deleted ends with ``SessionNotFoundError``, not early. Every page is read on
    ``engine`` (default: the store's next read engine, ``StoreContext.reads``), so a stream
    from a standby never mixes two standbys' states.
    """
    engine = ctx.read_engine() if engine is None else engine
    page = ctx.compiled.stream_page
    params = {
        **page.defaults,
        "b_key": None,
        "b_after": from_seq - 1,
        "b_to": MAX_SEQ if to_seq is None else to_seq - 1,
        "b_limit": STREAM_BATCH,
    }
    key: int | None = None
    while True:
        with translate_errors(session_id), read_tx(engine) as conn:
            if key is None:
                key = params["b_key"] = session_key(conn, ctx, session_id)
            rows = fetch_rows(conn, page, params)
            if len(rows) < STREAM_BATCH:
                require_key(conn, ctx, session_id, key)
        for row in rows:
            yield event_from_row(session_id, row)
        if len(rows) < STREAM_BATCH:
            return
        params["b_after"] = rows[-1][0]  # its seq


LOAD_BATCH = 20_000
"""Page size of a read that keeps the whole log anyway (``load_session``): on PostgreSQL
every page is a round trip."""


def event_rows_in(
    conn: Connection,
    ctx: StoreContext,
    key: int,
    to_seq: int | None = None,
    batch: int | None = None,
) -> Iterator[Any]:
    """The event rows up to ``to_seq`` (inclusive; None: all), paged on ``conn`` (pages of
    ``batch`` rows, default ``STREAM_BATCH``).

    Inside a ``snapshot_tx`` every page sees the same log, and a page is all that is held: a
    caller folding the rows as they come needs no memory for the log. A page ending at
    ``to_seq`` is the last one read.
    """
    limit = STREAM_BATCH if batch is None else batch
    last = MAX_SEQ if to_seq is None else to_seq
    params = {"b_key": key, "b_after": -1, "b_to": last}
    page = ctx.compiled.events_page
    while True:
        rows = fetch_rows(conn, page, {**page.defaults, **params, "b_limit": limit})
        more = len(rows) == limit and rows[-1][0] < last
        if more:
            params["b_after"] = rows[-1][0]  # its seq
        # Handed out from the end of the reversed page, so that each row is released once
        # its caller has folded it rather than with the whole page (a load's live objects are
        # then its log alone, and the garbage collector runs less often).
        rows.reverse()
        pop = rows.pop
        while rows:
            yield pop()
        if not more:
            return


def snapshot_events(
    conn: Connection, ctx: StoreContext, session_id: str, key: int, head_seq: int
) -> Iterator[SessionEvent]:
    """Events ``0..head_seq`` in pages, all read on ``conn`` (one snapshot transaction).

    Raises ``CorruptSessionError`` when a seq is missing: the log must be whole up to the head.
    """
    expected = 0
    for row in event_rows_in(conn, ctx, key, head_seq):
        if row[0] != expected:  # its seq
            break
        yield event_from_row(session_id, row)
        expected += 1
    if expected <= head_seq:
        raise CorruptSessionError(
            f"session {session_id!r}: event seq {expected} is missing below the head "
            f"{head_seq}; run verify",
            session_id=session_id,
            seq=expected,
        )


def follow_key(ctx: StoreContext, session_id: str) -> int:
    """The key of the session a follow starts on, read on the primary (a standby may not
    have replayed its creation yet); ``SessionNotFoundError`` when there is none."""
    with translate_errors(session_id), read_tx(ctx.engine) as conn:
        return session_key(conn, ctx, session_id)


def events_after(
    ctx: StoreContext, session_id: str, key: int, after_seq: int, engine: Engine | None = None
) -> list[SessionEvent]:
    """One page (at most ``FOLLOW_BATCH``) of the events committed after ``after_seq`` to the
    session of ``key`` (the one the follow started on), read on ``engine`` (default: the
    primary).

    An empty page is followed by a check, on the primary, that the session still exists:
    ``SessionNotFoundError`` once it was deleted (even if created again under its id, which
    gives it a new key), so a follower never carries on into another session.
    """
    params = {"b_key": key, "b_after": after_seq, "b_limit": FOLLOW_BATCH}
    engine = engine or ctx.engine
    with translate_errors(session_id), read_tx(engine) as conn:
        rows = conn.execute(ctx.statements.events_after, params).all()
        if not rows and engine is ctx.engine:
            require_key(conn, ctx, session_id, key)
    if not rows and engine is not ctx.engine:
        with translate_errors(session_id), read_tx(ctx.engine) as conn:
            require_key(conn, ctx, session_id, key)
    return [event_from_row(session_id, row) for row in rows]


def start_follow(
    ctx: StoreContext, session_id: str, after_seq: int, timeout: float | None, *, listening: bool
) -> tuple[Follower, Engine]:
    """A follow's state machine and the engine all its reads run on.

    The session must exist on the primary (a standby may not have replayed its creation
    yet: the follow then reads nothing until it has). The reads go to one standby when the
    store has them, while the wake-ups come from the primary's LISTEN (a standby cannot
    LISTEN): a wake-up may name a head the standby has not replayed yet, and the follower
    then reads again with a short backoff (``Follower``'s ``lagging``) until it has.
    """
    engine = ctx.read_engine()
    machine = Follower(
        session_id,
        ctx.tenant,
        after_seq,
        timeout,
        listening=listening,
        lagging=engine is not ctx.engine,
    )
    return machine, engine


def follow(
    ctx: StoreContext, session_id: str, after_seq: int = -1, timeout: float | None = None
) -> Iterator[SessionEvent]:
    """Yield events committed after ``after_seq`` as they arrive, in order, each once.

    The sync driver of ``following.Follower``: a backend that listens wakes the follower
    with LISTEN/NOTIFY (``Backend.listener``); otherwise it polls with a short backoff.
    Returns after ``timeout`` seconds without a new event (``None``: never). Takes no write
    lock.
    """
    key = follow_key(ctx, session_id)
    listener = ctx.backend.listener(ctx, session_id)  # None: poll
    try:
        machine, engine = start_follow(
            ctx, session_id, after_seq, timeout, listening=listener is not None
        )
        action = machine.start()
        while True:
            if isinstance(action, Read):
                events = events_after(ctx, session_id, key, action.after_seq, engine)
                yield from events
                action = machine.read(events[-1].seq if events else None)
            elif isinstance(action, Wait):
                assert listener is not None
                listener.wait(action.seconds, machine.wakes)
                action = machine.waited()
            elif isinstance(action, Sleep):
                _time.sleep(action.seconds)
                action = machine.waited()
            else:
                return
    finally:
        if listener is not None:
            listener.close()


def surface_tail(ctx: StoreContext, session_id: str, before: int, limit: int) -> list[Any]:
    """``(pos, seq, type, data)`` of the last ``limit`` surface rows before position ``before``,
    newest first: the tail read, one statement on a DBAPI cursor.

    One statement reads one consistent snapshot on both backends, so it needs no explicit
    transaction; this takes the Core connection and BEGIN/COMMIT overhead off the interactive
    read (a framework's ``get_items(limit=10)``, an agent's ``messages(last=20)``). It runs on
    the store's idle connection (``idle.IdleConnection``: no checkout, no pre-ping round
    trip), or, when that is in use, not kept, broken, or checkouts are watched by listeners,
    on a pooled connection.

    The session is addressed by its key (``StoreContext.keys``; one shard on Citus): read
    first when it is not kept, and read again when a kept one finds nothing (the session
    may have been deleted and created again under its id). ``SessionNotFoundError`` when
    there is no such session.
    """
    engine, idle = ctx.reads()  # a store-level read: a standby's when the store has them
    kept = ctx.keys.get(session_id)
    if kept is not None:
        rows = _tail_by_key(ctx, engine, idle, kept, before, limit)
        if rows:
            return rows
    with read_tx(engine) as conn:
        key = session_key(conn, ctx, session_id)
    return [] if key == kept else _tail_by_key(ctx, engine, idle, key, before, limit)


def _tail_by_key(
    ctx: StoreContext, engine: Engine, idle: IdleConnection, key: int, before: int, limit: int
) -> list[Any]:
    params = {"b_key": key, "b_before": before, "b_limit": limit}
    return one_statement(ctx, engine, idle, ctx.compiled.surface_tail, params)


def by_kept_key_alone(ctx: StoreContext, session_id: str, c: Compiled) -> list[Any] | None:
    """The rows of the one read ``c`` of the session by its kept key (``StoreContext.keys``)
    on the primary (``one_statement``); None when no key is kept. (No rows: the key may be
    stale, and the caller reads by the id.)"""
    key = ctx.keys.get(session_id)
    if key is None:
        return None
    return one_statement(ctx, ctx.engine, ctx.idle, c, {"b_key": key})


def one_statement(
    ctx: StoreContext, engine: Engine, idle: IdleConnection, c: Compiled, values: dict[str, Any]
) -> list[Any]:
    """The rows (driver tuples) of the one read ``c`` with ``values`` (its defaults filled
    in): on the idle connection of ``engine`` (``idle``), in autocommit, or, when that is in
    use, not kept, broken, or checkouts are watched by listeners, on a pooled connection."""
    params = c.bind({**c.defaults, **values})
    rows = None if engine.pool.dispatch.checkout else _on_idle(idle, c.sql, params)
    if rows is not None:
        return rows
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        ctx.backend.begin_read(ctx, raw)
        cur.execute(c.sql, params)
        return list(cur.fetchall())
    finally:
        raw.close()  # back to the pool, which resets (rolls back) it


def _on_idle(idle: IdleConnection, sql: str, params: Any) -> list[Any] | None:
    """The rows of one statement run on the idle connection; None when it is not available
    or the read failed (``borrow`` then discards the connection; the pool reads again)."""
    try:
        with idle.borrow() as dbapi:
            if dbapi is None:
                return None
            cursor = dbapi.cursor()
            try:
                cursor.execute(sql, params)
                return list(cursor.fetchall())
            finally:
                cursor.close()
    except Exception:  # a broken connection, most likely: the pool's path reports the rest
        return None
