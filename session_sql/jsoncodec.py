"""JSON text: parse straight into frozen values, and write them back, losslessly.

Event data is read and written here, into and from ``jsonvalue``'s frozen values. The hot
paths (``loads_frozen``, ``dumps_frozen``) first try orjson's C parser and encoder, with one
walk that checks numbers and freezes containers, and hand anything that path cannot decide (an
error, a suspicious number, an escape, deep nesting) to the exact path (the stdlib codec with
checking hooks), which gives the same result or the same error; so the fast path changes speed,
never an outcome. ``dumps_compact`` writes values that are not frozen (at any depth, floats
kept floats on JSONB).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate
from math import copysign, isfinite
from typing import Any, ClassVar, Final

import orjson

from session_sql.errors import InvalidEventError, NotJSONError
from session_sql.jsonvalue import (
    _FAST_DEPTH,
    MAX_SAFE_INTEGER,
    NUL_ADVICE,
    FrozenDict,
    FrozenList,
    JSONValue,
    _list_of,
    _snapshot_exact,
    _UndecidedError,
    snapshot_fast,
    snapshot_json,
    thaw,
)

_BIG_FLOAT = float(MAX_SAFE_INTEGER)


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def dumps_compact(value: Any) -> str:
    """Serialise ``value`` compactly, at any depth, keeping every float a float everywhere.

    The output is ``json.dumps(value, ensure_ascii=False, separators=(",", ":"),
    allow_nan=False)`` except for floats printed with a positive exponent.

    JSONB stores numbers as ``numeric`` and prints ``1e+16`` back as the integer
    ``10000000000000000``; written as ``10000000000000000.0`` it stays a float. Only floats
    of magnitude ≥ 1e16 are printed with an exponent by ``repr``, and all of them are
    integral, so the slow path writes those as ``<int>.0``.
    """
    try:
        text = _COMPACT.encode(value)
    except RecursionError:
        return _dumps_iterative(value)
    if "e+" in text:  # may be inside a string too; then the slow path yields the same text
        return _dumps_iterative(value)
    return text


def _float_text(x: float) -> str:
    if not isfinite(x):
        raise ValueError(f"Out of range float values are not JSON compliant: {x!r}")
    text = float.__repr__(x)
    if "e+" in text:
        return repr(int(x)) + ".0"
    return text


def _key_text(key: Any) -> str:
    # Same key coercions as json.dumps, so both paths agree.
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        return _float_text(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _dump_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


class _Frame:
    __slots__ = ("close", "first", "ident", "is_dict", "items")

    def __init__(self, items: Iterator[Any], close: str, ident: int, is_dict: bool) -> None:
        self.items = items
        self.close = close
        self.ident = ident
        self.is_dict = is_dict
        self.first = True


_END: Final = object()


def _dumps_iterative(value: Any) -> str:
    """``json.dumps`` with an explicit stack (no depth limit) and float-preserving numbers."""
    parts: list[str] = []
    on_path: set[int] = set()
    stack: list[_Frame] = []
    item = value
    pending = True
    while True:
        if pending:
            pending = False
            if isinstance(item, str):
                parts.append(_dump_str(item))
            elif item is None:
                parts.append("null")
            elif item is True:
                parts.append("true")
            elif item is False:
                parts.append("false")
            elif isinstance(item, int):
                parts.append(int.__repr__(item))
            elif isinstance(item, float):
                parts.append(_float_text(item))
            elif isinstance(item, list | tuple | dict):
                if id(item) in on_path:
                    raise ValueError("Circular reference detected")
                on_path.add(id(item))
                if isinstance(item, dict):
                    parts.append("{")
                    stack.append(_Frame(iter(item.items()), "}", id(item), is_dict=True))
                else:
                    parts.append("[")
                    stack.append(_Frame(iter(item), "]", id(item), is_dict=False))
            else:
                raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")
        if not stack:
            return "".join(parts)
        frame = stack[-1]
        nxt: Any = next(frame.items, _END)
        if nxt is _END:
            parts.append(frame.close)
            on_path.discard(frame.ident)
            stack.pop()
            continue
        if not frame.first:
            parts.append(",")
        frame.first = False
        if frame.is_dict:
            key, item = nxt
            parts.append(_dump_str(_key_text(key)))
            parts.append(":")
        else:
            item = nxt
        pending = True


def _frozen_pairs(pairs: list[tuple[str, Any]]) -> FrozenDict:
    for _, v in pairs:
        if type(v) is list:
            return FrozenDict((k, _freeze_lists(v) if type(v) is list else v) for k, v in pairs)
    return FrozenDict(pairs)


def _freeze_lists(items: list[Any]) -> FrozenList:
    """A parsed JSON array as a FrozenList; nested arrays too, innermost first, no recursion.

    Its objects are frozen already (the decoder's object hook ran on them).
    """
    order: list[tuple[list[Any], list[Any] | None, int]] = []
    pending: list[tuple[list[Any], list[Any] | None, int]] = [(items, None, 0)]
    while pending:
        entry = pending.pop()
        order.append(entry)
        lst = entry[0]
        for i, v in enumerate(lst):
            if type(v) is list:
                pending.append((v, lst, i))
    frozen = FrozenList()
    for lst, parent, index in reversed(order):  # children before their parents
        frozen = FrozenList(lst)
        if parent is not None:
            parent[index] = frozen
    return frozen


def _checked_int(text: str) -> int:
    value = int(text)
    if len(text) > 15 and not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise NotJSONError(f"integer {text} is outside the safe range ±(2**53-1)")
    return value


def _checked_float(text: str) -> float:
    value = float(text)
    if not isfinite(value):
        raise NotJSONError(f"{text} overflows to {value!r}")
    if value == 0.0 and copysign(1.0, value) < 0:
        raise NotJSONError("-0.0 does not survive a JSON round trip")
    return value


def _no_constant(name: str) -> Any:
    raise NotJSONError(f"{name} is not a JSON value")


_FROZEN_DECODER = json.JSONDecoder(
    object_pairs_hook=_frozen_pairs,
    parse_int=_checked_int,
    parse_float=_checked_float,
    parse_constant=_no_constant,
)


def _parsed_item(x: Any, depth: int) -> Any:
    """A value orjson parsed, checked and frozen; ``_UndecidedError`` when the exact path
    must judge.

    Strings need no check (text without a ``\\u`` escape cannot hold U+0000 or a lone
    surrogate); an integer literal past 64 bits comes back from orjson as a float, so every
    float of integer size is sent to the exact parser, which keeps the literal's type.
    """
    tx = type(x)
    if tx is dict:
        return _parsed_dict(x, depth + 1)
    if tx is list:
        return _parsed_list(x, depth + 1)
    if tx is int:
        if x > MAX_SAFE_INTEGER or x < -MAX_SAFE_INTEGER:
            raise _UndecidedError
    elif tx is float and (x >= _BIG_FLOAT or x <= -_BIG_FLOAT or _negative_zero(x)):
        raise _UndecidedError
    return x


# The walks below are the hot loop of every read: containers are frozen in place (orjson's
# own dicts and lists, nobody else holds them), strings pass with one type test, and the
# rarer kinds are tested in the order they occur in event data. Each container's loop is
# written out in its own function (no helper call per container: a read walks thousands).


def _parsed_dict(d: dict[str, Any], depth: int) -> FrozenDict:
    if depth > _FAST_DEPTH:
        raise _UndecidedError
    for k, x in d.items():
        tx = type(x)
        if tx is str:
            continue
        if tx is dict:
            d[k] = _parsed_dict(x, depth + 1)
        elif tx is list:
            d[k] = _parsed_list(x, depth + 1)
        elif tx is int:
            if x > MAX_SAFE_INTEGER or x < -MAX_SAFE_INTEGER:
                raise _UndecidedError
        elif tx is float and (x >= _BIG_FLOAT or x <= -_BIG_FLOAT or _negative_zero(x)):
            raise _UndecidedError
    return FrozenDict(d)


_INT_ONLY: Final = frozenset({int})


def _parsed_list(items: list[Any], depth: int) -> FrozenList:
    if depth > _FAST_DEPTH:
        raise _UndecidedError
    if len(items) > 8 and set(map(type, items)) <= _INT_ONLY:
        # A list of seqs or ids (a summary cites thousands): its range, checked in C.
        if max(items) > MAX_SAFE_INTEGER or min(items) < -MAX_SAFE_INTEGER:
            raise _UndecidedError
        return FrozenList(items)
    for i, x in enumerate(items):
        tx = type(x)
        if tx is str:
            continue
        if tx is dict:
            items[i] = _parsed_dict(x, depth + 1)
        elif tx is list:
            items[i] = _parsed_list(x, depth + 1)
        elif tx is int:
            if x > MAX_SAFE_INTEGER or x < -MAX_SAFE_INTEGER:
                raise _UndecidedError
        elif tx is float and (x >= _BIG_FLOAT or x <= -_BIG_FLOAT or _negative_zero(x)):
            raise _UndecidedError
    return FrozenList(items)


def _negative_zero(x: float) -> bool:
    return x == 0.0 and copysign(1.0, x) < 0


def loads_frozen(text: str, *, root: str = "value") -> JSONValue:
    """Parse JSON text straight into a frozen, validated value (what ``snapshot_json`` yields).

    Fast path: orjson parses, and one walk checks numbers and freezes containers. Text holding
    a ``\\u`` escape (the only way to smuggle U+0000 or a lone surrogate into a string), text
    orjson refuses, and values the walk cannot decide take the exact path: the stdlib decoder
    whose hooks check numbers and freeze as they build (with ``snapshot_json`` after it for
    escaped text). Raises ``NotJSONError``.
    """
    if "\\u" not in text:
        try:
            value = orjson.loads(text)
            t = type(value)
            if t is dict:
                return _parsed_dict(value, 0)
            if t is list:
                return _parsed_list(value, 0)
            return _parsed_item(value, 0)
        except (orjson.JSONDecodeError, _UndecidedError):
            pass
    return _loads_exact(text, root)


_TOKENS: Final = bytes.maketrans(b"123456789-E\x01,[ \t\n\r", b"0000000000e:::::::")
_BIG_OR_EXPONENT: Final = re.compile(rb":0(?:0{15}|0*(?:\.0*)?e)")
"""In a text whose digits and minus signs are ``0`` and whose ``,``, ``[`` and blanks are
``:`` (so that every number follows a ``:``): a number of 16 digits or more (an integer past
the safe range, a float of integer size) or with an exponent."""
_BEFORE_NUMBER: Final = frozenset(b":,[ \t\n\r\x01")
_NOT_OPENING: Final = bytes(b for b in range(256) if b not in b"[{\x01")


def plain_texts(texts: Sequence[Any]) -> list[bool]:
    """For each JSON text, whether orjson's value of it is ``thaw(loads_frozen(text))``:
    which of them ``loads_vouched`` may read.

    True when the text shows that ``loads_frozen``'s fast path keeps orjson's value
    unchanged: no ``\\u`` escape (U+0000, a lone surrogate), no number its walk would
    question (``_BIG_OR_EXPONENT``; a minus before a zero: minus zero, or a fraction that may
    round to it), no more opening brackets than the walk's depth. The texts are searched
    joined (by U+0001, which a JSON text cannot hold outside a string nor raw inside one),
    in C, so a long read pays a few passes over its bytes, not a search per row; a
    number-like run inside a string only costs its row the slower path.
    """
    count = len(texts)
    try:
        data = "\x01".join(["", *texts]).encode()  # each text after a separator
    except (TypeError, UnicodeEncodeError):  # not text, or a lone surrogate: look closer
        return [False] * count
    openings = data.translate(None, _NOT_OPENING).split(b"\x01")[1:]
    if max(map(len, openings), default=0) <= _FAST_DEPTH:
        plain = [True] * count  # (a raw U+0001 splits its own text only: orjson refuses it)
    elif len(openings) == count:
        plain = [len(brackets) <= _FAST_DEPTH for brackets in openings]
    else:  # a text holds a raw U+0001: count each text's own
        plain = [t.count("[") + t.count("{") <= _FAST_DEPTH for t in texts]
    if b"\\u" in data:
        plain = [ok and "\\u" not in t for ok, t in zip(plain, texts, strict=True)]
    hits = [m.start() + 1 for m in _BIG_OR_EXPONENT.finditer(data.translate(_TOKENS))]
    at = data.find(b"-0")
    while at >= 0:
        if data[at - 1] in _BEFORE_NUMBER:
            hits.append(at)
        at = data.find(b"-0", at + 2)
    if hits:
        starts = list(accumulate((len(t.encode()) + 1 for t in texts), initial=1))
        for at in hits:  # where the number begins: in the last text starting at or before
            plain[bisect_right(starts, at) - 1] = False
    return plain


def loads_vouched(text: str, *, root: str = "value") -> Any:
    """``thaw(loads_frozen(text))`` for a text ``plain_texts`` vouched for: orjson's value,
    plain ``dict``s and ``list``s the caller owns (``loads_frozen`` when orjson refuses the
    text, for the same error). Raises ``NotJSONError``."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return thaw(loads_frozen(text, root=root))


def loads_plain(text: str, *, root: str = "value") -> Any:
    """``thaw(loads_frozen(text))``, without building the frozen value when the text shows it
    needs no look (``plain_texts``): plain values the caller owns, for readers that hand out
    copies anyway. The same value or error as ``loads_frozen``; raises ``NotJSONError``."""
    if plain_texts([text])[0]:
        return loads_vouched(text, root=root)
    return thaw(loads_frozen(text, root=root))


def _loads_exact(text: str, root: str) -> JSONValue:
    """``loads_frozen``'s exact path (the stdlib decoder with checking hooks)."""
    try:
        if "\\u" in text:
            return snapshot_json(json.loads(text, parse_constant=_no_constant), root=root)
        value = _FROZEN_DECODER.decode(text)
    except ValueError as exc:  # JSONDecodeError
        raise NotJSONError(f"{root}: unreadable JSON: {exc}", path=root) from exc
    except RecursionError as exc:
        raise NotJSONError(f"{root}: JSON nested too deeply to read back", path=root) from exc
    except NotJSONError as exc:
        raise NotJSONError(f"{root}: {exc}", path=root) from exc
    if type(value) is list:
        return _freeze_lists(value)
    if type(value) is str and "\x00" in value:
        raise NotJSONError(f"{root}: string contains U+0000{NUL_ADVICE}", path=root)
    return value


_REMEMBER_MAX = 1 << 16
_REMEMBER_MAX_CHARS = 1 << 25


class _Remembered:
    """The texts ``snapshot_stored`` wrote, by the identity of the frozen value, until
    ``dumps_frozen`` takes them: an entry holds its value, so the identity is not reused
    while it lasts. Bounded (entries and characters): a batch that is never written (an
    append refused, a session that stores nothing) leaves entries behind, and they are
    dropped together when a bound is reached; a dropped text is written again, the same."""

    texts: ClassVar[dict[int, tuple[Any, str]]] = {}
    chars: ClassVar[int] = 0


def snapshot_stored(value: Any, *, root: str = "value") -> JSONValue:
    """``snapshot_json`` for event data about to be written: the text orjson writes while
    checking it (``snapshot_fast``) is kept for ``dumps_frozen``, so a batch's data is
    encoded once, by the pass that validates it."""
    t = type(value)
    if t is not dict and t is not list:
        return snapshot_json(value, root=root)
    try:
        frozen, data = snapshot_fast(value)
    except _UndecidedError:
        return _snapshot_exact(value, root)
    if b"e+" not in data:  # else dumps_frozen's own rule applies (see there)
        remembered = _Remembered.texts
        if len(remembered) >= _REMEMBER_MAX or _Remembered.chars >= _REMEMBER_MAX_CHARS:
            remembered.clear()
            _Remembered.chars = 0
        text = data.decode()
        remembered[id(frozen)] = (frozen, text)
        _Remembered.chars += len(text)
    return frozen


def dumps_frozen(value: JSONValue) -> str:
    """Compact JSON text of a value ``snapshot_json`` or ``loads_frozen`` returned, fast.

    The same JSON value as ``dumps_compact`` writes (orjson's encoder; it may spell a small
    float differently, ``1e-7`` for ``1e-07``). Values it does not take — nested deeper than
    orjson goes, or holding a float that needs ``dumps_compact``'s exponent rule — are written
    by ``dumps_compact``. Only for validated values: orjson would write NaN as ``null``. The
    text ``snapshot_stored`` wrote for ``value``, if it still has it, is taken instead.
    """
    hit = _Remembered.texts.pop(id(value), None)
    if hit is not None and hit[0] is value:
        _Remembered.chars -= len(hit[1])
        return hit[1]
    try:
        data = orjson.dumps(value, default=_list_of)
    except TypeError:  # orjson.JSONEncodeError: depth, or a type it does not know
        return dumps_compact(value)
    if b"e+" in data:  # may be inside a string too; then dumps_compact writes the same value
        return dumps_compact(value)
    return data.decode()


def check_json_size(text: str, limit: int | None, seq: int) -> None:
    """Refuse serialised event data above ``limit`` bytes of UTF-8."""
    if limit is None or len(text) * 4 <= limit:  # no UTF-8 character takes more than 4 bytes
        return
    size = len(text.encode("utf-8"))
    if size > limit:
        raise InvalidEventError(
            f"event data is {size} bytes of JSON, above the limit of {limit} bytes",
            seq=seq,
        )
