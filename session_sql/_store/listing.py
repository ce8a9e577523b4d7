"""Listing sessions: the paged query of ``list_sessions``/``iter_sessions`` and ``SessionInfo``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from sqlalchemy import Connection, and_, false, func, not_, or_, select

from session_sql._store import reader
from session_sql._store.context import StoreContext
from session_sql._store.database import read_tx, translate_errors
from session_sql._store.metadata import HIDDEN_LABEL
from session_sql._store.stored import (
    INFO_COLUMNS,
    ListingFilters,
    SessionInfo,
    info_from_values,
    listing_filters,
    listing_page,
)
from session_sql.arguments import lookup_id
from session_sql.errors import SessionNotFoundError


def own(ctx: StoreContext, table: Any) -> Any:
    """The condition that keeps ``table``'s rows of the store's tenant."""
    return table.c.tenant == ctx.statements.tenant_param


def session_info(conn: Connection, ctx: StoreContext, session_id: str) -> SessionInfo:
    """One session's ``SessionInfo``; ``SessionNotFoundError`` when it is missing."""
    lookup_id(session_id)
    s = ctx.tables.sessions
    query = select(*info_columns(s)).where(own(ctx, s))

    def read(key: int) -> list[Any]:  # by its key: one shard on Citus
        return list(conn.execute(query.where(s.c.session_key == key)).all())

    rows = reader.by_kept_key(conn, ctx, session_id, read)
    if not rows:
        raise SessionNotFoundError.for_session(session_id)
    return info_from_row(rows[0])


def list_sessions(
    ctx: StoreContext,
    wanted: ListingFilters | None,
    include_hidden: bool,
    page: tuple[int, bool],
    order: Literal["updated", "created"],
    after: SessionInfo | str | None,
) -> list[SessionInfo]:
    """``SessionStore.list_sessions`` with its filters and ``page`` (``listing_page``'s limit
    and direction) checked: one read."""
    limit, descending = page
    s = ctx.tables.sessions
    conditions = _filters(ctx, wanted, include_hidden)
    if conditions is None:
        return []
    key = s.c.updated_at if order == "updated" else s.c.created_at
    query = (
        select(*info_columns(s))
        .where(*conditions)
        .order_by(*((key.desc(), s.c.id.desc()) if descending else (key, s.c.id)))
    )
    with translate_errors(), read_tx(ctx.read_engine()) as conn:
        if after is not None:
            cursor = after if isinstance(after, SessionInfo) else session_info(conn, ctx, after)
            at = cursor.updated_at if order == "updated" else cursor.created_at
            if descending:
                query = query.where(or_(key < at, and_(key == at, s.c.id < cursor.id)))
            else:
                query = query.where(or_(key > at, and_(key == at, s.c.id > cursor.id)))
        rows = conn.execute(query.limit(limit)).all()
    return [info_from_row(row) for row in rows]


def count_sessions(ctx: StoreContext, wanted: ListingFilters | None, include_hidden: bool) -> int:
    """``SessionStore.count_sessions`` with its filters checked: how many sessions
    ``list_sessions`` would list with the same filters and no limit (one count over the
    sessions table)."""
    conditions = _filters(ctx, wanted, include_hidden)
    if conditions is None:
        return 0
    query = select(func.count()).select_from(ctx.tables.sessions).where(*conditions)
    with translate_errors(), read_tx(ctx.read_engine()) as conn:
        return int(conn.execute(query).scalar_one())


def _filters(
    ctx: StoreContext, wanted: ListingFilters | None, include_hidden: bool
) -> list[Any] | None:
    """The WHERE conditions of the checked listing filters (``include_hidden=False`` adds
    ``_not_hidden``); ``None`` when no session can match (then nothing is read)."""
    if wanted is None:
        return None
    s = ctx.tables.sessions
    conditions: list[Any] = [own(ctx, s)]
    if wanted.user_id is not None:
        conditions.append(s.c.user_id == wanted.user_id)
    conditions.extend(ctx.backend.labels_match(s.c.labels, wanted.labels))
    if wanted.parent is not None:
        conditions.append(s.c.parent_session == wanted.parent)
    if wanted.id_prefix is not None:
        # substr, not LIKE: SQLite's LIKE ignores case and both treat % and _ as wildcards.
        prefix = wanted.id_prefix
        conditions.append(func.substr(s.c.id, 1, len(prefix)) == prefix)
    if wanted.created_after is not None:
        conditions.append(s.c.created_at >= wanted.created_after)
    if wanted.created_before is not None:
        conditions.append(s.c.created_at < wanted.created_before)
    if not include_hidden:
        conditions.append(_not_hidden(ctx))
    return conditions


def _not_hidden(ctx: StoreContext) -> Any:
    """The condition that leaves out the sessions labelled ``HIDDEN_LABEL=true``."""
    hidden = ctx.backend.labels_match(ctx.tables.sessions.c.labels, {HIDDEN_LABEL: "true"})
    return not_(func.coalesce(and_(*hidden), false()))


def iter_sessions(ctx: StoreContext, parent: str | None, page_size: int) -> Iterator[SessionInfo]:
    """Every session, oldest-created first, one ``list_sessions`` page at a time."""
    wanted = listing_filters(parent, None, None, None, None, None)
    page_limit = listing_page(page_size, "created", False)
    after: SessionInfo | None = None
    while True:
        page = list_sessions(ctx, wanted, True, page_limit, "created", after)
        yield from page
        if len(page) < page_size:
            return
        after = page[-1]


def info_columns(s: Any) -> list[Any]:
    """The ``sessions`` columns a ``SessionInfo`` is built from (``stored.INFO_COLUMNS``)."""
    return [s.c[name] for name in INFO_COLUMNS]


def info_from_row(row: Any) -> SessionInfo:
    return info_from_values(tuple(row))
