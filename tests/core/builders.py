"""The core suite's builders: a deterministic clock, and "a refused input changes nothing".

The message and event builders live in ``tests/builders.py``; they are re-exported here, so
the core tests import everything from ``.builders``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from session_sql import Session, SessionEvent

from .. import builders as shared
from ..builders import *  # noqa: F403  (the shared builders, re-exported)
from ..builders import T0

__all__ = [
    "Clock",
    "State",
    "assert_unchanged",
    "capture",
    "new_session",
    "refused",
]
__all__ += shared.__all__


class Clock:
    """A deterministic clock: ``T0``, ``T0 + 1``, ... (one tick per call)."""

    def __init__(self, start: int = T0) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1
        return self.now - 1


def new_session(session_id: str = "s1", **kwargs: Any) -> Session:
    """A session with a deterministic clock."""
    return Session(session_id, clock=Clock(), **kwargs)


# -- "a refused input changes nothing" --------------------------------------------------------


@dataclass(frozen=True)
class State:
    """What a refused input must leave exactly as it was."""

    event_ids: tuple[int, ...]
    events: tuple[SessionEvent, ...]
    nodes: tuple[int, ...]
    replace_generation: int
    message_ids: tuple[int, ...]
    cache: tuple[Any, ...]
    request_header: int


def _cache(session: Session) -> tuple[Any, ...]:
    # The only place the tests read the session's private projection caches (SPEC §4: a
    # refused event leaves "every cache exactly as it was").
    return (
        tuple(id(m) for m in session._messages),
        session._projected,
        session._projected_generation,
    )


def capture(session: Session) -> State:
    """Snapshot the log, the surface, the (primed) message cache and the request header."""
    messages = session.messages()
    return State(
        event_ids=tuple(id(e) for e in session.events),
        events=tuple(session.events),
        nodes=session.surface.nodes,
        replace_generation=session.surface.replace_generation,
        message_ids=tuple(id(m) for m in messages),
        cache=_cache(session),
        request_header=id(session.request_header()),
    )


def assert_unchanged(session: Session, before: State) -> None:
    # Check the caches before anything reads (and so refreshes) them.
    assert _cache(session) == before.cache
    assert session.seq == len(before.events)
    assert capture(session) == before


@contextmanager
def refused(
    session: Session, error: type[BaseException], match: str | None = None
) -> Iterator[pytest.ExceptionInfo[Any]]:
    """Expect ``error`` from the block and assert the session did not change at all."""
    before = capture(session)
    with pytest.raises(error, match=match) as info:
        yield info
    assert_unchanged(session, before)
