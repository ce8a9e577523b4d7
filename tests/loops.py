"""Run coroutines on threads that each have an event loop of their own, as the Agents SDK's own
tests and thread-per-request servers do."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any


def in_loops(count: int, body: Callable[[int], Awaitable[Any]], timeout: float = 60) -> None:
    """``body(i)`` at once in ``count`` threads, each on a new event loop of its own (as
    ``loop.run_until_complete`` in a thread does); a loop that hangs fails the test."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def work(i: int) -> None:
        loop = asyncio.new_event_loop()
        try:
            start.wait(timeout)
            loop.run_until_complete(body(i))
        except BaseException as exc:
            errors.append(exc)
        finally:
            loop.close()

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "an event loop hangs"
    if errors:
        raise errors[0]
