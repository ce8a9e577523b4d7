"""A session written by a real ADK ``Runner`` (a scripted model that reports token usage)
reads like a native one: ``stats`` counts its tool calls and tokens, ``show`` and ``tail``
print its text and calls, the ``tool_calls`` and ``turns`` views have its rows, and
``messages()`` is the conversation in core shapes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.events.event import Event
from google.genai import types

from session_sql import open_store
from session_sql.integrations.adk import SQLSessionService, store_id

from .adk_agent import runner, turn
from .framework_reads import cli, tool_calls, turns

KEY = store_id("session", "app", "u", "s")


def write_two_turns(backend: Any) -> None:
    async def main() -> None:
        async with SQLSessionService.from_url(backend.url, schema=backend.schema) as service:
            await service.create_session(app_name="app", user_id="u", session_id="s")
            run = runner(service)
            await turn(run, "hello")
            await turn(run, "weather Paris")

    asyncio.run(main())


def test_a_run_reads_like_a_native_session(backend) -> None:
    write_two_turns(backend)
    with open_store(backend.url, schema=backend.schema) as store:
        stats = store.stats(KEY)
        assert [(t.tool, t.calls, t.errors) for t in stats.tools] == [("get_weather", 1, 0)]
        # the model was sent 1, then 3, then 5 contents: 10 input tokens each, 5 a reply
        assert [(m.model, m.messages, m.input_tokens, m.output_tokens) for m in stats.tokens] == [
            ("scripted-1", 3, 90, 15)
        ]
        messages = store.messages(KEY)
        assert [(m["role"], m["source"]["kind"]) for m in messages] == [
            ("user", "adk"),
            ("assistant", "model"),
            ("user", "adk"),
            ("assistant", "model"),
            ("user", "tool"),
            ("assistant", "model"),
        ]
        call_id = messages[3]["content"][0]["id"]
        assert messages[3]["content"] == [
            {
                "type": "tool-call",
                "id": call_id,
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            }
        ]
        assert messages[5]["content"] == [{"type": "text", "text": "the weather: sunny in Paris"}]
        assert store.verify(KEY).ok

    shown = cli(backend, "show", KEY)
    assert "echo hello after 1" in shown and "the weather: sunny in Paris" in shown
    assert "get_weather" in shown
    tailed = cli(backend, "tail", KEY, "-n", "30")
    assert "tool/call" in tailed and "turn/end" in tailed
    printed = cli(backend, "stats", KEY)
    assert "get_weather" in printed and "scripted-1" in printed

    assert tool_calls(backend, KEY) == [
        ("get_weather", call_id, '{"city": "Paris"}', 2, True, False)
    ]
    # (turn, reason, user, assistant, calls, results, ended)
    assert turns(backend, KEY) == [
        (1, "completed", 1, 1, 0, 0, True),
        (2, "completed", 1, 2, 1, 1, True),
    ]


def test_turns_follow_invocations_and_final_responses(backend) -> None:
    """An invocation that goes on after a final response (a second agent) starts a turn; an
    invocation that starts while a turn is open ends it as interrupted."""

    def said(text: str, invocation: str, author: str) -> Event:
        role = "user" if author == "user" else "model"
        content = types.Content(role=role, parts=[types.Part(text=text)])
        return Event(author=author, invocation_id=invocation, content=content)

    async def main() -> None:
        async with SQLSessionService.from_url(backend.url, schema=backend.schema) as service:
            s = await service.create_session(app_name="app", user_id="u", session_id="s")
            for event in [
                said("plan a trip", "i1", "user"),
                said("first leg", "i1", "planner"),  # final: turn 1 ends
                said("second leg", "i1", "booker"),  # the invocation goes on: turn 2
                said("and hotels?", "i2", "user"),  # turn 3 begins
                Event(author="booker", invocation_id="i2"),  # no content: not final
                said("new question", "i3", "user"),  # turn 3 was left open
            ]:
                await service.append_event(s, event)

    asyncio.run(main())
    assert turns(backend, KEY) == [
        (1, "completed", 1, 1, 0, 0, True),
        (2, "completed", 0, 1, 0, 0, True),
        (3, "interrupted", 1, 0, 0, 0, True),
        (4, None, 1, 0, 0, 0, False),
    ]
    with open_store(backend.url, schema=backend.schema) as store:
        assert store.verify(KEY).ok
