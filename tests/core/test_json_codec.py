"""The JSON codec's fast paths agree with the exact paths on every outcome.

``snapshot_json``, ``loads_frozen`` and ``dumps_frozen`` try orjson and a recursive walk
first, and hand what they cannot decide to the exact (stdlib, explicit-stack) paths. These
tests pin the cases where a fast codec alone would be lossy or lax, and check on generated
values that both paths give the same value or the same error.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_sql import NotJSONError, jsoncodec
from session_sql.jsoncodec import (
    _loads_exact,
    dumps_compact,
    dumps_frozen,
    loads_frozen,
    loads_plain,
    loads_vouched,
    plain_texts,
    snapshot_stored,
)
from session_sql.jsonvalue import (
    _FAST_DEPTH,
    FrozenDict,
    FrozenList,
    _snapshot_exact,
    _thaw_exact,
    json_equal,
    snapshot_json,
    thaw,
)

# -- loads_frozen ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        # orjson reads an integer literal past 64 bits as a float: it must stay refused.
        ("[18446744073709551616]", "safe range"),
        ('{"n": 123456789012345678901234567890}', "safe range"),
        ("-18446744073709551617", "safe range"),
        ("9007199254740992", "safe range"),  # 2**53: past the safe range, within 64 bits
        # A long list of ints is range-checked as a whole: either end of it.
        ("[1, 2, 3, 4, 5, 6, 7, 8, 9, 9007199254740992]", "safe range"),
        ("[-9007199254740992, 1, 2, 3, 4, 5, 6, 7, 8, 9]", "safe range"),
        ("[-0.0]", "-0.0"),
        ('{"x": -0e5}', "-0.0"),
        ("1e999", "overflows"),
        ('["a\\u0000b"]', r"U\+0000"),
        ('{"\\u0000": 1}', r"U\+0000"),
        ('["\\ud800"]', "surrogate"),
        ("[NaN]", "NaN"),
        ("[1,", "unreadable"),
    ],
)
def test_loads_frozen_refuses_what_the_exact_path_refuses(text: str, reason: str) -> None:
    with pytest.raises(NotJSONError, match=reason):
        loads_frozen(text, root="data")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1e16", 1e16),  # a float of integer size keeps its type
        ("[100000000000000000000.0]", [1e20]),
        ("[9007199254740991, -9007199254740991]", [2**53 - 1, -(2**53 - 1)]),
        ("[1, 2, 3, 4, 5, 6, 7, 8, 9, -9007199254740991]", [*range(1, 10), -(2**53 - 1)]),
        ('{"a": [1, 2.5, {"b": [true, null, "x"]}], "a": 3}', {"a": 3}),  # the last key wins
        ("-0", 0),
        ('"\\u00e9"', "é"),
    ],
)
def test_loads_frozen_keeps_types_and_values(text: str, expected: Any) -> None:
    value = loads_frozen(text)
    assert json_equal(value, expected)
    assert json_equal(value, _loads_exact(text, "value"))


def test_loads_frozen_freezes_every_container() -> None:
    value = loads_frozen('{"a": [{"b": [[1]]}], "c": {}}')
    assert type(value) is FrozenDict
    assert type(value["a"]) is FrozenList
    assert type(value["a"][0]) is FrozenDict
    assert type(value["a"][0]["b"][0]) is FrozenList
    assert type(value["c"]) is FrozenDict


def test_loads_frozen_reads_values_deeper_than_the_fast_walk() -> None:
    depth = _FAST_DEPTH + 50
    value = loads_frozen("[" * depth + "7" + "]" * depth)
    for _ in range(depth):
        assert type(value) is FrozenList
        value = value[0]
    assert value == 7


# -- snapshot_json -----------------------------------------------------------------------------


def test_snapshot_takes_values_deeper_than_the_fast_walk() -> None:
    value: Any = {"leaf": 1}
    for _ in range(_FAST_DEPTH + 10):
        value = {"k": [value]}
    frozen = snapshot_json(value)
    assert json_equal(frozen, value)
    assert type(frozen["k"]) is FrozenList


def test_snapshot_names_a_bad_value_below_the_fast_walk_depth() -> None:
    value: Any = [math.nan]
    for _ in range(_FAST_DEPTH + 10):
        value = [value]
    with pytest.raises(NotJSONError, match="not a finite number") as info:
        snapshot_json(value, root="data")
    assert info.value.path.startswith("data[0][0]")


def test_snapshot_keeps_frozen_parts_as_they_are() -> None:
    inner = snapshot_json({"x": [1]})
    outer = snapshot_json({"inner": inner, "list": [inner]})
    assert outer["inner"] is inner
    assert outer["list"][0] is inner


# -- generated values: both paths, one outcome -------------------------------------------------

_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([2**53 - 1, 2**53, -(2**53), 2**64, 1e16, 1e20, -0.0, 0.0, 5e-324])
    | st.floats()
    | st.text()
    | st.sampled_from(["\x00", "a\ud800", "\udfff", "é", "😀"])
)
_VALUES = st.recursive(
    _LEAVES,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=4) | st.sampled_from(["\x00", "\ud800"]), children)
    ),
    max_leaves=25,
)


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except NotJSONError as exc:
        return "error", str(exc)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_snapshot_fast_and_exact_paths_agree(value: Any) -> None:
    if type(value) not in (dict, list):
        value = [value]
    fast = _outcome(lambda v, r: snapshot_json(v, root=r), value, "data")
    exact = _outcome(_snapshot_exact, value, "data")
    assert fast[0] == exact[0]
    if fast[0] == "ok":
        assert json_equal(fast[1], exact[1])
        assert type(fast[1]) is type(exact[1])
    else:
        assert fast[1] == exact[1]


def _texts(value: Any) -> list[str]:
    """JSON texts of ``value``: the stdlib's, and one with every string escaped as ASCII."""
    try:
        return [
            json.dumps(value, ensure_ascii=False, allow_nan=True),
            json.dumps(value, ensure_ascii=True, allow_nan=True),
        ]
    except (UnicodeEncodeError, ValueError):
        return []


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_loads_fast_and_exact_paths_agree(value: Any) -> None:
    for text in _texts(value):
        fast = _outcome(lambda t, r: loads_frozen(t, root=r), text, "data")
        exact = _outcome(_loads_exact, text, "data")
        assert fast[0] == exact[0], text
        if fast[0] == "ok":
            assert json_equal(fast[1], exact[1]), text
        else:
            assert fast[1] == exact[1], text


# -- loads_plain: the thawed value, or the same error -------------------------------------------


def _plain_and_frozen_agree(text: str, loads: Any = loads_plain) -> None:
    plain = _outcome(lambda t: loads(t, root="data"), text)
    frozen = _outcome(lambda t: thaw(loads_frozen(t, root="data")), text)
    assert plain[0] == frozen[0], text
    if plain[0] == "ok":
        assert json_equal(plain[1], frozen[1]), text
        assert repr(plain[1]) == repr(frozen[1]), text  # plain containers, same types
    else:
        assert plain[1] == frozen[1], text


@pytest.mark.parametrize(
    "text",
    [
        "[18446744073709551616]",
        '{"n": 123456789012345678901234567890}',
        "9007199254740992",
        " 9007199254740991",
        "[1, 2, 3, 4, 5, 6, 7, 8, 9, 9007199254740992]",
        "[-0.0]",
        '{"x": -0e5}',
        '{"x":-0}',
        '{"x": -0.05, "y": "2024-01-05"}',
        "[-0." + "0" * 400 + "1]",  # rounds to minus zero
        "[-1e-400, 1e-400]",
        '{"a": [0.' + "0" * 400 + "1]}",
        "[12345678901234567890, 1234567890123456]",
        '{"id": "oa_3e9f", "t": 1, "s": 2}',
        " [\n -0 ]",
        "[1.5E+3]",
        "[1e16, 1E2, 2.5e-3]",
        "1e999",
        "[100000000000000000000.0]",
        '["a\\u0000b"]',
        '["\\ud800"]',
        '"\\u00e9"',
        "[NaN]",
        "[1,",
        '{"a": [1, 2.5, {"b": [true, null, "x"]}], "a": 3}',
        '{"id": "call_3e9f", "n": 12e}',
        "[" * (_FAST_DEPTH + 5) + "7" + "]" * (_FAST_DEPTH + 5),
        "[" * 2000 + "]" * 2000,
        '{"s": "' + "{" * 100 + '"}',
    ],
)
def test_loads_plain_is_loads_frozen_thawed(text: str) -> None:
    _plain_and_frozen_agree(text)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_loads_plain_agrees_with_loads_frozen(value: Any) -> None:
    for text in _texts(value):
        _plain_and_frozen_agree(text)
        _plain_and_frozen_agree(json.dumps(value, indent=1, allow_nan=True))


def test_plain_texts_finds_the_row_of_each_questioned_number() -> None:
    texts = [
        '{"a": "é😀", "n": 1}',
        '{"n":-0.0}',
        '"ü"',
        "12345678901234567",
        '{"x": [1, 2], "t": "2024-01-05"}',
        '{"e": "call_3e9f", "f": [ 1e5]}',
        "-0",
        '["\\u00e9"]',
        "[" * (_FAST_DEPTH + 1) + "]" * (_FAST_DEPTH + 1),
        "[1]",
    ]
    assert plain_texts(texts) == [True, False, True, False, True, False, False, False, False, True]
    assert plain_texts([]) == []
    deep = "[" * (_FAST_DEPTH + 1) + "]" * (_FAST_DEPTH + 1)
    # A raw U+0001 (which orjson refuses) splits the joined texts' separators: each text's
    # own brackets are counted then, and the deep one after it is still found.
    assert plain_texts(['["a\x01b"]', deep, "[1]"]) == [True, False, True]
    assert plain_texts([b"[1]", "[1]"]) == [False, False]  # not all text: look at each closely


@settings(max_examples=200, deadline=None)
@given(st.lists(_VALUES, max_size=6))
def test_loads_vouched_agrees_with_loads_frozen_on_the_texts_plain_texts_vouches_for(
    values: list[Any],
) -> None:
    texts = [text for value in values for text in _texts(value)]
    for text, vouched in zip(texts, plain_texts(texts), strict=True):
        if vouched:
            _plain_and_frozen_agree(text, loads_vouched)


# -- dumps_frozen ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_dumps_frozen_writes_the_value_dumps_compact_writes(value: Any) -> None:
    try:
        frozen = snapshot_json(value)
    except NotJSONError:
        return
    text = dumps_frozen(frozen)
    assert json_equal(json.loads(text), json.loads(dumps_compact(frozen)))
    assert json_equal(loads_frozen(text), frozen)  # and it reads back as the same value


def test_dumps_frozen_keeps_big_floats_floats_through_jsonb() -> None:
    value = snapshot_json({"a": [1, {"b": 1e16}]})
    assert dumps_frozen(value) == '{"a":[1,{"b":10000000000000000.0}]}'
    assert dumps_frozen(1.5e300) == str(int(1.5e300)) + ".0"


def test_dumps_frozen_writes_values_deeper_than_orjson_goes() -> None:
    depth = 3000
    value = snapshot_json(_nest(depth))
    assert dumps_frozen(value) == "[" * depth + '"x"' + "]" * depth


def _nest(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def test_dumps_frozen_is_compact_and_keeps_unicode() -> None:
    frozen = snapshot_json({"a": [1, 2.5, None, True], "b": "é\n\u2028", "": {}})
    assert dumps_frozen(frozen) == dumps_compact(frozen)


# -- snapshot_stored: the text written while checking is the text stored -----------------------


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_snapshot_stored_agrees_with_snapshot_json_and_keeps_the_text(value: Any) -> None:
    if type(value) not in (dict, list):
        value = [value]
    stored = _outcome(lambda v: snapshot_stored(v, root="data"), value)
    plain = _outcome(lambda v: snapshot_json(v, root="data"), value)
    assert stored[0] == plain[0]
    if stored[0] != "ok":
        assert stored[1] == plain[1]
        return
    assert json_equal(stored[1], plain[1])
    text = dumps_frozen(stored[1])  # the remembered text, taken once
    assert text == dumps_frozen(plain[1])  # what an encoding afresh writes
    assert json_equal(loads_frozen(text), stored[1])


@pytest.mark.parametrize(
    "value",
    [
        {"a": "x\x00y"},  # U+0000: orjson writes it escaped, the exact path names it
        {"a\x00": 1},
        {"a": float("nan")},  # orjson would write null
        {"a": [-0.0]},
        {"a": 2**53},
        {"a": 2**64},
        {"a": "\ud800"},
        {1: "x"},
    ],
)
def test_snapshot_stored_refuses_what_snapshot_json_refuses(value: Any) -> None:
    with pytest.raises(NotJSONError) as stored:
        snapshot_stored(value, root="data")
    with pytest.raises(NotJSONError) as plain:
        snapshot_json(value, root="data")
    assert str(stored.value) == str(plain.value)


def test_snapshot_stored_takes_a_backslash_before_u0000_exactly() -> None:
    value = {"a": "\\u0000"}  # a backslash, then the letters: no U+0000 in it
    frozen = snapshot_stored(value, root="data")
    assert frozen == value
    assert json.loads(dumps_frozen(frozen)) == value


def test_remembered_texts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsoncodec, "_REMEMBER_MAX", 3)
    values = [snapshot_stored({"n": n}) for n in range(10)]
    assert len(jsoncodec._Remembered.texts) <= 3
    assert [dumps_frozen(v) for v in values] == [f'{{"n":{n}}}' for n in range(10)]


# -- thaw: orjson's copy and the walk's agree ----------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_thaw_copies_a_frozen_value_as_the_walk_does(value: Any) -> None:
    try:
        frozen = snapshot_json([value, {"k": value}])
    except NotJSONError:
        return
    thawed = thaw(frozen)
    assert json_equal(thawed, _thaw_exact(frozen))
    assert type(thawed) is list
    assert type(thawed[1]) is dict


def test_thaw_keeps_a_non_finite_float_a_hand_built_value_holds() -> None:
    thawed = thaw(FrozenDict({"a": math.inf, "b": [math.nan]}))
    assert thawed["a"] == math.inf
    assert math.isnan(thawed["b"][0])
