"""Framework sessions as first-class citizens: titled where the framework names them, and
checked by ``verify --invariants`` for what their adapter guarantees, beside native sessions
that are still checked in full."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.testclient import TestClient
from typer.testing import CliRunner

from session_sql import open_async_store, open_store
from session_sql.cli import app
from session_sql.inspector.app import create_app
from session_sql.integrations.adk import store_id
from session_sql.integrations.claude_agent_sdk import SessionSQLSessionStore
from session_sql.integrations.langgraph import SessionSQLSaver
from session_sql.integrations.pydantic_ai import SessionSQLStepStore
from session_sql.metadata import HIDDEN_LABEL

from ..conftest import Backend
from . import pai_agent, test_adk_reads, test_openai_agents_reads
from .claude_transcript import SESSION_ID, SUBPATH, main_entries, subagent_entries
from .lg_graph import run_sync

ADK_KEY = store_id("session", "app", "u", "s")
CLAUDE_KEY = {"project_key": "-home-dev-proj", "session_id": SESSION_ID}


def _mixed_store(backend: Backend) -> None:
    """Two ADK turns, two OpenAI Agents turns, a LangGraph script (interrupt, resume, fork) on
    thread ``t1``, and the same script on ``t2``, then pruned (a rewritten thread); a Claude
    Agent SDK transcript with a subagent's, and a pydantic-ai agent's run."""
    test_adk_reads.write_two_turns(backend)
    test_openai_agents_reads.write_two_turns(backend)
    with open_store(backend.url, schema=backend.schema) as store:
        run_sync(lambda: SessionSQLSaver(store), "t1")
        run_sync(lambda: SessionSQLSaver(store), "t2")
        SessionSQLSaver(store).prune(["t2"])

    async def claude_and_pydantic_ai() -> None:
        async with open_async_store(backend.url, schema=backend.schema) as store:
            claude = SessionSQLSessionStore(store)
            await claude.append(CLAUDE_KEY, main_entries())
            await claude.append({**CLAUDE_KEY, "subpath": SUBPATH}, subagent_entries())
            steps = SessionSQLStepStore(store)
            await pai_agent.agent(steps, pai_agent.Script(), run_id="run-1").run("weather?")

    asyncio.run(claude_and_pydantic_ai())


def _verify(backend: Backend) -> Any:
    env = {"SESSION_SQL_URL": backend.url, "SESSION_SQL_SCHEMA": backend.schema}
    return CliRunner().invoke(app, ["verify", "--all", "--invariants"], env=env)


def test_verify_invariants_passes_a_healthy_mixed_store(backend: Backend) -> None:
    _mixed_store(backend)
    with open_store(backend.url, schema=backend.schema) as store:
        native = store.create_session("native")
        native.append_many(
            [
                {"type": "turn/start", "data": {"turn": 1}},
                {"type": "step/start", "data": {"turn": 1, "step": 1}},
                {"type": "step/end", "data": {"turn": 1, "step": 1}},
                {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}},
            ]
        )
        count = len(store.list_sessions())
    result = _verify(backend)
    assert result.exit_code == 0, result.output
    assert f"{count} ok, 0 failed" in result.output
    # A native session is still held to its steps.
    with open_store(backend.url, schema=backend.schema) as store:
        broken = store.create_session("broken")
        broken.append("turn/start", {"turn": 1})
        message = {
            "id": "m",
            "role": "assistant",
            "content": [],
            "source": {"kind": "model", "provider": "p", "model": "m"},
        }
        data = {"turn": 1, "step": 1, "message": message}
        broken.append("assistant/message", data, surface_op="append")
    result = _verify(backend)
    assert result.exit_code == 1
    assert f"{count} ok, 1 failed" in result.output
    assert "invariant outside-step at seq 1" in result.output


def test_framework_sessions_are_titled_by_the_framework(backend: Backend) -> None:
    _mixed_store(backend)
    with open_store(backend.url, schema=backend.schema) as store:
        assert store.session_info(ADK_KEY).title == "s"  # ADK's session id
        assert store.session_info("chat").title == "Weather in Paris?"  # the first user message
        assert store.session_info("langgraph:t1").title == "t1"  # the thread id
        assert store.session_info("langgraph:t2~1").title == "t2"  # kept by a move
        saver = SessionSQLSaver(store)
        saver.copy_thread("t1", "t3")
        assert store.session_info("langgraph:t3").title == "t3"
        odd = "line\none\x00" + "x" * 1200
        saver.put(
            {"configurable": {"thread_id": odd, "checkpoint_ns": ""}},
            {**_checkpoint(), "id": "1"},
            {},
            {},
        )
        [info] = [i for i in store.list_sessions() if i.id.startswith("langgraph:#")]
        assert info.title == "line one" + "x" * 991 + "…"
        # The ADK service's state sessions are not ADK sessions: no title.
        assert store.session_info(store_id("app", "app")).title is None


def _checkpoint() -> Any:
    return {
        "v": 4,
        "id": "1",
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": {},
        "channel_versions": {},
        "versions_seen": {},
        "updated_channels": None,
    }


# -- hidden sessions: the ADK service's app and user state ------------------------------------


def _ls(backend: Backend, *args: str) -> list[str]:
    env = {"SESSION_SQL_URL": backend.url, "SESSION_SQL_SCHEMA": backend.schema}
    result = CliRunner().invoke(app, ["ls", "--json", *args], env=env)
    assert result.exit_code == 0, result.output
    return sorted(row["id"] for row in json.loads(result.stdout))


def test_the_adk_state_sessions_are_hidden_from_the_listings_unless_asked(
    backend: Backend,
) -> None:
    test_adk_reads.write_two_turns(backend)
    state = sorted([store_id("app", "app"), store_id("user", "app", "u")])
    assert _ls(backend) == [ADK_KEY]
    assert _ls(backend, "--hidden") == sorted([ADK_KEY, *state])
    with open_store(backend.url, schema=backend.schema) as store:
        assert store.session_info(state[0]).labels[HIDDEN_LABEL] == "true"
        # The API lists every session unless asked; scans (verify, export) see them all.
        assert len(store.list_sessions()) == 3 == store.count_sessions()
        assert [i.id for i in store.list_sessions(include_hidden=False)] == [ADK_KEY]
        assert store.count_sessions(include_hidden=False) == 1
        assert len(list(store.iter_sessions())) == 3
        with TestClient(create_app(store), base_url="http://127.0.0.1") as client:
            listed = client.get("/api/sessions").json()
            assert [s["id"] for s in listed["sessions"]] == [ADK_KEY]
            listed = client.get("/api/sessions", params={"hidden": "1"}).json()
            assert sorted(s["id"] for s in listed["sessions"]) == sorted([ADK_KEY, *state])
            page = client.get("/").text
            assert ADK_KEY in page and state[0] not in page
            assert state[0] in client.get("/", params={"hidden": "1"}).text


def test_a_hidden_label_of_another_value_hides_nothing(backend: Backend) -> None:
    with open_store(backend.url, schema=backend.schema) as store:
        store.create_session("a", labels={HIDDEN_LABEL: "false"})
        store.create_session("b", labels={"other": "true"})
        store.create_session("c", labels={HIDDEN_LABEL: "true"})
        store.create_session("d")
        assert [i.id for i in store.list_sessions(include_hidden=False, order="created")] == [
            "a",
            "b",
            "d",
        ]
    assert _ls(backend) == ["a", "b", "d"]
    assert _ls(backend, "--hidden") == ["a", "b", "c", "d"]
