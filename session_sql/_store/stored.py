"""What the store's rows become when read (events, headers, session infos, messages), and
the checked arguments of a listing.

The decoding half of the row codec (``rows`` holds the encoding and the columns a reader
selects). It needs no SQLAlchemy: the store's readers and the command line's quick SQLite
reads (``quick``) hand it the same plain row tuples, so a row is checked one way whoever
reads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from session_sql._store.metadata import check_labels, check_user_id
from session_sql.arguments import MAX_BOUND, clamp, int_arg
from session_sql.catalog import NODE_TYPES
from session_sql.errors import (
    CorruptSessionError,
    InvalidArgumentError,
    InvalidEventError,
    NotJSONError,
    SessionFormatUnsupportedError,
)
from session_sql.events import (
    SessionEvent,
    SurfaceOp,
    check_header,
    check_type_name,
    is_session_id,
    parse_source_seqs,
    parse_surface_op,
)
from session_sql.jsoncodec import loads_frozen
from session_sql.jsonvalue import MAX_SAFE_INTEGER, FrozenDict
from session_sql.messages import project_data

__all__ = [
    "INFO_COLUMNS",
    "ListingFilters",
    "SessionInfo",
    "event_from_row",
    "frozen_header",
    "info_from_values",
    "labels_value",
    "listing_filters",
    "listing_page",
    "project_row",
]


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


INFO_COLUMNS = (
    "id",
    "created_at",
    "updated_at",
    "head_seq",
    "parent_session",
    "tenant",
    "user_id",
    "title",
    "labels",
)
"""The ``sessions`` columns a ``SessionInfo`` is built from, in the order readers select them."""


def info_from_values(values: tuple[Any, ...]) -> SessionInfo:
    """A ``SessionInfo`` from a row of the ``INFO_COLUMNS``; stored labels are checked."""
    fields = dict(zip(INFO_COLUMNS, values, strict=True))
    fields["labels"] = labels_value(fields["id"], fields["labels"])
    return SessionInfo.model_validate(fields)


class ListingFilters(NamedTuple):
    """The checked filters of a listing: the sessions kept are those matching every one set."""

    user_id: str | None
    labels: dict[str, str]
    parent: str | None
    id_prefix: str | None
    created_after: int | None
    created_before: int | None


def listing_filters(
    parent: str | None,
    created_after: int | None,
    created_before: int | None,
    id_prefix: str | None,
    user_id: str | None,
    labels: Mapping[str, str] | None,
) -> ListingFilters | None:
    """The filters of ``list_sessions``/``count_sessions``, checked (``InvalidArgumentError``);
    ``None`` when no session can match them (then nothing is read)."""
    if id_prefix is not None and type(id_prefix) is not str:
        raise InvalidArgumentError(
            f"id_prefix must be a str, got {type(id_prefix).__name__}", argument="id_prefix"
        )
    user = check_user_id(user_id, argument="user_id")
    wanted = check_labels(labels, "labels")
    for name, bound in (("created_after", created_after), ("created_before", created_before)):
        if bound is not None:
            int_arg(name, bound)
    if parent is not None and not is_session_id(parent):
        return None  # no session can have it as its parent
    if id_prefix and not id_prefix.isprintable():
        return None  # no session id has it (and PostgreSQL text cannot hold a NUL)
    return ListingFilters(
        user,
        wanted,
        parent,
        id_prefix or None,
        None if created_after is None else clamp(created_after),
        None if created_before is None else clamp(created_before),
    )


def listing_page(
    limit: int, order: Literal["updated", "created"], reverse: bool
) -> tuple[int, bool]:
    """A listing's ``limit`` (checked, clamped) and whether its order is descending:
    newest-updated first, or oldest-created first, and ``reverse`` turns either round."""
    limit = min(int_arg("limit", limit, minimum=0), MAX_BOUND)
    if order not in ("updated", "created"):
        raise InvalidArgumentError(
            f"order must be 'updated' or 'created', got {order!r}", argument="order"
        )
    if type(reverse) is not bool:
        raise InvalidArgumentError(
            f"reverse must be a bool, got {type(reverse).__name__}", argument="reverse"
        )
    return limit, (order == "updated") != reverse


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


def frozen_header(session_id: str, raw: Any) -> FrozenDict:
    """The stored header text, parsed and checked; ``CorruptSessionError`` when it is broken."""
    try:
        return check_header(loads_frozen(raw, root="header"))
    except SessionFormatUnsupportedError:
        raise  # another format version (§1.3) is not corruption: say newer or older
    except (ValueError, TypeError) as exc:
        raise CorruptSessionError(
            f"session {session_id!r}: stored header is invalid: {exc}", session_id=session_id
        ) from exc


def event_from_row(session_id: str, row: Any) -> SessionEvent:
    """A frozen, envelope-checked event from a row selected by ``event_columns``.

    Raises ``CorruptSessionError`` naming the session and seq for anything a wire envelope
    would be refused for.
    """
    seq, type_name, time, text, src, op, ignorable = row
    if type(ignorable) is int:  # SQLite's BOOLEAN, read without SQLAlchemy's conversion
        ignorable = bool(ignorable)
    try:
        # The common case inline (once per event of every load): a type name seen before, a
        # time in the safe range.
        type_ = type_name if type_name in _seen_types else _checked_type(type_name, seq)
        if type(time) is not int or not -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER:
            raise InvalidEventError(f"time must be an int, got {time!r}", seq=seq)
        data = loads_frozen(text, root="data")
        surface_op = None if op is None else _surface_op(op, seq)
        sources = (
            None
            if src is None
            else parse_source_seqs(loads_frozen(src, root="sourceEventSeqs"), seq=seq)
        )
        if ignorable not in (None, True):
            raise InvalidEventError(f"ignorable must be true or NULL, got {ignorable!r}")
    except (InvalidEventError, NotJSONError, ValueError) as exc:
        raise CorruptSessionError(
            f"session {session_id!r} seq {seq}: stored event is invalid: {exc}",
            session_id=session_id,
            seq=seq,
        ) from exc
    # The fields are checked above: build the tuple without NamedTuple's Python-level __new__.
    fields = (type_, seq, time, data, surface_op, sources, ignorable is True)
    event: SessionEvent = tuple.__new__(SessionEvent, fields)
    return event


_seen_types: set[Any] = set()


def _checked_type(name: Any, seq: int) -> str:
    """``check_type_name``; the names that pass are remembered (a handful recur)."""
    checked = check_type_name(name, seq=seq)
    if type(name) is str and len(_seen_types) < _MAX_SURFACE_OPS:
        _seen_types.add(name)
    return checked


_surface_ops: dict[Any, SurfaceOp] = {}
_MAX_SURFACE_OPS = 4096


def _surface_op(text: Any, seq: int) -> SurfaceOp:
    """A stored ``surface_op`` column, parsed and checked; the texts recur (``"append"`` on
    every surface append), so each distinct text is parsed once per process."""
    op = _surface_ops.get(text) if type(text) is str else None
    if op is None:
        op = parse_surface_op(json.loads(text), seq=seq)
        if type(text) is str and len(_surface_ops) < _MAX_SURFACE_OPS:
            _surface_ops[text] = op
    return op


def project_row(
    session_id: str,
    seq: int,
    type_: str,
    data: Any,
    items: frozenset[str] = frozenset(),
    loads: Callable[..., Any] = loads_frozen,
) -> Any:
    """``messages.project_data`` on a stored row, whose data nobody has checked yet.

    ``items`` are the store catalog's item types (their rows project to their data).
    ``loads`` decodes the data: ``loads_frozen``, or for a reader that hands out copies
    ``jsoncodec.loads_plain``/``loads_vouched`` (the same value thawed, never frozen).
    """
    try:
        frozen = loads(data, root="data")
        if type_ in NODE_TYPES or type_ in items:
            return project_data(type_, frozen, seq, checked=False, items=items)
    except (NotJSONError, InvalidEventError, KeyError, TypeError) as exc:
        raise CorruptSessionError(
            f"session {session_id!r} seq {seq}: stored surface event is malformed: {exc}",
            session_id=session_id,
            seq=seq,
        ) from exc
    raise CorruptSessionError(
        f"session {session_id!r} seq {seq}: a {type_} event is on the surface, and this "
        "store's catalog has no such item type (open the store with the catalog that wrote it)",
        session_id=session_id,
        seq=seq,
    )
