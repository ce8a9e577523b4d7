"""End to end: a real ADK ``Runner`` with a scripted model keeps its session in session_sql,
then a fresh process resumes it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("google.adk")

from session_sql import open_store
from session_sql.integrations.adk import SQLSessionService, store_id

from .adk_agent import runner, turn

ROOT = Path(__file__).resolve().parents[2]


def texts(events) -> list[str]:
    out = []
    for e in events:
        for p in e.content.parts if e.content else []:
            if p.text is not None:
                out.append(p.text)
            elif p.function_call is not None:
                out.append(f"call {p.function_call.name}({json.dumps(p.function_call.args)})")
            elif p.function_response is not None:
                out.append(f"result {json.dumps(p.function_response.response)}")
    return out


def test_a_runner_keeps_its_session_and_a_fresh_process_resumes_it(backend) -> None:
    async def first_process() -> list[str]:
        async with SQLSessionService.from_url(backend.url, schema=backend.schema) as service:
            await service.create_session(
                app_name="app", user_id="u", session_id="s", state={"user:name": "Ann"}
            )
            run = runner(service)
            await turn(run, "hello")
            produced = await turn(run, "weather Paris", **{"app:units": "metric"})
            assert texts(produced) == [
                'call get_weather({"city": "Paris"})',
                'result {"result": "sunny in Paris"}',
                "the weather: sunny in Paris",
            ]
            session = await service.get_session(app_name="app", user_id="u", session_id="s")
            assert session is not None
            assert session.state == {
                "last_reply": "the weather: sunny in Paris",
                "app:units": "metric",
                "user:name": "Ann",
            }
            return texts(session.events)

    history = asyncio.run(first_process())
    assert history == [
        "hello",
        "echo hello after 1",
        "weather Paris",
        'call get_weather({"city": "Paris"})',
        'result {"result": "sunny in Paris"}',
        "the weather: sunny in Paris",
    ]
    out = subprocess.run(
        [sys.executable, "-m", "tests.integrations.adk_agent", backend.url, backend.schema, "bye"],
        capture_output=True,
        text=True,
        check=True,
        timeout=180,
        cwd=ROOT,
    )
    resumed = json.loads(out.stdout.strip().splitlines()[-1])
    # the model was sent the whole history: six events and the new message
    assert [p["text"] for e in resumed["produced"] for p in e["content"]["parts"]] == [
        "echo bye after 7"
    ]
    assert resumed["events"] == 8
    assert resumed["state"] == {
        "last_reply": "echo bye after 7",
        "app:units": "metric",
        "user:name": "Ann",
    }
    with open_store(backend.url, schema=backend.schema) as store:
        key = store_id("session", "app", "u", "s")
        assert store.verify(key).ok
        assert [e.type for e in store.events(key)] == [
            "turn/start",
            "user/message",
            "assistant/message",
            "turn/end",  # a final response ends the invocation's turn
            "turn/start",
            "user/message",
            "assistant/message",
            "tool/call",
            "tool/result",
            "assistant/message",
            "turn/end",
            "turn/start",
            "user/message",
            "assistant/message",
            "turn/end",
        ]
        turns = [(e.data["turn"], e.data["step"]) for e in store.events(key) if "step" in e.data]
        assert turns == [(1, 1), (2, 1), (2, 1), (2, 1), (2, 2), (3, 1)]
