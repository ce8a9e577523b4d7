"""SPEC §11.2: ``surface/removed`` takes a range off the surface without taking its place."""

from __future__ import annotations

from pathlib import Path

import pytest

from session_sql import (
    InvalidEventError,
    InvalidSeedError,
    Replace,
    Session,
    SurfaceError,
    check_invariants,
    fold_surface,
    interrupted_turn_closers,
)
from session_sql.jsonl import read_jsonl, write_jsonl
from session_sql.surface import Replacement, ReplaceNodes, Replay, plan

from .builders import (
    WireLog,
    begin_step,
    begin_turn,
    new_session,
    refused,
    remove,
    reply,
    say,
    summarize,
    tool_turn,
)


def texts(session: Session) -> list[str]:
    return [m["content"][0]["text"] for m in session.messages()]


def four_messages() -> Session:
    session = new_session()
    for text in ("a", "b", "c", "d"):
        say(session, text)
    return session


def assert_replays_alike(session: Session) -> None:
    """Fold, a fresh seed and the live session agree (SPEC §4's fold rule)."""
    fold = fold_surface(session.events)
    assert fold.nodes == session.surface.nodes
    assert len(fold.replacements) == session.surface.replace_generation
    fresh = Session(seed=[e.to_json() for e in session.events])
    assert fresh.surface.nodes == session.surface.nodes
    assert fresh.messages() == session.messages()


def test_a_removal_takes_the_range_off_and_never_appears_itself() -> None:
    session = four_messages()
    seq = remove(session, 1, 2, [1, 2])
    assert session.surface.nodes == (0, 3)
    assert seq not in session.surface.nodes
    assert texts(session) == ["a", "d"]
    assert session.surface.replace_generation == 1
    assert session.message_for(session.events[seq]) is None
    assert_replays_alike(session)


def test_a_removal_of_the_last_nodes_is_a_pop_and_of_all_a_clear() -> None:
    session = four_messages()
    remove(session, 3, 3, [3], reason="pop")
    assert texts(session) == ["a", "b", "c"]
    remove(session, 0, 2, [0, 1, 2], reason="clear")
    assert session.surface.nodes == ()
    assert session.messages() == []
    say(session, "again")
    assert texts(session) == ["again"]
    assert session.surface.replace_generation == 2
    assert_replays_alike(session)


def test_the_fold_records_removals_among_replacements() -> None:
    session = four_messages()
    summary = summarize(session, 0, 1, [0, 1])
    removal = remove(session, summary, 2, [summary, 2])
    fold = fold_surface(session.events)
    assert fold.nodes == (3,)
    assert fold.replacements == (
        Replacement(summary, 0, 1, (0, 1)),
        Replacement(removal, summary, 2, (summary, 2)),
    )


def test_the_planner_gives_a_replace_with_no_seq() -> None:
    session = four_messages()
    remove(session, 1, 2, [1, 2])
    event = session.events[-1]
    transition = plan((0, 1, 2, 3), event, session.events.__getitem__)
    assert transition == ReplaceNodes(1, 2, None, (1, 2))


def test_a_replay_drops_the_stored_positions_and_keeps_next_pos() -> None:
    session = four_messages()
    remove(session, 0, 1, [0, 1])
    state = Replay(keep_surface_events=True)
    for event in session.events:
        state.fold(event, session.catalog)
    assert state.rows() == [(2, 2), (3, 3)]
    assert (state.next_pos, state.replace_generation, state.length) == (4, 1, 5)


def test_a_removal_may_never_append() -> None:
    session = four_messages()
    with refused(session, SurfaceError, "never 'append'"):
        session.append("surface/removed", {"reason": "x"}, surface_op="append")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"surface_op": None, "source_event_seqs": [1]}, SurfaceError, "must carry a surfaceOp"),
        ({"surface_op": Replace(1, 2), "source_event_seqs": [1]}, SurfaceError, "cover"),
        ({"surface_op": Replace(1, 2), "source_event_seqs": None}, SurfaceError, "cover"),
        ({"surface_op": Replace(2, 1), "source_event_seqs": [1, 2]}, SurfaceError, "reversed"),
        ({"surface_op": Replace(1, 9), "source_event_seqs": [1]}, SurfaceError, "precede"),
    ],
)
def test_a_removal_follows_the_replace_rules(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    session = four_messages()
    with refused(session, error, match):
        session.append("surface/removed", {"reason": "x"}, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("data", [{}, {"reason": 1}, [], "pop", None])
def test_a_removal_needs_a_str_reason(data: object) -> None:
    session = four_messages()
    with refused(session, InvalidEventError, "surface/removed data"):
        session.append("surface/removed", data, surface_op=Replace(1, 1), source_event_seqs=[1])


def test_a_seed_with_a_bad_removal_is_refused_with_its_index() -> None:
    log = WireLog()
    say(log, "a")
    log.append("surface/removed", {"reason": "x"}, surface_op="append")
    with pytest.raises(InvalidSeedError) as info:
        Session(seed=log.events)
    assert info.value.index == 1


def test_invariants_and_repair_accept_a_removal_inside_an_open_turn() -> None:
    log = WireLog()
    seqs = tool_turn(log, 1)
    begin_turn(log, 2)
    question = say(log, "question 2")
    begin_step(log, 2, 1)
    answer = reply(log, "thinking", turn=2, step=1)
    remove(log, question, answer, [question, answer], reason="forget this")
    assert check_invariants(log.events) == []
    closers = interrupted_turn_closers(log.events)
    assert [e.type for e in closers] == ["step/end", "turn/end"]
    repaired = Session(seed=log.events + [e.to_json() for e in closers])
    assert repaired.surface.nodes == (
        seqs["user"],
        seqs["reply"],
        seqs["tool/result"],
        seqs["final"],
    )
    assert check_invariants(repaired.events) == []


def test_jsonl_round_trips_a_removal(tmp_path: Path) -> None:
    session = four_messages()
    remove(session, 1, 2, [1, 2], reason="forget this")
    write_jsonl(tmp_path / "s.jsonl", session.header, session.events)
    header, events = read_jsonl(tmp_path / "s.jsonl")
    assert events == list(session.events)
    again = Session(session.id, seed=[e.to_json() for e in events], header=header)
    assert again.surface.nodes == session.surface.nodes == (0, 3)
    assert again.messages() == session.messages()
