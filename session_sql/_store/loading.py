"""Whole sessions: creating one, forking one, reading one back (``load_session``) and
inserting a new one in one transaction."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any, NamedTuple

from session_sql._gc import PAUSE_MIN_EVENTS, gc_paused
from session_sql._store import bulk, reader
from session_sql._store.context import StoreContext
from session_sql._store.database import read_tx, snapshot_tx, translate_errors
from session_sql._store.metadata import (
    EXPORT_KEY,
    Metadata,
    check_labels,
    check_title,
    check_user_id,
    title_of,
)
from session_sql._store.rows import NEW_SESSION_KEY, check_header_limits, event_values
from session_sql._store.stored import event_from_row, frozen_header, labels_value
from session_sql._store.writer import Prepared, StoredSession
from session_sql.arguments import lookup_id
from session_sql.errors import (
    CorruptSessionError,
    InvalidHeaderError,
    InvalidSeedError,
)
from session_sql.events import SessionEvent
from session_sql.jsonvalue import FrozenDict
from session_sql.session import Session, fold_checked, fork_seed
from session_sql.surface import Replay, replay


class Loaded(NamedTuple):
    """A stored session read back: its row and its fully validated log."""

    header: FrozenDict
    log: list[SessionEvent]
    inherited_event_count: int
    incarnation: str
    state: Replay
    metadata: Metadata


def create(
    ctx: StoreContext,
    session_id: str | None,
    *,
    header: Mapping[str, Any] | None,
    seed: Sequence[SessionEvent | Mapping[str, Any]] | None,
    user_id: str | None,
    title: str | None,
    labels: Mapping[str, str] | None,
    prepared: Sequence[Prepared],
) -> StoredSession:
    """``SessionStore.create_session``: the session built in memory, then inserted whole.

    ``prepared`` batches of other sessions (``begin_together``'s) go into its transaction:
    all commit or none does. The handles are not touched: the caller commits them. For a
    session created with changes to state other sessions hold (the async store's
    ``_create_together``, as the ADK service's app and user state need); a lost race raises
    as ``append_together`` does."""
    if isinstance(header, Mapping) and EXPORT_KEY in header:
        raise InvalidHeaderError(
            f"header key {EXPORT_KEY!r} is reserved: an export carries the session's "
            "tenant and metadata under it (pass user_id, title and labels instead)"
        )
    metadata = Metadata(check_user_id(user_id), check_title(title), check_labels(labels, "labels"))
    session = Session(
        session_id,
        seed=seed,
        header=header,
        catalog=ctx.catalog,
        clock=ctx.clock,
        max_event_bytes=ctx.max_event_bytes,
    )
    log = list(session.events)
    if metadata.title is None:  # a seed's latest session/title names it, as an append would
        metadata = metadata._replace(title=title_of(log))
    state = session._state  # the seed's replay: the session is not used again
    incarnation, key = insert_session(ctx, session.header, log, 0, state, metadata, prepared)
    handle = StoredSession._attach(ctx, session.header, log, 0, incarnation, key, state)
    handle.first_live_seq = session.first_live_seq
    return handle


def fork(
    ctx: StoreContext, parent_id: str, boundary: int | None, child_id: str | None
) -> StoredSession:
    """``SessionStore.fork_session``: the parent loaded, the child inserted whole."""
    loaded = load(ctx, parent_id)
    parent = detached(ctx, loaded, seeded=False)
    log, header, inherited = fork_seed(parent, boundary, child_id, ctx.clock())
    state = Replay()
    for _ in replay(log, state, ctx.catalog, log.__getitem__):
        pass
    incarnation, key = insert_session(ctx, header, log, inherited, state, loaded.metadata)
    return StoredSession._attach(ctx, header, log, inherited, incarnation, key, state)


def detached(ctx: StoreContext, loaded: Loaded, *, seeded: bool) -> Session:
    """An in-memory session over a loaded log (``seeded``: add the end-of-seed marker)."""
    return Session._from_checked(
        loaded.header,
        loaded.log,
        loaded.inherited_event_count,
        ctx.catalog,
        ctx.clock,
        ctx.max_event_bytes,
        state=loaded.state,
        seeded=seeded,
    )


def load(ctx: StoreContext, session_id: str) -> Loaded:
    """Read and fully validate a stored session (its log up to the row's head).

    Row and log come from one snapshot, and each event is planned once. A long log is
    read with the cyclic collector paused, as a big batch is built (see ``_gc``): every
    object it builds is kept in the log.
    """
    lookup_id(session_id)
    log: list[SessionEvent] = []
    state = Replay()
    with translate_errors(session_id), snapshot_tx(ctx.read_engine()) as conn:
        row = reader.session_row(conn, ctx, session_id)
        header = frozen_header(session_id, row.header)
        rows = reader.event_rows_in(
            conn, ctx, row.session_key, row.head_seq, batch=reader.LOAD_BATCH
        )
        long_log = row.head_seq + 1 >= PAUSE_MIN_EVENTS
        try:
            with gc_paused() if long_log else nullcontext():
                fold_checked(
                    map(functools.partial(event_from_row, session_id), rows),
                    log,
                    state,
                    ctx.catalog,
                    parsed=True,
                )
        except InvalidSeedError as exc:
            raise CorruptSessionError(
                f"session {session_id!r} seq {exc.seq}: stored event is invalid: {exc}",
                session_id=session_id,
                seq=exc.seq,
            ) from exc
    metadata = Metadata(row.user_id, row.title, labels_value(session_id, row.labels))
    return Loaded(header, log, row.inherited_event_count, row.incarnation, state, metadata)


def insert_session(
    ctx: StoreContext,
    header: FrozenDict,
    log: list[SessionEvent],
    inherited_event_count: int,
    state: Replay,
    metadata: Metadata,
    prepared: Sequence[Prepared] = (),
) -> tuple[str, int]:
    """Write a whole new session in one transaction (with ``prepared``, see
    ``create``); returns its incarnation (new at every creation, so a recreated
    session differs) and its ``session_key``. ``state`` is the replay of ``log``: its rows
    and counters are what gets stored."""
    session_id = str(header["id"])
    surface_rows = state.rows()
    check_header_limits(header, ctx.max_event_bytes)  # the limits, before the transaction
    limit = ctx.max_event_bytes
    event_rows = [event_values(ctx.tenant, NEW_SESSION_KEY, e, limit) for e in log]
    incarnation = uuid.uuid4().hex
    row = new_row(
        ctx.tenant,
        header,
        inherited_event_count,
        len(log) - 1,
        state.next_pos,
        state.replace_generation,
        state.digest,
        ctx.clock(),
        incarnation,
        metadata,
    )
    parts = [pending.session._append_part(pending) for pending in prepared]
    with translate_errors(session_id):
        inserted = bulk.insert_session(ctx, row, event_rows, surface_rows, parts)
    if inserted.lost is not None:
        loser = prepared[inserted.lost].session
        with translate_errors(loser.id), read_tx(ctx.engine) as conn:
            loser._raise_lost_race(conn)
    ctx.keys[session_id] = inserted.session_key
    return incarnation, inserted.session_key


def new_row(
    tenant: str,
    header: FrozenDict,
    inherited_event_count: int,
    head_seq: int,
    surface_next_pos: int,
    replace_generation: int,
    surface_digest: int,
    updated_at: int,
    incarnation: str,
    metadata: Metadata,
) -> dict[str, Any]:
    """The ``sessions`` row of a new session."""
    return {
        "tenant": tenant,
        "id": str(header["id"]),
        "format_version": header["version"],
        "created_at": header["createdAt"],
        "parent_session": header.get("parentSession"),
        "inherited_event_count": inherited_event_count,
        "header": header,
        "head_seq": head_seq,
        "surface_next_pos": surface_next_pos,
        "replace_generation": replace_generation,
        "surface_digest": surface_digest,
        "updated_at": updated_at,
        "incarnation": incarnation,
        "user_id": metadata.user_id,
        "title": metadata.title,
        "labels": dict(metadata.labels),
    }
