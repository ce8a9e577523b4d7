"""Lossless JSON values: validate-and-freeze in one pass, and thaw back.

A frozen value is built from ``FrozenDict`` (a read-only ``dict``) and ``FrozenList`` (a
``tuple``). Both are subclasses of the built-ins the stdlib JSON encoder knows, so a frozen value
serialises with ``json.dumps`` directly, without being thawed first. JSON text is
``jsoncodec``'s: it parses into these values and writes them back.

The hot path here (``snapshot_json``) first tries a fast path — orjson's encoder checks keys
and strings in C, then a recursive walk with type dispatch checks numbers and freezes — and
hands anything that path cannot decide (a bad value, deep nesting, a cycle) to the exact path,
which gives the same result or the same error; so the fast path changes speed, never an
outcome. ``_UndecidedError`` and ``_FAST_DEPTH`` are that protocol, shared with
``jsoncodec``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from math import copysign, isfinite
from typing import Any, NoReturn, TypeAlias

import orjson

from session_sql.errors import NotJSONError

MAX_SAFE_INTEGER = 2**53 - 1

JSONValue: TypeAlias = Any
"""A frozen lossless-JSON value (None, bool, int, float, str, FrozenList, FrozenDict)."""


def _readonly(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is immutable")


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses every mutation (values are frozen too)."""

    __slots__ = ()
    __setitem__ = __delitem__ = _readonly
    clear = pop = popitem = setdefault = update = _readonly
    __ior__ = _readonly

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"

    def __hash__(self) -> int:  # type: ignore[override]
        raise TypeError("unhashable type: 'FrozenDict'")


class FrozenList(tuple[Any, ...]):
    """A JSON array after freezing: a tuple that also compares equal to the equal list."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, list | tuple):
            return NotImplemented
        return _deep_equal(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return f"FrozenList({list(self)!r})"


def _deep_equal(a: Any, b: Any) -> bool:
    """``a == b`` with an explicit stack, so that frozen values compare at any depth.

    ``FrozenList.__eq__`` is Python code: recursing through it costs Python frames at every
    level, and values a few hundred levels deep (which the store keeps) would hit the recursion
    limit. Mappings compare as dicts, a ``FrozenList`` as the equal list or tuple, and
    everything else with ``==``, exactly as the recursive comparison would.
    """
    stack: list[tuple[Any, Any]] = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif (
            isinstance(x, list | tuple)
            and isinstance(y, list | tuple)
            and (type(x) is type(y) or isinstance(x, FrozenList) or isinstance(y, FrozenList))
        ):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


NUL_ADVICE = (
    ", which the store refuses: PostgreSQL's JSON operators cannot read a document holding "
    "it (SPEC §12.1); encode binary data first (base64, or an escape of your own)"
)
"""Why U+0000 is refused, and what to do instead (tool output read from binary files)."""


def _fail(path: list[Any], why: str) -> NoReturn:
    where = str(path[0]) + "".join(
        f"[{json.dumps(p, ensure_ascii=False)}]" if type(p) is str else f"[{p!r}]" for p in path[1:]
    )
    raise NotJSONError(f"{where}: {why}", path=where)


def _str_problem(s: str) -> str | None:
    if "\x00" in s:
        return "string contains U+0000" + NUL_ADVICE
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return "string contains an unpaired surrogate"
    return None


def _scalar_problem(value: Any) -> str | None:
    """Why a non-container value is not lossless JSON, or None when it is."""
    t = type(value)
    if t is str:
        return _str_problem(value)
    if t is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return None
        return f"integer {value} is outside the safe range ±(2**53-1)"
    if t is float:
        if not isfinite(value):
            return f"{value!r} is not a finite number"
        if value == 0.0 and copysign(1.0, value) < 0:
            return "-0.0 does not survive a JSON round trip"
        return None
    if t is bool or value is None:
        return None
    return f"{t.__name__} is not a JSON value"


_checked_keys: set[str] = set()
_MAX_CHECKED_KEYS = 4096

_FAST_DEPTH = 64
"""How deep the recursive fast paths go before they hand the value to the exact path (which
uses an explicit stack): real event data nests far less, and a cycle ends up there too."""


class _UndecidedError(Exception):
    """The fast path met something it does not decide; the exact path takes over."""


def _list_of(value: Any) -> Any:
    """orjson's ``default``: a ``FrozenList`` (a tuple subclass, which orjson does not take)
    as the list it stands for; anything else is refused."""
    if type(value) is FrozenList:
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _encoded(value: Any) -> bytes:
    """``value`` as compact JSON bytes from orjson's encoder, which also checks, in C, what
    the walk then need not: every key a ``str`` (exactly), no string (key or value) holding
    a lone surrogate, no integer past 64 bits, no unknown type, no cycle (orjson stops at
    255 levels). ``_UndecidedError`` when it refuses the value, or when the text holds an
    escaped U+0000 (a string with U+0000, or one with a backslash before ``u0000``)."""
    try:
        text = orjson.dumps(value, default=_list_of)
    except TypeError:  # orjson.JSONEncodeError
        raise _UndecidedError from None
    if b"\\u0000" in text:
        raise _UndecidedError
    return text


def _walk_dict(d: dict[str, Any], depth: int) -> FrozenDict:
    """A frozen copy of ``d``, whose keys and strings ``_encoded`` has checked: the numbers
    are checked here, the containers frozen, and string values pass with one type test."""
    if depth > _FAST_DEPTH:
        raise _UndecidedError
    out = FrozenDict(d)
    for k, x in d.items():
        tx = type(x)
        if tx is str:
            continue
        if tx is dict:
            _set(out, k, _walk_dict(x, depth + 1))
        elif tx is list:
            _set(out, k, _walk_list(x, depth + 1))
        elif tx is int:
            if x > MAX_SAFE_INTEGER or x < -MAX_SAFE_INTEGER:
                raise _UndecidedError
        elif tx is float:
            if not isfinite(x) or (x == 0.0 and copysign(1.0, x) < 0):
                raise _UndecidedError
        elif not (x is None or tx is bool or tx is FrozenDict or tx is FrozenList):
            raise _UndecidedError  # a str or int subclass, a tuple, ...
    return out


_set = dict.__setitem__
"""Fills a ``FrozenDict`` being built (its own ``__setitem__`` refuses)."""


def _walk_list(items: list[Any], depth: int) -> FrozenList:
    """``_walk_dict`` for a list."""
    if depth > _FAST_DEPTH:
        raise _UndecidedError
    out = list(items)
    for i, x in enumerate(items):
        tx = type(x)
        if tx is str:
            continue
        if tx is dict:
            out[i] = _walk_dict(x, depth + 1)
        elif tx is list:
            out[i] = _walk_list(x, depth + 1)
        elif tx is int:
            if x > MAX_SAFE_INTEGER or x < -MAX_SAFE_INTEGER:
                raise _UndecidedError
        elif tx is float:
            if not isfinite(x) or (x == 0.0 and copysign(1.0, x) < 0):
                raise _UndecidedError
        elif not (x is None or tx is bool or tx is FrozenDict or tx is FrozenList):
            raise _UndecidedError
    return FrozenList(out)


def snapshot_fast(value: dict[str, Any] | list[Any]) -> tuple[JSONValue, bytes]:
    """``snapshot_json``'s fast path for a ``dict`` or ``list``: the frozen copy and its
    compact JSON bytes (orjson's), or ``_UndecidedError`` when the exact path must judge.

    Two passes, one of them in C: orjson's encoder checks keys and strings while it writes
    the text, then one walk checks numbers and freezes the containers.
    """
    text = _encoded(value)
    return (_walk_dict(value, 0) if isinstance(value, dict) else _walk_list(value, 0)), text


def snapshot_json(value: Any, *, root: str = "value") -> JSONValue:
    """Validate ``value`` as lossless JSON and return a deeply frozen copy.

    Values up to ``_FAST_DEPTH`` deep take the fast path (``snapshot_fast``: orjson's
    encoder checks keys and strings in C, one walk checks numbers and freezes); anything it
    does not accept (a bad value, deep nesting, a cycle) is walked again by the exact path,
    whose explicit stack bounds depth by memory only and names the first bad value. Shared
    (non-cyclic) references become independent copies. Raises ``NotJSONError`` naming the
    path of the first bad value, prefixed by ``root``.
    """
    t = type(value)
    if t is FrozenDict or t is FrozenList:
        return value
    if t is not dict and t is not list:
        problem = _scalar_problem(value)
        if problem is not None:
            _fail([root], problem)
        return value
    try:
        return snapshot_fast(value)[0]
    except _UndecidedError:
        return _snapshot_exact(value, root)


def _snapshot_exact(value: Any, root: str) -> JSONValue:
    """``snapshot_json``'s exact walk of a ``dict`` or ``list``: an explicit stack, and the
    path of the first bad value."""
    t = type(value)
    # Ancestors of the current position, for cycle detection (shared siblings are fine).
    active: set[int] = {id(value)}
    # path[i + 1] is the key/index by which frames[i + 1] hangs below frames[i].
    path: list[Any] = [root]
    # A frame: (id of the source, collected output, iterator over the source, is a dict).
    frames: list[tuple[int, list[Any], Iterator[Any], bool]] = [
        (id(value), [], iter(value.items()) if t is dict else iter(value), t is dict)
    ]
    while True:
        src_id, out, it, is_dict = frames[-1]
        descended = False
        for item in it:
            if is_dict:
                key, child = item
                if type(key) is not str:
                    _fail([*path, key], f"key {key!r} is not a str")
                if key not in _checked_keys:  # keys recur: check each distinct one once
                    problem = _str_problem(key)
                    if problem is not None:
                        _fail([*path, key], "key " + problem)
                    if len(_checked_keys) < _MAX_CHECKED_KEYS:
                        _checked_keys.add(key)
            else:
                key, child = len(out), item
            ct = type(child)
            if ct is str:
                if not child.isascii() or "\x00" in child:
                    problem = _str_problem(child)
                    if problem is not None:
                        _fail([*path, key], problem)
            elif ct is int:
                if child > MAX_SAFE_INTEGER or child < -MAX_SAFE_INTEGER:
                    _fail([*path, key], f"integer {child} is outside the safe range ±(2**53-1)")
            elif ct is dict or ct is list:
                cid = id(child)
                if cid in active:
                    _fail([*path, key], "cycle: a container contains itself")
                active.add(cid)
                path.append(key)
                out.append(key)  # placeholder, replaced when the child frame finishes
                frames.append(
                    (cid, [], iter(child.items()) if ct is dict else iter(child), ct is dict)
                )
                descended = True
                break
            elif not (child is None or ct is bool or ct is FrozenDict or ct is FrozenList):
                problem = _scalar_problem(child)  # floats, and every kind that is refused
                if problem is not None:
                    _fail([*path, key], problem)
            out.append((key, child) if is_dict else child)
        if descended:
            continue
        frames.pop()
        active.discard(src_id)
        done: Any = FrozenDict(out) if is_dict else FrozenList(out)
        if not frames:
            return done
        path.pop()
        parent_out = frames[-1][1]
        parent_out[-1] = (parent_out[-1], done) if frames[-1][3] else done


def thaw(value: Any) -> Any:
    """Return a plain, mutable deep copy (``dict``/``list``) of a frozen (or plain) JSON value.

    A frozen container is copied by orjson (written, then read back: both in C, exact for
    the values ``snapshot_json`` makes); text holding ``null`` (which orjson also writes for
    a non-finite float a hand-built ``FrozenDict`` might hold) or anything orjson refuses is
    copied by the walk instead.
    """
    t = type(value)
    if t is FrozenDict or t is FrozenList:
        try:
            text = orjson.dumps(value, default=_list_of)
        except TypeError:  # orjson.JSONEncodeError: depth, or a type it does not know
            pass
        else:
            if b"null" not in text:
                return orjson.loads(text)
    try:
        return _thaw_fast(value, 0)
    except _UndecidedError:  # deeper than _FAST_DEPTH, or a container of another type
        return _thaw_exact(value)


def _thaw_fast(x: Any, depth: int) -> Any:
    """``thaw`` by recursion with type dispatch (an integration thaws every item it reads);
    ``_UndecidedError`` past ``_FAST_DEPTH`` or on a container it does not know."""
    tx = type(x)
    if tx is FrozenDict or tx is dict:
        if depth > _FAST_DEPTH:
            raise _UndecidedError
        depth += 1
        return {
            k: v if type(v) is str or type(v) is int else _thaw_fast(v, depth) for k, v in x.items()
        }
    if tx is FrozenList or tx is list or tx is tuple:
        if depth > _FAST_DEPTH:
            raise _UndecidedError
        depth += 1
        return [_thaw_fast(v, depth) for v in x]
    if isinstance(x, dict | list | tuple):
        raise _UndecidedError
    return x


def _thaw_exact(value: Any) -> Any:
    """``thaw`` with an explicit stack: any depth, any ``dict``/``list``/``tuple`` subclass."""
    if not isinstance(value, dict | list | tuple):
        return value
    root: Any = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        src, dst = stack.pop()
        items: Iterable[tuple[Any, Any]] = src.items() if isinstance(src, dict) else enumerate(src)
        for k, v in items:
            if isinstance(v, dict):
                new: Any = {}
                stack.append((v, new))
            elif isinstance(v, list | tuple):
                new = []
                stack.append((v, new))
            else:
                new = v
            if isinstance(dst, dict):
                dst[k] = new
            else:
                dst.append(new)
    return root


def json_equal(a: Any, b: Any) -> bool:
    """Structural JSON equality that, unlike ``==``, tells ``1``, ``1.0`` and ``True`` apart."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        tx, ty = type(x), type(y)
        x_map, y_map = isinstance(x, dict), isinstance(y, dict)
        if x_map or y_map:
            if not (x_map and y_map) or x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
            continue
        x_seq, y_seq = isinstance(x, list | tuple), isinstance(y, list | tuple)
        if x_seq or y_seq:
            if not (x_seq and y_seq) or len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
            continue
        if tx is not ty or x != y:
            return False
    return True


def json_depth(value: Any) -> int:
    """How deeply containers nest in ``value`` (a scalar is 0, ``[]`` is 1)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            deepest = max(deepest, depth)
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest
