"""SPEC §1.1: the lossless JSON domain, ``snapshot_json`` and ``thaw``."""

from __future__ import annotations

import io
import json
import math
import operator
from collections import OrderedDict, UserDict, defaultdict
from decimal import Decimal
from enum import IntEnum
from typing import Any

import pytest

from session_sql import NotJSONError, snapshot_json, thaw
from session_sql.jsoncodec import dumps_compact
from session_sql.jsonl import write_jsonl
from session_sql.jsonvalue import FrozenDict, FrozenList, json_equal

from .builders import new_session, refused

SAFE = 2**53 - 1
DEPTH = 100_000


class Color(IntEnum):
    RED = 1


class MyDict(dict):  # type: ignore[type-arg]
    pass


class MyList(list):  # type: ignore[type-arg]
    pass


class MyStr(str):
    pass


class MyFloat(float):
    pass


def deep_list(depth: int, leaf: Any = None) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth - 1):
        child: list[Any] = []
        node.append(child)
        node = child
    if leaf is not None:
        node.append(leaf)
    return root


def depth_of(value: Any) -> int:
    """Nesting depth of a chain of single-element containers, without recursion."""
    depth = 0
    while isinstance(value, list | tuple | dict):
        depth += 1
        items = list(value.values()) if isinstance(value, dict) else list(value)
        if not items or not isinstance(items[0], list | tuple | dict):
            break
        value = items[0]
    return depth


# -- admissible values -------------------------------------------------------------------------

ADMISSIBLE: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    SAFE,
    -SAFE,
    0.0,
    1.5,
    -2.25,
    1e16,
    1e-300,
    "",
    "plain",
    "héllo wörld ✓ 😀",
    [],
    {},
    [1, "two", 3.0, None, True, [], {}],
    {"a": {"b": [{"c": None}]}, "": "empty key", "😀": 1},
]


@pytest.mark.parametrize("value", ADMISSIBLE, ids=repr)
def test_admissible_values_are_copied_equal_with_types_kept(value: Any) -> None:
    frozen = snapshot_json(value)
    assert frozen == value
    assert json_equal(frozen, value)  # 1 stays int, 1.0 stays float, True stays bool
    assert json_equal(json.loads(json.dumps(frozen)), value)


def test_int_float_and_bool_keep_their_types() -> None:
    frozen = snapshot_json({"i": 1, "f": 1.0, "b": True, "big": 1e16})
    assert [type(frozen[k]) for k in ("i", "f", "b", "big")] == [int, float, bool, float]


def test_containers_become_read_only_mappings_and_tuples() -> None:
    frozen = snapshot_json({"list": [1, [2]], "map": {"k": {}}})
    assert type(frozen) is FrozenDict
    assert type(frozen["list"]) is FrozenList
    assert type(frozen["list"][1]) is FrozenList
    assert type(frozen["map"]["k"]) is FrozenDict
    assert isinstance(frozen["list"], tuple)
    assert frozen["list"] == [1, [2]]  # a frozen list still compares equal to the list


def test_the_snapshot_is_a_copy() -> None:
    source: dict[str, Any] = {"items": [1, 2], "meta": {"k": "v"}}
    frozen = snapshot_json(source)
    source["items"].append(3)
    source["meta"]["k"] = "changed"
    source["new"] = True
    assert frozen == {"items": [1, 2], "meta": {"k": "v"}}


def test_frozen_output_serialises_with_the_stdlib_encoder() -> None:
    frozen = snapshot_json({"a": [1, 2.5, "x", None, {"b": False}]})
    assert json.dumps(frozen) == '{"a": [1, 2.5, "x", null, {"b": false}]}'


# -- rejected values ---------------------------------------------------------------------------

NAN = float("nan")
INF = float("inf")

# (value, path named by the error, a fragment of the reason)
REJECTED = [
    pytest.param({"x": [0, 1, NAN]}, 'data["x"][2]', "not a finite number", id="nan-in-list"),
    pytest.param(NAN, "data", "not a finite number", id="nan-top"),
    pytest.param({"a": INF}, 'data["a"]', "not a finite number", id="inf"),
    pytest.param([-INF], "data[0]", "not a finite number", id="-inf"),
    pytest.param({"z": -0.0}, 'data["z"]', "-0.0", id="negative-zero"),
    pytest.param([[-0.0]], "data[0][0]", "-0.0", id="negative-zero-nested"),
    pytest.param({"n": 2**53}, 'data["n"]', "safe range", id="int-2**53"),
    pytest.param({"n": -(2**53)}, 'data["n"]', "safe range", id="int--2**53"),
    pytest.param([10**30], "data[0]", "safe range", id="int-huge"),
    pytest.param({"t": (1, 2)}, 'data["t"]', "tuple", id="tuple"),
    pytest.param({"s": {1, 2}}, 'data["s"]', "set", id="set"),
    pytest.param({"s": frozenset()}, 'data["s"]', "frozenset", id="frozenset"),
    pytest.param({"b": b"raw"}, 'data["b"]', "bytes", id="bytes"),
    pytest.param({"b": bytearray(b"x")}, 'data["b"]', "bytearray", id="bytearray"),
    pytest.param({"d": OrderedDict(a=1)}, 'data["d"]', "OrderedDict", id="ordereddict"),
    pytest.param({"d": defaultdict(list)}, 'data["d"]', "defaultdict", id="defaultdict"),
    pytest.param({"d": MyDict(a=1)}, 'data["d"]', "MyDict", id="dict-subclass"),
    pytest.param(MyDict(a=1), "data", "MyDict", id="dict-subclass-top"),
    pytest.param({"d": UserDict(a=1)}, 'data["d"]', "UserDict", id="userdict"),
    pytest.param({"l": MyList([1])}, 'data["l"]', "MyList", id="list-subclass"),
    pytest.param({"s": MyStr("x")}, 'data["s"]', "MyStr", id="str-subclass"),
    pytest.param({"f": MyFloat(1.0)}, 'data["f"]', "MyFloat", id="float-subclass"),
    pytest.param({"e": Color.RED}, 'data["e"]', "Color", id="int-enum"),
    pytest.param({"d": Decimal("1.5")}, 'data["d"]', "Decimal", id="decimal"),
    pytest.param({"o": object()}, 'data["o"]', "object", id="object"),
    pytest.param({"c": 1j}, 'data["c"]', "complex", id="complex"),
    pytest.param({"s": "a\x00b"}, 'data["s"]', "U+0000", id="nul-in-string"),
    pytest.param(["\ud800"], "data[0]", "surrogate", id="lone-high-surrogate"),
    pytest.param(["x\udfff"], "data[0]", "surrogate", id="lone-low-surrogate"),
    pytest.param(["\ud83d\ude00"], "data[0]", "surrogate", id="surrogate-pair-as-two-chars"),
    pytest.param({1: "v"}, "data[1]", "not a str", id="int-key"),
    pytest.param({"a": {None: 1}}, 'data["a"][None]', "not a str", id="none-key"),
    pytest.param({True: 1}, "data[True]", "not a str", id="bool-key"),
    pytest.param({(1, 2): 1}, "data[(1, 2)]", "not a str", id="tuple-key"),
    pytest.param({"a\x00": 1}, 'data["a\\u0000"]', "U+0000", id="nul-in-key"),
    pytest.param({"\udc80": 1}, "data[", "surrogate", id="surrogate-key"),
]


@pytest.mark.parametrize(("value", "path", "reason"), REJECTED)
def test_rejected_values_name_their_path(value: Any, path: str, reason: str) -> None:
    with pytest.raises(NotJSONError) as info:
        snapshot_json(value, root="data")
    assert isinstance(info.value, TypeError)
    assert info.value.path.startswith(path)
    assert str(info.value).startswith(path)
    assert reason in str(info.value)


def test_the_default_root_is_value() -> None:
    with pytest.raises(NotJSONError, match=r'^value\["x"\]'):
        snapshot_json({"x": NAN})


@pytest.mark.parametrize(("value", "path", "reason"), REJECTED)
def test_append_of_a_rejected_value_changes_nothing(value: Any, path: str, reason: str) -> None:
    session = new_session()
    session.append("todo/write", {"ok": 1})
    with refused(session, NotJSONError) as info:
        session.append("todo/write", value)
    assert info.value.path.startswith(path)


def test_the_first_bad_value_is_reported() -> None:
    with pytest.raises(NotJSONError) as info:
        snapshot_json({"ok": [1, 2], "bad": [3, NAN], "worse": INF}, root="data")
    assert info.value.path == 'data["bad"][1]'


def test_safe_integer_bounds_are_inclusive() -> None:
    assert snapshot_json([SAFE, -SAFE]) == [SAFE, -SAFE]
    for unsafe in (SAFE + 1, -SAFE - 1):
        with pytest.raises(NotJSONError):
            snapshot_json(unsafe)


def test_positive_zero_and_valid_astral_characters_are_admissible() -> None:
    frozen = snapshot_json({"zero": 0.0, "emoji": "😀", "escape": "\u2028"})
    assert math.copysign(1.0, frozen["zero"]) == 1.0
    assert frozen["emoji"] == "😀"


# -- depth, cycles, shared references ----------------------------------------------------------


def test_a_100000_deep_list_needs_no_recursion() -> None:
    frozen = snapshot_json(deep_list(DEPTH, leaf="bottom"))
    assert depth_of(frozen) == DEPTH
    thawed = thaw(frozen)
    assert type(thawed) is list
    assert depth_of(thawed) == DEPTH


def test_a_100000_deep_dict_needs_no_recursion() -> None:
    root: dict[str, Any] = {}
    node = root
    for _ in range(DEPTH - 1):
        node["k"] = {}
        node = node["k"]
    assert depth_of(snapshot_json(root)) == DEPTH


def test_a_bad_value_at_the_bottom_of_a_deep_list_is_found() -> None:
    with pytest.raises(NotJSONError) as info:
        snapshot_json(deep_list(DEPTH, leaf=NAN))
    assert info.value.path.endswith("[0][0]")


def test_a_100000_deep_value_can_be_appended_and_serialised() -> None:
    session = new_session()
    event = session.append("todo/write", deep_list(DEPTH, leaf="bottom"))
    expected = "[" * DEPTH + '"bottom"' + "]" * DEPTH
    assert dumps_compact(event.data) == expected
    stream = io.StringIO()
    write_jsonl(stream, session.header, session.events)
    assert f'"data":{expected}}}\n' in stream.getvalue()


def test_the_deep_serialiser_writes_what_the_stdlib_writes() -> None:
    value = {"a": [1, 2.5, None, True, "é\n\u2028"], "": {}, "b": [[], {"k": "v"}]}
    shallow = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert dumps_compact(value) == shallow
    assert dumps_compact(deep_list(3000, leaf=value)) == "[" * 3000 + shallow + "]" * 3000


def test_a_list_containing_itself_is_a_cycle() -> None:
    looped: list[Any] = [1]
    looped.append(looped)
    with pytest.raises(NotJSONError, match="cycle") as info:
        snapshot_json({"l": looped}, root="data")
    assert info.value.path == 'data["l"][1]'


def test_a_dict_containing_itself_is_a_cycle() -> None:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    with pytest.raises(NotJSONError, match="cycle"):
        snapshot_json(looped)


def test_an_indirect_cycle_is_found() -> None:
    a: dict[str, Any] = {}
    b: list[Any] = [a]
    a["b"] = [[b]]
    with pytest.raises(NotJSONError, match="cycle") as info:
        snapshot_json(a, root="data")
    assert info.value.path == 'data["b"][0][0][0]'


def test_shared_references_are_allowed_and_become_independent_copies() -> None:
    shared = {"k": [1, 2]}
    value = {"a": shared, "b": shared, "list": [shared, shared], "deep": {"x": [shared]}}
    frozen = snapshot_json(value)
    assert frozen == value
    copies = [frozen["a"], frozen["b"], *frozen["list"], frozen["deep"]["x"][0]]
    assert all(c == shared for c in copies)
    assert len({id(c) for c in copies}) == len(copies)
    assert all(c is not shared for c in copies)


def test_a_shared_list_repeated_in_one_list_is_not_a_cycle() -> None:
    leaf = [0]
    assert snapshot_json([leaf, leaf, [leaf, leaf]]) == [[0], [0], [[0], [0]]]


# -- frozen output -----------------------------------------------------------------------------


def test_frozen_output_is_accepted_as_is() -> None:
    frozen = snapshot_json({"a": [1, {"b": 2}]})
    assert snapshot_json(frozen) is frozen
    assert snapshot_json(frozen["a"]) is frozen["a"]
    wrapped = snapshot_json({"inner": frozen, "list": [frozen["a"]]})
    assert wrapped["inner"] is frozen
    assert wrapped["list"][0] is frozen["a"]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: operator.setitem(d, "a", 2),
        lambda d: operator.delitem(d, "a"),
        lambda d: d.clear(),
        lambda d: d.pop("a"),
        lambda d: d.popitem(),
        lambda d: d.setdefault("z", 1),
        lambda d: d.update(z=1),
        lambda d: d.__ior__({"z": 1}),
        lambda d: operator.setitem(d["nested"], "x", 1),
        lambda d: operator.setitem(d["list"], 0, 9),
        lambda d: operator.delitem(d["list"], 0),
        lambda d: operator.setitem(d["list"][1], "k", 0),
    ],
    ids=[
        "setitem",
        "delitem",
        "clear",
        "pop",
        "popitem",
        "setdefault",
        "update",
        "ior",
        "nested-setitem",
        "list-setitem",
        "list-delitem",
        "dict-in-list",
    ],
)
def test_frozen_values_refuse_mutation_with_type_error(mutate: Any) -> None:
    frozen = snapshot_json({"a": 1, "nested": {}, "list": [1, {"k": 1}]})
    with pytest.raises(TypeError):
        mutate(frozen)
    assert frozen == {"a": 1, "nested": {}, "list": [1, {"k": 1}]}


def test_frozen_lists_have_no_mutating_methods() -> None:
    frozen = snapshot_json([1, 2])
    for name in ("append", "extend", "insert", "remove", "sort", "reverse", "clear", "pop"):
        assert not hasattr(frozen, name)


# -- thaw --------------------------------------------------------------------------------------


def test_thaw_gives_plain_mutable_containers_all_the_way_down() -> None:
    original = {"a": [1, {"b": [2.0, None]}], "c": {"d": "e"}}
    thawed = thaw(snapshot_json(original))
    assert thawed == original
    assert json_equal(thawed, original)
    assert type(thawed) is dict
    assert type(thawed["a"]) is list
    assert type(thawed["a"][1]) is dict
    assert type(thawed["a"][1]["b"]) is list
    thawed["a"][1]["b"].append(3)
    thawed["c"]["new"] = 1


def test_thaw_is_a_deep_copy() -> None:
    frozen = snapshot_json({"a": [1, {"b": 2}]})
    first, second = thaw(frozen), thaw(frozen)
    first["a"][1]["b"] = 99
    assert second["a"][1]["b"] == 2
    assert frozen["a"][1]["b"] == 2
    plain = {"x": [1]}
    copy = thaw(plain)
    copy["x"].append(2)
    assert plain == {"x": [1]}


@pytest.mark.parametrize("scalar", [None, True, 0, 1.5, "s"])
def test_thaw_returns_scalars_unchanged(scalar: Any) -> None:
    assert thaw(scalar) is scalar


def test_thaw_of_a_snapshot_round_trips_through_snapshot() -> None:
    value = {"a": [1, 2.0, {"b": [True, None, "x"]}]}
    assert json_equal(snapshot_json(thaw(snapshot_json(value))), value)


def test_thaw_of_a_100000_deep_value_needs_no_recursion() -> None:
    """Past the recursive walk's depth, the explicit stack takes over."""
    thawed = thaw(snapshot_json(deep_list(DEPTH, "leaf")))
    assert depth_of(thawed) == DEPTH
    node = thawed
    while node and type(node[0]) is list:
        node = node[0]
    assert node == ["leaf"]


def test_thaw_copies_subclassed_containers_into_plain_ones() -> None:
    thawed = thaw(MyDict(a=MyList([OrderedDict(b=(1, 2))])))
    assert thawed == {"a": [{"b": [1, 2]}]}
    assert type(thawed) is dict and type(thawed["a"]) is list
    assert type(thawed["a"][0]) is dict and type(thawed["a"][0]["b"]) is list
