"""A store shared by threads: connections are bounded and returned, whatever the threading."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from session_sql import SessionStore, open_store

from .store_builders import say


def run_in_thread(work: Callable[[], Any]) -> Any:
    """Run ``work`` in a new thread that ends with it; its result, or its exception re-raised."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = work()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")


def test_short_lived_threads_return_their_connections(backend):
    # A pool of 2 (+1 overflow) waiting 2 s at most: a connection kept by a finished thread
    # would make the fourth thread's append fail instead of waiting for good.
    options: dict[str, Any] = {"pool_size": 2, "max_overflow": 1, "pool_timeout": 2}
    with open_store(backend.url, schema=backend.schema, **options) as store:

        def work(n: int) -> int:
            handle = store.create_session(f"t{n}")
            say(handle)
            say(handle, "again")
            return handle.seq

        for n in range(50):
            assert run_in_thread(lambda n=n: work(n)) == 2
        assert store.engine.pool.checkedout() == 0
        main = store.create_session("main")
        say(main)
        assert len(store.list_sessions(limit=100)) == 51
        assert [e.seq for e in store.events("t49")] == [0, 1]
        assert len(store.messages("t0")) == 2
        assert store.engine.pool.checkedout() == 0


def test_threads_appending_at_once_share_a_bounded_pool(backend):
    with open_store(backend.url, schema=backend.schema, pool_size=2, max_overflow=1) as store:
        barrier = threading.Barrier(8)
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                handle = store.create_session(f"t{n}")
                barrier.wait()
                for i in range(5):
                    say(handle, f"m{i}")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert store.engine.pool.checkedout() == 0
        assert all(store.verify(f"t{n}").ok for n in range(8))
        assert {len(list(store.events(f"t{n}"))) for n in range(8)} == {5}


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_store_works_from_other_threads(url: str):
    with open_store(url) as store:
        first = store.create_session("first")
        say(first)

        def elsewhere(store: SessionStore = store) -> list[int]:
            other = store.create_session("other")
            say(other)
            say(first, "from another thread")
            return [e.seq for e in store.events("first")]

        assert run_in_thread(elsewhere) == [0, 1]
        assert {info.id for info in store.list_sessions()} == {"other", "first"}
        assert store.load_session("other").seq == 2  # with the in-memory marker
        say(first, "back home")
        assert first.seq == 3


def test_threads_take_turns_on_an_in_memory_store():
    with open_store("sqlite://") as store:
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                handle = store.create_session(f"t{n}")
                barrier.wait()
                for i in range(10):
                    say(handle, f"m{i}")
                    store.messages(handle.id)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert all(store.verify(f"t{n}").ok for n in range(4))
        assert {len(store.messages(f"t{n}")) for n in range(4)} == {10}
