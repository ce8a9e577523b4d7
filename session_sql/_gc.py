"""Pausing the cyclic garbage collector while a big batch of events is built (and, when no
validator or observer is registered, persisted and committed: ``Session._paused_append``), a
long log is loaded (``SessionStore.load_session``), or the messages of a long surface read are
built (``reader.surface_messages`` and ``messages``, an integration's
``SessionStore._surface_items``).

Building a batch allocates several containers per event (the frozen data, the event) and
keeps every one of them: they go into the session's log. Python's collector runs a young
collection every 700 container allocations, which scans those new objects again and again,
and the survivors it promotes trigger full collections of the whole process's heap; on
PostgreSQL's 5,000-event ``append_many`` that was about 40% of the client's CPU time (see
docs/performance.md). Reference counting still frees everything else while the collector
is paused, and the objects built here are scanned once, at the next collection. The pause is
the process's: other threads, and an event loop's other tasks while an async append awaits
its transaction, run paused too, for as long as that one append lasts.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

PAUSE_MIN_EVENTS = 100
"""From this many events in one batch (or nodes in one read), its building runs with the
collector paused."""


class _Pause:
    """Pauses held now, by any thread; the collector is restored when the last one ends."""

    lock = threading.Lock()
    holders = 0
    was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block with the cyclic collector disabled, then restore it as it was.

    Nested and concurrent pauses share one pause: the collector is enabled again when the
    last ends, and only if it was enabled when the first began (a ``gc.disable()`` made by
    another thread during the pause is undone with it).
    """
    with _Pause.lock:
        if _Pause.holders == 0:
            _Pause.was_enabled = gc.isenabled()
            gc.disable()
        _Pause.holders += 1
    try:
        yield
    finally:
        with _Pause.lock:
            _Pause.holders -= 1
            if _Pause.holders == 0 and _Pause.was_enabled:
                gc.enable()


def paused_for(events: int) -> AbstractContextManager[None]:
    """``gc_paused()`` for a batch of ``events`` events from ``PAUSE_MIN_EVENTS`` on; a
    no-op below."""
    return gc_paused() if events >= PAUSE_MIN_EVENTS else nullcontext()
