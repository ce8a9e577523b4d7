"""SPEC §1.2 (the event envelope) and §1.3 (the session header)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from session_sql import (
    SESSION_FORMAT_VERSION,
    InvalidEventError,
    InvalidHeaderError,
    InvalidSeedError,
    Replace,
    Session,
    SessionEvent,
    SessionFormatUnsupportedError,
)
from session_sql.jsonvalue import FrozenDict, FrozenList

from .builders import T0, new_session, refused, user_message, wire

# -- envelope: parse and serialise ------------------------------------------------------------


def test_a_minimal_envelope_parses_into_a_frozen_event() -> None:
    event = SessionEvent.from_json(
        {"type": "turn/start", "seq": 0, "time": T0, "data": {"turn": 1}}
    )
    assert event == SessionEvent("turn/start", 0, T0, {"turn": 1})
    assert (event.surface_op, event.source_event_seqs, event.ignorable) == (None, None, False)
    assert type(event.data) is FrozenDict


def test_every_optional_key_parses() -> None:
    event = SessionEvent.from_json(
        {
            "type": "user/message",
            "seq": 5,
            "time": T0,
            "data": user_message(),
            "surfaceOp": {"op": "replace", "start": 1, "end": 3},
            "sourceEventSeqs": [1, 2, 3],
            "ignorable": True,
        }
    )
    assert event.surface_op == Replace(1, 3)
    assert type(event.surface_op) is Replace
    assert event.source_event_seqs == (1, 2, 3)
    assert event.ignorable is True


def test_data_may_be_null() -> None:
    assert SessionEvent.from_json(wire("todo/write", 0, None)).data is None


def test_to_json_omits_absent_optional_keys() -> None:
    wire_event = SessionEvent("turn/start", 0, T0, FrozenDict({"turn": 1})).to_json()
    assert wire_event == {"type": "turn/start", "seq": 0, "time": T0, "data": {"turn": 1}}
    assert None not in wire_event.values()


def test_to_json_writes_plain_wire_values() -> None:
    event = SessionEvent(
        "user/message", 3, T0, FrozenDict(), Replace(0, 2), (0, 1, 2), ignorable=True
    )
    wire_event = event.to_json()
    assert wire_event["surfaceOp"] == {"op": "replace", "start": 0, "end": 2}
    assert type(wire_event["sourceEventSeqs"]) is list
    assert wire_event["ignorable"] is True
    assert set(wire_event) == {
        "type",
        "seq",
        "time",
        "data",
        "surfaceOp",
        "sourceEventSeqs",
        "ignorable",
    }
    assert SessionEvent("user/message", 0, T0, {}, "append").to_json()["surfaceOp"] == "append"


def test_parse_and_serialise_round_trip() -> None:
    raw = wire(
        "tool/result",
        7,
        {"x": [1, 2.5, "é"]},
        surface_op={"op": "replace", "start": 2, "end": 2},
        source_event_seqs=[2, 6],
    )
    event = SessionEvent.from_json(raw)
    assert event.to_json() == raw
    assert json.loads(json.dumps(event.to_json())) == raw
    assert SessionEvent.from_json(event.to_json()) == event


def test_events_are_immutable() -> None:
    event = SessionEvent.from_json(wire("todo/write", 0, {"a": [1]}))
    with pytest.raises(AttributeError):
        event.seq = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        event.data["a"] = 2
    assert type(event.data["a"]) is FrozenList


def test_replace_serialises_as_the_three_key_object() -> None:
    assert Replace(2, 1).to_json() == {"op": "replace", "start": 2, "end": 1}


def _base() -> dict[str, Any]:
    return {"type": "todo/write", "seq": 0, "time": T0, "data": {}}


def _with(**changes: Any) -> dict[str, Any]:
    event = _base()
    for key, value in changes.items():
        if value is _MISSING:
            del event[key]
        else:
            event[key] = value
    return event


_MISSING = object()

BAD_ENVELOPES = [
    pytest.param(_with(extra=1), id="extra-key"),
    pytest.param(_with(surface_op="append"), id="python-name-as-key"),
    pytest.param(_with(type=_MISSING), id="missing-type"),
    pytest.param(_with(seq=_MISSING), id="missing-seq"),
    pytest.param(_with(time=_MISSING), id="missing-time"),
    pytest.param(_with(data=_MISSING), id="missing-data"),
    pytest.param(_with(type=""), id="type-empty"),
    pytest.param(_with(type=1), id="type-int"),
    pytest.param(_with(type=None), id="type-null"),
    pytest.param(_with(type=["todo/write"]), id="type-list"),
    pytest.param(_with(seq=-1), id="seq-negative"),
    pytest.param(_with(seq="0"), id="seq-str"),
    pytest.param(_with(seq=0.0), id="seq-float"),
    pytest.param(_with(seq=False), id="seq-bool"),
    pytest.param(_with(seq=None), id="seq-null"),
    pytest.param(_with(time="now"), id="time-str"),
    pytest.param(_with(time=1.5), id="time-float"),
    pytest.param(_with(time=True), id="time-bool"),
    pytest.param(_with(time=None), id="time-null"),
    pytest.param(_with(surfaceOp=None), id="surfaceOp-null"),
    pytest.param(_with(surfaceOp="prepend"), id="surfaceOp-unknown-str"),
    pytest.param(_with(surfaceOp=["append"]), id="surfaceOp-list"),
    pytest.param(_with(surfaceOp={"op": "replace", "start": 0}), id="replace-missing-end"),
    pytest.param(
        _with(surfaceOp={"op": "replace", "start": 0, "end": 0, "x": 1}), id="replace-extra-key"
    ),
    pytest.param(_with(surfaceOp={"op": "splice", "start": 0, "end": 0}), id="replace-bad-op"),
    pytest.param(_with(surfaceOp={"op": "replace", "start": -1, "end": 0}), id="replace-negative"),
    pytest.param(_with(surfaceOp={"op": "replace", "start": "0", "end": 0}), id="replace-str"),
    pytest.param(_with(surfaceOp={"op": "replace", "start": 0, "end": 1.0}), id="replace-float"),
    pytest.param(_with(surfaceOp={"op": "replace", "start": True, "end": 0}), id="replace-bool"),
    pytest.param(_with(sourceEventSeqs=None), id="sources-null"),
    pytest.param(_with(sourceEventSeqs="0"), id="sources-str"),
    pytest.param(_with(sourceEventSeqs=0), id="sources-int"),
    pytest.param(_with(sourceEventSeqs={"0": 0}), id="sources-object"),
    pytest.param(_with(sourceEventSeqs=[0.0]), id="sources-float"),
    pytest.param(_with(sourceEventSeqs=[True]), id="sources-bool"),
    pytest.param(_with(sourceEventSeqs=[None]), id="sources-null-item"),
    pytest.param(_with(sourceEventSeqs=[*range(20), True]), id="sources-ints-then-bool"),
    pytest.param(_with(sourceEventSeqs=[*range(20), 1.0]), id="sources-ints-then-float"),
    pytest.param(_with(ignorable=False), id="ignorable-false"),
    pytest.param(_with(ignorable=None), id="ignorable-null"),
    pytest.param(_with(ignorable=1), id="ignorable-1"),
    pytest.param(_with(ignorable="true"), id="ignorable-str"),
]


@pytest.mark.parametrize("envelope", BAD_ENVELOPES)
def test_bad_envelopes_are_invalid(envelope: dict[str, Any]) -> None:
    with pytest.raises(InvalidEventError):
        SessionEvent.from_json(envelope)


@pytest.mark.parametrize("envelope", BAD_ENVELOPES)
def test_bad_envelopes_are_invalid_even_on_an_unknown_ignorable_event(
    envelope: dict[str, Any],
) -> None:
    envelope = {**envelope, "ignorable": envelope.get("ignorable", True)}
    if envelope.get("type") == "todo/write":
        envelope["type"] = "vendor/unknown"
    with pytest.raises(InvalidEventError):
        SessionEvent.from_json(envelope)
    with pytest.raises(InvalidSeedError) as info:
        Session(seed=[envelope])
    assert info.value.index == 0


@pytest.mark.parametrize("not_an_object", [[], "event", None, 1, [("type", "x")]])
def test_an_envelope_must_be_an_object(not_an_object: Any) -> None:
    with pytest.raises(InvalidEventError):
        SessionEvent.from_json(not_an_object)


def test_an_envelope_that_is_not_lossless_json_is_invalid() -> None:
    with pytest.raises(InvalidEventError, match="lossless"):
        SessionEvent.from_json({**_base(), "data": {"x": float("nan")}})


@pytest.mark.parametrize(
    ("surface_op", "sources"),
    [
        ({"op": "replace", "start": 0}, None),
        ("prepend", None),
        ({"op": "replace", "start": -1, "end": 0}, None),
        (None, ["1"]),
        (None, 5),
        (None, [True]),
    ],
)
def test_wrongly_typed_surface_metadata_is_refused_on_an_ignorable_append(
    surface_op: Any, sources: Any
) -> None:
    session = new_session()
    session.append("todo/write", {})
    with refused(session, InvalidEventError):
        session.append(
            "vendor/unknown", {}, surface_op=surface_op, source_event_seqs=sources, ignorable=True
        )


@pytest.mark.parametrize("ignorable", [1, None, "yes", 0])
def test_append_ignorable_must_be_a_bool(ignorable: Any) -> None:
    session = new_session()
    with refused(session, InvalidEventError, match="ignorable"):
        session.append("todo/write", {}, ignorable=ignorable)


# -- the session header ------------------------------------------------------------------------


def header(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"version": 0, "id": "h1", "createdAt": T0, "isSeeded": False}
    for key, value in changes.items():
        if value is _MISSING:
            del base[key]
        else:
            base[key] = value
    return base


def test_the_format_version_is_zero() -> None:
    assert SESSION_FORMAT_VERSION == 0


def test_a_default_header() -> None:
    session = new_session("abc")
    assert session.header == {"version": 0, "id": "abc", "createdAt": T0, "isSeeded": False}
    assert session.id == "abc"
    assert type(session.header) is FrozenDict


def test_a_generated_id_is_used_without_one() -> None:
    first, second = Session(), Session()
    assert first.id != second.id
    assert first.header["id"] == first.id


def test_a_given_header_is_kept_verbatim_with_extra_keys() -> None:
    raw = header(
        parentSession="p0",
        cwd="/home/me/project",
        app={"name": "agent", "tags": ["a", 1, 2.5]},
    )
    session = Session(header=raw)
    assert session.header == raw
    assert session.id == "h1"
    with pytest.raises(TypeError):
        session.header["id"] = "other"
    raw["app"]["name"] = "changed"
    assert session.header["app"]["name"] == "agent"


def test_a_header_id_must_agree_with_the_session_id() -> None:
    assert Session("h1", header=header()).id == "h1"
    with pytest.raises(InvalidHeaderError, match="differs"):
        Session("other", header=header())


@pytest.mark.parametrize(("version", "age"), [(1, "newer"), (7, "newer"), (-1, "older")])
def test_another_format_version_is_unsupported(version: int, age: str) -> None:
    with pytest.raises(SessionFormatUnsupportedError, match=age):
        Session(header=header(version=version))


BAD_HEADERS = [
    pytest.param(header(version=_MISSING), id="version-missing"),
    pytest.param(header(version="0"), id="version-str"),
    pytest.param(header(version=False), id="version-bool"),
    pytest.param(header(version=0.0), id="version-float"),
    pytest.param(header(id=_MISSING), id="id-missing"),
    pytest.param(header(id=""), id="id-empty"),
    pytest.param(header(id=7), id="id-int"),
    pytest.param(header(id="a\nb"), id="id-unprintable"),
    pytest.param(header(createdAt=_MISSING), id="createdAt-missing"),
    pytest.param(header(createdAt=-1), id="createdAt-negative"),
    pytest.param(header(createdAt="2024"), id="createdAt-str"),
    pytest.param(header(createdAt=1.5), id="createdAt-float"),
    pytest.param(header(isSeeded=_MISSING), id="isSeeded-missing"),
    pytest.param(header(isSeeded=0), id="isSeeded-int"),
    pytest.param(header(isSeeded="false"), id="isSeeded-str"),
    pytest.param(header(parentSession=3), id="parent-int"),
    pytest.param(header(parentSession=""), id="parent-empty"),
    pytest.param(header(cwd="relative/path"), id="cwd-relative"),
    pytest.param(header(cwd=["/"]), id="cwd-list"),
    pytest.param(header(extra=float("nan")), id="not-lossless"),
    pytest.param(["version", 0], id="not-an-object"),
]


@pytest.mark.parametrize("raw", BAD_HEADERS)
def test_malformed_headers_are_invalid(raw: Any) -> None:
    with pytest.raises(InvalidHeaderError):
        Session(header=raw)


def test_to_json_is_plain_and_mutable_and_to_wire_shares_the_frozen_data() -> None:
    event = SessionEvent.from_json(
        {"type": "todo/write", "seq": 0, "time": 1, "data": {"items": [{"t": "x"}]}}
    )
    wire = event.to_json()
    assert type(wire["data"]) is dict and type(wire["data"]["items"]) is list
    wire["data"]["items"].append({"t": "y"})  # a plain copy: the event is untouched
    assert event.data == {"items": [{"t": "x"}]}
    assert event.to_wire()["data"] is event.data
