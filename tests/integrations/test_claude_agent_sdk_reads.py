"""A Claude transcript stored through ``SessionSQLSessionStore`` reads like a native session:
``show``, ``tail`` and ``stats`` print its conversation, calls and tokens, the ``tool_calls``
and ``turns`` views have its rows, ``ls`` lists it by its title, and the inspector's API gives
its messages as the store does."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from session_sql import open_store
from session_sql.inspector.app import create_app
from session_sql.integrations._claude_mapping import store_id
from session_sql.integrations.claude_agent_sdk import SessionSQLSessionStore

from .claude_transcript import SESSION_ID, SUBPATH, main_entries, subagent_entries
from .framework_reads import cli, tool_calls, turns

KEY = {"project_key": "-home-dev-proj", "session_id": SESSION_ID}
MAIN = store_id(KEY)


def write(backend: Any) -> None:
    async def main() -> None:
        async with SessionSQLSessionStore.from_url(backend.url, schema=backend.schema) as store:
            entries = main_entries()
            await store.append(KEY, entries[:8])  # type: ignore[arg-type]
            await store.append(KEY, entries[8:])  # type: ignore[arg-type]
            await store.append({**KEY, "subpath": SUBPATH}, subagent_entries())  # type: ignore[arg-type]

    asyncio.run(main())


def test_a_transcript_reads_like_a_native_session(backend) -> None:
    write(backend)
    shown = cli(backend, "show", MAIN)
    assert "Fix the failing test" in shown and "One still fails" in shown and "Grep" in shown
    tailed = cli(backend, "tail", MAIN, "-n", "60")
    assert "tool/call" in tailed and "turn/end" in tailed
    printed = cli(backend, "stats", MAIN)
    assert "Bash" in printed and "claude-sonnet-4-5-20250929" in printed
    assert "Fix slugify" in cli(backend, "ls")

    # (tool, call_id, arguments, turn, answered, is_error)
    assert tool_calls(backend, MAIN) == [
        ("Read", "toolu_01", '{"path": "utils.py"}', 1, True, False),
        ("Grep", "toolu_02", '{"q": "def slug"}', 2, True, False),
        ("Bash", "toolu_03", '{"cmd": "pytest -q"}', 2, True, True),
    ]
    # (turn, reason, user, assistant, calls, results, ended)
    assert turns(backend, MAIN) == [
        (1, "completed", 1, 4, 1, 1, True),
        (2, "completed", 1, 4, 2, 2, True),
    ]

    with open_store(backend.url, schema=backend.schema) as store:
        with TestClient(create_app(store), base_url="http://127.0.0.1") as client:
            body = client.get(f"/api/sessions/{MAIN}/messages").json()["messages"]
            assert json.dumps(body) == json.dumps(store.messages(MAIN))
            listed = client.get("/api/sessions").json()
        assert store.verify(MAIN).ok and store.verify(store_id({**KEY, "subpath": SUBPATH})).ok
    titles = {s["id"]: s["title"] for s in listed["sessions"]}
    assert titles[MAIN] == "Fix slugify"
