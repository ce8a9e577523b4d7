"""The async store's joint writes that the ADK service builds on: a session created with
batches of other sessions in one transaction, and a joint append conditional on a head the
caller names. Both write everything or nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from session_sql import (
    AsyncSessionStore,
    ConcurrencyError,
    SessionExistsError,
    open_async_store,
    open_store,
)

from .store_builders import refused, user_message


def said(text: str) -> dict[str, object]:
    return {"type": "user/message", "data": user_message(text), "surface_op": "append"}


def run(backend: Any, body: Callable[[AsyncSessionStore, Any], Awaitable[None]]) -> None:
    """``body(async_store, sync_store)`` on one backend (the sync one reads the tables)."""

    async def main() -> None:
        async with open_async_store(backend.url, schema=backend.schema) as store:
            with open_store(backend.url, schema=backend.schema) as tables:
                await body(store, tables)

    asyncio.run(main())


def test_a_session_created_with_other_batches_commits_all_at_once(backend) -> None:
    async def body(store: AsyncSessionStore, tables: Any) -> None:
        shared = await store.create_session("shared")
        new, done = await store._create_together(
            "new", writes=[(shared, [said("one")])], user_id="u", labels={"k": "v"}
        )
        assert (new.id, new.seq, shared.seq) == ("new", 0, 1)
        assert [[e.seq for e in events] for events in done] == [[0]]
        info = await store.session_info("new")
        assert (info.user_id, info.labels) == ("u", {"k": "v"})
        assert (await store.verify("new")).ok and (await store.verify("shared")).ok
        # both handles go on appending
        await new.append("user/message", user_message("two"), surface_op="append")
        await store.append_together([(shared, [said("three")])])
        assert [m["content"][0]["text"] for m in await store.messages("shared")] == [
            "one",
            "three",
        ]

    run(backend, body)


def test_a_taken_id_or_a_lost_race_writes_nothing_anywhere(backend) -> None:
    async def body(store: AsyncSessionStore, tables: Any) -> None:
        shared = await store.create_session("shared")
        await store.create_session("taken")
        with refused(tables, SessionExistsError, shared) as info:
            await store._create_together("taken", writes=[(shared, [said("one")])])
        assert info.value.session_id == "taken"
        stale = await store.open_session("shared")
        await shared.append("user/message", user_message("first"), surface_op="append")
        with refused(tables, ConcurrencyError, stale) as lost:
            await store._create_together("new", writes=[(stale, [said("late")])])
        assert lost.value.session_id == "shared"
        # nothing is left busy: the handles append again
        await stale.refresh()
        new, _ = await store._create_together("new", writes=[(stale, [said("late")])])
        assert (new.seq, stale.seq) == (0, 2)

    run(backend, body)


def test_a_joint_append_waits_for_no_refresh_past_the_named_head(backend) -> None:
    """The head is checked under the handle's lock: a refresh that moved the handle past it
    (another reader of the same handle) refuses the append, which writes nothing."""

    async def body(store: AsyncSessionStore, tables: Any) -> None:
        mine = await store.create_session("s")
        other = await store.create_session("o")
        theirs = await store.open_session("s")
        await theirs.append("user/message", user_message("theirs"), surface_op="append")
        await mine.refresh()  # a reader moves the shared handle on to seq 0
        with refused(tables, ConcurrencyError, mine, other) as info:
            await store._append_together(
                [(mine, [said("stale")]), (other, [said("x")])], heads={"s": -1}
            )
        assert (info.value.session_id, info.value.expected) == ("s", -1)
        done = await store._append_together([(mine, [said("fresh")])], heads={"s": 0})
        assert [e.seq for e in done[0]] == [1]

    run(backend, body)
