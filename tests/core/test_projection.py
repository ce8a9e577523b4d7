"""SPEC §6: messages derived from the surface."""

from __future__ import annotations

import operator

import pytest

from session_sql import InvalidEventError, Replace, Session
from session_sql.messages import project, project_data

from .builders import (
    answer,
    call_tool,
    new_session,
    reply,
    say,
    summarize,
    tool_turn,
)


def replayed(session: Session) -> Session:
    return Session(seed=[e.to_json() for e in session.events])


def test_each_surface_type_projects_its_message() -> None:
    session = new_session()
    user = say(session, "question")
    assistant = reply(session, "answer", tool_calls=[("c1", "shell")])
    call = call_tool(session, "c1")
    result = answer(session, "c1", "output", sources=[call])
    events = session.events
    assert session.messages() == [
        events[user].data,
        events[assistant].data["message"],
        events[result].data["message"],
    ]
    assert [m["role"] for m in session.messages()] == ["user", "assistant", "user"]


def test_an_assistant_message_with_empty_content_projects_nothing() -> None:
    session = new_session()
    say(session)
    empty = reply(session, None)  # only carried usage
    say(session)
    assert empty in session.surface.nodes
    assert len(session.messages()) == 2
    assert session.message_for(session.events[empty]) is None
    assert replayed(session).messages() == session.messages()


def test_messages_are_the_frozen_objects_stored_in_the_log() -> None:
    session = new_session()
    seqs = tool_turn(session)
    first, second = session.messages(), session.messages()
    assert first == second
    assert all(a is b for a, b in zip(first, second, strict=True))
    assert first[0] is session.events[seqs["user"]].data
    assert first[1] is session.events[seqs["reply"]].data["message"]
    assert first[2] is session.events[seqs["tool/result"]].data["message"]


def test_each_call_returns_a_new_list() -> None:
    session = new_session()
    say(session)
    first = session.messages()
    first.append("junk")
    first.clear()
    second = session.messages()
    assert second is not first
    assert len(second) == 1


def test_a_list_returned_earlier_does_not_grow() -> None:
    session = new_session()
    say(session)
    earlier = session.messages()
    say(session)
    reply(session)
    assert len(earlier) == 1
    assert len(session.messages()) == 3


def test_an_earlier_list_survives_a_replace_unchanged() -> None:
    session = new_session()
    say(session, "a")
    say(session, "b")
    earlier = session.messages()
    summarize(session, 0, 1, [0, 1])
    assert [m["content"][0]["text"] for m in earlier] == ["a", "b"]
    assert [m["content"][0]["text"] for m in session.messages()] == ["summary"]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda m: operator.setitem(m, "id", "x"),
        lambda m: operator.delitem(m, "role"),
        lambda m: operator.setitem(m["content"], 0, {}),
        lambda m: operator.setitem(m["content"][0], "text", "forged"),
        lambda m: m["content"][0].update(text="forged"),
        lambda m: operator.setitem(m["source"], "kind", "x"),
    ],
    ids=["set-id", "del-role", "replace-block", "set-text", "update-block", "set-source"],
)
def test_mutating_a_message_raises(mutate: object) -> None:
    session = new_session()
    say(session, "original")
    message = session.messages()[0]
    with pytest.raises(TypeError):
        mutate(message)  # type: ignore[operator]
    assert session.messages()[0]["content"][0]["text"] == "original"


def test_mutating_a_tool_result_raises() -> None:
    session = new_session()
    seqs = tool_turn(session)
    result = session.messages()[2]
    block = result["content"][0]
    with pytest.raises(TypeError):
        block["isError"] = True
    with pytest.raises(TypeError):
        operator.setitem(block["content"], 0, {"type": "text", "text": "forged"})
    with pytest.raises(AttributeError):
        block["content"].append({"type": "text", "text": "forged"})
    assert session.events[seqs["tool/result"]].data["message"] is result


def test_messages_after_appends_and_replaces_equal_a_fresh_replay() -> None:
    session = new_session()
    checkpoints = []
    first = say(session, "a")
    checkpoints.append(session.messages())
    seqs = tool_turn(session, 1)
    checkpoints.append(session.messages())
    reply(session, None)
    summarize(session, first, seqs["user"], [first, seqs["user"]])
    checkpoints.append(session.messages())
    after = say(session, "after")
    reply(session, "reply", surface_op=Replace(after, after), sources=[after])
    assert session.messages() == replayed(session).messages()
    assert [len(c) for c in checkpoints] == [1, 5, 4]
    assert session.messages()[-1]["content"][0]["text"] == "reply"


def test_message_for_projects_one_event() -> None:
    session = new_session()
    seqs = tool_turn(session)
    events = session.events
    assert session.message_for(events[seqs["user"]]) is events[seqs["user"]].data
    assert session.message_for(events[seqs["reply"]]) is events[seqs["reply"]].data["message"]
    for kind in ("turn/start", "request/header", "chunk", "tool/call", "step/end", "turn/end"):
        assert session.message_for(events[seqs[kind]]) is None


def test_message_for_projects_a_shadowed_event_too() -> None:
    session = new_session()
    first = say(session, "a")
    summarize(session, 0, 0, [0])
    assert session.message_for(session.events[first]) is session.events[first].data


def test_project_data_is_project_and_checks_unchecked_data() -> None:
    session = new_session()
    tool_turn(session)
    reply(session, None)
    for event in session.events:
        assert project_data(event.type, event.data, event.seq, checked=False) == project(event)
    with pytest.raises(InvalidEventError, match=r"data\.message: role must be 'assistant'"):
        project_data("assistant/message", {"message": session.messages()[0]}, 3, checked=False)
    with pytest.raises(InvalidEventError, match="a message must be an object"):
        project_data("user/message", [], 3, checked=False)
    with pytest.raises(KeyError):
        project_data("tool/result", {}, 3, checked=False)
