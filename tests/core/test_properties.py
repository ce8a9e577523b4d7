"""Property tests over random logs (SPEC §4–6, §1.4).

A random log mixes user/assistant/tool messages, turn/step boundaries, chunks, plugin events,
replaces, prunes and removals, valid and invalid (random endpoints, random provenance, missing or
misplaced surface ops, unknown types, values outside the JSON domain). For every log:

(a) the live session equals a replay of its log (``Session(seed=...)`` and ``fold_surface``)
    and an independent reference model of the surface and the projection;
(b) a refused append changes nothing;
(c) ``write_jsonl`` then ``read_jsonl`` is the identity.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from session_sql import (
    InvalidEventError,
    NotJSONError,
    Replace,
    Session,
    fold_surface,
    snapshot_json,
    thaw,
)
from session_sql.jsoncodec import dumps_compact
from session_sql.jsonl import read_jsonl, write_jsonl
from session_sql.jsonvalue import json_equal

from .builders import (
    Clock,
    assert_unchanged,
    assistant_message,
    capture,
    tool_result_data,
    user_message,
)

SAFE = 2**53 - 1

# -- strategies --------------------------------------------------------------------------------

# The UTF-8 codec leaves out lone surrogates; U+0000 is excluded by hand.
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)
floats = st.floats(allow_nan=False, allow_infinity=False).map(lambda f: 0.0 if f == 0 else f)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # Named, not a lambda: hypothesis inspects the extend function's source.
    return st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-SAFE, SAFE) | floats | texts,
    _containers,
    max_leaves=12,
)
not_json = st.sampled_from(
    [float("nan"), float("inf"), -0.0, 2**53, (1, 2), {1: "x"}, b"x", "a\x00", "\ud800", {2, 3}]
)


class Attempt(NamedTuple):
    """One append to try; ``valid`` marks attempts built to satisfy every rule."""

    type: str
    data: Any
    surface_op: Any = None
    sources: Any = None
    ignorable: bool = False
    valid: bool = False


Draw = st.DataObject


def _maybe_op(draw: Draw, session: Session) -> Any:
    """Mostly "append"; sometimes none, a random replace, or a malformed op."""
    return draw.draw(
        st.one_of(
            st.just("append"),
            st.just("append"),
            st.just("append"),
            st.none(),
            st.builds(Replace, st.integers(0, session.seq + 1), st.integers(0, session.seq + 1)),
            st.sampled_from(["prepend", {"op": "replace", "start": 0}]),
        )
    )


def _maybe_sources(draw: Draw, session: Session) -> Any:
    """Mostly none; sometimes earlier seqs, sometimes random (possibly invalid) ints."""
    seq = session.seq
    earlier = st.lists(st.integers(0, max(seq - 1, 0)), min_size=1, max_size=3, unique=True)
    anything = st.lists(st.integers(-1, seq + 1), max_size=3)
    choices = [st.none(), st.none(), anything]
    if seq:
        choices.append(earlier)
    return draw.draw(st.one_of(*choices))


turn_numbers = st.integers(0, 3) | st.integers(0, 3) | st.just(-1)  # -1 breaks a data rule


def _turn_step(draw: Draw) -> tuple[int, int]:
    return draw.draw(turn_numbers), draw.draw(turn_numbers)


def user_op(draw: Draw, session: Session) -> Attempt:
    message = user_message(draw.draw(texts), id=f"u{session.seq}")
    return Attempt("user/message", message, _maybe_op(draw, session), _maybe_sources(draw, session))


def assistant_op(draw: Draw, session: Session) -> Attempt:
    text = draw.draw(st.none() | texts)
    calls = draw.draw(st.lists(st.sampled_from(["c1", "c2", "c3"]), max_size=2, unique=True))
    message = assistant_message(text, id=f"a{session.seq}", tool_calls=[(c, "t") for c in calls])
    turn, step = _turn_step(draw)
    data = {"turn": turn, "step": step, "message": message}
    return Attempt(
        "assistant/message", data, _maybe_op(draw, session), _maybe_sources(draw, session)
    )


def tool_result_op(draw: Draw, session: Session) -> Attempt:
    turn, step = _turn_step(draw)
    data = tool_result_data(
        draw.draw(st.sampled_from(["c1", "c2", "c3"])),
        draw.draw(texts),
        turn=turn,
        step=step,
        id=f"r{session.seq}",
    )
    return Attempt("tool/result", data, _maybe_op(draw, session), _maybe_sources(draw, session))


def boundary_op(draw: Draw, session: Session) -> Attempt:
    kind = draw.draw(st.sampled_from(["turn/start", "turn/end", "step/start", "step/end"]))
    turn, step = _turn_step(draw)
    data: dict[str, Any] = {"turn": turn}
    if kind.startswith("step"):
        data["step"] = step
    if kind == "turn/end":
        data["reason"] = {"kind": "completed"}
    return Attempt(kind, data)


def chunk_op(draw: Draw, session: Session) -> Attempt:
    turn, step = _turn_step(draw)
    chunk = {"type": "text-delta", "index": 0, "text": draw.draw(texts)}
    return Attempt("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk})


def plugin_op(draw: Draw, session: Session) -> Attempt:
    return Attempt(
        draw.draw(st.sampled_from(["todo/write", "session/title"])), draw.draw(json_values)
    )


def replace_op(draw: Draw, session: Session) -> Attempt:
    """A summary replacing a range: from the surface (valid) or from random seqs."""
    nodes = session.surface.nodes
    message = user_message("summary", id=f"s{session.seq}")
    from_surface = draw.draw(st.integers(0, 3)) > 0  # three times out of four
    if nodes and from_surface:
        i = draw.draw(st.integers(0, len(nodes) - 1))
        j = draw.draw(st.integers(i, len(nodes) - 1))
        extra = draw.draw(st.lists(st.integers(0, session.seq - 1), max_size=2))
        sources = sorted({*nodes[i : j + 1], *extra})  # may cite more than it shadows
        return Attempt("user/message", message, Replace(nodes[i], nodes[j]), sources, valid=True)
    start = draw.draw(st.integers(0, session.seq + 1))
    end = draw.draw(st.integers(0, session.seq + 1))
    sources = draw.draw(
        st.one_of(st.lists(st.integers(-1, session.seq + 1), max_size=4), st.none())
    )
    return Attempt("user/message", message, Replace(start, end), sources)


def remove_op(draw: Draw, session: Session) -> Attempt:
    """A ``surface/removed`` of a surface range (valid), or appending / with bad coverage."""
    nodes = session.surface.nodes
    data = {"reason": draw.draw(st.sampled_from(["pop", "clear", "forget this"]))}
    if not nodes:
        return Attempt("surface/removed", data, "append", None)
    i = draw.draw(st.integers(0, len(nodes) - 1))
    j = draw.draw(st.integers(i, len(nodes) - 1))
    kind = draw.draw(st.sampled_from(["valid", "valid", "valid", "append", "uncovered"]))
    if kind == "append":
        return Attempt("surface/removed", data, "append", list(nodes[i : j + 1]))
    sources = list(nodes[i : j + 1]) if kind == "valid" else list(nodes[i:j]) or None
    op = Replace(nodes[i], nodes[j])
    return Attempt("surface/removed", data, op, sources, valid=kind == "valid")


def prune_op(draw: Draw, session: Session) -> Attempt:
    """A tool/result replacing a tool/result node: only the content changed (valid) or more."""
    results = [n for n in session.surface.nodes if session.events[n].type == "tool/result"]
    if not results:
        return tool_result_op(draw, session)
    target = original = draw.draw(st.sampled_from(results))
    data = thaw(session.events[target].data)
    data["message"]["content"][0]["content"] = [{"type": "text", "text": "[pruned]"}]
    change = draw.draw(st.sampled_from(["none", "turn", "id", "meta", "other-target"]))
    if change == "turn":
        data["turn"] += 1
    elif change == "id":
        data["message"]["id"] += "x"
    elif change == "meta":
        data["meta"] = {"added": True}
    elif change == "other-target":
        target = draw.draw(st.sampled_from(session.surface.nodes))
    valid = change == "none" or (change == "other-target" and target == original)
    return Attempt("tool/result", data, Replace(target, target), [target], valid=valid)


def bad_op(draw: Draw, session: Session) -> Attempt:
    """Inputs every rule set must refuse (or, for unknown ignorable ones, keep inertly)."""
    kind = draw.draw(
        st.sampled_from(
            ["not-json", "unknown", "ignorable", "op-on-plugin", "sources-on-boundary", "no-op"]
        )
    )
    if kind == "not-json":
        return Attempt("todo/write", {"value": draw.draw(not_json)})
    if kind == "unknown":
        return Attempt("vendor/new", {"x": 1})
    if kind == "ignorable":
        return Attempt(
            "vendor/new",
            draw.draw(json_values),
            _maybe_op(draw, session),
            _maybe_sources(draw, session),
            ignorable=True,
        )
    if kind == "op-on-plugin":
        return Attempt("todo/write", {}, "append")
    if kind == "sources-on-boundary":
        return Attempt("turn/start", {"turn": 1}, None, [0])
    return Attempt("user/message", user_message(id=f"n{session.seq}"))


# Message-producing ops and replaces come twice, to grow surfaces worth replacing.
OPS: list[Callable[[Draw, Session], Attempt]] = [
    *[user_op, assistant_op, tool_result_op, replace_op, prune_op] * 2,
    remove_op,
    boundary_op,
    chunk_op,
    plugin_op,
    bad_op,
]


# -- a reference model of §4 and §6 ------------------------------------------------------------


class Model:
    """The surface and messages of committed events, computed the simplest possible way."""

    def __init__(self) -> None:
        self.nodes: list[int] = []
        self.replaces = 0

    def commit(self, session: Session, seq: int) -> None:
        event = session.events[seq]
        if event.type not in session.catalog or event.surface_op is None:
            return
        if event.surface_op == "append":
            self.nodes.append(seq)
            return
        start, end = (
            self.nodes.index(event.surface_op.start),
            self.nodes.index(event.surface_op.end),
        )
        self.nodes[start : end + 1] = [] if event.type == "surface/removed" else [seq]
        self.replaces += 1

    def messages(self, session: Session) -> list[Any]:
        out = []
        for seq in self.nodes:
            event = session.events[seq]
            if event.type == "user/message":
                out.append(event.data)
            elif event.type == "tool/result" or event.data["message"]["content"]:
                out.append(event.data["message"])
        return out


def run(draw: Draw, session: Session, *, check_refusals: bool) -> Model:
    """Apply a random sequence of attempts to ``session``; return the reference model."""
    model = Model()
    for _ in range(draw.draw(st.integers(0, 30), label="ops")):
        attempt = draw.draw(st.sampled_from(OPS))(draw, session)
        before = capture(session) if check_refusals else None
        try:
            committed = session.append(
                attempt.type,
                attempt.data,
                surface_op=attempt.surface_op,
                source_event_seqs=attempt.sources,
                ignorable=attempt.ignorable,
            )
        except (InvalidEventError, NotJSONError) as exc:
            event(f"refused: {type(exc).__name__}")
            assert not attempt.valid, f"a valid {attempt} was refused"
            if before is not None:
                assert_unchanged(session, before)  # (b)
            continue
        model.commit(session, committed.seq)
        if isinstance(committed.surface_op, Replace) and committed.type in session.catalog:
            event(f"committed: {committed.type} replace")
        if draw.draw(st.booleans(), label="read messages now"):
            session.messages()  # exercise the incremental projection at random points
    event(f"committed replaces: {min(model.replaces, 3)}{'+' if model.replaces > 3 else ''}")
    return model


def assert_equals_replay(session: Session, model: Model) -> None:
    """(a): live == replay == fold == reference model."""
    wire_log = [e.to_json() for e in session.events]
    replay = Session(seed=wire_log)
    fold = fold_surface(session.events)
    live_messages = session.messages()
    assert session.surface.nodes == replay.surface.nodes == fold.nodes == tuple(model.nodes)
    assert (
        session.surface.replace_generation
        == replay.surface.replace_generation
        == len(fold.replacements)
        == model.replaces
    )
    assert json_equal(live_messages, replay.messages())
    assert json_equal(live_messages, model.messages(session))
    assert all(a is b for a, b in zip(live_messages, model.messages(session), strict=True))
    assert_tail_reads_are_slices(session)
    assert_tail_reads_are_slices(replay)


def assert_tail_reads_are_slices(session: Session) -> None:
    """SPEC §11.1: ``last=N`` is the final N entries of the full read (none for N = 0)."""
    full, nodes = session.messages(), session.surface_messages()
    assert [n.seq for n in nodes] == list(session.surface.nodes)
    assert [n.message for n in nodes if n.message is not None] == full
    for n in sorted({0, 1, 2, 3, len(full), len(nodes), len(nodes) + 2}):
        assert session.messages(last=n) == (full[-n:] if n else [])
        assert session.surface_messages(last=n) == (nodes[-n:] if n else [])


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.data())
def test_a_live_session_equals_its_replay(draw: Draw) -> None:
    session = Session("live", clock=Clock())
    model = run(draw, session, check_refusals=False)
    assert_equals_replay(session, model)


@settings(PROPERTY, max_examples=100)
@given(st.data())
def test_a_refused_append_changes_nothing(draw: Draw) -> None:
    session = Session("refusals", clock=Clock())
    model = run(draw, session, check_refusals=True)
    assert_equals_replay(session, model)


@settings(PROPERTY, max_examples=60)
@given(st.data())
def test_jsonl_export_then_import_is_the_identity(draw: Draw) -> None:
    session = Session("jsonl", clock=Clock())
    run(draw, session, check_refusals=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "session.jsonl"
        write_jsonl(path, session.header, session.events)
        header, events = read_jsonl(path)
    assert header == session.header
    assert len(events) == session.seq
    for read, original in zip(events, session.events, strict=True):
        assert json_equal(read.to_json(), original.to_json())
    assert json_equal(Session(seed=events).messages(), session.messages())


@settings(PROPERTY, max_examples=200)
@given(json_values)
def test_snapshot_and_thaw_round_trip_any_json_value(value: Any) -> None:
    frozen = snapshot_json(value)
    assert json_equal(frozen, value)
    assert snapshot_json(frozen) is frozen
    assert json_equal(thaw(frozen), value)


@settings(PROPERTY, max_examples=100)
@given(json_values)
def test_the_deep_serialiser_agrees_with_the_stdlib(value: Any) -> None:
    # 1,500 levels of nesting push json.dumps past the recursion limit onto the stack path.
    depth = 1500
    wrapped: Any = value
    for _ in range(depth):
        wrapped = [wrapped]
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    got = dumps_compact(wrapped)
    if "e+" in expected:  # big floats are written as <int>.0 so JSONB keeps them floats
        assert json_equal(json.loads(got[depth:-depth]), json.loads(expected))
        assert got[:depth] == "[" * depth
    else:
        assert got == "[" * depth + expected + "]" * depth
