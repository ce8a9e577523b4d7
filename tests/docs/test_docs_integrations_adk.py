"""docs/integrations.md: the SQL queries over Google ADK sessions run on both dialects and
answer what the text says they answer."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types

from session_sql.integrations.adk import SQLSessionService

from .test_docs_sql import _run

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
QUERY = re.compile(r"```sql\n-- adk: (?P<name>[a-z0-9-]+)\n(?P<body>.*?)```", re.S)


def queries() -> dict[str, str]:
    return {m["name"]: m["body"] for m in QUERY.finditer(DOC.read_text(encoding="utf-8"))}


def event(role: str, part: types.Part, **delta: Any) -> Event:
    return Event(
        author="user" if role == "user" else "helper",
        invocation_id="i1",
        content=types.Content(role=role, parts=[part]),
        actions=EventActions(state_delta=delta),
    )


def write_sessions(backend: Any) -> None:
    call = types.FunctionCall(id="c1", name="get_weather", args={"city": "Paris"})
    result = types.FunctionResponse(id="c1", name="get_weather", response={"result": "sunny"})

    async def main() -> None:
        async with SQLSessionService.from_url(backend.url, schema=backend.schema) as service:
            s1 = await service.create_session(app_name="weather", user_id="ann", session_id="s1")
            for e in [
                event("user", types.Part(text="Weather in Paris?"), **{"user:city": "Paris"}),
                event("model", types.Part(function_call=call)),
                event("user", types.Part(function_response=result)),
                event("model", types.Part(text="Sunny.")),
            ]:
                await service.append_event(s1, e)
            s2 = await service.create_session(app_name="weather", user_id="ann", session_id="s2")
            await service.append_event(s2, event("user", types.Part(text="Hi")))
            bob = await service.create_session(app_name="weather", user_id="bob")
            await service.append_event(bob, event("user", types.Part(text="Yo"), **{"user:x": 1}))
            await service.create_session(app_name="other", user_id="ann", session_id="s9")

    asyncio.run(main())


def test_the_sql_queries_answer_on_both_dialects(backend) -> None:
    write_sessions(backend)
    found = queries()
    assert set(found) == {"sessions-of-a-user", "conversation", "tool-calls", "user-state-now"}
    results = {name: _run(backend, sql) for name, sql in found.items()}
    assert results["sessions-of-a-user"] == [("s1", 4), ("s2", 1)]
    assert results["conversation"] == [
        (0, "user/message", "Weather in Paris?"),
        (1, "assistant/message", "get_weather"),
        (2, "tool/result", '{"result": "sunny"}'),
        (3, "assistant/message", "Sunny."),
    ]
    assert results["tool-calls"] == [("get_weather", 1)]
    states = [
        (user, state if isinstance(state, dict) else json.loads(state))
        for user, state in results["user-state-now"]
    ]
    assert states == [("ann", {"city": "Paris"}), ("bob", {"x": 1})]


def test_the_adk_example_runs_as_written(tmp_path, monkeypatch, capsys):
    # The example block, run alone as a reader would paste it: it must call its own main()
    # and need no model service (its model is scripted), and leave the turn in the store.
    from session_sql import open_store

    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Google ADK") :]
    [block] = re.findall(r"^```python\n(.*?)^```", section.split("\n## ", 1)[0], re.S | re.M)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "integrations.md[ADK example]", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.splitlines() == ["helper Sunny in Paris."]
    with open_store("sqlite:///sessions.db") as store:
        [info] = store.list_sessions(labels={"adk_kind": "session", "adk_app": "weather"})
        assert info.user_id == "ann"
        assert [m["role"] for m in store.messages(info.id)] == ["user", "assistant"]
