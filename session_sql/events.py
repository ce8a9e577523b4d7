"""The event envelope (SPEC §1.2), the session header (§1.3) and the name formats."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple, TypeAlias, TypeGuard

from session_sql.errors import (
    InvalidEventError,
    InvalidHeaderError,
    NotJSONError,
    SessionFormatUnsupportedError,
)
from session_sql.jsonvalue import MAX_SAFE_INTEGER, FrozenDict, FrozenList, snapshot_json, thaw

SESSION_FORMAT_VERSION = 0

MAX_SESSION_ID_LENGTH = 128
MAX_TYPE_LENGTH = 128
_TYPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*\Z")
_ENVELOPE_KEYS = frozenset(
    {"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"}
)


class Replace(NamedTuple):
    """``{"op": "replace", "start": a, "end": b}``: shadow surface nodes ``a..b`` (by position)."""

    start: int
    end: int

    def to_json(self) -> dict[str, Any]:
        return {"op": "replace", "start": self.start, "end": self.end}


SurfaceOp: TypeAlias = Literal["append"] | Replace


class SessionEvent(NamedTuple):
    """One immutable event of a session log; ``data`` is a frozen JSON value."""

    type: str
    seq: int
    time: int
    data: Any
    surface_op: SurfaceOp | None = None
    source_event_seqs: tuple[int, ...] | None = None
    ignorable: bool = False

    @classmethod
    def from_json(cls, obj: Any) -> SessionEvent:
        """Validate a wire envelope and return the frozen event (``InvalidEventError``)."""
        if isinstance(obj, SessionEvent):
            return obj
        try:
            frozen = snapshot_json(obj, root="event")
        except NotJSONError as exc:
            raise InvalidEventError(f"event is not lossless JSON: {exc}") from exc
        return parse_envelope(frozen)

    def to_json(self) -> dict[str, Any]:
        """The plain wire dict: mutable ``dict``/``list`` throughout, optional keys omitted."""
        wire = self.to_wire()
        wire["data"] = thaw(self.data)
        return wire

    def to_wire(self) -> dict[str, Any]:
        """The wire dict sharing the frozen ``data`` (no copy): for serialising."""
        wire: dict[str, Any] = {
            "type": self.type,
            "seq": self.seq,
            "time": self.time,
            "data": self.data,
        }
        if self.surface_op is not None:
            op = self.surface_op
            wire["surfaceOp"] = op.to_json() if isinstance(op, Replace) else op
        if self.source_event_seqs is not None:
            wire["sourceEventSeqs"] = list(self.source_event_seqs)
        if self.ignorable:
            wire["ignorable"] = True
        return wire


def is_safe_int(value: Any) -> TypeGuard[int]:
    return type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER


_valid_type_names: set[str] = set()


def check_type_name(name: Any, *, seq: int | None = None) -> str:
    """Event type names: 1–128 chars, ``/``-separated segments of ``[A-Za-z0-9._-]``."""
    if type(name) is str and name in _valid_type_names:  # a handful of names recur in every log
        return str(name)
    if type(name) is not str or not name:
        raise InvalidEventError(f"event type must be a non-empty str, got {name!r}", seq=seq)
    if len(name) > MAX_TYPE_LENGTH or _TYPE_NAME.match(name) is None:
        raise InvalidEventError(
            f"event type {name!r} is not a valid type name (segments of letters, digits, "
            f"'.', '_' or '-' separated by '/', at most {MAX_TYPE_LENGTH} characters)",
            seq=seq,
        )
    if len(_valid_type_names) < 4096:
        _valid_type_names.add(name)
    return name


def is_session_id(session_id: Any) -> TypeGuard[str]:
    """Whether ``session_id`` has the session id format: 1–128 printable characters."""
    return (
        type(session_id) is str
        and 1 <= len(session_id) <= MAX_SESSION_ID_LENGTH
        and session_id.isprintable()
    )


def check_session_id(session_id: Any) -> str:
    """Session ids: 1–128 printable characters."""
    if not is_session_id(session_id):
        raise InvalidHeaderError(
            f"session id must be 1–{MAX_SESSION_ID_LENGTH} printable characters, got {session_id!r}"
        )
    return session_id


def parse_surface_op(raw: Any, *, seq: int | None = None) -> SurfaceOp:
    """Accept ``"append"``, a ``Replace`` or its wire object; anything else is invalid."""
    if raw == "append" and type(raw) is str:
        return "append"
    if isinstance(raw, Replace):
        start, end = raw
    elif isinstance(raw, Mapping) and set(raw) == {"op", "start", "end"} and raw["op"] == "replace":
        start, end = raw["start"], raw["end"]
    else:
        raise InvalidEventError(
            f"surfaceOp must be 'append' or {{'op': 'replace', 'start', 'end'}}, got {raw!r}",
            seq=seq,
        )
    if not (is_safe_int(start) and is_safe_int(end) and start >= 0 and end >= 0):
        raise InvalidEventError(
            f"replace endpoints must be ints >= 0, got start={start!r} end={end!r}", seq=seq
        )
    return Replace(start, end)


_INT_ONLY = frozenset({int})


def parse_source_seqs(raw: Any, *, seq: int | None = None) -> tuple[int, ...]:
    """``sourceEventSeqs`` must be a list of ints (the provenance rules come later)."""
    if not isinstance(raw, list | tuple) or isinstance(raw, Replace):
        raise InvalidEventError(f"sourceEventSeqs must be a list of ints, got {raw!r}", seq=seq)
    # Checked in C (a summary cites thousands of seqs); the loop below names a bad one.
    if set(map(type, raw)) <= _INT_ONLY and (
        not raw or (max(raw) <= MAX_SAFE_INTEGER and min(raw) >= -MAX_SAFE_INTEGER)
    ):
        return raw if type(raw) is FrozenList else FrozenList(raw)
    for s in raw:
        if not is_safe_int(s):
            raise InvalidEventError(f"sourceEventSeqs must hold only ints, got {s!r}", seq=seq)
    return FrozenList(raw)  # a tuple that also equals the list it came from


_REQUIRED_KEYS = frozenset({"type", "seq", "time", "data"})


def parse_envelope(obj: Any) -> SessionEvent:
    """Check the envelope of an already frozen wire object and build the event."""
    if not isinstance(obj, dict):
        raise InvalidEventError(f"an event must be a JSON object, got {type(obj).__name__}")
    seq = obj.get("seq")
    keys = obj.keys()
    if not (keys <= _ENVELOPE_KEYS and keys >= _REQUIRED_KEYS):  # no sets built when valid
        at = seq if is_safe_int(seq) else None
        extra = keys - _ENVELOPE_KEYS
        if extra:
            raise InvalidEventError(f"unknown envelope keys {sorted(extra)}", seq=at)
        missing = _REQUIRED_KEYS - keys
        raise InvalidEventError(f"missing envelope keys {sorted(missing)}", seq=at)
    type_ = obj["type"]
    if type(type_) is not str or type_ not in _valid_type_names:
        type_ = check_type_name(type_, seq=seq if is_safe_int(seq) else None)
    if not is_safe_int(seq) or seq < 0:
        raise InvalidEventError(f"seq must be an int >= 0, got {seq!r}", seq=None)
    time = obj["time"]
    if not is_safe_int(time):
        raise InvalidEventError(f"time must be an int (epoch ms), got {time!r}", seq=seq)
    surface_op = sources = None
    ignorable = False
    if len(obj) > 4:  # optional keys: most of a log (chunks, steps, tool calls) has none
        op = obj.get("surfaceOp")
        if op is not None or "surfaceOp" in obj:
            surface_op = parse_surface_op(op, seq=seq)
        src = obj.get("sourceEventSeqs")
        if src is not None or "sourceEventSeqs" in obj:
            sources = parse_source_seqs(src, seq=seq)
        if "ignorable" in obj:
            if obj["ignorable"] is not True:
                raise InvalidEventError(
                    f"ignorable must be exactly true when present, got {obj['ignorable']!r}",
                    seq=seq,
                )
            ignorable = True
    # Every field is checked: build the tuple without the NamedTuple's Python-level __new__.
    fields = (type_, seq, time, obj["data"], surface_op, sources, ignorable)
    event: SessionEvent = tuple.__new__(SessionEvent, fields)
    return event


# -- the session header ---------------------------------------------------------------------


def check_header(raw: Any) -> FrozenDict:
    """Validate a session header (§1.3) and return it frozen."""
    if not isinstance(raw, dict):
        raise InvalidHeaderError(f"a session header must be a JSON object, got {raw!r}")
    try:
        header: FrozenDict = snapshot_json(raw, root="header")
    except NotJSONError as exc:
        raise InvalidHeaderError(f"session header is not lossless JSON: {exc}") from exc
    version = header.get("version")
    if not is_safe_int(version):
        raise InvalidHeaderError(f"header version must be an int, got {version!r}")
    if version != SESSION_FORMAT_VERSION:
        age = "newer" if version > SESSION_FORMAT_VERSION else "older"
        raise SessionFormatUnsupportedError(
            f"session format version {version} is {age} than this build's "
            f"{SESSION_FORMAT_VERSION}; open it with a build that reads version {version}"
        )
    check_session_id(header.get("id"))
    created = header.get("createdAt")
    if not is_safe_int(created) or created < 0:
        raise InvalidHeaderError(f"header createdAt must be an int >= 0, got {created!r}")
    if type(header.get("isSeeded")) is not bool:
        raise InvalidHeaderError(f"header isSeeded must be a bool, got {header.get('isSeeded')!r}")
    if "parentSession" in header:
        check_session_id(header["parentSession"])
    if "cwd" in header:
        cwd = header["cwd"]
        if type(cwd) is not str or not cwd.startswith("/"):
            raise InvalidHeaderError(f"header cwd must be an absolute path, got {cwd!r}")
    return header


def make_header(
    session_id: str,
    created_at: int,
    *,
    is_seeded: bool = False,
    parent_session: str | None = None,
) -> FrozenDict:
    raw: dict[str, Any] = {
        "version": SESSION_FORMAT_VERSION,
        "id": session_id,
        "createdAt": created_at,
        "isSeeded": is_seeded,
    }
    if parent_session is not None:
        raw["parentSession"] = parent_session
    return check_header(raw)


__all__ = [
    "SESSION_FORMAT_VERSION",
    "FrozenDict",
    "FrozenList",
    "Replace",
    "SessionEvent",
    "SurfaceOp",
    "check_header",
    "check_session_id",
    "check_type_name",
    "is_session_id",
    "make_header",
    "parse_envelope",
]
