"""Several writers on one session: ``retry_on_conflict`` refreshes, waits and tries again."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest

from session_sql import (
    ConcurrencyError,
    InvalidArgumentError,
    RetryPolicy,
    open_async_store,
    open_store,
    retry_on_conflict,
    retry_on_conflict_async,
)

from .store_builders import dump_tables, user_message

QUICK = RetryPolicy(first_delay=0.0, max_delay=0.0)


def _opened(backend: Any) -> Any:
    return open_store(backend.url, schema=backend.schema)


def test_a_lost_race_is_refreshed_and_retried(backend) -> None:
    with _opened(backend) as store:
        a = store.create_session("s1")
        b = store.open_session("s1")
        a.append("user/message", user_message("from a", id="a"), surface_op="append")
        seen: list[int] = []
        lost: list[ConcurrencyError] = []

        def action(handle: Any) -> int:
            seen.append(len(handle.events))  # what the handle held when it decided
            return handle.append(
                "user/message", user_message("from b", id="b"), surface_op="append"
            ).seq

        assert retry_on_conflict(b, action, policy=QUICK, on_conflict=lost.append) == 1
        assert seen == [0, 1]  # the second call saw a's event, loaded by refresh
        assert len(lost) == 1 and lost[0].session_id == "s1"
        assert [e.data["id"] for e in store.events("s1")] == ["a", "b"]
        assert store.verify("s1").ok


def test_giving_up_raises_the_last_conflict_and_writes_nothing(backend) -> None:
    with _opened(backend) as store:
        a = store.create_session("s1")
        b = store.open_session("s1")
        calls = 0

        def always_behind(handle: Any) -> None:
            nonlocal calls
            calls += 1
            a.append("session/title", {"title": f"a{calls}"})  # another writer gets in first
            before = dump_tables(store)
            try:
                handle.append("session/title", {"title": "b"})
            finally:
                assert dump_tables(store) == before  # the refused append left no trace

        with pytest.raises(ConcurrencyError):
            retry_on_conflict(
                b, always_behind, policy=RetryPolicy(attempts=3, first_delay=0.0, max_delay=0.0)
            )
        assert calls == 3
        assert [e.data["title"] for e in store.events("s1")] == ["a1", "a2", "a3"]


def test_other_errors_are_not_retried(backend) -> None:
    with _opened(backend) as store:
        handle = store.create_session("s1")
        calls = 0

        def invalid(h: Any) -> None:
            nonlocal calls
            calls += 1
            h.append("user/message", {"not": "a message"}, surface_op="append")

        with pytest.raises(Exception) as raised:
            retry_on_conflict(handle, invalid, policy=QUICK)
        assert not isinstance(raised.value, ConcurrencyError)
        assert calls == 1
        assert list(store.events("s1")) == []


def test_writers_on_one_session_lose_nothing_and_duplicate_nothing(backend) -> None:
    writers, appends = 4, 25
    with _opened(backend) as store:
        store.create_session("hot")
    lost = [0] * writers
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            with _opened(backend) as store:
                handle = store.open_session("hot")
                for n in range(appends):
                    msg = user_message(f"w{w} #{n}", id=f"w{w}-{n}")

                    def count(_: ConcurrencyError, w: int = w) -> None:
                        lost[w] += 1

                    retry_on_conflict(
                        handle,
                        lambda h, m=msg: h.append("user/message", m, surface_op="append"),
                        on_conflict=count,
                    )
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with _opened(backend) as store:
        events = list(store.events("hot"))
        assert [e.seq for e in events] == list(range(writers * appends))
        ids = [e.data["id"] for e in events]
        assert sorted(ids) == sorted(f"w{w}-{n}" for w in range(writers) for n in range(appends))
        # Each writer's own messages are in the order it appended them.
        for w in range(writers):
            mine = [int(i.split("-")[1]) for i in ids if i.startswith(f"w{w}-")]
            assert mine == list(range(appends))
        assert store.verify("hot").ok


def test_the_async_helper_refreshes_and_retries(backend) -> None:
    async def scenario() -> None:
        async with open_async_store(backend.url, schema=backend.schema) as store:
            a = await store.create_session("s1")
            b = await store.open_session("s1")
            await a.append("user/message", user_message("from a", id="a"), surface_op="append")
            lost: list[ConcurrencyError] = []

            async def action(handle: Any) -> int:
                event = await handle.append(
                    "user/message", user_message("from b", id="b"), surface_op="append"
                )
                return int(event.seq)

            seq = await retry_on_conflict_async(b, action, policy=QUICK, on_conflict=lost.append)
            assert seq == 1 and len(lost) == 1
            assert [e.data["id"] async for e in await store.events("s1")] == ["a", "b"]

            calls = 0

            async def always_behind(handle: Any) -> None:
                nonlocal calls
                calls += 1
                await a.append("session/title", {"title": f"a{calls}"})
                await handle.append("session/title", {"title": "b"})

            with pytest.raises(ConcurrencyError):
                await retry_on_conflict_async(
                    b, always_behind, policy=RetryPolicy(attempts=2, first_delay=0.0, max_delay=0.0)
                )
            assert calls == 2

    asyncio.run(scenario())


def test_the_pause_is_drawn_from_a_doubling_window() -> None:
    policy = RetryPolicy(first_delay=0.01, max_delay=0.05, rng=random.Random(7))
    windows = {1: 0.01, 2: 0.02, 3: 0.04, 4: 0.05, 9: 0.05}
    for lost, window in windows.items():
        delays = [policy.delay(lost) for _ in range(200)]
        assert all(0 <= d <= window for d in delays), lost
        assert max(delays) > window / 2, lost  # the whole window is used, not its start


@pytest.mark.parametrize(
    "options",
    [{"attempts": 0}, {"first_delay": -1.0}, {"first_delay": 1.0, "max_delay": 0.5}],
)
def test_a_policy_refuses_bounds_that_make_no_sense(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        RetryPolicy(**options)


def test_a_handle_that_lost_a_race_paces_its_next_calls_until_they_are_clean(backend) -> None:
    from session_sql import retrying

    policy = RetryPolicy(first_delay=0.001, max_delay=0.004)
    with _opened(backend) as store:
        a = store.create_session("s1")
        b = store.open_session("s1")
        a.append("session/title", {"title": "a"})

        def title(h: Any) -> None:
            h.append("session/title", {"title": "b"})

        retry_on_conflict(b, title, policy=policy)
        assert retrying._windows[b] == 0.001  # lost once: its window opened
        assert a not in retrying._windows  # a writer that never lost is not paced
        a.refresh()
        for _ in range(3):  # the window halves on each clean call, then is forgotten
            retry_on_conflict(b, title, policy=policy)
        assert b not in retrying._windows
        assert len(list(store.events("s1"))) == 5
