"""Real ``agents.Runner`` runs on a ``SessionSQLSession`` (a scripted model, no network), a
resume from a fresh process, and the SDK's compaction becoming a replace with provenance."""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace
from typing import Any

from agents.memory import OpenAIResponsesCompactionSession

from session_sql import Replace, open_async_store
from session_sql.integrations.openai_agents import ITEM_TYPE, SessionSQLSession

from .oa_workers import ScriptedModel, call, resume_run, run_turn, say

SPAWN = multiprocessing.get_context("spawn")


def two_turns(backend: Any) -> tuple[ScriptedModel, list[Any]]:
    """Turn 1 calls the weather tool and answers; turn 2 answers. Returns the model and the
    session's items."""
    model = ScriptedModel(
        [
            [call("get_weather", '{"city": "Paris"}', 1)],
            [say("It is sunny in Paris.", 2)],
            [say("You're welcome.", 3)],
        ]
    )

    async def main() -> list[Any]:
        async with SessionSQLSession.from_url("chat", backend.url, schema=backend.schema) as s:
            assert await run_turn(s, model, "Weather in Paris?") == "It is sunny in Paris."
            assert await run_turn(s, model, "Thanks!") == "You're welcome."
            return await s.get_items()

    return model, asyncio.run(main())


def test_a_run_with_a_tool_call_is_stored_and_resumed_by_a_fresh_process(backend) -> None:
    model, items = two_turns(backend)
    kinds = [item.get("type", "message") for item in items]
    assert kinds == [
        "message",  # the user's question
        "function_call",
        "function_call_output",
        "message",  # the answer
        "message",  # thanks
        "message",  # you're welcome
    ]
    assert items[0]["content"] == "Weather in Paris?"
    assert items[1]["id"] == "fc_1" and items[1]["call_id"] == "call_1"
    assert items[2] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "sunny in Paris",
    }
    assert items[3]["id"] == "msg_2" and items[3]["role"] == "assistant"
    # the model's second call saw the tool's output; turn 2 saw all of turn 1
    assert model.inputs[1][-1]["type"] == "function_call_output"
    assert [i.get("content") for i in model.inputs[2] if i.get("role") == "user"] == [
        "Weather in Paris?",
        "Thanks!",
    ]

    with ProcessPoolExecutor(max_workers=1, mp_context=SPAWN) as pool:
        seen, answer, after = pool.submit(resume_run, backend.url, backend.schema, "chat").result(
            timeout=120
        )
    assert answer == "You asked about Paris."
    assert seen[: len(items)] == items  # the fresh process's model saw the whole history
    assert seen[-1]["content"] == "What did I ask first?"
    assert after[: len(items)] == items and len(after) == len(items) + 2

    async def check() -> None:
        async with open_async_store(backend.url, schema=backend.schema) as store:
            assert (await store.verify("chat")).ok
            messages = await store.messages("chat")
            users = [m for m in messages if m["source"]["kind"] == "openai-agents"]
            assert [m["content"][0]["text"] for m in users] == [
                "Weather in Paris?",
                "Thanks!",
                "What did I ask first?",
            ]
            types = [e.type async for e in await store.events("chat")]
            assert ITEM_TYPE not in types  # every item of the run has a core shape
            assert types.count("turn/start") == types.count("turn/end") == 3

    asyncio.run(check())


class FakeCompactClient:
    """Stands in for ``AsyncOpenAI``: ``responses.compact`` returns a scripted summary."""

    def __init__(self, output: list[Any]) -> None:
        self.requests: list[dict[str, Any]] = []

        async def compact(**kwargs: Any) -> Any:
            self.requests.append(kwargs)
            return SimpleNamespace(output=output, usage=None)

        self.responses = SimpleNamespace(compact=compact)


SUMMARY = {"type": "compaction", "id": "cmp_1", "encrypted_content": "summary-of-five"}


def test_sdk_compaction_is_a_replace_with_provenance(backend) -> None:
    async def main() -> None:
        async with open_async_store(backend.url, schema=backend.schema) as store:
            base = SessionSQLSession("c", store)
            items = [{"role": "user", "content": "hi"}] + [
                {"type": "function_call_output", "call_id": f"c{i}", "output": str(i)}
                for i in range(4)
            ]
            await base.add_items(items)
            client = FakeCompactClient([SUMMARY, {"role": "user", "content": "kept"}])
            compacting = OpenAIResponsesCompactionSession(
                "c",
                base,
                client=client,
                compaction_mode="input",  # type: ignore[arg-type]
            )
            await compacting.run_compaction({"force": True})
            assert client.requests[0]["input"][0]["content"] == "hi"
            assert await base.get_items() == [SUMMARY, {"role": "user", "content": "kept"}]
            events = [e async for e in await store.events("c")]
            # the turn/start, five items, the summary, the kept message: none deleted
            assert len(events) == 8
            summary = events[6]
            assert (summary.type, summary.data) == (ITEM_TYPE, SUMMARY)
            assert summary.surface_op == Replace(1, 5)
            assert summary.source_event_seqs == (1, 2, 3, 4, 5)
            assert (await store.verify("c")).ok

    asyncio.run(main())


def test_the_compaction_snapshot_replaces_a_suffix_unless_it_changed(backend) -> None:
    async def main() -> None:
        async with open_async_store(backend.url, schema=backend.schema) as store:
            session = SessionSQLSession("c", store)
            items = [{"type": "note", "n": n} for n in range(5)]
            await session.add_items(items)
            snapshot = await session._get_compaction_snapshot(3)
            assert snapshot.items == items[2:] and snapshot.complete is False
            assert (await session._get_compaction_snapshot(5)).complete is True
            assert await snapshot.replace_suffix(1, [SUMMARY]) is True
            assert await session.get_items() == [*items[:3], SUMMARY]
            events = [e async for e in await store.events("c")]
            assert events[-1].surface_op == Replace(3, 4)
            assert events[-1].source_event_seqs == (3, 4)

            stale = await session._get_compaction_snapshot(2)
            await session.add_items([{"type": "note", "n": 9}])  # the suffix moved on
            assert await stale.replace_suffix(0, [SUMMARY]) is False
            assert await stale.replace_suffix(2, [SUMMARY]) is False  # nothing to replace
            fresh = await session._get_compaction_snapshot(2)
            assert await fresh.replace_suffix(0, []) is True  # no output: a removal
            assert await session.get_items() == items[:3]
            assert await session._get_compaction_snapshot(2, prune_prefix=bool) is None
            assert (await store.verify("c")).ok

    asyncio.run(main())
