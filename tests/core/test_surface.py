"""SPEC §4 (the surface), §5 (provenance) and ``fold_surface``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from session_sql import (
    InvalidEventError,
    InvalidSeedError,
    Replace,
    Session,
    SessionEvent,
    SurfaceError,
    fold_surface,
    thaw,
)
from session_sql import surface as surface_module
from session_sql.catalog import default_catalog
from session_sql.pending import batch_items
from session_sql.surface import AppendNode, Replacement, ReplaceNodes, Replay, SurfaceFold, replay

from .builders import (
    Target,
    WireLog,
    answer,
    assistant_data,
    begin_step,
    begin_turn,
    call_tool,
    chunk,
    chunk_data,
    new_session,
    refused,
    reply,
    request_header_data,
    say,
    summarize,
    tool_result_data,
    tool_turn,
    user_message,
    wire,
)


def four_messages() -> Session:
    """A session whose surface is ``(0, 1, 2, 3)``."""
    session = new_session()
    for text in ("a", "b", "c", "d"):
        say(session, text)
    return session


def texts(session: Session) -> list[str]:
    return [m["content"][0]["text"] for m in session.messages()]


def assert_matches_replay(session: Session) -> None:
    fold = fold_surface(session.events)
    assert fold.nodes == session.surface.nodes
    assert len(fold.replacements) == session.surface.replace_generation
    assert Session(seed=[e.to_json() for e in session.events]).messages() == session.messages()


# -- append ------------------------------------------------------------------------------------


def test_append_pushes_the_seq_onto_the_end() -> None:
    session = new_session()
    session.append("turn/start", {"turn": 1})
    say(session)
    session.append("todo/write", [])
    reply(session)
    assert session.surface.nodes == (1, 3)
    assert session.surface.replace_generation == 0
    assert isinstance(session.surface.nodes, tuple)  # immutable
    assert session.surface.nodes == [1, 3]  # and equal to the same list


@pytest.mark.parametrize(
    ("type_", "data"),
    [
        ("user/message", user_message()),
        ("assistant/message", assistant_data()),
        ("tool/result", tool_result_data()),
    ],
)
def test_a_surface_eligible_event_without_surface_op_is_refused(type_: str, data: Any) -> None:
    session = four_messages()
    with refused(session, SurfaceError, match="must carry a surfaceOp"):
        session.append(type_, data)
    seed = [*[e.to_json() for e in session.events], wire(type_, 4, data)]
    with pytest.raises(InvalidSeedError) as info:
        Session(seed=seed)
    assert isinstance(info.value, SurfaceError)
    assert info.value.index == 4
    with pytest.raises(SurfaceError):
        fold_surface(seed)


NOT_ELIGIBLE = [
    ("turn/start", {"turn": 1}),
    ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
    ("step/start", {"turn": 1, "step": 1}),
    ("step/end", {"turn": 1, "step": 1}),
    ("assistant/chunk", chunk_data()),
    ("assistant/attempt", {"turn": 1, "step": 1}),
    ("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": "n", "arguments": "{}"}),
    ("request/header", request_header_data()),
    ("request/context", {"provider": "prov", "model": "mod"}),
    ("session/end-seed", {}),
    ("compaction/summary", {"text": "s"}),
]


@pytest.mark.parametrize(("type_", "data"), NOT_ELIGIBLE)
@pytest.mark.parametrize(
    "metadata",
    [
        {"surface_op": "append"},
        {"surface_op": Replace(0, 0), "source_event_seqs": [0]},
        {"source_event_seqs": [0]},
    ],
    ids=["append", "replace", "sources-only"],
)
def test_other_types_may_not_carry_surface_metadata(
    type_: str, data: Any, metadata: dict[str, Any]
) -> None:
    session = four_messages()
    with refused(session, SurfaceError, match="not surface-eligible"):
        session.append(type_, data, **metadata)
    seed = [*[e.to_json() for e in session.events], wire(type_, 4, data, **metadata)]
    with pytest.raises(InvalidSeedError) as info:
        Session(seed=seed)
    assert isinstance(info.value, SurfaceError)
    assert info.value.index == 4


# -- replace -----------------------------------------------------------------------------------


def test_replace_removes_the_range_and_puts_the_event_at_its_start() -> None:
    session = four_messages()
    summary = summarize(session, 1, 2, [1, 2])
    assert summary == 4
    assert session.surface.nodes == (0, 4, 3)
    assert session.surface.replace_generation == 1
    assert texts(session) == ["a", "summary", "d"]
    assert [e.seq for e in session.events] == [0, 1, 2, 3, 4]  # shadowed events stay logged
    assert_matches_replay(session)


def test_start_equal_to_end_replaces_one_node() -> None:
    session = four_messages()
    summarize(session, 2, 2, [2])
    assert session.surface.nodes == (0, 1, 4, 3)
    assert texts(session) == ["a", "b", "summary", "d"]


def test_the_whole_surface_can_be_replaced() -> None:
    session = four_messages()
    summarize(session, 0, 3, [0, 1, 2, 3])
    assert session.surface.nodes == (4,)
    assert_matches_replay(session)


def test_endpoints_are_compared_by_position_not_by_number() -> None:
    session = new_session()
    say(session, "first")  # 0
    say(session, "second")  # 1
    summarize(session, 0, 0, [0])  # 2 takes position 0
    assert session.surface.nodes == (2, 1)
    with refused(session, SurfaceError, match="reversed"):
        summarize(session, 1, 2, [1, 2])
    summarize(session, 2, 1, [2, 1])  # 3: start=2 sits before end=1
    assert list(session.surface.nodes) == [3]
    assert session.surface.replace_generation == 2
    assert fold_surface(session.events).replacements[-1] == Replacement(3, 2, 1, (2, 1))
    assert_matches_replay(session)


def test_a_reversed_range_is_refused() -> None:
    session = four_messages()
    with refused(session, SurfaceError, match="reversed"):
        summarize(session, 2, 1, [1, 2])


@pytest.mark.parametrize(
    ("start", "end"),
    [(1, 3), (0, 1), (1, 1), (5, 5), (0, 7)],
    ids=["shadowed-start", "shadowed-end", "shadowed-both", "never-a-node", "end-never-a-node"],
)
def test_an_endpoint_missing_from_the_surface_is_refused(start: int, end: int) -> None:
    session = four_messages()  # (0, 1, 2, 3)
    summarize(session, 1, 2, [1, 2])  # 4 -> (0, 4, 3)
    session.append("todo/write", {})  # 5, logged but never on the surface
    say(session)  # 6
    session.append("todo/write", {})  # 7
    assert session.surface.nodes == (0, 4, 3, 6)
    with refused(session, SurfaceError, match="not on the surface"):
        summarize(session, start, end, sorted({start, end}))


@pytest.mark.parametrize(
    ("start", "end"),
    [(4, 4), (0, 4), (4, 0), (0, 9), (9, 9)],
    ids=["both-own-seq", "end-own-seq", "start-own-seq", "end-after", "both-after"],
)
def test_endpoints_at_or_after_the_own_seq_are_refused(start: int, end: int) -> None:
    session = four_messages()  # the next seq is 4
    with refused(session, SurfaceError, match="precede"):
        session.append(
            "user/message", user_message(), surface_op=Replace(start, end), source_event_seqs=[0]
        )


def test_sources_must_cover_every_shadowed_node() -> None:
    session = four_messages()
    with refused(session, SurfaceError, match=r"missing \[2\]"):
        summarize(session, 1, 3, [1, 3])
    with refused(session, SurfaceError, match="cover"):
        session.append("user/message", user_message(), surface_op=Replace(1, 1))


def test_sources_may_cite_more_than_the_shadowed_nodes() -> None:
    session = four_messages()
    session.append("todo/write", {})  # 4
    summarize(session, 1, 2, [0, 1, 2, 4])
    assert session.surface.nodes == (0, 5, 3)


def test_an_assistant_message_may_replace_a_range() -> None:
    session = four_messages()
    reply(session, "condensed", surface_op=Replace(0, 3), sources=[0, 1, 2, 3])
    assert texts(session) == ["condensed"]


@pytest.mark.parametrize(
    "surface_op",
    [
        {"op": "replace", "start": -1, "end": 0},
        {"op": "replace", "start": 0, "end": "1"},
        {"op": "replace", "start": 0, "end": 1, "why": "x"},
        {"op": "replace", "start": 0},
        {"op": "insert", "start": 0, "end": 1},
        "prepend",
        ["append"],
        Replace(-1, 0),
        (0, 1),
    ],
)
def test_malformed_surface_ops_are_invalid_events(surface_op: Any) -> None:
    session = four_messages()
    with refused(session, InvalidEventError):
        session.append(
            "user/message", user_message(), surface_op=surface_op, source_event_seqs=[0, 1]
        )


def test_a_replace_may_be_given_as_its_wire_object() -> None:
    session = four_messages()
    event = session.append(
        "user/message",
        user_message(),
        surface_op={"op": "replace", "start": 0, "end": 1},
        source_event_seqs=[0, 1],
    )
    assert event.surface_op == Replace(0, 1)
    assert session.surface.nodes == (4, 2, 3)


def test_replace_generation_counts_committed_replaces_only() -> None:
    session = four_messages()
    summarize(session, 0, 0, [0])
    say(session)
    with refused(session, SurfaceError):
        summarize(session, 0, 0, [0])  # 0 is gone
    summarize(session, 1, 2, [1, 2])
    assert session.surface.replace_generation == 2
    assert_matches_replay(session)


# -- tool/result replacement (pruning a long output) -------------------------------------------


def prunable(target: Target, *, with_error: bool = True) -> int:
    """A step with a tool call and its long result; returns the result's seq."""
    begin_turn(target)
    begin_step(target)
    chunk(target)
    reply(target, "calling", tool_calls=[("c1", "shell")])
    call = call_tool(target, "c1")
    extra: dict[str, Any] = {"meta": {"bytes": 1, "exit": 0}}
    if with_error:
        extra |= {"is_error": True, "error": {"name": "Exit", "code": "2"}}
    else:
        extra |= {"is_error": False}
    answer(target, "c1", "a very long output " * 20, sources=[call], **extra)
    return target.seq - 1


def pruned(original: Any) -> dict[str, Any]:
    """A plain copy of ``original`` tool/result data with only the result content changed."""
    data: dict[str, Any] = thaw(original)
    _block(data)["content"] = [{"type": "text", "text": "[pruned]"}]
    return data


def _block(data: dict[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = data["message"]["content"][0]
    return block


def test_a_tool_result_may_replace_its_result_with_a_shorter_content() -> None:
    session = new_session()
    result = prunable(session)
    data = pruned(session.events[result].data)
    event = session.append(
        "tool/result", data, surface_op=Replace(result, result), source_event_seqs=[result]
    )
    assert session.surface.nodes == (3, event.seq)
    assert session.messages()[-1]["content"][0]["content"] == [{"type": "text", "text": "[pruned]"}]
    assert_matches_replay(session)


Mutation = Callable[[dict[str, Any]], object]

# (what differs, mutation of the pruned data, the error append raises when the shape rules
#  of §3 see the difference first)
FIELD_CHANGES: list[tuple[str, Mutation, type[Exception]]] = [
    ("turn", lambda d: d.update(turn=2), SurfaceError),
    ("step", lambda d: d.update(step=2), SurfaceError),
    ("error-changed", lambda d: d["error"].update(code="3"), SurfaceError),
    ("error-removed", lambda d: d.pop("error"), SurfaceError),
    ("meta-changed", lambda d: d["meta"].update(exit=1), SurfaceError),
    ("meta-int-to-float", lambda d: d["meta"].update(bytes=1.0), SurfaceError),
    ("meta-removed", lambda d: d.pop("meta"), SurfaceError),
    ("data-key-added", lambda d: d.update(extra=True), SurfaceError),
    ("message-id", lambda d: d["message"].update(id="other"), SurfaceError),
    ("message-key-added", lambda d: d["message"].update(note="x"), SurfaceError),
    ("source-key-added", lambda d: d["message"]["source"].update(x=1), SurfaceError),
    (
        "call-id",
        lambda d: (d["message"]["source"].update(callId="c2"), _block(d).update(toolCallId="c2")),
        SurfaceError,
    ),
    ("block-key-added", lambda d: _block(d).update(note="x"), SurfaceError),
    ("role", lambda d: d["message"].update(role="assistant"), InvalidEventError),
    ("is-error-false", lambda d: _block(d).update(isError=False), InvalidEventError),
    ("block-content-removed", lambda d: _block(d).pop("content"), InvalidEventError),
]


@pytest.mark.parametrize(
    ("mutate", "error"), [pytest.param(m, e, id=name) for name, m, e in FIELD_CHANGES]
)
def test_a_tool_result_replacement_may_change_only_the_result_content(
    mutate: Mutation, error: type[Exception]
) -> None:
    session = new_session()
    result = prunable(session)
    data = pruned(session.events[result].data)
    mutate(data)
    with refused(session, error):
        session.append(
            "tool/result", data, surface_op=Replace(result, result), source_event_seqs=[result]
        )
    # The surface rule itself (without the shape rules in front of it) refuses every change.
    log = WireLog()
    prunable(log)
    log.append("tool/result", data, surface_op=Replace(result, result), source_event_seqs=[result])
    with pytest.raises(SurfaceError, match="only the result block's content"):
        fold_surface(log.events)


@pytest.mark.parametrize(
    ("name", "mutate"),
    [
        ("is-error-added", lambda d: _block(d).update(isError=True)),
        ("is-error-removed", lambda d: _block(d).pop("isError")),
    ],
)
def test_the_is_error_flag_must_stay_equal(name: str, mutate: Mutation) -> None:
    session = new_session()
    result = prunable(session, with_error=False)
    data = pruned(session.events[result].data)
    mutate(data)
    with refused(session, SurfaceError, match="only the result block's content"):
        session.append(
            "tool/result", data, surface_op=Replace(result, result), source_event_seqs=[result]
        )


def test_a_tool_result_may_replace_exactly_one_node() -> None:
    session = new_session()
    first = prunable(session)
    call = call_tool(session, "c2")
    second = answer(session, "c2", sources=[call])
    data = pruned(session.events[first].data)
    with refused(session, SurfaceError, match="exactly one node"):
        session.append(
            "tool/result",
            data,
            surface_op=Replace(first, second),
            source_event_seqs=[first, second],
        )


@pytest.mark.parametrize("target_type", ["user/message", "assistant/message"])
def test_a_tool_result_may_only_replace_a_tool_result(target_type: str) -> None:
    session = new_session()
    result = prunable(session)
    target = say(session) if target_type == "user/message" else reply(session)
    data = pruned(session.events[result].data)
    with refused(session, SurfaceError, match="may only replace a tool/result"):
        session.append(
            "tool/result", data, surface_op=Replace(target, target), source_event_seqs=[target]
        )


def test_a_pruned_result_can_be_pruned_again() -> None:
    session = new_session()
    result = prunable(session)
    first = session.append(
        "tool/result",
        pruned(session.events[result].data),
        surface_op=Replace(result, result),
        source_event_seqs=[result],
    )
    again = pruned(first.data)
    _block(again)["content"] = []
    session.append(
        "tool/result",
        again,
        surface_op=Replace(first.seq, first.seq),
        source_event_seqs=[first.seq],
    )
    assert session.surface.replace_generation == 2
    assert_matches_replay(session)


# -- provenance (§5) ---------------------------------------------------------------------------


def test_provenance_is_allowed_on_the_three_eligible_types() -> None:
    session = new_session()
    seqs = tool_turn(session)
    assert session.events[seqs["reply"]].source_event_seqs == (seqs["chunk"],)
    assert session.events[seqs["tool/result"]].source_event_seqs == (seqs["tool/call"],)
    say(session, sources=[seqs["turn/start"], seqs["chunk"]])  # cited seqs need not be nodes
    assert session.events[-1].source_event_seqs == (0, seqs["chunk"])


@pytest.mark.parametrize(
    "sources",
    [[], [1, 1], [-1], [4], [5], [0, 4], [2, 3, 2]],
    ids=["empty", "duplicate", "negative", "own-seq", "future", "own-seq-among-others", "dup-3"],
)
@pytest.mark.parametrize("type_", ["user/message", "assistant/message", "tool/result"])
def test_bad_provenance_is_refused(type_: str, sources: list[int]) -> None:
    session = four_messages()  # the next seq is 4
    data = {
        "user/message": user_message(),
        "assistant/message": assistant_data(),
        "tool/result": tool_result_data(),
    }[type_]
    with refused(session, InvalidEventError, match="sourceEventSeqs"):
        session.append(type_, data, surface_op="append", source_event_seqs=sources)
    seed = [*[e.to_json() for e in session.events]]
    seed.append(wire(type_, 4, data, surface_op="append", source_event_seqs=sources))
    with pytest.raises(InvalidSeedError) as info:
        Session(seed=seed)
    assert info.value.index == 4


@pytest.mark.parametrize("sources", [["0"], [0.0], [True], "01", 0, {0}])
def test_mistyped_provenance_is_refused(sources: Any) -> None:
    session = four_messages()
    with refused(session, InvalidEventError):
        session.append(
            "user/message", user_message(), surface_op="append", source_event_seqs=sources
        )


def test_provenance_is_also_checked_on_a_replace() -> None:
    session = four_messages()
    with refused(session, InvalidEventError, match="duplicates"):
        summarize(session, 1, 2, [1, 2, 2])
    with refused(session, InvalidEventError, match="< the event's seq"):
        summarize(session, 1, 2, [1, 2, 7])


# -- fold_surface ------------------------------------------------------------------------------


def test_fold_surface_replays_a_log_and_records_each_replacement() -> None:
    log = WireLog()
    for text in "abcd":
        say(log, text)
    summarize(log, 1, 2, [1, 2])  # 4
    summarize(log, 0, 4, [0, 4])  # 5
    fold = fold_surface(log.events)
    assert isinstance(fold, SurfaceFold)
    assert fold.nodes == (5, 3)
    assert fold.replacements == (
        Replacement(seq=4, start=1, end=2, shadowed=(1, 2)),
        Replacement(seq=5, start=0, end=4, shadowed=(0, 4)),
    )
    assert fold == fold_surface([SessionEvent.from_json(e) for e in log.events])
    assert fold_surface([]) == SurfaceFold((), ())


def test_fold_surface_accepts_mixed_events_and_wire_dicts() -> None:
    session = new_session()
    tool_turn(session)
    mixed = [e if e.seq % 2 else e.to_json() for e in session.events]
    assert fold_surface(mixed).nodes == session.surface.nodes


def test_fold_surface_requires_a_complete_log_from_seq_0() -> None:
    log = WireLog()
    for _ in range(3):
        say(log)
    with pytest.raises(InvalidEventError, match="seqs must run"):
        fold_surface(log.events[1:])


def test_fold_surface_refuses_an_invalid_transition() -> None:
    log = WireLog()
    say(log)
    say(log, surface_op=Replace(0, 0))  # no sources: coverage missing
    with pytest.raises(SurfaceError):
        fold_surface(log.events)


# -- replay ------------------------------------------------------------------------------------


def test_replay_yields_each_event_with_its_transition_and_stored_position() -> None:
    log = WireLog()
    for text in "abcd":
        say(log, text)  # 0..3 at positions 0..3
    summarize(log, 1, 2, [1, 2])  # 4 keeps position 1
    summarize(log, 0, 4, [0, 4])  # 5 keeps position 0
    log.append("todo/write", {"items": []})  # 6: off the surface
    say(log, "e")  # 7 takes the next position, 4: positions are sparse
    events = [SessionEvent.from_json(e) for e in log.events]
    state = Replay(keep_surface_events=True)
    steps = list(replay(events, state, default_catalog()))
    assert [step.event for step in steps] == events
    assert [step.position for step in steps] == [0, 1, 2, 3, 1, 0, None, 4]
    assert steps[4].transition == ReplaceNodes(1, 2, 4, (1, 2))
    assert steps[6].transition is None
    assert steps[7].transition == AppendNode(7)
    assert state.rows() == [(0, 5), (3, 3), (4, 7)]
    assert (state.next_pos, state.replace_generation, state.length) == (5, 2, 8)


def test_replay_keeps_only_the_events_on_the_surface() -> None:
    log = WireLog()
    result = tool_turn(log)["tool/result"]
    answer(log, "c1", "pruned", sources=[result], surface_op=Replace(result, result))
    state = Replay(keep_surface_events=True)
    for _ in replay(map(SessionEvent.from_json, log.events), state, default_catalog()):
        assert sorted(state._kept) == sorted(state.surface.nodes)
    assert state.surface.nodes == fold_surface(log.events).nodes


def test_fold_surface_plans_each_event_once(monkeypatch: pytest.MonkeyPatch) -> None:
    planned: list[int] = []
    real_plan = surface_module.plan

    def counting_plan(nodes: Any, event: SessionEvent, lookup: Any, items: Any) -> Any:
        planned.append(event.seq)
        return real_plan(nodes, event, lookup, items)

    monkeypatch.setattr(surface_module, "plan", counting_plan)
    log = WireLog()
    tool_turn(log)
    summarize(log, 2, 5, [2, 5])
    fold_surface(log.events)
    Session(seed=log.events)
    assert planned == list(range(log.seq)) * 2  # once per replay, not once per consumer


# -- the surface digest (what a store's write handle checks instead of replaying) -------------


def _message(text: str) -> dict[str, Any]:
    return {"type": "user/message", "data": user_message(text), "surface_op": "append"}


def _replace(type_: str, start: int, end: int, sources: list[int]) -> dict[str, Any]:
    data = {"reason": "r"} if type_ == "surface/removed" else user_message("s")
    return {
        "type": type_,
        "data": data,
        "surface_op": {"op": "replace", "start": start, "end": end},
        "source_event_seqs": sources,
    }


@pytest.mark.parametrize(
    "batch",
    [
        [_message("a")],
        [_replace("user/message", 1, 2, [1, 2])],
        [_message("a"), _replace("user/message", 2, 4, [2, 3, 4])],
        [_message("a"), _replace("surface/removed", 0, 4, [0, 1, 2, 3, 4]), _message("b")],
        [
            _replace("surface/removed", 1, 1, [1]),
            _message("a"),
            _replace("user/message", 3, 5, [3, 5]),
        ],
    ],
)
def test_counters_after_a_batch_match_the_state_after_it(batch: list[dict[str, Any]]) -> None:
    session = Session()
    for i in range(4):
        session.append("user/message", user_message(str(i)), surface_op="append")
    state = session._state
    pending = session._begin_append(batch_items(batch))
    predicted = state.counters_after(pending.transitions)
    pending.commit()
    assert predicted == (state.next_pos, state.replace_generation, state.digest)
    # The digest is the fold's: a fresh replay of the log gives the same, so does a state
    # rebuilt from the stored rows alone.
    fresh = Replay(keep_surface_events=True)
    list(replay(session.events, fresh, default_catalog()))
    rebuilt = Replay(
        surface_module.Surface(state.surface.nodes, state.replace_generation),
        state.positions,
        state.next_pos,
        state.length,
    )
    assert fresh.digest == state.digest == rebuilt.digest


def test_the_digest_moves_with_any_row_or_counter() -> None:
    digest = surface_module.surface_digest
    share = surface_module.node_digest
    base = digest(share(0, 3) + share(1, 5), 2, 0)
    assert digest(0, 0, 0) == 0  # an empty session's: the column's default
    others = {
        digest(share(0, 5) + share(1, 3), 2, 0),  # two rows swapped
        digest(share(0, 3) + share(2, 5), 2, 0),  # a row moved
        digest(share(0, 3), 2, 0),  # a row gone
        digest(share(0, 3) + share(1, 5), 3, 0),  # surface_next_pos
        digest(share(0, 3) + share(1, 5), 2, 1),  # replace_generation
    }
    assert base not in others and len(others) == 5
    assert share(0, 0) != 0  # a first event on the surface counts too
    assert all(0 <= d < 2**63 for d in (*others, base))


# -- Replay.take: fold without the Step ---------------------------------------------------------


def _replay_state(state: Replay) -> tuple[Any, ...]:
    return (
        state.length,
        state.next_pos,
        state.positions,
        state.surface.nodes,
        state.replace_generation,
        state.digest,
    )


def test_take_leaves_the_state_fold_leaves() -> None:
    session = four_messages()
    tool_turn(session, 1)
    summarize(session, 0, 2, [0, 1, 2])
    session.append("x/note", {"n": 1}, surface_op="append", ignorable=True)  # exempt
    prunable(session)
    catalog = default_catalog()
    log = list(session.events)
    folded, taken = Replay(), Replay()
    for event in log:
        folded.fold(event, catalog, log.__getitem__)
        taken.take(event, catalog, log.__getitem__)
        assert _replay_state(taken) == _replay_state(folded), event.seq
    assert taken.replace_generation == 1 and taken.length == len(log)


def test_take_refuses_what_fold_refuses_and_changes_nothing() -> None:
    session = four_messages()
    catalog = default_catalog()
    log = list(session.events)
    state = Replay()
    for event in log:
        state.take(event, catalog, log.__getitem__)
    before = _replay_state(state)
    bad = SessionEvent("step/start", len(log), 1, {"turn": 1, "step": 1}, "append")
    for fold in (state.fold, state.take):
        with pytest.raises(SurfaceError, match="not surface-eligible"):
            fold(bad, catalog, log.__getitem__)
        assert _replay_state(state) == before
