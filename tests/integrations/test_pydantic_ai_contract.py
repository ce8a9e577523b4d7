"""The ``StepStore`` protocol call by call: the same calls made on ``SessionSQLStepStore`` and
on the harness's ``SqliteStepStore`` and ``InMemoryStepStore`` answer the same; retried writes
are dropped; other writers, rewritten histories and bad input."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("pydantic_ai_harness")

from pydantic_ai.messages import (
    BinaryContent,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai_harness.step_persistence import (
    ContinuableSnapshot,
    InMemoryStepStore,
    RunRecord,
    SqliteStepStore,
    StepEvent,
    ToolEffectRecord,
)

from session_sql import SessionExistsError, open_async_store, open_store
from session_sql.integrations.pydantic_ai import SessionSQLStepStore

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


ASK = ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("Weather?")])
CALL = ModelResponse(parts=[TextPart("Looking."), ToolCallPart("weather", {"c": 1}, "t1")])
RETURN = ModelRequest(parts=[ToolReturnPart("weather", "sunny", "t1")])
ANSWER = ModelResponse(parts=[TextPart("Sunny.")])
# Parts no text block says: an image, reasoning, a retry prompt bound to no tool.
IMAGE = ModelRequest(
    parts=[
        UserPromptPart(["Like this?", BinaryContent(b"\x89PNG\x00\xff", media_type="image/png")])
    ]
)
THINK = ModelResponse(parts=[ThinkingPart("hmm \u2028 \U0001f600"), TextPart("Yes.")])
NUDGE = ModelRequest(
    parts=[RetryFeedbackPart("one word", retry=RetryInfo("model_retry"), timestamp=T0)]
)


def snapshot(run_id: str, n: int, messages: list[Any], **kw: Any) -> ContinuableSnapshot:
    return ContinuableSnapshot(
        run_id=run_id, step_index=n, messages=messages, timestamp=at(100 + n), **kw
    )


async def scenario(store: Any) -> list[Any]:
    """A sequence of protocol calls; what each read answers, in order."""
    out: list[Any] = []
    await store.register_run(RunRecord(run_id="b", conversation_id="c1", started_at=at(2)))
    await store.register_run(
        RunRecord(
            run_id="a",
            conversation_id="c1",
            agent_name="weather",
            metadata={"k": "v"},
            started_at=at(1),
            registration_id="r-1",
        )
    )
    await store.register_run(RunRecord(run_id="child", parent_run_id="a", started_at=at(3)))
    out.append(await store.list_runs())
    out.append(await store.list_runs(conversation_id="c1"))
    out.append(await store.list_runs(parent_run_id="a"))
    out.append(await store.list_runs(parent_run_id="a", conversation_id="c1"))
    out.append(await store.get_run(run_id="a"))
    out.append(await store.get_run(run_id="missing"))
    for i, kind in enumerate(["run_started", "model_request_started", "run_started"]):
        key = None if i == 2 else f"{i}:{kind}"
        event = StepEvent(run_id="a", kind=kind, step_index=i, timestamp=at(i), idempotency_key=key)
        await store.append_event(event)
        await store.append_event(event)  # a retry: dropped when it has a key
    out.append(await store.list_events(run_id="a"))
    out.append(await store.list_events(run_id="missing"))
    out.append(await store.latest_snapshot(run_id="a"))
    await store.save_snapshot(snapshot("a", 1, [ASK, CALL], idempotency_key="0:1:complete"))
    await store.save_snapshot(snapshot("a", 1, [ASK, CALL], idempotency_key="0:1:complete"))
    await store.save_snapshot(
        snapshot("a", 2, [ASK, CALL, RETURN], state="interrupted", idempotency_key="1:2:x")
    )
    out.append(await store.latest_snapshot(run_id="a"))
    out.append(await store.latest_snapshot(run_id="a", include_interrupted=True))
    await store.save_snapshot(snapshot("a", 3, [ASK, CALL, RETURN, ANSWER]))
    await store.save_snapshot(snapshot("a", 4, [ASK, ANSWER]))  # a rewritten history
    await store.save_snapshot(snapshot("a", 5, [ASK, ANSWER, IMAGE, THINK, NUDGE, ANSWER]))
    out.append(await store.latest_snapshot(run_id="a"))
    out.append(await store.list_snapshots(run_id="a"))
    out.append(await store.list_snapshots(run_id="a", include_interrupted=True))
    started = ToolEffectRecord(tool_call_id="t1", tool_name="weather", run_id="a", status="started")
    started.started_at = at(5)
    await store.record_tool_effect(started)
    other = ToolEffectRecord(
        tool_call_id="t2", tool_name="mail", run_id="a", status="started", started_at=at(6)
    )
    await store.record_tool_effect(other)
    out.append(await store.list_unresolved_tool_effects(run_id="a"))
    done = ToolEffectRecord(
        tool_call_id="t1",
        tool_name="weather",
        run_id="a",
        status="completed",
        started_at=at(5),
        ended_at=at(7),
        idempotency_key="once",
        effect_summary="sent",
    )
    await store.record_tool_effect(done)
    out.append(await store.get_tool_effect(run_id="a", tool_call_id="t1"))
    out.append(await store.get_tool_effect(run_id="a", tool_call_id="nope"))
    out.append(await store.list_unresolved_tool_effects(run_id="a"))
    out.append(await store.list_unresolved_tool_effects(run_id="missing"))
    return out


def as_json(value: Any) -> Any:
    """``value`` with each snapshot's messages as pydantic-ai's JSON."""
    if isinstance(value, list):
        return [as_json(v) for v in value]
    if isinstance(value, ContinuableSnapshot):
        return (
            dataclasses.replace(value, messages=[]),
            ModelMessagesTypeAdapter.dump_json(value.messages),
        )
    return value


def test_the_protocol_answers_as_the_harness_stores(backend, tmp_path) -> None:
    async def main() -> tuple[list[Any], list[Any], list[Any]]:
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            mine = await scenario(ours)
        sqlite = await scenario(SqliteStepStore(database=tmp_path / "h.db"))
        memory = await scenario(InMemoryStepStore())
        return mine, sqlite, memory

    mine, sqlite, memory = asyncio.run(main())
    assert mine == sqlite
    # The memory store hands back the objects it was given; a JSON round trip through
    # pydantic-ai turns a BinaryContent into a BinaryImage, so snapshots compare as JSON.
    assert as_json(mine) == as_json(memory)
    with open_store(backend.url, schema=backend.schema) as store:
        assert store.verify("pydantic-ai:a").ok
        shown = store.surface_messages("pydantic-ai:a")  # the latest history, one node each
        assert [n.type for n in shown] == [
            "user/message",
            "assistant/message",
            "user/message",
            "assistant/message",
            "pydantic-ai/message",  # a retry prompt bound to no tool call
            "assistant/message",
        ]
        assert [b["type"] for b in shown[2].message["content"]] == ["text", "pydantic-ai-content"]
        assert [b["type"] for b in shown[3].message["content"]] == ["reasoning", "text"]
    assert len(mine[6]) == 4  # the keyed retries dropped, the unkeyed event stored twice


def test_registering_a_run_twice_is_refused_and_changes_nothing(backend) -> None:
    async def main() -> None:
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            await ours.register_run(RunRecord(run_id="r", started_at=at(0)))
            before = await ours.store.head_seq("pydantic-ai:r")
            with pytest.raises(SessionExistsError, match="single-shot"):
                await ours.register_run(RunRecord(run_id="r", agent_name="x"))
            assert await ours.store.head_seq("pydantic-ai:r") == before
            assert await ours.get_run(run_id="r") == RunRecord(run_id="r", started_at=at(0))

    asyncio.run(main())


def test_a_run_registered_after_its_first_events_is_listed(backend) -> None:
    async def main() -> None:
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            await ours.append_event(StepEvent(run_id="late", kind="run_started", step_index=0))
            assert await ours.get_run(run_id="late") is None
            assert await ours.list_runs() == []
            record = RunRecord(run_id="late", conversation_id="c", started_at=at(0))
            await ours.register_run(record)
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as fresh:
            assert await fresh.list_runs(conversation_id="c") == [record]
            assert await fresh.get_run(run_id="late") == record

    asyncio.run(main())


def test_two_stores_on_one_run_see_each_others_writes(backend) -> None:
    """Two processes (two stores) writing one run: each write lands once, in one order, and
    a retried key is dropped even when the other store stored it."""

    async def main() -> None:
        async with (
            open_async_store(backend.url, schema=backend.schema) as one,
            open_async_store(backend.url, schema=backend.schema) as two,
        ):
            first, second = SessionSQLStepStore(one), SessionSQLStepStore(two)
            writes = []
            for i in range(20):
                store = first if i % 2 else second
                event = StepEvent(
                    run_id="shared", kind="tool_call_started", step_index=i, idempotency_key=str(i)
                )
                writes.append(store.append_event(event))
            await asyncio.gather(*writes)
            await first.append_event(
                StepEvent(run_id="shared", kind="run_failed", step_index=0, idempotency_key="0")
            )
            await first.save_snapshot(snapshot("shared", 1, [ASK, CALL]))
            await second.save_snapshot(snapshot("shared", 2, [ASK, CALL, RETURN, ANSWER]))
            for store in (first, second):
                events = await store.list_events(run_id="shared")
                assert sorted(e.step_index for e in events) == list(range(20))
                latest = await store.latest_snapshot(run_id="shared")
                assert latest is not None and latest.messages == [ASK, CALL, RETURN, ANSWER]
            # Each store has read past its own last write: its next write follows on.
            await first.append_event(StepEvent(run_id="shared", kind="run_completed", step_index=0))
            await second.record_tool_effect(
                ToolEffectRecord(tool_call_id="t", tool_name="x", run_id="shared", status="started")
            )
            assert [e.kind for e in await second.list_events(run_id="shared")][
                -1
            ] == "run_completed"
            assert len(await first.list_unresolved_tool_effects(run_id="shared")) == 1

    asyncio.run(main())
    with open_store(backend.url, schema=backend.schema) as store:
        assert [m["role"] for m in store.messages("pydantic-ai:shared")] == [
            "user",
            "assistant",
            "user",
            "assistant",
        ]
        assert store.verify("pydantic-ai:shared").ok


def test_the_surface_follows_a_rewritten_history(backend) -> None:
    """A history that drops messages (compaction) takes them off the surface, with
    provenance; the log keeps them."""

    async def main() -> None:
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            await ours.save_snapshot(snapshot("w", 1, [ASK, CALL, RETURN, ANSWER]))
            await ours.save_snapshot(snapshot("w", 2, [ASK, ANSWER]))
            latest = await ours.latest_snapshot(run_id="w")
            assert latest is not None and latest.messages == [ASK, ANSWER]

    asyncio.run(main())
    with open_store(backend.url, schema=backend.schema) as store:
        texts = [m["content"][0].get("text") for m in store.messages("pydantic-ai:w")]
        assert texts == ["Weather?", "Sunny."]
        types = [e.type for e in store.events("pydantic-ai:w")]
        assert types.count("surface/removed") == 1
        assert types.count("assistant/message") == 3  # the answer again, after the removal
        assert store.verify("pydantic-ai:w").ok


def test_a_long_or_odd_run_id_gets_a_digest_session_id(backend) -> None:
    run_id = "r/" + "x" * 300 + "\n"

    async def main() -> None:
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            record = RunRecord(run_id=run_id, started_at=at(0))
            await ours.register_run(record)
            assert await ours.get_run(run_id=run_id) == record
            assert await ours.list_runs() == [record]

    asyncio.run(main())
    with open_store(backend.url, schema=backend.schema) as store:
        [info] = store.list_sessions(labels={"pydantic_ai": "run"})
        assert info.id.startswith("pydantic-ai:#") and "pydantic_ai_run" not in info.labels


def test_runs_dropped_from_memory_read_back_from_the_log(backend) -> None:
    async def main() -> None:
        async with open_async_store(backend.url, schema=backend.schema) as store:
            ours = SessionSQLStepStore(store, max_cached_runs=1)
            for i in range(3):
                for run in ("x", "y"):
                    await ours.append_event(
                        StepEvent(run_id=run, kind="tool_call_started", step_index=i)
                    )
                    await ours.save_snapshot(snapshot(run, i, [ASK, CALL][: i % 2 + 1]))
            for run in ("x", "y"):
                assert [e.step_index for e in await ours.list_events(run_id=run)] == [0, 1, 2]
                latest = await ours.latest_snapshot(run_id=run)
                assert latest is not None and latest.messages == [ASK]

    asyncio.run(main())


def test_bad_options_and_a_catalog_without_the_types_are_refused(backend) -> None:
    from session_sql import ConfigurationError, InvalidArgumentError
    from session_sql.catalog import Catalog

    async def main() -> None:
        bare = Catalog(["x/y"])
        async with open_async_store(backend.url, schema=backend.schema, catalog=bare) as store:
            for bad in (0, True, "3"):
                with pytest.raises(InvalidArgumentError, match="max_cached_runs"):
                    SessionSQLStepStore(store, max_cached_runs=bad)  # type: ignore[arg-type]
            with pytest.raises(ConfigurationError, match="pydantic-ai types"):
                await SessionSQLStepStore(store).get_run(run_id="r")
        async with SessionSQLStepStore.from_url(
            backend.url, schema=backend.schema, catalog=bare
        ) as ours:  # from_url adds them to the catalog it is given
            await ours.register_run(RunRecord(run_id="r", started_at=at(0)))
            assert await ours.get_run(run_id="r") == RunRecord(run_id="r", started_at=at(0))

    asyncio.run(main())
