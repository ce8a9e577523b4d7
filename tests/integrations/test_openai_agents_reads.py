"""A session written by a real ``agents.Runner`` (a scripted model that reports token usage)
reads like a native one: ``stats`` counts its tool calls and tokens, ``show`` and ``tail``
print its text and calls, the ``tool_calls`` and ``turns`` views have its rows, and
``messages()`` is the conversation in core shapes. The items still come back exactly."""

from __future__ import annotations

import asyncio
from typing import Any

from session_sql import open_store
from session_sql.integrations.openai_agents import SessionSQLSession

from .framework_reads import cli, tool_calls, turns
from .oa_workers import ScriptedModel, call, run_turn, say

ARGUMENTS = '{"city": "Paris"}'


def write_two_turns(backend: Any) -> list[Any]:
    """Turn 1 calls the weather tool, then answers; turn 2 answers. Each of the three model
    responses reports 120 input and 8 output tokens. Returns the items."""
    model = ScriptedModel(
        [
            [call("get_weather", ARGUMENTS, 1)],
            [say("It is sunny in Paris.", 2)],
            [say("You're welcome.", 3)],
        ],
        tokens=(120, 8),
    )

    async def main() -> list[Any]:
        async with SessionSQLSession.from_url("chat", backend.url, schema=backend.schema) as s:
            await run_turn(s, model, "Weather in Paris?")
            await run_turn(s, model, "Thanks!")
            return await s.get_items()

    return asyncio.run(main())


def test_a_run_reads_like_a_native_session(backend) -> None:
    items = write_two_turns(backend)
    assert [item.get("type", "message") for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
        "message",
    ]
    with open_store(backend.url, schema=backend.schema) as store:
        stats = store.stats("chat")
        assert [(t.tool, t.calls, t.errors) for t in stats.tools] == [("get_weather", 1, 0)]
        # three model responses, each on its first assistant message
        assert [(m.model, m.input_tokens, m.output_tokens) for m in stats.tokens] == [
            ("unknown", 360, 24)
        ]
        messages = store.messages("chat")
        assert [(m["role"], m["source"]["kind"]) for m in messages] == [
            ("user", "openai-agents"),
            ("assistant", "model"),
            ("user", "tool"),
            ("assistant", "model"),
            ("user", "openai-agents"),
            ("assistant", "model"),
        ]
        assert messages[1]["content"] == [
            {"type": "tool-call", "id": "call_1", "name": "get_weather", "arguments": ARGUMENTS}
        ]
        assert messages[2]["content"][0]["content"] == [{"type": "text", "text": "sunny in Paris"}]
        assert messages[3]["content"] == [{"type": "text", "text": "It is sunny in Paris."}]
        assert messages[3]["source"]["item"] == items[3]  # the exact item
        assert store.verify("chat").ok

    shown = cli(backend, "show", "chat")
    assert "It is sunny in Paris." in shown and "You're welcome." in shown
    assert "get_weather" in shown and "sunny in Paris" in shown
    assert "[output_text]" not in shown and "[1] ?" not in shown
    tailed = cli(backend, "tail", "chat", "-n", "30")
    assert "tool/call" in tailed and "get_weather" in tailed and "turn/end" in tailed
    printed = cli(backend, "stats", "chat")
    assert "get_weather" in printed and "360" in printed

    assert tool_calls(backend, "chat") == [("get_weather", "call_1", ARGUMENTS, 1, True, False)]
    # (turn, reason, user, assistant, calls, results, ended)
    assert turns(backend, "chat") == [
        (1, "completed", 1, 2, 1, 1, True),
        (2, "completed", 1, 1, 0, 0, True),
    ]


def test_batches_outside_a_run_still_count_their_calls(backend) -> None:
    """Items added by hand (no run, no usage): the calls and results still meet in the views,
    across batches, and a batch of model output outside a turn starts one."""

    async def main() -> None:
        async with SessionSQLSession.from_url("hand", backend.url, schema=backend.schema) as s:
            await s.add_items([{"role": "user", "content": "hi"}, dict(CALL)])
            await s.add_items([{"type": "function_call_output", "call_id": "c9", "output": "1"}])
            await s.add_items([dict(ANSWER)])
            await s.add_items([dict(ANSWER)])  # no user message first: a turn of its own
            assert await s.get_items() == [
                {"role": "user", "content": "hi"},
                CALL,
                {"type": "function_call_output", "call_id": "c9", "output": "1"},
                ANSWER,
                ANSWER,
            ]

    asyncio.run(main())
    assert tool_calls(backend, "hand") == [("count", "c9", "{}", 1, True, False)]
    assert turns(backend, "hand") == [
        (1, "completed", 1, 2, 1, 1, True),
        (2, "completed", 0, 1, 0, 0, True),
    ]
    with open_store(backend.url, schema=backend.schema) as store:
        assert store.stats("hand").tokens[0].input_tokens == 0  # the protocol alone gives none


CALL = {"type": "function_call", "call_id": "c9", "name": "count", "arguments": "{}"}
ANSWER = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "1"}]}


def test_a_writer_continues_the_turn_another_writer_left(backend) -> None:
    """The turn a write continues is read back from the log when another writer (another
    instance, another process) moved the session on."""

    async def main() -> None:
        async with SessionSQLSession.from_url("two", backend.url, schema=backend.schema) as a:
            b = SessionSQLSession("two", a.store)
            await a.add_items([{"role": "user", "content": "hi"}])  # turn 1 starts
            await b.add_items([dict(CALL)])  # b has not seen it: reads the turn back
            await b.add_items([{"type": "function_call_output", "call_id": "c9", "output": "1"}])
            await a.add_items([dict(ANSWER)])  # a's copy is stale: it reloads, then ends turn 1
            await b.add_items([{"role": "user", "content": "again"}])  # turn 2
            await a.add_items([dict(ANSWER)])

    asyncio.run(main())
    assert turns(backend, "two") == [
        (1, "completed", 1, 2, 1, 1, True),
        (2, "completed", 1, 1, 0, 0, True),
    ]
    with open_store(backend.url, schema=backend.schema) as store:
        steps = [
            (e.data["turn"], e.data["step"])
            for e in store.events("two")
            if e.type == "assistant/message"
        ]
        assert steps == [(1, 1), (1, 3), (2, 1)]  # one step per batch of model output
