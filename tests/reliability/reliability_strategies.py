"""Hypothesis strategies for hostile input: data, envelopes, surface ops, provenance, names.

Each strategy mixes valid values with invalid ones (NaN, ±inf, -0.0, ints beyond ±(2**53-1),
non-JSON objects, non-str keys, U+0000, lone surrogates, cycles, dict subclasses, nesting past
the store's limit, strings near the size limit) and odd but valid ones (line and paragraph
separators, BOM, non-characters, combining marks, right-to-left overrides, SQL and shell
metacharacters, astral characters, 1e16, 5e-324, 2**53-1).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

MAX_SAFE = 2**53 - 1

ODD_TEXT = [
    "",
    " ",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\uffff",
    "\ufffe",
    "\U0010ffff",
    "\U0001f469\u200d\U0001f469\u200d\U0001f467",
    "e\u0301",
    "\u202egnirts",
    "\x7f",
    "\x1b[31m",
    "\t\r\n",
    "\\u0000",
    "\\ud800",
    "'",
    '"',
    "\\",
    "x'); DROP TABLE events; --",
    "$(rm -rf /)",
    "%s%n",
    "null",
    "{}",
    "ǅ𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "\u0085",
]
BAD_TEXT = ["\x00", "a\x00b", "\ud800", "x\udfff", "\udbff\udc00"]

ODD_NUMBERS: list[Any] = [
    0,
    -1,
    MAX_SAFE,
    -MAX_SAFE,
    0.0,
    1e16,
    -1e16,
    1.7976931348623157e308,
    5e-324,
    1e-7,
    0.1,
    2.0**53,
    123456789.123456789,
]
BAD_NUMBERS: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    MAX_SAFE + 1,
    -MAX_SAFE - 1,
    2**64,
    10**400,
]
BAD_OBJECTS: list[Any] = [
    b"bytes",
    bytearray(b"x"),
    (1, 2),
    {1, 2},
    frozenset(),
    Decimal("1.5"),
    1 + 2j,
    object(),
    OrderedDict(a=1),
    range(3),
]
BAD_KEYS: list[Any] = [1, None, True, 1.5, (1,), "\x00", "\ud800"]


def odd_text(*, valid: bool = True) -> st.SearchStrategy[str]:
    """Strings of any printable or odd Unicode; with ``valid=False``, also unstorable ones."""
    bits = ODD_TEXT + ([] if valid else BAD_TEXT)
    plain = st.text(st.characters(exclude_characters="\x00"), max_size=30)
    return st.one_of(
        plain,
        st.sampled_from(bits),
        st.builds(lambda a, b, c: a + b + c, plain, st.sampled_from(bits), plain),
    )


def scalars(*, valid: bool = True) -> st.SearchStrategy[Any]:
    good = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-MAX_SAFE, MAX_SAFE),
        st.floats(allow_nan=False, allow_infinity=False).filter(
            lambda x: x != 0 or math.copysign(1, x) > 0
        ),
        st.sampled_from(ODD_NUMBERS),
        odd_text(),
    )
    if valid:
        return good
    return st.one_of(
        good,
        odd_text(valid=False),
        st.sampled_from(BAD_NUMBERS),
        st.sampled_from(BAD_OBJECTS),
        st.integers(),
    )


def json_values(*, valid: bool = True, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    keys = (
        odd_text(valid=valid)
        if valid
        else st.one_of(odd_text(valid=False), st.sampled_from(BAD_KEYS))
    )
    return st.recursive(
        scalars(valid=valid),
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(keys, children, max_size=4),
        ),
        max_leaves=max_leaves,
    )


def _nest(value: Any, depth: int, as_dict: bool) -> Any:
    for _ in range(depth):
        value = {"k": value} if as_dict else [value]
    return value


def _cycle(container: Any, as_dict: bool) -> Any:
    """Make ``container`` (a fresh list or dict) contain itself, somewhere below the root."""
    inner: Any = [] if not as_dict else {}
    if as_dict:
        inner["self"] = inner
    else:
        inner.append(inner)
    return {"wrap": [container, inner]}


def _shared(value: Any) -> Any:
    """The same object twice, not a cycle: admissible, and stored as two copies."""
    return {"a": value, "b": [value, value]}


def hostile_values(*, huge: int = 0) -> st.SearchStrategy[Any]:
    """Anything a caller might pass as event data (``huge``: string sizes near the limit)."""
    options = [
        json_values(valid=True),
        json_values(valid=False),
        st.builds(_nest, scalars(), st.integers(400, 700), st.booleans()),
        st.builds(_nest, scalars(), st.integers(1000, 30_000), st.booleans()),
        st.builds(_cycle, json_values(max_leaves=4), st.booleans()),
        st.builds(_shared, json_values(max_leaves=4)),
    ]
    if huge:
        options.append(
            st.builds(
                lambda n, ch: {"blob": ch * n},
                st.integers(huge // 8, huge // 2),
                st.sampled_from(["x", "é", "🙂", "\u2028"]),
            )
        )
    return st.one_of(*options)


def type_names() -> st.SearchStrategy[Any]:
    """Event type names: the catalog's, unknown but well-formed ones, and malformed ones."""
    known = st.sampled_from(
        [
            "user/message",
            "assistant/message",
            "tool/result",
            "tool/call",
            "turn/start",
            "turn/end",
            "step/start",
            "step/end",
            "assistant/chunk",
            "request/header",
            "session/end-seed",
            "todo/write",
            "compaction/summary",
        ]
    )
    unknown = st.from_regex(
        r"[a-z0-9][a-z0-9._-]{0,12}(/[a-z0-9][a-z0-9._-]{0,12}){0,2}", fullmatch=True
    )
    malformed = st.one_of(
        odd_text(valid=False),
        st.just("a" * 129),
        st.sampled_from(["/x", "x/", "a//b", ".", "a b", "x/\x00"]),
        st.sampled_from([None, 1, b"x/y", ["x"]]),
    )
    return st.one_of(known, unknown, malformed)


def session_ids() -> st.SearchStrategy[Any]:
    """Session ids: printable ones up to the limit, and too long, empty or unprintable ones."""
    return st.one_of(
        st.text(st.characters(exclude_categories=("C", "Z")), min_size=1, max_size=20),
        odd_text(valid=False),
        st.integers(1, 140).map(lambda n: "s" * n),
        st.sampled_from(["x'); DROP TABLE events; --", "a b", "\u202e", "é", "\n", "", None, 7]),
    )


def surface_ops(nodes: tuple[int, ...], seq: int) -> st.SearchStrategy[Any]:
    """Mostly plausible against ``nodes`` (so some replaces commit), often not."""
    endpoint = st.one_of(
        st.sampled_from(nodes) if nodes else st.integers(0, 3),
        st.integers(-2, seq + 2),
    )
    return st.one_of(
        st.none(),
        st.just("append"),
        st.builds(lambda a, b: {"op": "replace", "start": a, "end": b}, endpoint, endpoint),
        st.sampled_from(
            [
                "Append",
                "replace",
                1,
                ["append"],
                {"op": "replace", "start": 0},
                {"op": "replace", "start": 0, "end": 0, "x": 1},
                {"op": "insert", "start": 0, "end": 0},
                {"op": "replace", "start": 0.0, "end": 0},
                {"op": "replace", "start": True, "end": 0},
                {"op": "replace", "start": 2**60, "end": 2**60},
                {"op": "replace", "start": 2**70, "end": 0},
            ]
        ),
    )


def provenance(nodes: tuple[int, ...], seq: int) -> st.SearchStrategy[Any]:
    """``sourceEventSeqs``: covering lists, partial ones, and malformed ones."""
    return st.one_of(
        st.none(),
        st.just(list(nodes)),
        st.lists(st.integers(-2, seq + 2), max_size=6),
        st.lists(st.sampled_from(nodes), min_size=1, max_size=6) if nodes else st.just([0]),
        st.sampled_from([[], [1.0], [True], "12", 5, [2**60], [2**70], [None], (0,), {0: 1}]),
    )
