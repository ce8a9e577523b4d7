"""SPEC §13.2: a realistic transcript through the SDK's store functions gives what the SDK's own
``InMemorySessionStore`` gives: import (twice, on ours: re-import is duplicate-safe), messages,
listing and info (through the summaries), subagents, rename, tag, fork and delete."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (
    InMemorySessionStore,
    SessionStore,
    delete_session_via_store,
    fork_session_via_store,
    get_session_info_from_store,
    get_session_messages_from_store,
    get_subagent_messages_from_store,
    import_session_to_store,
    list_sessions_from_store,
    list_subagents_from_store,
    project_key_for_directory,
    rename_session_via_store,
    tag_session_via_store,
)

from session_sql.integrations.claude_agent_sdk import SessionSQLSessionStore

from .claude_transcript import AGENT, SESSION_ID, SUBPATH, write_transcripts


def _plain(value: Any, *drop: str) -> Any:
    """A function's result as plain data, without the fields that differ by store or run."""
    if isinstance(value, list):
        return [_plain(v, *drop) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.asdict(value)
        return {k: v for k, v in fields.items() if k not in drop}
    return value


async def _walk(store: SessionStore, directory: str, imports: int) -> dict[str, Any]:
    """Everything the SDK's functions say about the transcript, in one store."""
    for _ in range(imports):
        await import_session_to_store(SESSION_ID, store, directory=directory)
    seen: dict[str, Any] = {
        "messages": _plain(await get_session_messages_from_store(store, SESSION_ID, directory)),
        "list": _plain(await list_sessions_from_store(store, directory), "last_modified"),
        "info": _plain(
            await get_session_info_from_store(store, SESSION_ID, directory), "last_modified"
        ),
        "subagents": await list_subagents_from_store(store, SESSION_ID, directory),
        "subagent": _plain(
            await get_subagent_messages_from_store(
                store, SESSION_ID, AGENT.removeprefix("agent-"), directory
            )
        ),
    }
    await rename_session_via_store(store, SESSION_ID, "Renamed by hand", directory)
    await tag_session_via_store(store, SESSION_ID, "urgent", directory)
    seen["renamed"] = _plain(await list_sessions_from_store(store, directory), "last_modified")
    fork = await fork_session_via_store(store, SESSION_ID, directory, title="A fork")
    forked = await get_session_messages_from_store(store, fork.session_id, directory)
    seen["fork"] = [(m.type, m.message) for m in forked]
    listed = await list_sessions_from_store(store, directory)
    seen["titles"] = sorted(info.summary for info in listed)
    await delete_session_via_store(store, SESSION_ID, directory)
    seen["deleted"] = (
        await get_session_info_from_store(store, SESSION_ID, directory),
        await list_subagents_from_store(store, SESSION_ID, directory),
        await store.load({"project_key": project_key_for_directory(directory), **_sub()}),
    )
    return seen


def _sub() -> dict[str, str]:
    return {"session_id": SESSION_ID, "subpath": SUBPATH}


def test_the_sdk_store_functions_agree_with_the_in_memory_store(
    backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "proj"
    directory.mkdir()
    config = tmp_path / "claude"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    write_transcripts(config / "projects", project_key_for_directory(str(directory)))

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        expected = await _walk(InMemorySessionStore(), str(directory), imports=1)
        async with SessionSQLSessionStore.from_url(backend.url, schema=backend.schema) as ours:
            return expected, await _walk(ours, str(directory), imports=2)

    expected, got = asyncio.run(main())
    assert len(expected["messages"]) == 12  # the user and assistant lines of the chain
    assert expected["subagents"] == [AGENT.removeprefix("agent-")]
    assert len(expected["subagent"]) == 2
    assert expected["titles"] == ["A fork", "Renamed by hand"]
    assert expected["deleted"] == (None, [], None)
    for name in expected:
        assert got[name] == expected[name], name
