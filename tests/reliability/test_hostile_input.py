"""Hostile input: every input is accepted and consistent, or refused cleanly and changes nothing.

Hypothesis generates appends and ``append_many`` batches (type names, data, surface ops,
provenance, ``ignorable``), seeds of wire envelopes with headers, JSONL files and session ids,
valid and invalid (see ``reliability_strategies``). For each input on each backend:

* accepted: the handle (live), a replay of the stored log (``load_session``) and the side table
  (``surface``, ``messages``, ``verify``) agree, type for type;
* refused: the error is a ``SessionSQLError`` subclass — never a raw ``TypeError``,
  ``RecursionError``, ``UnicodeEncodeError`` or driver exception — and neither the handle nor a
  single row of the database changed.

The figures (inputs tried, accepted, refused by error class) are printed and recorded.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from session_sql import (
    Session,
    SessionEvent,
    SessionNotFoundError,
    SessionSQLError,
    SessionStore,
    open_store,
)
from session_sql._store.schema import tables_for
from session_sql.errors import TornTailWarning
from session_sql.events import check_session_id
from session_sql.jsonvalue import json_equal, thaw

from .reliability_builders import (
    assert_store_consistent,
    assistant_data,
    tool_result_data,
    user_message,
    wires,
)
from .reliability_strategies import (
    hostile_values,
    json_values,
    odd_text,
    provenance,
    session_ids,
    surface_ops,
    type_names,
)

LIMIT = 64 * 1024  # a small max_event_bytes, so that "huge" inputs are cheap to generate
HYPOTHESIS = settings(
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # one store per test on purpose, shared by examples
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

BASE_SEED = [
    {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
    {
        "type": "user/message",
        "seq": 1,
        "time": 1,
        "data": user_message("hi"),
        "surfaceOp": "append",
    },
    {"type": "step/start", "seq": 2, "time": 1, "data": {"turn": 1, "step": 1}},
    {
        "type": "assistant/message",
        "seq": 3,
        "time": 1,
        "data": assistant_data(1, 1, "calling", ["c1"]),
        "surfaceOp": "append",
    },
    {
        "type": "tool/call",
        "seq": 4,
        "time": 1,
        "data": {"turn": 1, "step": 1, "callId": "c1", "name": "shell", "arguments": "{}"},
    },
    {
        "type": "tool/result",
        "seq": 5,
        "time": 1,
        "data": tool_result_data(1, 1, "c1", "output"),
        "surfaceOp": "append",
        "sourceEventSeqs": [4],
    },
]


def clock() -> int:
    """A fixed clock, so that a live session and a stored one can be compared field by field."""
    return 1_000


class Tally:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def accepted(self) -> None:
        self.counts["inputs"] += 1
        self.counts["accepted"] += 1

    def refused(self, exc: BaseException) -> None:
        self.counts["inputs"] += 1
        public = next(c for c in type(exc).__mro__ if not c.__name__.startswith("_"))
        self.counts[f"refused {public.__name__}"] += 1

    def report(self, what: str, backend: Any, record_property: Any) -> None:
        figures = dict(sorted(self.counts.items()))
        print(f"\nhostile {what} [{backend.name}]: {figures}")
        for name, value in figures.items():
            record_property(name, value)
        assert self.counts["accepted"] > 0, "nothing was accepted: the strategies are too hostile"
        assert self.counts["inputs"] > self.counts["accepted"], "nothing was refused"


@pytest.fixture
def store(backend) -> Iterator[SessionStore]:
    opened = open_store(backend.url, schema=backend.schema, max_event_bytes=LIMIT, clock=clock)
    yield opened
    opened.close()


def database_rows(store: SessionStore) -> tuple[Any, ...]:
    """A fingerprint of every row: a refusal must leave it unchanged."""
    t = tables_for(store.schema)
    with store.engine.connect() as conn:
        sessions = conn.execute(
            select(t.sessions.c.id, t.sessions.c.head_seq, t.sessions.c.surface_next_pos)
            .add_columns(t.sessions.c.replace_generation, t.sessions.c.updated_at)
            .order_by(t.sessions.c.id)
        ).all()
        events = conn.execute(select(func.count()).select_from(t.events)).scalar_one()
        s, sf = t.sessions, t.surface
        surface = conn.execute(
            select(s.c.id, sf.c.pos, sf.c.event_seq)
            .join_from(sf, s, sf.c.session_key == s.c.session_key)
            .order_by(s.c.id, sf.c.pos)
        ).all()
    return tuple(sessions), events, tuple(surface)


def handle_state(handle: Any) -> tuple[Any, ...]:
    return (
        handle.seq,
        handle.surface.nodes,
        handle.surface.replace_generation,
        wires(handle.events),
        thaw(handle.messages()),
    )


def refused_cleanly(exc: BaseException) -> None:
    if not isinstance(exc, SessionSQLError):
        raise AssertionError(f"raw {type(exc).__name__} escaped: {exc!r}"[:2000]) from exc


# --------------------------------------------------------------------------------------------
# Appends


def _data_for(type_: Any, handle: Any) -> st.SearchStrategy[Any]:
    """Plausible data for ``type_`` (so that some appends commit), or anything at all."""
    turn_step = st.fixed_dictionaries({"turn": st.just(1), "step": st.just(1)})
    plausible: dict[str, st.SearchStrategy[Any]] = {
        "user/message": st.builds(user_message, odd_text(valid=False)),
        "assistant/message": st.builds(
            assistant_data, st.just(1), st.just(1), odd_text(valid=False)
        ),
        "tool/result": st.builds(
            tool_result_data, st.just(1), st.just(1), st.just("c1"), odd_text()
        ),
        "assistant/chunk": turn_step,
        "todo/write": json_values(),
    }
    if type_ == "tool/result":  # a pruning of the stored result: only its content differs
        original = thaw(handle.events[5].data)
        original["message"]["content"][0]["content"] = [{"type": "text", "text": "[pruned]"}]
        plausible["tool/result"] = st.one_of(plausible["tool/result"], st.just(original))
    fitting = plausible.get(type_, json_values()) if isinstance(type_, str) else json_values()
    return st.one_of(fitting, hostile_values(huge=LIMIT))


@st.composite
def append_calls(draw: Any, handle: Any) -> dict[str, Any]:
    nodes, seq = handle.surface.nodes, handle.seq
    type_ = draw(type_names())
    call: dict[str, Any] = {"type": type_, "data": draw(_data_for(type_, handle))}
    op = draw(surface_ops(nodes, seq))
    if op is not None or draw(st.booleans()):
        call["surface_op"] = op
    sources = draw(provenance(nodes, seq))
    if sources is not None or draw(st.booleans()):
        call["source_event_seqs"] = sources
    if draw(st.integers(0, 5)) == 0:
        call["ignorable"] = draw(st.sampled_from([True, False, 1, None, "true"]))
    return call


def _apply(handle: Any, calls: list[dict[str, Any]], many: bool) -> list[Any]:
    if many:
        return handle.append_many(calls)
    (call,) = calls
    return [handle.append(**call)]


@pytest.mark.slow
def test_hostile_appends_are_accepted_consistently_or_refused_cleanly(
    backend, store, record_property
):
    tally = Tally()

    @settings(HYPOTHESIS, max_examples=150)
    @given(data=st.data())
    def run(data: Any) -> None:
        handle = store.create_session(seed=BASE_SEED)
        for _ in range(data.draw(st.integers(1, 4), label="calls")):
            many = data.draw(st.booleans(), label="many")
            size = data.draw(st.integers(0, 3), label="size") if many else 1
            calls = [data.draw(append_calls(handle)) for _ in range(size)]
            if many and calls and data.draw(st.integers(0, 10)) == 0:  # not append's names
                calls[0][data.draw(st.sampled_from(["surfaceOp", "extra", "seq"]))] = 1
            if many and data.draw(st.integers(0, 10)) == 0:
                calls.append(data.draw(st.sampled_from([None, 5, "x", {"data": {}}, []])))
            before, rows = handle_state(handle), database_rows(store)
            try:
                committed = _apply(handle, calls, many)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                refused_cleanly(exc)
                tally.refused(exc)
                assert handle_state(handle) == before, "a refusal changed the handle"
                assert database_rows(store) == rows, "a refusal changed the database"
                continue
            tally.accepted()
            assert list(handle.events[len(handle.events) - len(committed) :]) == committed
            for call, event in zip(calls, committed, strict=True):
                assert json_equal(thaw(event.data), call["data"])
        stored = assert_store_consistent(store, handle.id)
        assert wires(stored) == wires(handle.events)
        assert store.surface(handle.id) == handle.surface.nodes
        assert json_equal(thaw(store.messages(handle.id)), thaw(handle.messages()))

    run()
    tally.report("appends", backend, record_property)


# --------------------------------------------------------------------------------------------
# Seeds of wire envelopes, and headers


@st.composite
def envelopes(draw: Any) -> list[Any]:
    """A seed: BASE_SEED's envelopes, some of them mutated into something hostile."""
    seed: list[Any] = json.loads(json.dumps(BASE_SEED[: draw(st.integers(0, len(BASE_SEED)))]))
    for _ in range(draw(st.integers(0, 3))):
        if not seed:
            break
        i = draw(st.integers(0, len(seed) - 1))
        wire = seed[i]
        if not isinstance(wire, dict):
            continue
        how = draw(
            st.sampled_from(
                [
                    "drop",
                    "extra",
                    "seq",
                    "time",
                    "type",
                    "data",
                    "op",
                    "sources",
                    "ignorable",
                    "not-a-dict",
                    "null-op",
                ]
            )
        )
        if how == "drop" and wire:  # an earlier mutation may have emptied it
            wire.pop(draw(st.sampled_from(sorted(wire))), None)
        elif how == "extra":
            wire[draw(st.sampled_from(["extra", "Seq", "surface_op", ""]))] = draw(json_values())
        elif how == "seq":
            wire["seq"] = draw(
                st.one_of(st.integers(-1, 8), st.sampled_from([1.0, "0", None, 2**60]))
            )
        elif how == "time":
            wire["time"] = draw(
                st.one_of(st.integers(), st.sampled_from([1.5, "1", None, math.nan]))
            )
        elif how == "type":
            wire["type"] = draw(type_names())
        elif how == "data":
            wire["data"] = draw(hostile_values(huge=LIMIT))
        elif how == "op":
            wire["surfaceOp"] = draw(surface_ops((1, 3, 5), i))
        elif how == "sources":
            wire["sourceEventSeqs"] = draw(provenance((1, 3, 5), i))
        elif how == "ignorable":
            wire["ignorable"] = draw(st.sampled_from([True, False, 1, None, "true"]))
        elif how == "null-op":
            wire["surfaceOp"] = None
        else:
            seed[i] = draw(st.one_of(json_values(), st.just(None)))
    if draw(st.booleans()):  # the same envelopes as hand-built SessionEvent objects
        seed = [_as_session_event(w) if isinstance(w, dict) else w for w in seed]
    return seed


def _as_session_event(wire: dict[str, Any]) -> SessionEvent:
    """A SessionEvent holding the wire's fields as they are (a NamedTuple checks nothing)."""
    return SessionEvent(
        wire.get("type"),
        wire.get("seq"),
        wire.get("time"),
        wire.get("data"),
        wire.get("surfaceOp"),
        wire.get("sourceEventSeqs"),
        wire.get("ignorable", False),
    )


@st.composite
def headers(draw: Any) -> Any:
    """None (a generated header), or a valid header with up to two hostile mutations."""
    if draw(st.integers(0, 3)) == 0:
        return None
    header: dict[Any, Any] = {
        "version": 0,
        "id": draw(st.text(st.characters(exclude_categories=("C", "Z")), min_size=1)),
        "createdAt": draw(st.integers(0, 2**53 - 1)),
        "isSeeded": False,
    }
    for _ in range(draw(st.integers(0, 2))):
        how = draw(st.sampled_from(["id", "createdAt", "isSeeded", "version", "cwd", "extra"]))
        if how == "id":
            header["id"] = draw(session_ids())
        elif how == "createdAt":
            header["createdAt"] = draw(st.sampled_from([-1, 1.0, None, 2**53, "1"]))
        elif how == "isSeeded":
            header["isSeeded"] = draw(st.sampled_from([True, 0, None, "false"]))
        elif how == "version":
            header["version"] = draw(st.sampled_from([1, -1, "0", None, 0.0]))
        elif how == "cwd":
            header["cwd"] = draw(st.sampled_from(["/tmp", "relative", 5, "/\x00"]))
        else:
            header[draw(odd_text(valid=False))] = draw(hostile_values(huge=LIMIT))
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([[], "header", 5]))
    return header


@pytest.mark.slow
def test_hostile_seeds_and_headers_create_whole_sessions_or_nothing(
    backend, store, record_property
):
    tally = Tally()

    @settings(HYPOTHESIS, max_examples=150)
    @given(seed=st.one_of(envelopes(), st.sampled_from([5, "x", None, [None]])), header=headers())
    def run(seed: Any, header: Any) -> None:
        rows = database_rows(store)
        try:
            handle = store.create_session(header=header, seed=seed)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            refused_cleanly(exc)
            tally.refused(exc)
            assert database_rows(store) == rows, "a refused create changed the database"
            return
        tally.accepted()
        # What the same input gives in memory (a generated id is the only thing to carry over).
        live = Session(
            None if header is not None else handle.id, seed=seed, header=header, clock=clock
        )
        stored = assert_store_consistent(store, handle.id)
        assert wires(stored) == wires(live.events) == wires(handle.events)
        assert json_equal(thaw(store.load_session(handle.id).header), thaw(live.header))
        assert json_equal(thaw(store.messages(handle.id)), thaw(live.messages()))

    run()
    tally.report("seeds and headers", backend, record_property)


# --------------------------------------------------------------------------------------------
# JSONL files


def _line(value: Any) -> str:
    """A JSONL line for ``value``: NaN and friends as Python writes them, else its repr."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=True)
    except RecursionError:
        return "[" * 3000 + "]" * 3000  # too deep to print: a line just as deep
    except (TypeError, ValueError):
        try:
            return repr(value)
        except RecursionError:
            return "[" * 3000 + "]" * 3000


@st.composite
def jsonl_files(draw: Any) -> str:
    header = {"version": 0, "id": draw(session_ids()), "createdAt": 1, "isSeeded": False}
    lines = [_line(header)] + [_line(w) for w in draw(envelopes())]
    for _ in range(draw(st.integers(0, 2))):
        raw = draw(
            st.sampled_from(
                [
                    "",
                    "{",
                    "NaN",
                    '{"type": "todo/write", "seq": 0, "time": 1, "data": 1e400}',
                    '{"type": "todo/write", "seq": 0, "time": 1, "data": "\\u0000"}',
                    '{"type": "todo/write", "seq": 0, "time": 1, "data": "\\ud800"}',
                    '{"type": "todo/write", "seq": 0, "time": 1, "data": 9007199254740993}',
                    '{"type": "todo/write", "seq": 0, "time": 1, "data": {"a": 1, "a": 2}}',
                    '{"type": "todo/write", "seq": 0, "time": 1, "data": -0.0}',
                    "[" * 5000 + "]" * 5000,
                    "\ufeff{}",
                    "\x00",
                ]
            )
        )
        lines.insert(draw(st.integers(0, len(lines))), raw)
    text = "\n".join(lines)
    return text + ("\n" if draw(st.booleans()) else "")


@pytest.mark.slow
def test_hostile_jsonl_imports_whole_sessions_or_nothing(backend, store, tmp_path, record_property):
    tally = Tally()
    path = tmp_path / "hostile.jsonl"
    out = tmp_path / "exported.jsonl"

    @settings(HYPOTHESIS, max_examples=100)
    @given(text=jsonl_files())
    def run(text: str) -> None:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        rows = database_rows(store)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TornTailWarning)  # a torn tail is dropped
                sid = store.import_jsonl(path)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            refused_cleanly(exc)
            tally.refused(exc)
            assert database_rows(store) == rows, "a refused import changed the database"
            return
        tally.accepted()
        stored = assert_store_consistent(store, sid)
        store.export_jsonl(sid, out)
        store.delete_session(sid)
        again = store.import_jsonl(out)  # export -> import is lossless
        assert wires(store.events(again)) == wires(stored)
        store.delete_session(again)

    run()
    tally.report("JSONL imports", backend, record_property)


# --------------------------------------------------------------------------------------------
# Session ids and lookups


def _valid_id(value: Any) -> bool:
    try:
        check_session_id(value)
    except SessionSQLError:
        return False
    return True


@pytest.mark.slow
def test_hostile_session_ids_are_stored_verbatim_or_refused(backend, store, record_property):
    tally = Tally()
    created: set[str] = set()

    @settings(HYPOTHESIS, max_examples=150)
    @given(session_id=session_ids())
    def run(session_id: Any) -> None:
        # Every lookup of any id is a clean refusal (or an answer), never a raw exception.
        for lookup in (
            lambda: store.open_session(session_id),
            lambda: store.load_session(session_id),
            lambda: store.messages(session_id),
            lambda: store.surface(session_id),
            lambda: list(store.events(session_id)),
            lambda: store.verify(session_id),
            lambda: store.fork_session(session_id, boundary=-1),  # found: ForkError
            lambda: store.list_sessions(parent=session_id),
            lambda: store.list_sessions(after=session_id),
        ):
            try:
                lookup()
            except SessionNotFoundError:
                assert session_id not in created
            except BaseException as exc:
                refused_cleanly(exc)
        rows = database_rows(store)
        try:
            handle = store.create_session(session_id)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            refused_cleanly(exc)
            tally.refused(exc)
            assert not _valid_id(session_id) or session_id in created
            assert database_rows(store) == rows
            return
        tally.accepted()
        if session_id is None:  # a generated id
            session_id = handle.id
        assert _valid_id(session_id)
        created.add(session_id)
        assert handle.id == session_id
        handle.append("user/message", user_message(session_id), surface_op="append")
        assert store.open_session(session_id).id == session_id
        assert [e.data["content"][0]["text"] for e in store.events(session_id)] == [session_id]
        assert session_id in {i.id for i in store.list_sessions(limit=10_000)}

    run()
    tally.report("session ids", backend, record_property)
