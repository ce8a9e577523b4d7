"""Run coroutines on threads that each have an event loop of their own, as the Agents SDK's own
tests and thread-per-request servers do."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any


def on_own_loops(work: Callable[[int], Coroutine[Any, Any, None]], threads: int = 5) -> None:
    """Run ``work(i)`` for each i on thread i, each on a new loop, started together; fail
    (instead of hanging) when a loop is still running after 60 s, and re-raise what failed."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def body(i: int) -> None:
        loop = asyncio.new_event_loop()
        try:
            start.wait(60)
            loop.run_until_complete(work(i))
        except BaseException as exc:
            errors.append(exc)
        finally:
            loop.close()

    running = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join(60)
    assert not any(thread.is_alive() for thread in running), "an event loop hangs"
    assert errors == []
