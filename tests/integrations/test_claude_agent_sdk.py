"""SPEC §13.2: ``SessionSQLSessionStore`` keeps the Claude Agent SDK's ``SessionStore`` protocol.

On both backends: the SDK's own conformance runner (all 14 contracts), entries read back byte
for byte, retried batches stored once, a transcript's messages on the surface (turns, tool
calls, usage, title, the subagent linked to its parent), tenants kept apart, and refused input
that changes nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from claude_agent_sdk import SessionKey
from claude_agent_sdk.testing import run_session_store_conformance

from session_sql import (
    AsyncSessionStore,
    InvalidArgumentError,
    NotJSONError,
    open_async_store,
)
from session_sql.integrations import CLAUDE_ENTRY
from session_sql.integrations._claude_mapping import store_id
from session_sql.integrations.claude_agent_sdk import SessionSQLSessionStore

from .claude_transcript import SESSION_ID, SUBPATH, main_entries, subagent_entries

T = TypeVar("T")
KEY: SessionKey = {"project_key": "-home-dev-proj", "session_id": SESSION_ID}
SUB: SessionKey = {**KEY, "subpath": SUBPATH}


def run(backend: Any, body: Callable[[SessionSQLSessionStore], Awaitable[T]], **opts: Any) -> T:
    """``body(adapter)`` on a fresh event loop, over an async store on ``backend``."""

    async def main() -> T:
        async with SessionSQLSessionStore.from_url(
            backend.url, schema=backend.schema, **opts
        ) as adapter:
            return await body(adapter)

    return asyncio.run(main())


def test_conformance_runner_passes_every_contract(backend: Any) -> None:
    """The SDK's runner, each contract on a fresh tenant of the store (a namespace of its own):
    it builds one store per contract plus a probe, so 15 builds mean all 14 ran, none skipped."""

    async def main() -> int:
        stores: list[AsyncSessionStore] = []

        async def make() -> SessionSQLSessionStore:
            store = open_async_store(
                backend.url, schema=backend.schema, tenant=f"contract-{len(stores)}"
            )
            stores.append(await store)
            return SessionSQLSessionStore(store)

        try:
            await run_session_store_conformance(make)
        finally:
            for store in stores:
                await store.close()
        return len(stores)

    assert asyncio.run(main()) == 15


ODD = [
    {"uuid": "o1", "type": "user", "z": 1, "a": {"y": [1, 2.5, None], "b": True}, "m": "é✓\u2028"},
    {"type": "tag", "tag": "", "sessionId": "x"},
    {"uuid": "o2", "type": "assistant", "message": {"role": "assistant", "content": "hi", "id": 7}},
    {"uuid": "o3", "type": "x", "n": 1e16, "k": 9007199254740991, "e": {}, "l": [], "f": -1.5},
]


def test_load_returns_every_entry_byte_for_byte(backend: Any) -> None:
    """Key order, unicode, floats and odd shapes survive, also through a store opened anew."""
    batch = ODD + main_entries()

    async def write(adapter: SessionSQLSessionStore) -> Any:
        await adapter.append(KEY, batch[:3])
        await adapter.append(KEY, batch[3:])
        return await adapter.load(KEY)

    async def read(adapter: SessionSQLSessionStore) -> Any:
        return await adapter.load(KEY)

    expected = json.dumps(batch)
    assert json.dumps(run(backend, write)) == expected
    assert json.dumps(run(backend, read)) == expected


def test_what_only_json_text_can_hold_is_kept_too(backend: Any) -> None:
    """Values ``json.dumps`` writes but the store's JSON domain refuses (an int past 2**53 that
    a JavaScript writer printed, NaN, -0.0, U+0000 in a tool's output) come back byte for byte;
    such an entry stays off the surface, the rest of the batch is mapped as usual."""
    odd = [
        {"uuid": "t1", "type": "progress", "id": 12345678901234567000, "f": -0.0},
        {"uuid": "t2", "type": "x", "v": float("nan"), "w": float("inf")},
        {
            "uuid": "t3",
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a\x00b"}
                ],
            },
        },
    ]
    entries = [*main_entries()[:5], *odd, *main_entries()[5:]]

    async def body(adapter: SessionSQLSessionStore) -> Any:
        await adapter.append(KEY, entries)
        await adapter.append(KEY, odd)  # a retry: stored once
        fresh = SessionSQLSessionStore(adapter.store)  # folds the stored text entries again
        await fresh.append(KEY, [{"uuid": "t9", "type": "x"}, *odd])
        summaries = await adapter.list_session_summaries(KEY["project_key"])
        return await adapter.load(KEY), await adapter.store.messages(store_id(KEY)), summaries

    loaded, messages, summaries = run(backend, body)
    assert json.dumps(loaded) == json.dumps([*entries, {"uuid": "t9", "type": "x"}])
    assert "t3:toolu_01" not in [m["id"] for m in messages]
    assert len(messages) == 13
    assert [s["data"]["custom_title"] for s in summaries] == ["Fix slugify"]


def test_a_retried_batch_is_stored_once(backend: Any) -> None:
    """A batch sent again (by this process or another) adds nothing; a batch that repeats some
    uuids adds only the new entries; an entry without uuid in a new batch is still added."""
    entries = main_entries()
    first, second = entries[:6], entries[6:]
    tag = {"type": "tag", "tag": "wip", "sessionId": SESSION_ID}

    async def once(adapter: SessionSQLSessionStore) -> None:
        await adapter.append(KEY, first)
        await adapter.append(KEY, first)  # the SDK's retry of a batch whose reply was lost

    async def again(adapter: SessionSQLSessionStore) -> Any:
        await adapter.append(KEY, first)  # another process's retry, nothing cached
        await adapter.append(KEY, [*first[-2:], *second])  # overlaps the stored batch
        await adapter.append(KEY, [*first[-2:], *second])  # a retry of that
        await adapter.append(KEY, [tag])  # a tag has no uuid: each one sent is a new entry
        return await adapter.load(KEY)

    run(backend, once)
    assert run(backend, again) == [*entries, tag]
    assert run(backend, again) == [*entries, tag, tag]

    async def count(adapter: SessionSQLSessionStore) -> int:
        events = await adapter.store.events(store_id(KEY))
        return sum([1 async for e in events if e.type == CLAUDE_ENTRY])

    assert run(backend, count) == len(entries) + 2


def test_a_claude_session_reads_like_a_native_one(backend: Any) -> None:
    """Messages, turns, tool calls, token usage, title and the subagent's link to its parent."""

    async def body(adapter: SessionSQLSessionStore) -> Any:
        entries = main_entries()
        await adapter.append(KEY, entries[:8])  # the first turn and the system line
        await adapter.append(KEY, entries[8:])
        await adapter.append(SUB, subagent_entries())
        store = adapter.store
        main, sub = store_id(KEY), store_id(SUB)
        messages = await store.messages(main)
        events = [e async for e in await store.events(main)]
        infos = {i.id: i for i in await store.list_sessions()}
        return (
            messages,
            events,
            infos[main],
            infos[sub],
            await store.stats(main),
            await store.verify(main),
            await store.messages(sub),
        )

    messages, events, main, sub, stats, report, sub_messages = run(backend, body)
    roles = [(m["role"], [b["type"] for b in m["content"]]) for m in messages]
    assert roles == [
        ("user", ["text"]),
        ("assistant", ["reasoning"]),
        ("assistant", ["text"]),
        ("assistant", ["tool-call"]),
        ("user", ["tool-result"]),
        ("assistant", ["text"]),
        ("user", ["text"]),
        ("assistant", ["tool-call"]),
        ("assistant", ["tool-call"]),
        ("user", ["tool-result"]),
        ("user", ["tool-result"]),
        ("assistant", ["text"]),
        ("assistant", ["text"]),
    ]
    assert messages[0]["content"][0]["text"].startswith("Fix the failing test")
    assert messages[3]["content"][0] == {
        "type": "tool-call",
        "id": "toolu_01",
        "name": "Read",
        "arguments": '{"path": "utils.py"}',
    }
    assert messages[10]["content"][0]["isError"] is True
    assert messages[1]["id"] == "a1"
    assert messages[1]["source"]["model"] == "claude-sonnet-4-5-20250929"
    kinds = [e.type for e in events]
    assert kinds.count("turn/start") == 2
    assert [e.data["reason"]["kind"] for e in events if e.type == "turn/end"] == [
        "completed",
        "completed",
    ]
    assert kinds.count(CLAUDE_ENTRY) == len(main_entries())
    assert kinds.count("tool/call") == 3
    assert {(t.tool, t.calls, t.errors) for t in stats.tools} == {
        ("Read", 1, 0),
        ("Grep", 1, 0),
        ("Bash", 1, 1),
    }
    # Each API message counted once, though every block's line repeats its usage.
    [tokens] = stats.tokens
    assert (tokens.input_tokens, tokens.output_tokens) == (4 * 1200, 61 + 12 + 44 + 15)
    assert report.ok
    assert main.title == "Fix slugify"
    assert main.labels["claude_session"] == SESSION_ID
    assert sub.parent_session == main.id
    assert (
        SessionSQLSessionStore.session_id_of(KEY),
        SessionSQLSessionStore.session_id_of(SUB),
    ) == (
        main.id,
        sub.id,
    )
    assert sub.labels["claude_subpath"] == SUBPATH
    assert sub.title == "Search for callers of slugify."
    assert [m["content"][0]["text"] for m in sub_messages] == [
        "Search for callers of slugify.",
        "Two callers.",
    ]


def test_tenants_are_kept_apart(backend: Any) -> None:
    """One key in two tenants of one database: two transcripts, listed and deleted apart."""

    async def main() -> Any:
        async with (
            SessionSQLSessionStore.from_url(backend.url, schema=backend.schema, tenant="a") as a,
            SessionSQLSessionStore.from_url(backend.url, schema=backend.schema, tenant="b") as b,
        ):
            await a.append(KEY, [{"type": "x", "from": "a"}])
            await b.append(KEY, [{"type": "x", "from": "b"}])
            await b.append(SUB, [{"type": "x", "from": "b-sub"}])
            seen = (
                await a.load(KEY),
                await b.load(KEY),
                await a.list_subkeys(KEY),
                await b.list_subkeys(KEY),
                len(await a.list_sessions(KEY["project_key"])),
            )
            await a.delete(KEY)
            return (*seen, await a.load(KEY), await b.load(KEY), await b.load(SUB))

    got = asyncio.run(main())
    assert got[:5] == ([{"type": "x", "from": "a"}], [{"type": "x", "from": "b"}], [], [SUBPATH], 1)
    assert got[5:] == (None, [{"type": "x", "from": "b"}], [{"type": "x", "from": "b-sub"}])


@pytest.mark.parametrize(
    ("entries", "error"),
    [
        ("not a list", InvalidArgumentError),
        ([{"uuid": "n1", "type": "x"}, {"no": "type"}], InvalidArgumentError),
        ([{"uuid": "n1", "type": "x"}, ["a list"]], InvalidArgumentError),
        ([{"uuid": "n1", "type": "x"}, {"type": "x", "v": {1, 2}}], NotJSONError),
        ([{"uuid": "n1", "type": "x"}, {"type": "x", "v": b"bytes"}], NotJSONError),
    ],
)
def test_bad_batches_change_nothing(backend: Any, entries: Any, error: type[Exception]) -> None:
    async def body(adapter: SessionSQLSessionStore) -> Any:
        await adapter.append(KEY, [{"uuid": "first", "type": "x"}])
        before = await adapter.store.session_info(store_id(KEY))
        with pytest.raises(error):
            await adapter.append(KEY, entries)
        after = await adapter.store.session_info(store_id(KEY))
        await adapter.append(KEY, [{"uuid": "n1", "type": "x"}])  # still writable, n1 is new
        return before, after, await adapter.load(KEY)

    before, after, loaded = run(backend, body)
    assert before == after
    assert loaded == [{"uuid": "first", "type": "x"}, {"uuid": "n1", "type": "x"}]


def test_a_refused_first_batch_leaves_no_session(backend: Any) -> None:
    async def body(adapter: SessionSQLSessionStore) -> Any:
        with pytest.raises(NotJSONError):
            await adapter.append(KEY, [{"uuid": "n1", "type": "x"}, {"type": "x", "v": {1}}])
        return await adapter.load(KEY), await adapter.store.list_sessions()

    assert run(backend, body) == (None, [])


def test_bad_keys_are_refused(backend: Any) -> None:
    async def body(adapter: SessionSQLSessionStore) -> None:
        for key in ({"project_key": "", "session_id": "s"}, {"session_id": "s"}, "p/s"):
            with pytest.raises(InvalidArgumentError):
                await adapter.append(key, [{"type": "x"}])  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await adapter.load({**KEY, "subpath": ""})
        assert await adapter.list_sessions(KEY["project_key"]) == []

    run(backend, body)


def test_two_writers_interleave_without_loss(backend: Any) -> None:
    """Two stores (two connection pools) append to one transcript at once: every entry lands
    once, and each writer's entries stay in its order."""

    async def main() -> Any:
        async with (
            SessionSQLSessionStore.from_url(backend.url, schema=backend.schema) as a,
            SessionSQLSessionStore.from_url(backend.url, schema=backend.schema) as b,
        ):

            async def write(adapter: SessionSQLSessionStore, name: str) -> None:
                for i in range(10):
                    batch = [{"uuid": f"{name}{i}", "type": "x"}]
                    await adapter.append(KEY, batch)
                    await adapter.append(KEY, batch)  # and its retry

            await asyncio.gather(write(a, "a"), write(b, "b"))
            return await a.load(KEY)

    loaded = asyncio.run(main())
    uuids = [e["uuid"] for e in loaded]
    assert sorted(uuids) == sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)])
    assert [u for u in uuids if u[0] == "a"] == [f"a{i}" for i in range(10)]


def test_a_transcript_deleted_by_another_store_is_written_again(backend: Any) -> None:
    """A cached handle on a transcript another process deleted: the next batch starts it anew,
    and a retry of a batch stored before the delete is stored again (the delete took it)."""

    async def main() -> Any:
        async with (
            SessionSQLSessionStore.from_url(backend.url, schema=backend.schema) as a,
            SessionSQLSessionStore.from_url(backend.url, schema=backend.schema) as b,
        ):
            await a.append(KEY, [{"uuid": "1", "type": "x"}])
            await b.delete(KEY)
            await a.append(KEY, [{"uuid": "1", "type": "x"}, {"uuid": "2", "type": "x"}])
            return await b.load(KEY)

    assert asyncio.run(main()) == [{"uuid": "1", "type": "x"}, {"uuid": "2", "type": "x"}]


def test_compaction_takes_the_history_off_the_surface(backend: Any) -> None:
    """After Claude Code's compaction boundary the surface holds its summary and what follows,
    as the model sees it; the log and ``load`` keep everything."""
    boundary = {
        "type": "system",
        "subtype": "compact_boundary",
        "content": "Conversation compacted",
        "compactMetadata": {"trigger": "manual", "preTokens": 23000},
        "uuid": "cb1",
        "logicalParentUuid": "a8",
        "timestamp": "2026-01-05T10:05:00.000Z",
    }
    summary = {
        "type": "user",
        "isCompactSummary": True,
        "uuid": "cs1",
        "parentUuid": "cb1",
        "timestamp": "2026-01-05T10:05:01.000Z",
        "message": {"role": "user", "content": "This session continues: slugify was fixed."},
    }
    entries = [*main_entries(), boundary, summary]

    async def body(adapter: SessionSQLSessionStore) -> Any:
        await adapter.append(KEY, entries[:5])
        await adapter.append(KEY, entries[5:])
        await adapter.append(KEY, [{**summary, "uuid": "u9", "isCompactSummary": False}])
        sid = store_id(KEY)
        return (
            await adapter.store.messages(sid),
            await adapter.load(KEY),
            (await adapter.store.verify(sid)).ok,
        )

    messages, loaded, ok = run(backend, body)
    assert [m["id"] for m in messages] == ["cs1", "u9"]
    assert json.dumps(loaded) == json.dumps(
        [*entries, {**summary, "uuid": "u9", "isCompactSummary": False}]
    )
    assert ok


def test_the_store_must_be_async_and_know_the_types(backend: Any) -> None:
    """A sync store is refused; a catalog without the integration's types is refused at first
    use, and ``from_url`` adds them to a catalog it is given."""
    from session_sql import DEFAULT_CATALOG, ConfigurationError, open_store

    with (
        open_store(backend.url, schema=backend.schema) as sync,
        pytest.raises(InvalidArgumentError),
    ):
        SessionSQLSessionStore(sync)  # type: ignore[arg-type]

    async def main() -> Any:
        async with open_async_store(
            backend.url, schema=backend.schema, catalog=DEFAULT_CATALOG
        ) as bare:
            with pytest.raises(ConfigurationError):
                await SessionSQLSessionStore(bare).append(KEY, [{"type": "x"}])
        async with SessionSQLSessionStore.from_url(
            backend.url, schema=backend.schema, catalog=DEFAULT_CATALOG
        ) as adapter:
            await adapter.append(KEY, [{"type": "x"}])
            return await adapter.load(KEY)

    assert asyncio.run(main()) == [{"type": "x"}]


def test_a_result_cites_its_call_across_processes(backend: Any) -> None:
    """A tool result stored by a process that did not store its call (a store opened anew)
    cites that call's ``tool/call`` event."""
    entries = main_entries()
    split = 5  # the first call is stored, its result is not yet

    async def first(adapter: SessionSQLSessionStore) -> None:
        await adapter.append(KEY, entries[:1])
        await adapter.append(KEY, entries[1:split])

    async def second(adapter: SessionSQLSessionStore) -> Any:
        await adapter.append(KEY, entries[split:])
        return [e async for e in await adapter.store.events(store_id(KEY))]

    run(backend, first)
    events = run(backend, second)
    [call] = [e for e in events if e.type == "tool/call" and e.data["callId"] == "toolu_01"]
    [result] = [
        e
        for e in events
        if e.type == "tool/result" and e.data["message"]["source"]["callId"] == "toolu_01"
    ]
    assert call.seq in result.source_event_seqs


def test_a_session_whose_first_batch_never_landed_is_not_listed(backend: Any) -> None:
    """A session created for a transcript whose first batch then failed (a crash between the
    two) is no transcript: not listed, loaded as None, written by the next batch, deleted."""
    from session_sql.integrations._claude_mapping import header_of, labels_of

    async def body(adapter: SessionSQLSessionStore) -> Any:
        for key in (KEY, SUB):
            await adapter.store.create_session(
                store_id(key), header=header_of(key), labels=labels_of(key)
            )
        seen = (
            await adapter.list_sessions(KEY["project_key"]),
            await adapter.list_subkeys(KEY),
            await adapter.load(KEY),
        )
        await adapter.append(KEY, [{"uuid": "1", "type": "x"}])
        listed = [s["session_id"] for s in await adapter.list_sessions(KEY["project_key"])]
        await adapter.delete(KEY)
        return seen, listed, await adapter.store.list_sessions()

    seen, listed, left = run(backend, body)
    assert seen == ([], [], None)
    assert listed == [SESSION_ID]
    assert left == []
