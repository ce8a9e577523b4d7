"""Tenants and session metadata (SPEC §11.4): what a valid tenant, user id, title and labels are.

Checked at the API before any transaction starts, so a bad value writes nothing. Every value
must be text the database can store and compare: printable characters (no NUL, no lone
surrogates), bounded in length. Label names are restricted further, to characters that need no
quoting in a JSON path on any backend.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from session_sql.errors import ConfigurationError, InvalidArgumentError, InvalidHeaderError
from session_sql.events import check_header, is_safe_int
from session_sql.jsonl import EVENTS_KEY
from session_sql.jsonvalue import FrozenDict, thaw

__all__ = [
    "HIDDEN_LABEL",
    "EXPORT_KEY",
    "MAX_LABELS",
    "MAX_TENANT_LENGTH",
    "UNSET",
    "Exported",
    "Metadata",
    "check_labels",
    "check_tenant",
    "TITLE_EVENT",
    "check_title",
    "title_of",
    "check_user_id",
    "export_header",
    "split_export_header",
]

MAX_TENANT_LENGTH = 128
MAX_USER_ID_LENGTH = 256
MAX_TITLE_LENGTH = 1000
MAX_LABEL_VALUE_LENGTH = 1000
MAX_LABELS = 64
HIDDEN_LABEL = "session_sql.hidden"
"""A session labelled ``session_sql.hidden=true`` is left out of ``session-sql ls`` and the
inspector's list unless asked (``list_sessions(include_hidden=False)`` is that listing): for
a framework's bookkeeping sessions, such as the ADK service's app and user state."""
_LABEL_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,128}\Z")


class _Unset:
    """The type of ``UNSET``: "leave this as it is" in ``update_session``."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


class Metadata(NamedTuple):
    """A session's metadata as stored in its row."""

    user_id: str | None = None
    title: str | None = None
    labels: Mapping[str, str] = {}


def _printable(value: str, *, minimum: int, maximum: int) -> bool:
    return minimum <= len(value) <= maximum and value.isprintable()


def check_tenant(tenant: object) -> str:
    """A store's tenant: ``None`` or ``""`` (the default tenant), or 1–128 printable characters."""
    if tenant is None:
        return ""
    if type(tenant) is not str or not _printable(tenant, minimum=0, maximum=MAX_TENANT_LENGTH):
        raise ConfigurationError(
            f"tenant must be a string of at most {MAX_TENANT_LENGTH} printable characters "
            f'("" or None: the default tenant), not {tenant!r}',
            option="tenant",
        )
    return tenant


def check_user_id(user_id: object, *, argument: str = "user_id") -> str | None:
    """``None`` or 1–256 printable characters; ``InvalidArgumentError`` otherwise."""
    if user_id is None:
        return None
    if type(user_id) is not str or not _printable(user_id, minimum=1, maximum=MAX_USER_ID_LENGTH):
        raise InvalidArgumentError(
            f"{argument} must be None or 1–{MAX_USER_ID_LENGTH} printable characters, "
            f"not {user_id!r}",
            argument=argument,
        )
    return user_id


TITLE_EVENT = "session/title"
"""The plugin event whose latest ``data.title`` is the session's title (docs/concepts.md)."""


def title_of(events: Iterable[Any]) -> str | None:
    """The title the latest ``session/title`` event of ``events`` sets, or ``None`` when none
    sets one: a title must be a non-empty string that ``check_title`` accepts (the event's
    data is opaque, so any other value is kept in the log and leaves the title alone)."""
    found = None
    for event in events:
        if event.type != TITLE_EVENT or not isinstance(event.data, Mapping):
            continue
        title = event.data.get("title")
        if type(title) is str and _printable(title, minimum=1, maximum=MAX_TITLE_LENGTH):
            found = title
    return found


def check_title(title: object) -> str | None:
    """``None`` or at most 1000 printable characters; ``InvalidArgumentError`` otherwise."""
    if title is None:
        return None
    if type(title) is not str or not _printable(title, minimum=0, maximum=MAX_TITLE_LENGTH):
        raise InvalidArgumentError(
            f"title must be None or at most {MAX_TITLE_LENGTH} printable characters, not {title!r}",
            argument="title",
        )
    return title


def check_labels(labels: object, argument: str) -> dict[str, str]:
    """``None`` (no labels) or a mapping of label name -> value, both strings.

    Names: 1–128 characters from ``A-Z a-z 0-9 _ . : / -``; values: at most 1000 printable
    characters; at most 64 labels. ``InvalidArgumentError`` naming ``argument`` otherwise.
    """
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise InvalidArgumentError(
            f"{argument} must be a mapping of str to str (or None), not {labels!r}",
            argument=argument,
        )
    if len(labels) > MAX_LABELS:
        raise InvalidArgumentError(
            f"{argument}: at most {MAX_LABELS} labels, got {len(labels)}", argument=argument
        )
    checked: dict[str, str] = {}
    for name, value in labels.items():
        if type(name) is not str or _LABEL_NAME.match(name) is None:
            raise InvalidArgumentError(
                f"{argument}: label name {name!r} must be 1–128 characters from "
                "A-Z a-z 0-9 _ . : / -",
                argument=argument,
            )
        if type(value) is not str or not _printable(
            value, minimum=0, maximum=MAX_LABEL_VALUE_LENGTH
        ):
            raise InvalidArgumentError(
                f"{argument}: label {name!r} must have a string value of at most "
                f"{MAX_LABEL_VALUE_LENGTH} printable characters, not {value!r}",
                argument=argument,
            )
        checked[name] = value
    return checked


# --------------------------------------------------------------------------------------------
# The JSONL extension: what the session row holds beside the header and the log


EXPORT_KEY = "x-session-sql"
"""The header key under which an export carries the session's row (tenant, metadata, time of
the last write). A plain header key (SPEC §1.3 keeps any other key verbatim), so a reader of
the plain format stores it as one more header key; this store takes it out again on import."""

_EXPORT_FIELDS = frozenset({"tenant", "userId", "title", "labels", "updatedAt"})


class Exported(NamedTuple):
    """What an export's ``EXPORT_KEY`` said: the row of the session it was read from."""

    tenant: str
    metadata: Metadata
    updated_at: int | None


def export_header(
    header: Mapping[str, Any],
    tenant: str,
    metadata: Metadata,
    updated_at: int,
    events: int | None = None,
) -> dict[str, Any]:
    """The header line of an export: the stored header, then ``events`` under
    ``jsonl.EVENTS_KEY`` (the lines that follow, so that a cut copy is refused), then
    ``EXPORT_KEY`` (last)."""
    line = {key: value for key, value in header.items() if key not in (EXPORT_KEY, EVENTS_KEY)}
    if events is not None:
        line[EVENTS_KEY] = events
    line[EXPORT_KEY] = {
        "tenant": tenant,
        "userId": metadata.user_id,
        "title": metadata.title,
        "labels": dict(metadata.labels),
        "updatedAt": updated_at,
    }
    return line


def split_export_header(header: FrozenDict) -> tuple[FrozenDict, Exported | None]:
    """A file's header without ``EXPORT_KEY``, and what that key said (``None``: absent).

    Every field is checked as ``create_session`` checks it; a bad one raises
    ``InvalidHeaderError`` (line 1 of the file), before anything is written.
    """
    if EXPORT_KEY not in header:
        return header, None
    raw = header[EXPORT_KEY]
    if not isinstance(raw, Mapping):
        raise InvalidHeaderError(f"header {EXPORT_KEY} must be an object, got {thaw(raw)!r}")
    unknown = sorted(set(raw) - _EXPORT_FIELDS)
    if unknown:
        raise InvalidHeaderError(
            f"header {EXPORT_KEY} has unknown keys {unknown} (this build knows "
            f"{sorted(_EXPORT_FIELDS)}): it was written by a newer build, import it there"
        )
    updated_at = raw.get("updatedAt")
    if updated_at is not None and (not is_safe_int(updated_at) or updated_at < 0):
        raise InvalidHeaderError(
            f"header {EXPORT_KEY}.updatedAt must be an int >= 0, got {updated_at!r}"
        )
    try:
        tenant = check_tenant(raw.get("tenant", ""))
        metadata = Metadata(
            check_user_id(raw.get("userId"), argument=f"{EXPORT_KEY}.userId"),
            check_title(raw.get("title")),
            check_labels(thaw(raw.get("labels")), f"{EXPORT_KEY}.labels"),
        )
    except (ConfigurationError, InvalidArgumentError) as exc:
        raise InvalidHeaderError(f"header {EXPORT_KEY}: {exc}") from exc
    rest = {key: value for key, value in thaw(header).items() if key != EXPORT_KEY}
    return check_header(rest), Exported(tenant, metadata, updated_at)
