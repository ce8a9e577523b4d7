"""Appending to a session that several writers share: retry lost races with jittered backoff.

Appends are optimistic (rule 14): a handle that is behind gets ``ConcurrencyError`` and
nothing is written. Under contention, losers that refresh and retry at once collide again (the
next winner commits while they read), so a naive loop retries in storms. Waiting a random time
in an exponentially growing window ("full jitter") spreads the retries out. The window is kept
per handle across calls, halved by each success without a lost race: a writer that keeps
winning on a hot session also waits before its next attempt (it would otherwise win every
race, being the only writer that is never behind, and starve the others), and a writer on a
quiet session soon waits for nothing.

The action decides again on each attempt: it is called with the refreshed handle and must
build its events from what the handle now holds (an event that depends on the log, e.g. a
reply to the last message, is recomputed rather than re-sent blindly).
"""

from __future__ import annotations

import asyncio
import random
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from session_sql.errors import ConcurrencyError, InvalidArgumentError

__all__ = ["RetryPolicy", "retry_on_conflict", "retry_on_conflict_async"]

T = TypeVar("T")
H = TypeVar("H", bound="_Refreshable")
A = TypeVar("A", bound="_AsyncRefreshable")


class _Refreshable(Protocol):
    def refresh(self) -> object: ...


class _AsyncRefreshable(Protocol):
    def refresh(self) -> Awaitable[object]: ...


class RetryPolicy:
    """How long to wait before each retry: a uniform draw in ``[0, window]``, where the window
    starts at ``first_delay`` seconds and doubles per lost race up to ``max_delay``; after
    ``attempts`` calls in all, the last ``ConcurrencyError`` is raised."""

    __slots__ = ("_random", "attempts", "first_delay", "max_delay")

    def __init__(
        self,
        *,
        attempts: int = 64,
        first_delay: float = 0.002,
        max_delay: float = 0.25,
        rng: random.Random | None = None,
    ) -> None:
        if attempts < 1:
            raise InvalidArgumentError(f"attempts must be at least 1, not {attempts!r}")
        if not 0 <= first_delay <= max_delay:
            raise InvalidArgumentError(
                f"need 0 <= first_delay <= max_delay, not {first_delay!r} and {max_delay!r}"
            )
        self.attempts = attempts
        self.first_delay = first_delay
        self.max_delay = max_delay
        self._random = rng or random.Random()

    def delay(self, lost: int) -> float:
        """A pause after the ``lost``-th lost race in a row (1-based), from a fresh window."""
        return self.pause(min(self.max_delay, self.first_delay * 2 ** (lost - 1)))

    def pause(self, window: float) -> float:
        """A uniform draw in ``[0, window]``."""
        return self._random.uniform(0, window)


DEFAULT_POLICY = RetryPolicy()

_windows: weakref.WeakKeyDictionary[object, float] = weakref.WeakKeyDictionary()
"""Each handle's current backoff window (seconds), while it is not zero."""


def _lost(handle: object, policy: RetryPolicy) -> float:
    """Widen the handle's window after a lost race; the pause to take now."""
    window = min(policy.max_delay, max(policy.first_delay, 2 * _windows.get(handle, 0.0)))
    _windows[handle] = window
    return policy.pause(window)


def _won(handle: object, policy: RetryPolicy, lost: int) -> None:
    """Narrow the window after a success that lost no race; forget it once below the first."""
    window = _windows.get(handle)
    if window is None or lost:
        return
    if window / 2 < policy.first_delay:
        del _windows[handle]
    else:
        _windows[handle] = window / 2


def _pause_before(handle: object, policy: RetryPolicy) -> float:
    """The pause before a first attempt: none on a session this handle found quiet."""
    window = _windows.get(handle)
    return 0.0 if window is None else policy.pause(min(window, policy.first_delay))


class _Races:
    """The lost races of one ``retry_on_conflict`` call: told of each, it says how long to
    pause before the next attempt, or that the attempts are spent."""

    __slots__ = ("count", "handle", "on_conflict", "policy")

    def __init__(
        self,
        handle: object,
        policy: RetryPolicy,
        on_conflict: Callable[[ConcurrencyError], None] | None,
    ) -> None:
        self.handle, self.policy, self.on_conflict = handle, policy, on_conflict
        self.count = 0

    def lost(self, exc: ConcurrencyError) -> float | None:
        """Count a lost race; the pause before the next attempt, None when none is left."""
        self.count += 1
        if self.on_conflict is not None:
            self.on_conflict(exc)
        pause = _lost(self.handle, self.policy)
        return None if self.count >= self.policy.attempts else pause

    def won(self) -> None:
        _won(self.handle, self.policy, self.count)


def retry_on_conflict(
    handle: H,
    action: Callable[[H], T],
    *,
    policy: RetryPolicy = DEFAULT_POLICY,
    on_conflict: Callable[[ConcurrencyError], None] | None = None,
) -> T:
    """Call ``action(handle)``; when it loses a race (``ConcurrencyError``), wait, refresh the
    handle and call it again, up to ``policy.attempts`` calls. Returns what the action returns.

    ``on_conflict`` is told of each lost race (to count them). Other errors propagate at once.
    """
    pause = _pause_before(handle, policy)
    if pause:
        time.sleep(pause)
        handle.refresh()
    races = _Races(handle, policy, on_conflict)
    while True:
        try:
            result = action(handle)
        except ConcurrencyError as exc:
            if (wait := races.lost(exc)) is None:
                raise
            time.sleep(wait)
            handle.refresh()
        else:
            races.won()
            return result


async def retry_on_conflict_async(
    handle: A,
    action: Callable[[A], Awaitable[T]],
    *,
    policy: RetryPolicy = DEFAULT_POLICY,
    on_conflict: Callable[[ConcurrencyError], None] | None = None,
) -> T:
    """``retry_on_conflict`` for an async handle: ``await action(handle)``, sleeping with
    ``asyncio.sleep`` between attempts (the event loop keeps running)."""
    pause = _pause_before(handle, policy)
    if pause:
        await asyncio.sleep(pause)
        await handle.refresh()
    races = _Races(handle, policy, on_conflict)
    while True:
        try:
            result = await action(handle)
        except ConcurrencyError as exc:
            if (wait := races.lost(exc)) is None:
                raise
            await asyncio.sleep(wait)
            await handle.refresh()
        else:
            races.won()
            return result
