"""``follow`` as one state machine: the cursor, the idle deadline, the polling backoff, the wake.

No I/O here. ``Follower`` says what to do next (``Read``, ``Wait``, ``Sleep``, ``Stop``) and
is told what came of it; ``reader.follow`` and ``AsyncSessionStore.follow`` are the loops that
do the reads, LISTEN waits and sleeps it asks for, so both follow a session the same way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import NamedTuple

POLL_START = 0.002
"""The first sleep of a polling follower (SQLite) after an empty read; doubled after each."""
POLL_MAX = 0.05
"""The longest sleep of a polling follower: the wake latency it can add at most."""
LISTEN_MAX = 1.0
"""The longest LISTEN wait before reading anyway, so a lost notification costs a second."""
CATCH_UP_MAX = 30.0
"""How long a follower reading from a standby polls for a head a wake-up named and the
standby has not replayed yet; past it (a session deleted and recreated with a shorter log,
a standby stopped) it waits again, reading at least every ``LISTEN_MAX``."""


class Read(NamedTuple):
    """Read the events committed after ``after_seq`` (one page)."""

    after_seq: int


class Wait(NamedTuple):
    """Wait on the LISTEN connection for a wake-up (``Follower.wakes``), ``seconds`` at most."""

    seconds: float


class Sleep(NamedTuple):
    """Sleep ``seconds`` (polling: there is no LISTEN connection)."""

    seconds: float


class Stop(NamedTuple):
    """The timeout elapsed without a new event: the follow ends."""


Action = Read | Wait | Sleep | Stop


_ENCODE_PAYLOAD = json.JSONEncoder(separators=(",", ":")).encode
"""``json.dumps(..., separators=(",", ":"))``, with the encoder made once: ``dumps`` builds
one per call when given options, which cost more than encoding the payload."""


def payload(tenant: str, session_id: str, head: int) -> str:
    """The NOTIFY payload of a commit: ``[tenant, session id, head seq]`` as JSON (ASCII;
    a few kilobytes at most, as ids and tenants are 128 characters at most: under
    PostgreSQL's 8,000-byte limit)."""
    return _ENCODE_PAYLOAD([tenant, session_id, head])


def parse_payload(note: str) -> tuple[object, object, object] | None:
    """``(tenant, session id, head)`` of a NOTIFY payload; ``None`` if it is not one."""
    try:
        tenant, session_id, head = json.loads(note)
    except (ValueError, TypeError):
        return None
    return tenant, session_id, head


class Follower:
    """One follow's state: the last seq yielded, the idle deadline and the polling backoff.

    ``timeout`` counts from the last read that found events (or the start); ``None`` never
    stops. ``listening``: a LISTEN connection wakes the follower (PostgreSQL), else it polls.
    ``lagging``: the reads go to a hot standby while the wake-ups come from the primary, so
    a wake-up may name a head the reads do not see yet; until they do (``CATCH_UP_MAX`` at
    most), the follower reads again with the polling backoff instead of waiting for a wake-up
    that has already come.
    """

    def __init__(
        self,
        session_id: str,
        tenant: str,
        after_seq: int,
        timeout: float | None,
        *,
        listening: bool,
        lagging: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.session_id = session_id
        self.tenant = tenant
        self.last = after_seq
        """The cursor: the last seq yielded (or ``after_seq``)."""
        self._timeout = timeout
        self._listening = listening
        self._clock = clock
        self._idle_since = clock()
        self._backoff = POLL_START
        self._lagging = lagging
        self.told = after_seq
        """The highest head a wake-up named (a standby's reads catch up to it)."""
        self._told_at = 0.0

    def start(self) -> Action:
        """The first step: read what is committed already."""
        return Read(self.last)

    def read(self, last_seq: int | None) -> Action:
        """A ``Read`` returned: ``last_seq`` of its events once they are yielded (``None``:
        none). Events: read on at once. None: wait, sleep, or stop once the timeout is over."""
        if last_seq is not None:
            self.last = last_seq
            self._idle_since = self._clock()
            self._backoff = POLL_START
            return Read(self.last)
        if self._timeout is None:
            remaining = None
        else:
            remaining = self._timeout - (self._clock() - self._idle_since)
            if remaining <= 0:
                return Stop()
        if self._listening and not self._behind():
            return Wait(LISTEN_MAX if remaining is None else min(remaining, LISTEN_MAX))
        backoff = self._backoff
        self._backoff = min(backoff * 2, POLL_MAX)
        return Sleep(backoff if remaining is None else min(backoff, remaining))

    def _behind(self) -> bool:
        """Whether the reads have not yet reached a head a wake-up named (a standby's lag)."""
        return (
            self._lagging and self.told > self.last and self._clock() - self._told_at < CATCH_UP_MAX
        )

    def waited(self) -> Action:
        """A ``Wait`` (woken or timed out) or a ``Sleep`` ended: read again."""
        return Read(self.last)

    def wakes(self, note: str) -> bool:
        """Whether a NOTIFY payload ends a ``Wait``: a commit to this session of this tenant
        past the cursor. Any other notification on the channel (another tenant's, another
        session's, an older head, not a payload at all) is ignored, never an error."""
        parsed = parse_payload(note)
        if parsed is None:
            return False
        tenant, session_id, head = parsed
        if not (
            tenant == self.tenant
            and session_id == self.session_id
            and type(head) is int
            and head > self.last
        ):
            return False
        if head > self.told:
            self.told = head
            self._told_at = self._clock()
        return True
