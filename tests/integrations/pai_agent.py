"""A real pydantic-ai ``Agent`` with a scripted model (no network), and a ``StepStore`` that
hands every protocol call to several stores, so that they are given identical records."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai_harness.step_persistence import StepPersistence


class Script:
    """The model: asks for the weather of each city in the prompt (one call each, at once),
    then answers; ``fail_after`` makes the request after that many fail once."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.requests = 0
        self.fail_after = fail_after

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests += 1
        if self.fail_after is not None and self.requests == self.fail_after + 1:
            self.fail_after = None
            raise RuntimeError("the model service is down")
        last = messages[-1]
        returns = [p for p in last.parts if p.part_kind in ("tool-return", "retry-prompt")]
        if returns:
            said = "; ".join(f"{p.content}" for p in returns)
            return ModelResponse(parts=[TextPart(f"Weather: {said} ☀ \u2028 done.")])
        prompt = next(
            p.content for p in last.parts if p.part_kind == "user-prompt"
        )  # "weather in Paris, Rome"
        cities = [c.strip() for c in str(prompt).split(" in ", 1)[-1].split(",")]
        calls = [
            ToolCallPart("get_weather", {"city": c}, tool_call_id=f"call-{self.requests}-{i}")
            for i, c in enumerate(cities)
        ]
        return ModelResponse(parts=[TextPart("Let me look."), *calls])


def agent(store: Any, script: Script, **persistence: Any) -> Agent[None, str]:
    """The weather agent, its steps persisted in ``store``."""
    made: Agent[None, str] = Agent(
        FunctionModel(script),
        capabilities=[StepPersistence(store=store, **persistence)],
        instructions="Answer briefly.",
        name="weather",
    )

    @made.tool_plain
    def get_weather(city: str) -> str:
        if city == "Atlantis":
            raise ModelRetry("no such city")
        if city == "Crash":
            raise RuntimeError("the weather service crashed")
        return json.dumps({"city": city, "sky": "sunny"})

    return made


class Tee:
    """A ``StepStore`` writing to every one of ``stores`` and reading from the first; one
    call at a time, so that concurrent calls (parallel tools) reach each store in one order."""

    def __init__(self, *stores: Any) -> None:
        self.stores = stores
        self.lock = asyncio.Lock()

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            async with self.lock:
                results = [await getattr(s, name)(*args, **kwargs) for s in self.stores]
            return results[0]

        return call
