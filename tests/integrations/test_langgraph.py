"""SPEC §12.4: LangGraph's checkpointers on session_sql, end to end with a real ``StateGraph``.

On both backends, sync and async: a graph with a tool node and a human approval runs to its
``interrupt()``, is resumed with ``Command(resume=...)`` by a fresh saver (and by a fresh
process), travels back in time (``get_state_history``, ``update_state`` on an old checkpoint,
run the fork), and every state it shows equals ``InMemorySaver``'s on the same script. The
thread is one session whose surface is the conversation (``messages()``, ``stats``, the
``tool_calls`` view); checkpoints store only what changed; ``prune``, ``delete_for_runs`` and
``delete_thread`` remove rows, and a move interrupted by a crash is finished by the next reader.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from sqlalchemy import text

from session_sql import (
    InvalidArgumentError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStore,
    open_async_store,
    open_store,
    thaw,
)
from session_sql.integrations.langgraph import (
    CHECKPOINT_TYPE,
    MOVED_TYPE,
    AsyncSessionSQLSaver,
    SessionSQLSaver,
)

from ..conftest import Backend
from .framework_reads import cli, turns
from .lg_graph import apause, aresume, build_chat, pause, resume, run_async, run_sync

SPAWN = multiprocessing.get_context("spawn")


def _store(backend: Backend) -> SessionStore:
    return open_store(backend.url, schema=backend.schema)


def _cfg(thread: str, **more: Any) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": "", **more}}


# -- the graph, against InMemorySaver -------------------------------------------------------


def test_sync_script_matches_in_memory_saver(backend: Backend) -> None:
    memory = InMemorySaver()
    expected = run_sync(lambda: memory, "t1")
    with _store(backend) as store:
        got = run_sync(lambda: SessionSQLSaver(store), "t1")
        assert got == expected
        assert got["paused"]["interrupts"] == [{"question": "send the answer?"}]
        assert got["fork_done"]["messages"][-1] == ("ai", "It is sunny in Rome.", [])
        # The conversation now (the fork replaced the Paris answer) is the surface.
        said = [(m["role"], m["content"][0]) for m in store.messages("langgraph:t1")]
        assert said == [
            ("user", {"type": "text", "text": "What is the weather in Paris?"}),
            (
                "assistant",
                {
                    "type": "tool-call",
                    "id": "call_rome",
                    "name": "get_weather",
                    "arguments": {"city": "Rome"},
                },
            ),
            (
                "user",
                {
                    "type": "tool-result",
                    "toolCallId": "call_rome",
                    "content": [{"type": "text", "text": "sunny in Rome"}],
                },
            ),
            ("assistant", {"type": "text", "text": "It is sunny in Rome."}),
        ]


def test_async_script_matches_in_memory_saver(backend: Backend) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        memory = InMemorySaver()
        expected = await run_async(lambda: memory, "t1")
        async with open_async_store(backend.url, schema=backend.schema) as store:
            got = await run_async(lambda: AsyncSessionSQLSaver(store), "t1")
            assert len(await store.messages("langgraph:t1")) == 4
        return expected, got

    expected, got = asyncio.run(main())
    assert got == expected


def test_sync_and_async_savers_read_each_others_threads(backend: Backend) -> None:
    with _store(backend) as store:
        run_sync(lambda: SessionSQLSaver(store), "t1")
        sync_tuples = list(SessionSQLSaver(store).list(_cfg("t1")))

    async def main() -> list[Any]:
        async with AsyncSessionSQLSaver.from_url(backend.url, schema=backend.schema) as saver:
            return [t async for t in saver.alist(_cfg("t1"))]

    async_tuples = asyncio.run(main())
    assert [t.checkpoint for t in async_tuples] == [t.checkpoint for t in sync_tuples]
    assert [t.pending_writes for t in async_tuples] == [t.pending_writes for t in sync_tuples]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_resume_from_a_fresh_process(backend: Backend, api: str) -> None:
    memory = InMemorySaver()
    expected = run_sync(lambda: memory, "t1")
    first, second = (pause, resume) if api == "sync" else (apause, aresume)
    with ProcessPoolExecutor(1, mp_context=SPAWN) as pool:
        paused = pool.submit(first, backend.url, backend.schema, "t1").result(timeout=120)
    with ProcessPoolExecutor(1, mp_context=SPAWN) as pool:
        resumed = pool.submit(second, backend.url, backend.schema, "t1").result(timeout=120)
    assert paused == expected["paused"]
    assert resumed == expected["resumed"]


# -- the thread as a session ------------------------------------------------------------------


def test_stats_and_the_tool_calls_view_see_the_thread(backend: Backend) -> None:
    with _store(backend) as store:
        run_sync(lambda: SessionSQLSaver(store), "t1")
        stats = store.stats("langgraph:t1")
        assert [(t.tool, t.calls) for t in stats.tools] == [("get_weather", 2)]
        assert [(t.model, t.input_tokens, t.output_tokens) for t in stats.tokens] == [
            ("scripted-1", 50, 19)
        ]
        schema = backend.table_prefix
        with store.engine.connect() as conn:
            rows = conn.execute(
                text(
                    f"SELECT tool, arguments, result_seq IS NOT NULL FROM {schema}tool_calls "
                    "WHERE session_id = 'langgraph:t1' ORDER BY call_seq"
                )
            ).all()
            # The approval the human gave, as JSON SQL reads: the last root checkpoint's value.
            approved = conn.execute(
                text(
                    "SELECT e.data -> 'values' -> 'approved' ->> 'json' "
                    f"FROM {schema}events e JOIN {schema}sessions s "
                    "ON s.session_key = e.session_key "
                    "WHERE s.id = 'langgraph:t1' AND e.type = 'langgraph/checkpoint' "
                    "AND e.data -> 'values' -> 'approved' IS NOT NULL ORDER BY e.seq"
                )
            ).all()
        assert [tuple(r) for r in rows] == [
            ("get_weather", '{"city": "Paris"}', True),
            ("get_weather", '{"city": "Rome"}', True),
        ]
        assert [r[0] for r in approved] == ["yes", "no"]
        info = store.session_info("langgraph:t1")
        assert info.labels == {"langgraph_thread": "t1"}
        assert store.verify("langgraph:t1").ok


@pytest.mark.parametrize("api", ["sync", "async"])
def test_each_run_of_the_graph_is_a_turn(backend: Backend, api: str) -> None:
    questions = [HumanMessage(f"Weather {i}?", id=f"q{i}") for i in range(3)]
    cfg: Any = {"configurable": {"thread_id": "runs"}}
    if api == "sync":
        with _store(backend) as store:
            graph = build_chat(SessionSQLSaver(store))
            for question in questions:
                graph.invoke({"messages": [question]}, cfg)
    else:

        async def main() -> None:
            async with AsyncSessionSQLSaver.from_url(backend.url, schema=backend.schema) as saver:
                graph = build_chat(saver)
                for question in questions:
                    await graph.ainvoke({"messages": [question]}, cfg)

        asyncio.run(main())
    # One turn per run: its question, the call and its answer, the tool's result. LangGraph
    # tells a checkpointer nothing when a run finishes, so no turn has an end.
    assert turns(backend, "langgraph:runs") == [(n, None, 1, 2, 1, 1, False) for n in (1, 2, 3)]
    with _store(backend) as store:
        assert store.stats("langgraph:runs").events_by_type["turn/start"] == 3
        # every message the surface shows is numbered with the run that wrote it
        numbers = [
            (e.type, e.data["turn"], e.data["step"])
            for e in store.events("langgraph:runs")
            if e.type in ("assistant/message", "tool/call", "tool/result")
        ]
    assert numbers == [
        (kind, n, step)
        for n in (1, 2, 3)
        for kind, step in [
            ("assistant/message", 1),
            ("tool/call", 1),
            ("tool/result", 1),
            ("assistant/message", 2),
        ]
    ]
    printed = cli(backend, "stats", "langgraph:runs")
    assert any(line.split()[:2] == ["turn/start", "3"] for line in printed.splitlines())


def test_an_interrupt_ends_its_turn_and_a_resume_opens_one(backend: Backend) -> None:
    with _store(backend) as store:
        run_sync(lambda: SessionSQLSaver(store), "t1")
    # The question runs to the interrupt (turn 1); the resume is a run (2); the run from the
    # update_state fork goes to the interrupt again (3, with the tool call the fork made in
    # turn 2's range, where update_state wrote it); the last resume is a run (4).
    assert turns(backend, "langgraph:t1") == [
        (1, "interrupted", 1, 2, 1, 1, True),
        (2, None, 0, 1, 1, 0, False),
        (3, "interrupted", 0, 1, 0, 1, True),
        (4, None, 0, 0, 0, 0, False),
    ]


def _chat(saver: SessionSQLSaver, thread: str, turns: int) -> None:
    """A chat of ``turns`` exchanges through a one-node graph (a growing messages channel)."""
    from langgraph.graph import START, MessagesState, StateGraph

    def reply(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"answer {n} " + "x" * 200, id=f"a{n}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    app = graph.compile(checkpointer=saver)
    for i in range(turns):
        app.invoke(
            {"messages": [HumanMessage(f"question {i} " + "y" * 200, id=f"h{i}")]},
            {"configurable": {"thread_id": thread}},
        )


def test_a_checkpoint_costs_what_changed(backend: Backend) -> None:
    with _store(backend) as store:
        saver = SessionSQLSaver(store)
        _chat(saver, "chat", 60)
        stored = [
            e.data["values"]["messages"]
            for e in store.events("langgraph:chat")
            if e.type == CHECKPOINT_TYPE and "messages" in e.data["values"]
        ]
        ours = sum(len(json.dumps(thaw(blob))) for blob in stored)
        # What storing the whole list at every version would cost, in the same encoding.
        whole = 0
        for found in saver.list(_cfg("chat")):
            messages = found.checkpoint["channel_values"].get("messages", [])
            whole += len(base64.b64encode(saver.serde.dumps_typed(messages)[1]))
        assert ours < 0.15 * whole
        # A read decodes a whole value and at most log2(versions) + 1 parts.
        depths = []
        by_seq = {
            e.seq: e.data["values"]
            for e in store.events("langgraph:chat")
            if e.type == CHECKPOINT_TYPE
        }
        for values in by_seq.values():
            blob, depth = values.get("messages"), 0
            while blob is not None and "extends" in blob:
                blob, depth = by_seq[blob["extends"]]["messages"], depth + 1
            depths.append(depth)
        assert max(depths) <= math.log2(len(stored)) + 1
        last = saver.get_tuple(_cfg("chat"))
        assert last is not None
        assert len(last.checkpoint["channel_values"]["messages"]) == 120


def test_prune_keep_latest_removes_rows_and_keeps_the_conversation(backend: Backend) -> None:
    with _store(backend) as store:
        saver = SessionSQLSaver(store)
        _chat(saver, "chat", 10)
        before = saver.get_tuple(_cfg("chat"))
        events_before = store.head_seq("langgraph:chat") + 1
        saver.prune(["chat"])
        [info] = store.list_sessions(id_prefix="langgraph:chat")
        assert info.id == "langgraph:chat~1"
        # One checkpoint (with every value it needs), its writes, the conversation, the marker.
        kinds = [e.type for e in store.events(info.id)]
        assert kinds.count(CHECKPOINT_TYPE) == 1
        assert kinds.count("langgraph/writes") <= 2
        assert info.event_count == len(kinds) < events_before
        after = saver.get_tuple(_cfg("chat"))
        assert after is not None and before is not None
        assert after.checkpoint == before.checkpoint
        assert after.metadata == before.metadata
        assert len(list(saver.list(_cfg("chat")))) == 1
        assert len(store.messages(info.id)) == 20
        # The thread goes on in its new generation.
        _chat(saver, "chat", 1)
        assert len(list(saver.list(_cfg("chat")))) == 4  # the kept one, then 3 for the turn
        assert store.verify(info.id).ok


def test_delete_for_runs_and_delete_thread_remove_rows(backend: Backend) -> None:
    with _store(backend) as store:
        saver = SessionSQLSaver(store)
        config = saver.put(_cfg("t"), _checkpoint("1"), {"run_id": "r1"}, {})  # type: ignore[typeddict-unknown-key]
        saver.put_writes(config, [("ch", "w")], "task")
        saver.put({**config}, _checkpoint("2"), {"run_id": "r2"}, {})  # type: ignore[typeddict-unknown-key]
        saver.delete_for_runs(["r1"])
        assert [t.metadata.get("run_id") for t in saver.list(_cfg("t"))] == ["r2"]
        assert [s.id for s in store.list_sessions(id_prefix="langgraph:")] == ["langgraph:t~1"]
        saver.delete_thread("t")
        assert store.list_sessions(id_prefix="langgraph:") == []
        assert saver.get_tuple(_cfg("t")) is None


def test_a_move_cut_short_by_a_crash_is_finished_by_the_next_reader(backend: Backend) -> None:
    with _store(backend) as store:
        saver = SessionSQLSaver(store)
        _chat(saver, "chat", 3)
        latest = saver.get_tuple(_cfg("chat"))
        # A prune that sealed the thread and died before creating its successor.
        handle = store.open_session("langgraph:chat")
        handle.append(
            MOVED_TYPE,
            {"to": "langgraph:chat~1", "op": {"op": "keep_latest"}, "labels": {}},
            ignorable=True,
        )
        fresh = SessionSQLSaver(store)
        found = fresh.get_tuple(_cfg("chat"))
        assert found is not None and latest is not None
        assert found.checkpoint == latest.checkpoint
        assert [s.id for s in store.list_sessions(id_prefix="langgraph:")] == ["langgraph:chat~1"]
        with pytest.raises(SessionNotFoundError):
            store.head_seq("langgraph:chat")
        # The first saver's cached handle follows the move.
        assert saver.get_tuple(_cfg("chat")) == found


def test_copy_thread_is_a_fork(backend: Backend) -> None:
    with _store(backend) as store:
        saver = SessionSQLSaver(store)
        _chat(saver, "src", 2)
        saver.copy_thread("src", "dst")
        info = store.session_info("langgraph:dst")
        assert info.parent_session == "langgraph:src"
        assert info.labels == {"langgraph_thread": "dst"}
        src, dst = saver.get_tuple(_cfg("src")), saver.get_tuple(_cfg("dst"))
        assert src is not None and dst is not None
        assert dst.checkpoint == src.checkpoint
        assert dst.config["configurable"]["thread_id"] == "dst"
        assert store.messages("langgraph:dst") == store.messages("langgraph:src")
        with pytest.raises(SessionExistsError):
            saver.copy_thread("src", "dst")
        _chat(saver, "dst", 1)  # the fork goes its own way; the source is untouched
        assert len(list(saver.list(_cfg("src")))) == 6
        assert len(list(saver.list(_cfg("dst")))) == 9


def test_values_that_are_not_json_go_through_serde(backend: Backend) -> None:
    with _store(backend) as store:
        saver = SessionSQLSaver(store)
        values = {"set": {1, 2}, "bytes": b"\x00\xff", "nan": float("nan"), "nul": "a\x00b"}
        cp = _checkpoint("1", values)
        config = saver.put(_cfg("t"), cp, {}, {k: "1" for k in values})
        found = saver.get_tuple(config)
        assert found is not None
        got = found.checkpoint["channel_values"]
        assert got["set"] == {1, 2} and got["bytes"] == b"\x00\xff" and got["nul"] == "a\x00b"
        assert got["nan"] != got["nan"]
        [event] = [e for e in store.events("langgraph:t") if e.type == CHECKPOINT_TYPE]
        assert all("serde" in event.data["values"][k] for k in values)


def test_long_and_odd_thread_ids(backend: Backend) -> None:
    with _store(backend) as store:
        saver = SessionSQLSaver(store)
        for thread in ("x" * 300, "a~1", "#odd", " spaced ", "tab\there"):
            config = saver.put(_cfg(thread), _checkpoint("1"), {}, {})
            assert config["configurable"]["thread_id"] == thread
            assert saver.get_tuple(_cfg(thread)) is not None
        assert saver.get_tuple(_cfg("a")) is None
        assert len(list(saver.list(None))) >= 4  # listed by label (printable ids)


def test_threads_whose_ids_share_a_prefix_stay_apart(backend: Backend) -> None:
    with _store(backend) as store:
        saver = SessionSQLSaver(store)
        for thread in ("1", "10", "1~1"):
            _chat(saver, thread, 2)
        saver.prune(["1"])
        fresh = SessionSQLSaver(store)
        assert len(list(fresh.list(_cfg("1")))) == 1
        assert len(list(fresh.list(_cfg("10")))) == 6
        assert len(list(fresh.list(_cfg("1~1")))) == 6
        saver.delete_thread("1")
        assert fresh.get_tuple(_cfg("1")) is None
        assert fresh.get_tuple(_cfg("10")) is not None
        assert fresh.get_tuple(_cfg("1~1")) is not None


def test_two_savers_writing_one_thread_both_land(backend: Backend) -> None:
    """A saver whose cached log is stale loses its conditional append, reloads and retries."""
    with _store(backend) as store:
        one, two = SessionSQLSaver(store), SessionSQLSaver(store)
        parent = None
        for i in range(6):
            saver = one if i % 2 == 0 else two
            config = _cfg("t") if parent is None else _cfg("t", checkpoint_id=parent)
            values = {"log": [f"entry {j}" for j in range(i + 1)]}
            cp = {**_checkpoint(f"{i:02d}", values), "channel_versions": {"log": f"{i + 1}"}}
            stored = saver.put(config, cp, {"step": i}, {"log": f"{i + 1}"})
            saver.put_writes(stored, [("log", f"w{i}")], f"task{i}")
            parent = stored["configurable"]["checkpoint_id"]
        for saver in (one, two, SessionSQLSaver(store)):
            tuples = list(saver.list(_cfg("t")))
            assert [t.checkpoint["id"] for t in tuples] == [f"{i:02d}" for i in range(5, -1, -1)]
            assert tuples[0].checkpoint["channel_values"]["log"] == [f"entry {j}" for j in range(6)]
            assert [w[2] for t in tuples for w in t.pending_writes or []] == [
                f"w{i}" for i in range(5, -1, -1)
            ]


def test_wrong_stores_are_refused(backend: Backend) -> None:
    with _store(backend) as store, pytest.raises(InvalidArgumentError):
        AsyncSessionSQLSaver(store)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        SessionSQLSaver(open_async_store(backend.url, schema=backend.schema))  # type: ignore[arg-type]


def test_the_async_savers_sync_methods_run_from_another_thread(backend: Backend) -> None:
    async def main() -> None:
        async with AsyncSessionSQLSaver.from_url(backend.url, schema=backend.schema) as saver:
            await saver.aput(_cfg("t"), _checkpoint("1"), {}, {})
            found = await asyncio.to_thread(saver.get_tuple, _cfg("t"))
            assert found is not None and found.checkpoint["id"] == "1"
            with pytest.raises(InvalidArgumentError):
                saver.get_tuple(_cfg("t"))  # on the loop: it would block it

    asyncio.run(main())


def _checkpoint(cp_id: str, values: dict[str, Any] | None = None) -> Any:
    return {
        "v": 4,
        "id": cp_id,
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": values or {},
        "channel_versions": {k: "1" for k in values or {}},
        "versions_seen": {},
        "updated_channels": None,
    }
