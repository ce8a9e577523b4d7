"""A scripted model for real ``agents.Runner`` runs, and child-process bodies ('spawn').

Each process body opens its own store from ``(url, schema)`` and returns plain data, so the
parent compares what another process wrote or read with what it expects.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from session_sql.integrations.openai_agents import SessionSQLSession

# -- a scripted model ---------------------------------------------------------------------------


def say(text: str, n: int) -> ResponseOutputMessage:
    """An assistant message, as the Responses API returns one."""
    return ResponseOutputMessage(
        id=f"msg_{n}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def call(name: str, arguments: str, n: int) -> ResponseFunctionToolCall:
    """A function tool call, with its ``fc_`` id and its ``call_id``."""
    return ResponseFunctionToolCall(
        id=f"fc_{n}", call_id=f"call_{n}", type="function_call", name=name, arguments=arguments
    )


class ScriptedModel(Model):
    """Answers each model call with the next scripted output and records the input it got."""

    def __init__(self, script: list[list[Any]], tokens: tuple[int, int] | None = None) -> None:
        self.script = list(script)
        self.inputs: list[list[Any]] = []
        self.tokens = tokens  # (input, output) tokens each response reports; None: no usage

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kw: Any):
        self.inputs.append([input] if isinstance(input, str) else list(input))
        output = self.script.pop(0)
        usage = Usage()
        if self.tokens is not None:
            tokens_in, tokens_out = self.tokens
            usage = Usage(
                requests=1,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                total_tokens=tokens_in + tokens_out,
            )
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def agent(model: Model) -> Agent[Any]:
    return Agent(name="assistant", instructions="Be brief.", model=model, tools=[get_weather])


NO_TRACING = RunConfig(tracing_disabled=True)


async def run_turn(session: SessionSQLSession, model: ScriptedModel, text: str) -> str:
    result = await Runner.run(agent(model), text, session=session, run_config=NO_TRACING)
    return str(result.final_output)


# -- process bodies -----------------------------------------------------------------------------


def resume_run(url: str, schema: str, session_id: str) -> tuple[list[Any], str, list[Any]]:
    """A fresh process resumes the session with a third turn: what the model saw, its answer,
    and the session's items after the turn."""

    async def main() -> tuple[list[Any], str, list[Any]]:
        model = ScriptedModel([[say("You asked about Paris.", 90)]])
        async with SessionSQLSession.from_url(session_id, url, schema=schema) as session:
            answer = await run_turn(session, model, "What did I ask first?")
            return model.inputs[0], answer, await session.get_items()

    return asyncio.run(main())


def read_items(url: str, schema: str, session_id: str) -> list[Any]:
    """Every item of the session, read by a process of its own."""

    async def main() -> list[Any]:
        async with SessionSQLSession.from_url(session_id, url, schema=schema) as session:
            return await session.get_items()

    return asyncio.run(main())


def add_batches(
    url: str, schema: str, session_id: str, worker: int, count: int, sync_dir: str
) -> int:
    """Add ``count`` batches of two items to a shared session, starting with the other worker."""

    async def main() -> None:
        async with SessionSQLSession.from_url(
            session_id, url, schema=schema, busy_timeout_ms=30_000
        ) as session:
            await session.get_items(limit=1)  # the store is open before the race starts
            arrive_and_wait(sync_dir, "start", 2)
            for i in range(count):
                await session.add_items(
                    [
                        {"role": "user", "content": f"w{worker}-{i}"},
                        {"type": "note", "worker": worker, "i": i},
                    ]
                )

    asyncio.run(main())
    return os.getpid()


def arrive_and_wait(sync_dir: str, name: str, parties: int, timeout: float = 60) -> None:
    """A barrier: announce this process under ``name`` and wait until ``parties`` have."""
    directory = Path(sync_dir)
    (directory / f"{name}.{os.getpid()}").touch()
    deadline = time.monotonic() + timeout
    while len(list(directory.glob(f"{name}.*"))) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {name!r}: fewer than {parties} processes arrived")
        time.sleep(0.005)
