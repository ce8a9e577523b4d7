"""SPEC §12.1 through the OpenAI Agents SDK: a resumed agent sends its model the bytes the live
one would have sent, key order included (or a provider's prompt cache misses on every resume).

A real ``agents.Runner`` turn, on a scripted model that records its input, stores a history
with Anthropic-shaped items (a ``tool_use`` whose ``input`` has keys out of sorted order, an
assistant message carrying one, a ``tool_result``) and the SDK's own user message (``content``
before ``role``). A fresh store handle and a fresh session then resume it for a second turn:
what the model gets is compared, as ``json.dumps`` text, with what the live run had in memory.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import RunConfig, Runner

from session_sql import open_async_store
from session_sql.integrations.openai_agents import ITEM_TYPE, SessionSQLSession

from ..conftest import Backend
from .oa_workers import NO_TRACING, ScriptedModel, agent, say

TOOL_INPUT = {"zeta": 1, "alpha": {"y": 2, "b": 3}, "unit": "°C", "at": 1e16}
TOOL_USE = {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": TOOL_INPUT}
HISTORY: list[Any] = [
    {"content": "Weather in Paris?", "role": "user"},  # as the SDK builds a user message
    {
        "role": "assistant",
        "content": [{"type": "text", "text": "Let me check."}, dict(TOOL_USE)],
    },
    TOOL_USE,
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "sunny"}],
    },
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks"}]},
    {"role": "user", "content": [{"text": "Bye", "type": "input_text"}]},  # parts, text first
]
NEXT = "And tomorrow?"

# The history goes in as the turn's input, next to the (empty) stored one, as it is.
WITH_HISTORY = RunConfig(tracing_disabled=True, session_input_callback=lambda old, new: old + new)


def dumped(items: Any) -> str:
    return json.dumps(items)


def test_a_resumed_session_sends_the_model_the_live_bytes(backend: Backend) -> None:
    async def live() -> tuple[list[Any], list[Any], list[Any]]:
        """The live run: the model's input, the input of the next turn as the run holds it in
        memory, and the items as the live session reads them."""
        model = ScriptedModel([[say("It is sunny in Paris.", 1)]])
        async with open_async_store(backend.url, schema=backend.schema) as store:
            session = SessionSQLSession("chat", store)
            result = await Runner.run(
                agent(model), HISTORY, session=session, run_config=WITH_HISTORY
            )
            return model.inputs[0], result.to_input_list(), await session.get_items()

    async def resumed() -> tuple[list[Any], list[Any]]:
        """A new store handle and a new session, as a resumed agent has: the items, and the
        model's input for the next turn."""
        model = ScriptedModel([[say("Sunny again.", 2)]])
        async with SessionSQLSession.from_url("chat", backend.url, schema=backend.schema) as s:
            items = await s.get_items()
            await Runner.run(agent(model), NEXT, session=s, run_config=NO_TRACING)
            return items, model.inputs[0]

    first_input, live_next, live_items = asyncio.run(live())
    items, second_input = asyncio.run(resumed())

    assert dumped(first_input) == dumped(HISTORY)  # the live request, as the SDK sent it
    assert len(live_next) == len(HISTORY) + 1  # the history and the model's answer
    assert dumped(live_items) == dumped(live_next)
    assert dumped(items) == dumped(live_next)
    # The resumed request: the live history, byte for byte, then the new user message.
    assert dumped(second_input[:-1]) == dumped(live_next)
    assert dumped(second_input[: len(first_input)]) == dumped(first_input)
    assert second_input[-1] == {"content": NEXT, "role": "user"}

    # User text and assistant text are core messages (the SQL recipes see them) that keep
    # the exact item; the rest, the parts with their keys in another order included, are
    # items kept verbatim.
    async def types() -> list[str]:
        async with open_async_store(backend.url, schema=backend.schema) as store:
            return [e.type async for e in await store.events("chat")]

    assert asyncio.run(types())[: len(HISTORY) + 3] == [
        "turn/start",
        "user/message",
        "assistant/message",
        ITEM_TYPE,
        ITEM_TYPE,
        "turn/end",  # user text after the assistant's: a turn of its own
        "turn/start",
        "user/message",
        ITEM_TYPE,
    ]
    assert dumped(second_input[2]["input"]) == (
        '{"zeta": 1, "alpha": {"y": 2, "b": 3}, "unit": "\\u00b0C", "at": 1e+16}'
    )
