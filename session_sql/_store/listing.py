"""Listing sessions: the paged query of ``list_sessions``/``iter_sessions`` and ``SessionInfo``."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Connection, and_, func, or_, select

from session_sql._store.backends import read_tx, translate_errors
from session_sql._store.context import StoreContext
from session_sql._store.metadata import check_labels, check_user_id
from session_sql.arguments import MAX_BOUND, clamp, int_arg, lookup_id
from session_sql.errors import CorruptSessionError, InvalidArgumentError, SessionNotFoundError
from session_sql.events import is_session_id


class SessionInfo(BaseModel):
    """One row of ``list_sessions``: the session row's bookkeeping and metadata."""

    model_config = ConfigDict(frozen=True)

    id: str
    created_at: int
    updated_at: int
    head_seq: int
    parent_session: str | None
    tenant: str = ""
    user_id: str | None = None
    title: str | None = None
    labels: dict[str, str] = {}

    @property
    def event_count(self) -> int:
        """How many events the log holds (``head_seq + 1``)."""
        return self.head_seq + 1


def own(ctx: StoreContext, table: Any) -> Any:
    """The condition that keeps ``table``'s rows of the store's tenant."""
    return table.c.tenant == ctx.statements.tenant_param


def session_info(conn: Connection, ctx: StoreContext, session_id: str) -> SessionInfo:
    """One session's ``SessionInfo``; ``SessionNotFoundError`` when it is missing."""
    lookup_id(session_id)
    s = ctx.tables.sessions
    row = conn.execute(select(*info_columns(s)).where(own(ctx, s), s.c.id == session_id)).first()
    if row is None:
        raise SessionNotFoundError.for_session(session_id)
    return info_from_row(row)


def list_sessions(
    ctx: StoreContext,
    *,
    limit: int,
    after: SessionInfo | str | None,
    parent: str | None,
    created_after: int | None,
    created_before: int | None,
    order: Literal["updated", "created"],
    id_prefix: str | None,
    user_id: str | None,
    labels: Mapping[str, str] | None,
    reverse: bool = False,
) -> list[SessionInfo]:
    """``SessionStore.list_sessions``: its arguments checked, then one read."""
    limit = min(int_arg("limit", limit, minimum=0), MAX_BOUND)
    if order not in ("updated", "created"):
        raise InvalidArgumentError(
            f"order must be 'updated' or 'created', got {order!r}", argument="order"
        )
    s = ctx.tables.sessions
    conditions = _filters(ctx, parent, created_after, created_before, id_prefix, user_id, labels)
    if conditions is None:
        return []
    # Newest-updated first, or oldest-created first; ``reverse`` turns either round.
    if type(reverse) is not bool:
        raise InvalidArgumentError(
            f"reverse must be a bool, got {type(reverse).__name__}", argument="reverse"
        )
    descending = (order == "updated") != reverse
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


def count_sessions(
    ctx: StoreContext,
    *,
    parent: str | None,
    created_after: int | None,
    created_before: int | None,
    id_prefix: str | None,
    user_id: str | None,
    labels: Mapping[str, str] | None,
) -> int:
    """``SessionStore.count_sessions``: how many sessions ``list_sessions`` would list with
    the same filters and no limit (one count over the sessions table)."""
    conditions = _filters(ctx, parent, created_after, created_before, id_prefix, user_id, labels)
    if conditions is None:
        return 0
    query = select(func.count()).select_from(ctx.tables.sessions).where(*conditions)
    with translate_errors(), read_tx(ctx.read_engine()) as conn:
        return int(conn.execute(query).scalar_one())


def _filters(
    ctx: StoreContext,
    parent: str | None,
    created_after: int | None,
    created_before: int | None,
    id_prefix: str | None,
    user_id: str | None,
    labels: Mapping[str, str] | None,
) -> list[Any] | None:
    """The WHERE conditions of the listing filters, checked; ``None`` when no session can
    match (then nothing is read)."""
    if id_prefix is not None and type(id_prefix) is not str:
        raise InvalidArgumentError(
            f"id_prefix must be a str, got {type(id_prefix).__name__}", argument="id_prefix"
        )
    user = check_user_id(user_id, argument="user_id")
    wanted = check_labels(labels, "labels")
    for name, bound in (("created_after", created_after), ("created_before", created_before)):
        if bound is not None:
            int_arg(name, bound)
    s = ctx.tables.sessions
    conditions: list[Any] = [own(ctx, s)]
    if user is not None:
        conditions.append(s.c.user_id == user)
    conditions.extend(ctx.backend.labels_match(s.c.labels, wanted))
    if parent is not None:
        if not is_session_id(parent):
            return None  # no session can have it as its parent
        conditions.append(s.c.parent_session == parent)
    if id_prefix:
        if not id_prefix.isprintable():
            return None  # no session id has it (and PostgreSQL text cannot hold a NUL)
        # substr, not LIKE: SQLite's LIKE ignores case and both treat % and _ as wildcards.
        conditions.append(func.substr(s.c.id, 1, len(id_prefix)) == id_prefix)
    if created_after is not None:
        conditions.append(s.c.created_at >= clamp(created_after))
    if created_before is not None:
        conditions.append(s.c.created_at < clamp(created_before))
    return conditions


def iter_sessions(ctx: StoreContext, parent: str | None, page_size: int) -> Iterator[SessionInfo]:
    """Every session, oldest-created first, one ``list_sessions`` page at a time."""
    after: SessionInfo | None = None
    while True:
        page = list_sessions(
            ctx,
            limit=page_size,
            after=after,
            parent=parent,
            created_after=None,
            created_before=None,
            order="created",
            id_prefix=None,
            user_id=None,
            labels=None,
        )
        yield from page
        if len(page) < page_size:
            return
        after = page[-1]


def info_columns(s: Any) -> list[Any]:
    """The ``sessions`` columns a ``SessionInfo`` is built from."""
    return [
        s.c.id,
        s.c.created_at,
        s.c.updated_at,
        s.c.head_seq,
        s.c.parent_session,
        s.c.tenant,
        s.c.user_id,
        s.c.title,
        s.c.labels,
    ]


def info_from_row(row: Any) -> SessionInfo:
    values = row._asdict()
    values["labels"] = labels_value(row.id, row.labels)
    return SessionInfo.model_validate(values)


def labels_value(session_id: str, raw: Any) -> dict[str, str]:
    """A stored ``labels`` value as a dict; ``CorruptSessionError`` when it is not one."""
    if isinstance(raw, str):  # a driver that hands JSON back as text
        raw = json.loads(raw)
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise CorruptSessionError(
            f"session {session_id!r}: stored labels are not an object of strings: {raw!r}",
            session_id=session_id,
        )
    return dict(raw)
