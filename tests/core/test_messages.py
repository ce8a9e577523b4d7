"""SPEC §3: message shapes (seeds and loads) and the always-on data rules (appends too)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import pytest

from session_sql import InvalidEventError, InvalidSeedError, Session

from .builders import (
    WireLog,
    assistant_data,
    assistant_message,
    chunk_data,
    new_session,
    refused,
    request_header_data,
    say,
    tool_result_data,
    user_message,
    wire,
)

SURFACE_OP: dict[str, Literal["append"]] = {
    "user/message": "append",
    "assistant/message": "append",
    "tool/result": "append",
}


def _valid(type_: str) -> Any:
    return {
        "user/message": user_message(),
        "assistant/message": assistant_data(),
        "tool/result": tool_result_data("c1", is_error=True, error={"name": "E", "code": "X"}),
        "request/header": request_header_data(),
        "assistant/chunk": chunk_data(),
        "assistant/attempt": {"turn": 1, "step": 1, "error": {"message": "overloaded"}},
    }[type_]


def _mutated(type_: str, mutate: Callable[[Any], Any]) -> Any:
    data = copy.deepcopy(_valid(type_))
    replaced = mutate(data)
    return replaced.value if isinstance(replaced, _Whole) else data


def _set(path: str, value: Any) -> Callable[[Any], None]:
    """``data[a][b]... = value`` for a dotted path (integers index lists)."""
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]

    def mutate(data: Any) -> None:
        for key in parents:
            data = data[key]
        data[last] = value

    return mutate


def _drop(path: str) -> Callable[[Any], None]:
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]

    def mutate(data: Any) -> None:
        for key in parents:
            data = data[key]
        del data[last]

    return mutate


class _Whole(NamedTuple):
    """Returned by a mutation that replaces the whole data."""

    value: Any


def _whole(value: Any) -> Callable[[Any], Any]:
    return lambda _data: _Whole(value)


BAD_SHAPES = [
    # user/message: the message is the data
    ("user/message", _whole("hello"), "not-an-object"),
    ("user/message", _drop("id"), "id-missing"),
    ("user/message", _set("id", ""), "id-empty"),
    ("user/message", _set("id", 1), "id-int"),
    ("user/message", _set("role", "assistant"), "role-wrong"),
    ("user/message", _drop("role"), "role-missing"),
    ("user/message", _set("content", "hi"), "content-str"),
    ("user/message", _drop("content"), "content-missing"),
    ("user/message", _set("content.0", "hi"), "block-str"),
    ("user/message", _set("content.0", {"text": "hi"}), "block-without-type"),
    ("user/message", _set("content.0", {"type": "", "text": "hi"}), "block-empty-type"),
    ("user/message", _set("content.0", {"type": "text"}), "text-without-text"),
    ("user/message", _set("content.0", {"type": "reasoning", "text": 1}), "reasoning-int"),
    ("user/message", _set("content.0", {"type": "tool-call", "name": "x"}), "call-no-id"),
    ("user/message", _set("content.0", {"type": "tool-call", "id": "x"}), "call-no-name"),
    (
        "user/message",
        _set("content.0", {"type": "tool-call", "id": "x", "name": "y"}),
        "call-no-args",
    ),
    ("user/message", _set("content.0", {"type": "tool-result", "content": []}), "result-no-id"),
    (
        "user/message",
        _set("content.0", {"type": "tool-result", "toolCallId": "c", "content": [], "isError": 1}),
        "result-iserror-int",
    ),
    (
        "user/message",
        _set("content.0", {"type": "tool-result", "toolCallId": "c", "content": [{"type": 1}]}),
        "result-nested-block-bad",
    ),
    (
        "user/message",
        _set("content.0", {"type": "tool-result", "toolCallId": "c", "content": "x"}),
        "result-content-str",
    ),
    ("user/message", _drop("source"), "source-missing"),
    ("user/message", _set("source", {"kind": ""}), "source-kind-empty"),
    ("user/message", _set("source", "user"), "source-str"),
    # assistant/message: data.message, role assistant, source {kind: model, provider, model}
    ("assistant/message", _whole([]), "data-list"),
    ("assistant/message", _drop("message"), "message-missing"),
    ("assistant/message", _set("message.role", "user"), "role-user"),
    ("assistant/message", _set("message.source.kind", "user"), "source-kind-user"),
    ("assistant/message", _set("message.source.provider", ""), "provider-empty"),
    ("assistant/message", _drop("message.source.model"), "model-missing"),
    ("assistant/message", _set("message.source.model", 3), "model-int"),
    ("assistant/message", _set("message.content.0", {"type": "text"}), "bad-block"),
    ("assistant/message", _set("turn", -1), "turn-negative"),
    ("assistant/message", _set("step", "1"), "step-str"),
    ("assistant/message", _drop("turn"), "turn-missing"),
    ("assistant/message", _set("interrupted", False), "interrupted-false"),
    # tool/result: one tool-result block answering source.callId
    ("tool/result", _set("message.source.kind", "user"), "source-kind"),
    ("tool/result", _drop("message.source.callId"), "callid-missing"),
    ("tool/result", _set("message.content.0.toolCallId", "other"), "callid-mismatch"),
    ("tool/result", _set("message.content", []), "no-block"),
    (
        "tool/result",
        lambda d: d["message"]["content"].append(d["message"]["content"][0]),
        "two-blocks",
    ),
    ("tool/result", _set("message.content.0", {"type": "text", "text": "x"}), "text-block"),
    ("tool/result", _set("message.role", "assistant"), "role"),
    # request/header: config.provider/model non-empty, reason one of four
    ("request/header", _set("header.config.provider", ""), "provider-empty"),
    ("request/header", _drop("header.config.model"), "model-missing"),
    ("request/header", _drop("header.config"), "config-missing"),
    ("request/header", _set("reason", "restart"), "reason-unknown"),
    ("request/header", _drop("reason"), "reason-missing"),
    # assistant/chunk and assistant/attempt: turn/step ints >= 0
    ("assistant/chunk", _set("turn", 1.0), "chunk-turn-float"),
    ("assistant/chunk", _drop("step"), "chunk-step-missing"),
    ("assistant/attempt", _set("step", -2), "attempt-step-negative"),
    ("assistant/attempt", _whole(None), "attempt-null"),
]

ALWAYS_ON = [
    ("request/header", _whole("config"), "header-data-not-object"),
    ("request/header", _set("header", None), "header-not-object"),
    ("request/header", _set("header", []), "header-list"),
    ("tool/result", _whole([]), "result-data-not-object"),
    ("tool/result", _drop("message.content.0.isError"), "error-without-iserror"),
    ("tool/result", _set("message.content.0.isError", False), "error-with-iserror-false"),
    ("assistant/chunk", _set("turn", True), "turn-bool"),
    ("assistant/message", _set("step", None), "step-null"),
    ("assistant/attempt", _set("turn", "1"), "turn-str"),
]


def _params(cases: list[tuple[str, Any, str]]) -> list[Any]:
    return [pytest.param(type_, mutate, id=f"{type_}:{name}") for type_, mutate, name in cases]


def _seed_with(type_: str, data: Any) -> list[dict[str, Any]]:
    log = WireLog()
    say(log)
    log.append(type_, data, surface_op=SURFACE_OP.get(type_))
    say(log)
    return log.events


@pytest.mark.parametrize("type_", sorted({t for t, _, _ in BAD_SHAPES}))
def test_valid_shapes_are_accepted_on_seeds_and_appends(type_: str) -> None:
    seeded = Session(seed=_seed_with(type_, _valid(type_)))
    assert seeded.events[1].data == _valid(type_)
    live = new_session()
    live.append(type_, _valid(type_), surface_op=SURFACE_OP.get(type_))


@pytest.mark.parametrize(("type_", "mutate"), _params(BAD_SHAPES + ALWAYS_ON))
def test_a_bad_shape_in_a_seed_is_an_invalid_seed(type_: str, mutate: Any) -> None:
    with pytest.raises(InvalidSeedError) as info:
        Session(seed=_seed_with(type_, _mutated(type_, mutate)))
    assert info.value.index == 1
    assert info.value.seq == 1


@pytest.mark.parametrize(("type_", "mutate"), _params(ALWAYS_ON))
def test_always_on_rules_refuse_an_append(type_: str, mutate: Any) -> None:
    session = new_session()
    say(session)
    with refused(session, InvalidEventError):
        session.append(type_, _mutated(type_, mutate), surface_op=SURFACE_OP.get(type_))


@pytest.mark.parametrize(("type_", "mutate"), _params(BAD_SHAPES))
def test_append_also_refuses_what_a_reload_would_refuse(type_: str, mutate: Any) -> None:
    # Deliberate (rules.py): append applies the seed/load shapes too, so nothing is written
    # that a reader of the same catalog would refuse on load.
    session = new_session()
    say(session)
    with refused(session, InvalidEventError):
        session.append(type_, _mutated(type_, mutate), surface_op=SURFACE_OP.get(type_))


def test_unknown_blocks_and_extra_fields_pass_through_untouched() -> None:
    message = user_message()
    message["content"] = [
        {"type": "image", "mediaType": "image/png", "data": "iVBOR"},
        {"type": "file", "path": "/tmp/a.txt"},
        {"type": "vendor-block", "payload": {"nested": [1, 2.5]}},
        {"type": "text", "text": "hi", "cacheControl": {"type": "ephemeral"}},
        {
            "type": "tool-result",
            "toolCallId": "c1",
            "content": [{"type": "text", "text": "nested"}, {"type": "mystery"}],
            "isError": False,
        },
    ]
    message["source"] = {"kind": "cli", "terminal": "tty1"}
    message["extra"] = {"kept": True}
    session = Session(seed=[wire("user/message", 0, message, surface_op="append")])
    assert session.messages() == [message]


def test_a_user_message_source_may_be_any_kind() -> None:
    for kind in ("user", "steering", "compaction", "x"):
        Session(seed=[wire("user/message", 0, user_message(kind=kind), surface_op="append")])


def test_an_assistant_message_may_carry_usage_and_interrupted() -> None:
    data = assistant_data(
        assistant_message(None), usage={"inputTokens": 10, "outputTokens": 0}, interrupted=True
    )
    session = Session(seed=[wire("assistant/message", 0, data, surface_op="append")])
    assert session.events[0].data["usage"]["inputTokens"] == 10


def test_a_tool_result_may_carry_error_and_meta_with_iserror() -> None:
    data = tool_result_data(
        "c1", "boom", is_error=True, error={"name": "Exit", "code": "1"}, meta={"ms": 12}
    )
    session = new_session()
    session.append("tool/result", data, surface_op="append")
    assert session.messages() == [data["message"]]


def test_request_header_reasons() -> None:
    session = new_session()
    for reason in ("initial", "resume", "change", "series"):
        session.append("request/header", request_header_data(reason))
    assert session.seq == 4


@pytest.mark.parametrize(
    ("content", "place", "why"),
    [
        ("nope", "data.message.content", "a list of blocks"),
        ([{"type": "text", "text": "a"}, {"type": ""}], "data.message.content[1]", "'type'"),
        (
            [{"type": "tool-result", "toolCallId": "c", "content": [{"type": "text"}]}],
            "data.message.content[0].content[0]",
            "str 'text'",
        ),
        (
            [
                {
                    "type": "tool-result",
                    "toolCallId": "c",
                    "content": [{"type": "tool-result", "toolCallId": "d", "content": 5}],
                }
            ],
            "data.message.content[0].content[0].content",
            "a list of blocks",
        ),
    ],
)
def test_a_bad_block_is_named_by_its_place(content: Any, place: str, why: str) -> None:
    from session_sql.messages import check_message

    msg = {"id": "m", "role": "user", "content": content, "source": {"kind": "tool"}}
    with pytest.raises(InvalidEventError, match=rf"^{re.escape(place)}: .*{re.escape(why)}"):
        check_message(msg, "user", "data.message", 3)
