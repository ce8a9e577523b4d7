"""pydantic-ai-harness's ``StepStore`` over session_sql: a real ``Agent`` with the
``StepPersistence`` capability, compared with the harness's own stores, continued and forked."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("pydantic_ai_harness")
pytest.importorskip("starlette")

from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai_harness.step_persistence import (
    FileStepStore,
    SqliteStepStore,
    StepStore,
    continue_run,
    fork_run,
)
from starlette.testclient import TestClient

from session_sql import InvalidArgumentError, open_store
from session_sql.inspector.app import create_app
from session_sql.integrations.pydantic_ai import SessionSQLStepStore

from ..docs.test_docs_sql import _run
from .pai_agent import Script, Tee, agent


async def reads(store: Any, run_id: str, calls: list[str]) -> dict[str, Any]:
    """Everything the protocol reads about a run."""
    return {
        "run": await store.get_run(run_id=run_id),
        "runs": await store.list_runs(),
        "conversation": await store.list_runs(conversation_id="conv-1"),
        "children": await store.list_runs(parent_run_id=run_id),
        "events": await store.list_events(run_id=run_id),
        "latest": await store.latest_snapshot(run_id=run_id),
        "latest_any": await store.latest_snapshot(run_id=run_id, include_interrupted=True),
        "snapshots": await store.list_snapshots(run_id=run_id, include_interrupted=True),
        "effects": [await store.get_tool_effect(run_id=run_id, tool_call_id=c) for c in calls],
        "unresolved": await store.list_unresolved_tool_effects(run_id=run_id),
    }


def test_an_agent_run_reads_back_as_from_the_harness_sqlite_store(backend, tmp_path) -> None:
    calls = ["call-1-0", "call-1-1", "call-1-2", "nope"]

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        theirs = SqliteStepStore(database=tmp_path / "harness.db")
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            assert isinstance(ours, StepStore)
            tee = Tee(ours, theirs)
            result = await agent(tee, Script(), run_id="run-1").run(
                "weather in Paris, Rome, Atlantis", conversation_id="conv-1"
            )
            assert result.output.startswith("Weather: ")
            await agent(tee, Script(), run_id="run-2", parent_run_id="run-1").run(
                "weather in Oslo", conversation_id="conv-2"
            )
            return await reads(ours, "run-1", calls), await reads(theirs, "run-1", calls)

    mine, harness = asyncio.run(main())
    assert mine == harness
    assert [e.kind for e in mine["events"]].count("tool_call_started") == 3
    # A ModelRetry (Atlantis) leaves its effect "started" in the harness's store, and in ours.
    assert [e.status for e in mine["effects"][:3]] == ["completed", "completed", "started"]
    assert [e.tool_call_id for e in mine["unresolved"]] == ["call-1-2"]
    assert mine["latest"] is not None and len(mine["latest"].messages) == 4
    assert [r.run_id for r in mine["children"]] == ["run-2"]
    assert [r.run_id for r in mine["runs"]] == ["run-1", "run-2"]


def test_what_is_stored_is_the_harness_json_byte_for_byte(backend, tmp_path) -> None:
    """Every record is kept as the harness's JSON store writes it (FileStepStore's files)."""
    files = tmp_path / "files"

    async def main() -> None:
        theirs = FileStepStore(files, media_store=None)
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            prompt = "weather in Zürich, \u00e9\u2028x, \U0001f600"
            await agent(Tee(ours, theirs), Script(), run_id="run-b").run(prompt)

    asyncio.run(main())
    with open_store(backend.url, schema=backend.schema) as store:
        log = list(store.events("pydantic-ai:run-b"))
    by_type: dict[str, list[str]] = {}
    for event in log:
        by_type.setdefault(event.type, []).append(json.dumps(event.data))
    run_dir = files / "run-b"
    assert by_type["pydantic-ai/run"] == [(run_dir / "run.json").read_text(encoding="utf-8")]
    lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    assert by_type["pydantic-ai/step"] == lines
    kept = {e.seq: e for e in log}
    snapshots = sorted((run_dir / "snapshots").glob("*.json"), key=lambda p: int(p.stem))
    ours = [json.loads(text) for text in by_type["pydantic-ai/snapshot"]]
    assert len(ours) == len(snapshots) == 2
    for mine, path in zip(ours, snapshots, strict=True):
        theirs = json.loads(path.read_text(encoding="utf-8"))
        history = [_kept(kept[seq]) for seq in mine.pop("message_seqs")]
        assert json.dumps(history) == json.dumps(theirs.pop("messages"))
        assert json.dumps(mine) == json.dumps(theirs)


def _kept(event: Any) -> Any:
    data = event.to_json()["data"]
    if event.type == "pydantic-ai/revision":
        return data["message"]
    if event.type == "user/message":
        return data["pydantic_ai"]
    return data["message"]["pydantic_ai"]


def test_the_run_reads_like_a_native_session(backend) -> None:
    async def main() -> None:
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            await agent(ours, Script(), run_id="run-s").run("weather in Paris, Rome")

    asyncio.run(main())
    with open_store(backend.url, schema=backend.schema) as store:
        [info] = store.list_sessions(labels={"pydantic_ai": "run"})
        assert info.id == "pydantic-ai:run-s"
        assert info.labels["pydantic_ai_run"] == "run-s"
        assert info.title == "weather in Paris, Rome"  # the first user message
        messages = store.messages(info.id)
        assert [m["role"] for m in messages] == ["user", "assistant", "user", "user", "assistant"]
        assert messages[0]["content"] == [{"type": "text", "text": "weather in Paris, Rome"}]
        assert [b["type"] for b in messages[1]["content"]] == ["text", "tool-call", "tool-call"]
        results = [m["content"][0] for m in messages[2:4]]
        assert [r["toolCallId"] for r in results] == ["call-1-0", "call-1-1"]
        assert json.loads(results[0]["content"][0]["text"]) == {"city": "Paris", "sky": "sunny"}
        stats = store.stats(info.id)
        assert [(t.tool, t.calls, t.errors) for t in stats.tools] == [("get_weather", 2, 0)]
        [tokens] = stats.tokens
        assert tokens.messages == 2 and tokens.input_tokens > 0
        assert stats.events_by_type["turn/start"] == stats.events_by_type["turn/end"] == 1
        assert store.verify(info.id).ok
        sql = f"SELECT tool, is_error, result_seq FROM tool_calls WHERE session_id = '{info.id}'"
        calls = [(r[0], bool(r[1]), r[2] is not None) for r in _run(backend, sql)]
        assert calls == [("get_weather", False, True)] * 2
        with TestClient(create_app(store), base_url="http://127.0.0.1") as client:
            served = client.get(f"/api/sessions/{info.id}/messages").json()["messages"]
            assert json.dumps(served) == json.dumps(messages)
            page = client.get(f"/sessions/{info.id}")
            assert page.status_code == 200 and "weather in Paris, Rome" in page.text


def test_an_interrupted_run_continues_from_the_store(backend) -> None:
    """The model fails after the tools ran: the run fails, a fresh store (another process)
    continues it from its last snapshot."""

    async def first() -> None:
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            with pytest.raises(RuntimeError, match="model service is down"):
                await agent(ours, Script(fail_after=1), run_id="run-i").run("weather in Paris")

    async def second() -> tuple[str, Any]:
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            events = await ours.list_events(run_id="run-i")
            assert events[-1].kind == "run_failed"
            assert await ours.list_unresolved_tool_effects(run_id="run-i") == []
            history = await continue_run(ours, run_id="run-i")
            assert [m.kind for m in history] == ["request", "response", "request"]
            result = await agent(ours, Script(), run_id="run-i2").run(message_history=history)
            return result.output, await ours.latest_snapshot(run_id="run-i2")

    asyncio.run(first())
    output, latest = asyncio.run(second())
    assert output.startswith("Weather: ")
    assert latest is not None and len(latest.messages) == 4
    with open_store(backend.url, schema=backend.schema) as store:
        reasons = [
            e.data["reason"]["kind"]
            for e in store.events("pydantic-ai:run-i")
            if e.type == "turn/end"
        ]
        assert reasons == ["error"]
        assert [m["role"] for m in store.messages("pydantic-ai:run-i2")][-1] == "assistant"


def test_a_run_that_crashed_mid_tool_cycle_resumes_from_its_interrupted_snapshot(
    backend, tmp_path
) -> None:
    """A tool crashes the run: ours and the harness's SQLite store hold the same interrupted
    snapshot and tool effects; a fresh store resumes from it after repairing the history."""
    from pydantic_ai.messages import repair_messages

    async def first() -> tuple[dict[str, Any], dict[str, Any]]:
        theirs = SqliteStepStore(database=tmp_path / "harness.db")
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            with pytest.raises(RuntimeError, match="crashed"):
                await agent(Tee(ours, theirs), Script(), run_id="run-c").run(
                    "weather in Paris, Crash", conversation_id="conv-1"
                )
            calls = ["call-1-0", "call-1-1"]
            return await reads(ours, "run-c", calls), await reads(theirs, "run-c", calls)

    async def second() -> str:
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            with pytest.raises(LookupError):
                await continue_run(ours, run_id="run-c")  # no settled snapshot
            history = await continue_run(ours, run_id="run-c", include_interrupted=True)
            repaired = repair_messages(history)
            result = await agent(ours, Script(), run_id="run-c2").run(
                "weather in Oslo", message_history=repaired
            )
            return result.output

    mine, harness = asyncio.run(first())
    assert mine == harness
    assert mine["latest"] is None
    assert mine["latest_any"] is not None and mine["latest_any"].state == "interrupted"
    assert [e.status for e in mine["effects"]] == ["completed", "failed"]
    assert asyncio.run(second()).startswith("Weather: ")


def test_fork_run_branches_a_new_run_off_the_history(backend) -> None:
    async def main() -> list[Any]:
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as ours:
            await agent(ours, Script(), run_id="run-f").run("weather in Paris")
            history = await fork_run(ours, run_id="run-f")
            branch = agent(ours, Script(), run_id="run-f2", parent_run_id="run-f")
            await branch.run("weather in Rome", message_history=history)
            children = await ours.list_runs(parent_run_id="run-f")
            assert [r.run_id for r in children] == ["run-f2"]
            latest = await ours.latest_snapshot(run_id="run-f2")
            assert latest is not None
            parent = await ours.latest_snapshot(run_id="run-f")
            assert parent is not None
            assert latest.messages[: len(parent.messages)] == parent.messages
            return latest.messages

    messages = asyncio.run(main())
    assert len(messages) == 8
    with open_store(backend.url, schema=backend.schema) as store:
        shown = store.messages("pydantic-ai:run-f2")
        assert [m["role"] for m in shown].count("assistant") == 4
        roundtrip = ModelMessagesTypeAdapter.validate_python(
            [_kept(e) for e in store.events("pydantic-ai:run-f2") if _keeps(e)]
        )
        assert roundtrip[0] == messages[0]


def _keeps(event: Any) -> bool:
    return event.type == "pydantic-ai/revision" or "pydantic_ai" in (
        event.data if event.type == "user/message" else event.data.get("message") or {}
    )


def test_a_store_that_is_not_async_is_refused(backend) -> None:
    with (
        open_store(backend.url, schema=backend.schema) as store,
        pytest.raises(InvalidArgumentError, match="AsyncSessionStore"),
    ):
        SessionSQLStepStore(store)  # type: ignore[arg-type]
