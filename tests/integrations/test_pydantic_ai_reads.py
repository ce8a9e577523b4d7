"""A pydantic-ai run read like a native session: the CLI's ``show``, ``tail`` and ``stats``,
and the ``tool_calls`` and ``turns`` views."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("pydantic_ai_harness")

from session_sql.integrations.pydantic_ai import SessionSQLStepStore

from .framework_reads import cli, tool_calls, turns
from .pai_agent import Script, agent

KEY = "pydantic-ai:run-r"


def write_runs(backend: Any) -> None:
    async def main() -> None:
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as steps:
            await agent(steps, Script(), run_id="run-r").run("weather in Paris, Atlantis")
            with pytest.raises(RuntimeError, match="crashed"):
                await agent(steps, Script(), run_id="run-x").run("weather in Crash")

    asyncio.run(main())


def test_a_run_reads_like_a_native_session_in_the_cli_and_the_views(backend) -> None:
    write_runs(backend)
    shown = cli(backend, "show", KEY)
    assert "weather in Paris, Atlantis" in shown and "Weather: " in shown
    assert "get_weather" in shown
    tailed = cli(backend, "tail", KEY, "-n", "40")
    assert "tool/call" in tailed and "turn/end" in tailed
    printed = cli(backend, "stats", KEY)
    assert "get_weather" in printed and "function:" in printed
    # (tool, call id, arguments, turn, answered, is_error): Atlantis asked for a retry
    assert tool_calls(backend, KEY) == [
        ("get_weather", "call-1-0", '{"city": "Paris"}', 1, True, False),
        ("get_weather", "call-1-1", '{"city": "Atlantis"}', 1, True, True),
    ]
    # (turn, reason, user, assistant, calls, results, ended)
    assert turns(backend, KEY) == [(1, "completed", 1, 2, 2, 2, True)]
    # the crashed run: its turn ended with an error, its call left unanswered on the surface
    assert turns(backend, "pydantic-ai:run-x") == [(1, "error", 1, 1, 1, 0, True)]
