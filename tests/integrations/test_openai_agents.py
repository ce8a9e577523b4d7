"""SPEC §11.5: ``SessionSQLSession`` keeps the OpenAI Agents SDK's ``Session`` protocol.

On both backends: every method, limits, empty sessions, pop on empty, clear then add, unicode,
large and unknown items, refused input that changes nothing, concurrent writers in two
processes, and a store opened by another process that sees the same items.
"""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

import pytest
from agents.memory import Session, SessionSettings

from session_sql import (
    DEFAULT_CATALOG,
    AsyncSessionStore,
    InvalidArgumentError,
    NotJSONError,
    Replace,
    SessionNotFoundError,
    open_async_store,
    open_store,
)
from session_sql._gc import PAUSE_MIN_EVENTS
from session_sql.integrations import _openai_agents_mapping as mapping
from session_sql.integrations import openai_agents as adapter
from session_sql.integrations.openai_agents import ITEM_TYPE, SessionSQLSession

from ..loops import in_loops
from .oa_workers import add_batches, read_items

T = TypeVar("T")
SPAWN = multiprocessing.get_context("spawn")

USER_TEXT = {"role": "user", "content": "What's the weather in Paris?"}
USER_PARTS = {
    "type": "message",
    "role": "user",
    "content": [{"type": "input_text", "text": "two"}, {"type": "input_text", "text": "parts"}],
}
ASSISTANT = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "ok", "annotations": [], "logprobs": []}],
}
CALL = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
    "status": "completed",
}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
REASONING = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "x" * 40}
SYSTEM = {"role": "system", "content": "You are terse."}
USER_IMAGE = {
    "role": "user",
    "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"}
    ],
}
FUTURE = {"type": "hologram_call", "id": "hc_1", "payload": {"depth": [1, 2.5, None, True]}}
ITEMS = [USER_TEXT, SYSTEM, REASONING, CALL, OUTPUT, ASSISTANT, USER_PARTS, USER_IMAGE, FUTURE]


def run(backend: Any, body: Callable[[AsyncSessionStore], Awaitable[T]], **options: Any) -> T:
    """``body(store)`` on a fresh event loop, with an async store on ``backend``."""

    async def main() -> T:
        async with open_async_store(backend.url, schema=backend.schema, **options) as store:
            return await body(store)

    return asyncio.run(main())


async def event_types(store: AsyncSessionStore, session_id: str = "s1") -> list[str]:
    return [e.type async for e in await store.events(session_id)]


# -- the protocol -------------------------------------------------------------------------------


def test_it_is_a_session_of_the_sdk(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        assert isinstance(session, Session)
        assert session.session_id == "s1"
        assert session.session_settings == SessionSettings()

    run(backend, body)


def test_items_of_every_kind_come_back_exactly(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items(ITEMS[:4])
        await session.add_items(ITEMS[4:])
        assert await session.get_items() == ITEMS
        reopened = SessionSQLSession("s1", store)
        assert await reopened.get_items() == ITEMS
        items = await session.get_items()
        items[0]["content"] = "changed"  # plain, mutable copies
        assert await session.get_items() == ITEMS

    run(backend, body)


def test_core_shapes_hold_what_they_can_and_the_rest_are_items(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        await SessionSQLSession("s1", store).add_items(ITEMS)
        types = await event_types(store)
        assert types == [
            "turn/start",  # a batch that starts with a user message starts a turn
            "user/message",
            ITEM_TYPE,  # system
            ITEM_TYPE,  # reasoning
            "assistant/message",  # the function call, as a tool-call block
            "tool/call",  # beside it, for the analytics
            "tool/result",
            "assistant/message",
            "turn/end",  # user text after assistant text: that turn is complete
            "turn/start",
            "user/message",
            ITEM_TYPE,  # an image
            ITEM_TYPE,  # an item type the SDK does not have yet
        ]
        messages = await store.messages("s1")
        first = messages[0]
        assert first["role"] == "user"
        assert first["content"] == [{"type": "text", "text": USER_TEXT["content"]}]
        assert first["source"]["kind"] == "openai-agents"
        assert messages[3]["content"] == [
            {
                "type": "tool-call",
                "id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            }
        ]
        # the item is kept without the arguments the block holds (and where they go back)
        call_item = {k: v for k, v in CALL.items() if k != "arguments"}
        assert messages[3]["source"] == {
            "kind": "model",
            "provider": "openai-agents",
            "model": "unknown",
            "item": call_item,
            "omitted": ["arguments", 4],
        }
        assert messages[4]["source"]["item"] == {
            "type": "function_call_output",
            "call_id": "call_1",
        }
        assert messages[4]["content"][0]["toolCallId"] == "call_1"
        assert messages[4]["content"][0]["content"] == [{"type": "text", "text": "sunny"}]
        assert messages[5]["content"] == [{"type": "text", "text": "ok"}]
        parts = messages[6]
        assert [b["text"] for b in parts["content"]] == ["two", "parts"]
        assert messages[2] == REASONING  # an item's message is the item
        events = [e async for e in await store.events("s1")]
        assert events[6].source_event_seqs == (5,)  # the result cites its call
        assert (await store.verify("s1")).ok

    run(backend, body)


@pytest.mark.parametrize("limit", [None, 0, 1, 3, 9, 10, 100, 2_147_483_647])
def test_limits_give_the_latest_items_oldest_first(backend, limit) -> None:
    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items(ITEMS)
        expected = ITEMS if limit is None else ITEMS[max(len(ITEMS) - limit, 0) :]
        assert await session.get_items(limit) == expected
        assert await session.get_items(limit=limit) == expected

    run(backend, body)


@pytest.mark.parametrize("limit", [None, PAUSE_MIN_EVENTS, PAUSE_MIN_EVENTS - 1, 20])
def test_a_long_history_reads_back_exactly_and_as_the_callers_own(backend, limit) -> None:
    """A read of ``PAUSE_MIN_EVENTS`` items or more is built from plain values (never frozen,
    the collector paused): the same items, byte for byte, as a short read gives."""
    history = [
        {**item, "n": [n, 1e16, -0.5, 2**53 - 1]} if item.get("type") == "hologram_call" else item
        for n in range(-(-PAUSE_MIN_EVENTS // len(ITEMS)) + 2)
        for item in ITEMS
    ]

    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items(history)
        expected = history if limit is None else history[-limit:]
        got = await SessionSQLSession("s1", store).get_items(limit)
        assert json.dumps(got) == json.dumps(expected)  # key order and number types too
        got[-1]["payload"]["depth"].clear()  # plain, mutable copies
        assert await session.get_items(limit) == expected

    run(backend, body)


def test_a_tail_read_again_gives_fresh_exact_copies(backend, monkeypatch) -> None:
    """A short tail's items are built once from the kept frozen messages and kept as text
    (``_openai_agents_mapping._Kept``): every read gets the same values, types and key
    order, in copies of its own, also once the kept items are dropped or cannot be kept."""
    deep: Any = "leaf"
    for _ in range(300):  # deeper than orjson writes: built afresh every time
        deep = [deep]
    odd = {"type": "future_thing", "f": 1e16, "n": [2**53 - 1, -0.5, None], "deep": deep}
    history = [*ITEMS, odd, USER_TEXT]
    monkeypatch.setattr(mapping._Kept, "MAX", 5)

    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items(history)
        first = await session.get_items(limit=20)
        for _ in range(3):
            again = await session.get_items(limit=20)
            assert json.dumps(again) == json.dumps(first) == json.dumps(history)
            assert type(again[-2]["f"]) is float
            assert all(a is not b for a, b in zip(again, first, strict=True))
            again[0]["content"] = "changed"
            again[-2]["n"].clear()
        assert await session.get_items(limit=20) == history

    run(backend, body)


def test_the_settings_limit_is_the_default_and_an_argument_overrides_it(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store, session_settings=SessionSettings(limit=2))
        await session.add_items(ITEMS)
        assert await session.get_items() == ITEMS[-2:]
        assert await session.get_items(limit=4) == ITEMS[-4:]
        as_dict = SessionSQLSession("s1", store, session_settings={"limit": 1})
        assert await as_dict.get_items() == ITEMS[-1:]

    run(backend, body)


@pytest.mark.parametrize("limit", [-1, -5, True, 1.5, "3"])
def test_a_bad_limit_is_refused(backend, limit) -> None:
    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items(ITEMS[:2])
        with pytest.raises(InvalidArgumentError, match="limit") as info:
            await session.get_items(limit)
        assert info.value.argument == "limit"
        assert await session.get_items() == ITEMS[:2]

    run(backend, body)


def test_an_empty_session_reads_empty_and_is_not_created_by_reads(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        assert await session.get_items() == []
        assert await session.get_items(5) == []
        assert await session.pop_item() is None
        await session.clear_session()
        with pytest.raises(SessionNotFoundError):
            await store.head_seq("s1")
        await session.add_items([])  # nothing to add: still nothing created
        with pytest.raises(SessionNotFoundError):
            await store.head_seq("s1")
        await session.add_items([USER_TEXT])  # created on the first add
        assert await store.head_seq("s1") == 1  # the turn/start, the message

    run(backend, body)


def test_pop_takes_the_latest_item_off_and_keeps_it_in_the_log(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items(ITEMS[:3])
        assert await session.pop_item() == ITEMS[2]
        assert await session.get_items() == ITEMS[:2]
        assert await session.pop_item() == ITEMS[1]
        assert await session.pop_item() == ITEMS[0]
        assert await session.pop_item() is None  # pop on empty
        assert await session.get_items() == []
        events = [e async for e in await store.events("s1")]
        removals = [e for e in events if e.type == "surface/removed"]
        # seq 0 is the turn/start the user message begins
        assert [(e.surface_op, e.source_event_seqs, e.data["reason"]) for e in removals] == [
            (Replace(3, 3), (3,), "pop_item"),
            (Replace(2, 2), (2,), "pop_item"),
            (Replace(1, 1), (1,), "pop_item"),
        ]
        assert len(events) == 7  # nothing was deleted
        assert (await store.verify("s1")).ok

    run(backend, body)


def test_clear_then_add(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items(ITEMS)
        nodes = await store.surface("s1")
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.clear_session()  # clearing an empty history appends nothing
        await session.add_items([ASSISTANT, USER_TEXT])
        assert await session.get_items() == [ASSISTANT, USER_TEXT]
        events = [e async for e in await store.events("s1")]
        (clear,) = [e for e in events if e.type == "surface/removed"]
        assert len(nodes) == len(ITEMS)
        assert clear.surface_op == Replace(nodes[0], nodes[-1])
        assert clear.source_event_seqs == tuple(nodes)
        assert clear.data == {"reason": "clear_session"}
        # the second add: an answer in the open turn, then user text starts the next one
        assert [e.type for e in events[clear.seq + 1 :]] == [
            "assistant/message",
            "turn/end",
            "turn/start",
            "user/message",
        ]
        assert (await store.verify("s1")).ok

    run(backend, body)


def test_unicode_large_and_deep_items_round_trip(backend) -> None:
    big = "ü€😀中文 עברית " * 60_000  # about 1.1 MB of text
    deep: Any = {"leaf": "ok"}
    for i in range(200):
        deep = {"level": i, "child": [deep]}
    items = [
        {"role": "user", "content": "Grüße 😀 — 中文 — עברית — \u2028 \\ \" '"},
        {"type": "function_call_output", "call_id": "c", "output": big},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": big}]},
        {"type": "future_thing", "tree": deep, "ints": [2**53 - 1, -(2**53) + 1], "f": 1e16},
    ]

    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items(items)
        got = await session.get_items()
        assert got == items
        assert type(got[3]["f"]) is float
        assert await session.pop_item() == items[3]

    run(backend, body, max_event_bytes=64 * 1024 * 1024)


def _turns(count: int) -> list[Any]:
    """``count`` turns of a user question, a call, its output and an answer."""
    items: list[Any] = []
    for n in range(count):
        items += [
            {"role": "user", "content": f"question {n}"},
            {**CALL, "id": f"fc_{n}", "call_id": f"call_{n}"},
            {**OUTPUT, "call_id": f"call_{n}"},
            {**ASSISTANT, "id": f"msg_{n}"},
        ]
    return items


def test_a_big_batch_is_written_with_the_collector_paused(backend, monkeypatch) -> None:
    """From ``PAUSE_MIN_EVENTS`` items, a batch is mapped, checked and stored with the cyclic
    collector paused (session_sql._gc), and the collector is enabled again after, refused or
    not."""
    mapping = adapter.batch_of
    mapped: list[bool] = []

    def watched(*args: Any) -> Any:
        mapped.append(gc.isenabled())
        return mapping(*args)

    monkeypatch.setattr(adapter, "batch_of", watched)
    items = _turns(PAUSE_MIN_EVENTS // 4 + 1)

    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items(items)
        assert gc.isenabled()
        with pytest.raises(NotJSONError):
            await session.add_items([*items, {"x": float("nan")}])
        assert gc.isenabled()
        await session.add_items(items[:4])  # a small batch: the collector as it is
        assert await session.get_items() == items + items[:4]

    was = gc.isenabled()
    gc.enable()
    try:
        run(backend, body)
    finally:
        if not was:
            gc.disable()
    assert mapped == [False, False, True]


@pytest.mark.parametrize(
    ("items", "error"),
    [
        ([USER_TEXT, None], InvalidArgumentError),
        ([USER_TEXT, {"x": float("nan")}], NotJSONError),
        ([USER_TEXT, {"x": "bad\x00"}], NotJSONError),
        ([USER_TEXT, {"x": {1, 2}}], NotJSONError),
        ([{"role": "user", "content": "a", 3: "non-str key"}], NotJSONError),
        (USER_TEXT, InvalidArgumentError),
        ("text", InvalidArgumentError),
    ],
)
def test_bad_items_are_refused_and_nothing_is_written(backend, items, error) -> None:
    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items([ASSISTANT])
        head = await store.head_seq("s1")
        with pytest.raises(error):
            await session.add_items(items)
        assert await session.get_items() == [ASSISTANT]
        assert await store.head_seq("s1") == head
        await session.add_items([CALL])  # the session is still usable
        assert await session.get_items() == [ASSISTANT, CALL]

    run(backend, body)


def test_a_sync_store_or_a_store_without_the_item_type_is_refused(backend) -> None:
    with (
        open_store(backend.url, schema=backend.schema) as sync_store,
        pytest.raises(InvalidArgumentError, match="open_async_store"),
    ):
        SessionSQLSession("s1", sync_store)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="AsyncSessionStore"):
        SessionSQLSession("s1", object())  # type: ignore[arg-type]

    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        with pytest.raises(InvalidArgumentError, match="item type"):
            await session.add_items([USER_TEXT])
        with pytest.raises(SessionNotFoundError):
            await store.head_seq("s1")

    run(backend, body, catalog=DEFAULT_CATALOG)


def test_from_url_opens_and_closes_a_store_of_its_own(backend) -> None:
    async def main() -> None:
        session = SessionSQLSession.from_url(
            "s1", backend.url, schema=backend.schema, catalog=DEFAULT_CATALOG.extend(["app/x"])
        )
        await session.add_items([USER_TEXT, CALL])
        assert ITEM_TYPE in session.store.catalog.item_types
        assert "app/x" in session.store.catalog
        await session.close()
        async with SessionSQLSession.from_url("s1", backend.url, schema=backend.schema) as again:
            assert await again.get_items() == [USER_TEXT, CALL]

    asyncio.run(main())


def test_a_stale_instance_pops_and_clears_what_is_stored_now(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        first, second = SessionSQLSession("s1", store), SessionSQLSession("s1", store)
        await first.add_items([USER_TEXT])
        await second.add_items([CALL])  # second's handle opened after first's write
        await first.add_items([OUTPUT])  # first's handle is stale: reload and retry
        assert await second.pop_item() == OUTPUT  # second's handle is stale too
        assert await first.get_items() == [USER_TEXT, CALL]
        await first.clear_session()
        await second.add_items([ASSISTANT])
        assert await first.get_items() == [ASSISTANT]
        assert (await store.verify("s1")).ok

    run(backend, body)


def test_a_session_deleted_under_an_instance_is_created_again(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items([USER_TEXT])
        await store.delete_session("s1")
        await session.add_items([CALL])
        assert await session.get_items() == [CALL]

    run(backend, body)


# -- several processes --------------------------------------------------------------------------


def test_two_processes_adding_to_one_session_both_land(backend, tmp_path) -> None:
    count = 15
    with ProcessPoolExecutor(max_workers=2, mp_context=SPAWN) as pool:
        futures = [
            pool.submit(add_batches, backend.url, backend.schema, "s1", w, count, str(tmp_path))
            for w in (1, 2)
        ]
        for future in futures:
            future.result(timeout=120)

    async def body(store: AsyncSessionStore) -> list[Any]:
        assert (await store.verify("s1")).ok
        return await SessionSQLSession("s1", store).get_items()

    items = run(backend, body)
    assert len(items) == 4 * count
    for worker in (1, 2):  # each writer's batches land whole and in its own order
        mine = [i for i, item in enumerate(items) if f"w{worker}-" in str(item.get("content"))]
        assert [items[i]["content"] for i in mine] == [f"w{worker}-{i}" for i in range(count)]
        assert all(
            items[i + 1] == {"type": "note", "worker": worker, "i": n} for n, i in enumerate(mine)
        )


def test_threads_each_on_a_loop_of_their_own_share_one_session(backend) -> None:
    """Five threads, each with a new event loop, add items to one session at once (the first
    of them opening its store): every item lands exactly once, and no loop hangs."""
    session = SessionSQLSession.from_url("s1", backend.url, schema=backend.schema)

    async def work(i: int) -> None:
        for j in range(3):
            await session.add_items([{"role": "user", "content": f"{i}.{j}"}, OUTPUT])

    in_loops(5, work)

    async def after() -> list[Any]:
        async with session:
            return await session.get_items()

    items = asyncio.run(after())
    texts = [item["content"] for item in items if item.get("role") == "user"]
    assert sorted(texts) == sorted(f"{i}.{j}" for i in range(5) for j in range(3))
    assert all(items[k + 1] == OUTPUT for k in range(0, len(items), 2))  # each batch whole
    assert len(items) == 30


def test_another_process_sees_the_same_items(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items(ITEMS)
        await session.pop_item()

    run(backend, body)
    with ProcessPoolExecutor(max_workers=1, mp_context=SPAWN) as pool:
        seen = pool.submit(read_items, backend.url, backend.schema, "s1").result(timeout=120)
    assert seen == ITEMS[:-1]


def test_entries_another_writer_put_on_the_surface_are_not_items(backend) -> None:
    foreign = {
        "id": "m1",
        "role": "user",
        "content": [{"type": "text", "text": "from elsewhere"}],
        "source": {"kind": "user"},
    }

    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items([USER_TEXT, CALL])
        other = await store.open_session("s1")
        await other.append("user/message", foreign, surface_op="append")
        assert await session.get_items() == [USER_TEXT, CALL]
        assert await session.pop_item() == CALL  # the latest item, past the foreign entry
        messages = await store.messages("s1")
        assert len(messages) == 2 and messages[1] == foreign
        assert await session.get_items() == [USER_TEXT]
        await session.clear_session()  # clears every entry, items or not
        assert await store.messages("s1") == []

    run(backend, body)


def test_calls_and_outputs_come_back_in_their_key_order(backend) -> None:
    """A call's arguments and a tool's text output are stored once (in the core message) and
    put back where they stood among the item's keys; other outputs are kept whole."""
    items = [
        {"arguments": "{}", "type": "function_call", "call_id": "a", "name": "f"},
        {"output": "first", "call_id": "a", "type": "function_call_output"},
        {"type": "function_call", "name": "g", "arguments": "[1]", "call_id": "b", "x": None},
        {
            "type": "function_call_output",
            "call_id": "b",
            "output": [{"type": "input_text", "text": "parts"}, {"type": "input_image"}],
        },
    ]

    async def body(store: AsyncSessionStore) -> None:
        session = SessionSQLSession("s1", store)
        await session.add_items(items)
        got = await SessionSQLSession("s1", store).get_items()
        assert [json.dumps(item) for item in got] == [json.dumps(item) for item in items]
        messages = await store.messages("s1")
        assert messages[3]["source"]["item"] == items[3]  # a list output: kept whole
        assert messages[3]["content"][0]["content"] == [
            {"type": "text", "text": "parts"},
            {"type": "input_image"},
        ]

    run(backend, body)
