"""The follow state machine on its own: no database, a fake clock, results fed in by hand."""

from __future__ import annotations

import pytest

from session_sql._store.backends.postgresql.listening import listen_statement
from session_sql._store.following import (
    LISTEN_MAX,
    POLL_MAX,
    POLL_START,
    Follower,
    Read,
    Sleep,
    Stop,
    Wait,
    parse_payload,
    payload,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def machine(
    after_seq: int = -1, timeout: float | None = None, *, listening: bool = False
) -> tuple[Follower, Clock]:
    clock = Clock()
    return Follower("s1", "t", after_seq, timeout, listening=listening, clock=clock), clock


def test_it_reads_first_then_after_each_page_it_yielded() -> None:
    follower, _ = machine(after_seq=4)
    assert follower.start() == Read(4)
    assert follower.read(9) == Read(9)  # a page: read on at once
    assert follower.last == 9
    assert follower.read(12) == Read(12)


def test_a_polling_follower_backs_off_by_doubling_up_to_the_cap_and_resets_on_events() -> None:
    follower, _ = machine()
    follower.start()
    sleeps = []
    for _ in range(8):
        action = follower.read(None)
        assert isinstance(action, Sleep)
        sleeps.append(action.seconds)
        assert follower.waited() == Read(-1)
    assert sleeps == [0.002, 0.004, 0.008, 0.016, 0.032, 0.05, 0.05, 0.05]
    assert (POLL_START, POLL_MAX) == (0.002, 0.05)
    assert follower.read(3) == Read(3)
    assert follower.read(None) == Sleep(POLL_START)  # events reset the backoff


def test_a_listening_follower_waits_a_second_at_most_then_reads_anyway() -> None:
    follower, _ = machine(listening=True)
    follower.start()
    assert follower.read(None) == Wait(LISTEN_MAX) == Wait(1.0)
    assert follower.waited() == Read(-1)
    assert follower.read(None) == Wait(1.0)  # no backoff while listening


def test_the_timeout_counts_from_the_last_page_and_caps_every_wait() -> None:
    follower, clock = machine(timeout=0.3, listening=True)
    follower.start()
    clock.now += 0.1
    assert follower.read(None) == Wait(pytest.approx(0.2))
    clock.now += 0.25
    follower.waited()
    assert follower.read(None) == Stop()
    follower, clock = machine(timeout=0.5)
    follower.start()
    clock.now += 0.45
    assert follower.read(2) == Read(2)  # events: the idle time starts again
    clock.now += 0.49
    assert follower.read(None) == Sleep(POLL_START)
    clock.now += 0.0095
    assert follower.read(None) == Sleep(pytest.approx(0.0005))  # the backoff, capped


def test_a_zero_timeout_reads_once_and_stops() -> None:
    follower, _ = machine(timeout=0.0)
    assert follower.start() == Read(-1)
    assert follower.read(None) == Stop()
    follower, _ = machine(timeout=0.0, listening=True)
    follower.start()
    assert follower.read(5) == Read(5)  # what is there is read to the end first
    assert follower.read(None) == Stop()


def test_only_a_commit_past_the_cursor_to_this_session_of_this_tenant_wakes() -> None:
    follower, _ = machine(after_seq=6, listening=True)
    follower.start()
    assert follower.wakes(payload("t", "s1", 7))
    assert not follower.wakes(payload("t", "s1", 6))  # the head already yielded
    assert not follower.wakes(payload("t", "s1", 2))  # an older head
    assert not follower.wakes(payload("t", "s2", 9))  # another session
    assert not follower.wakes(payload("u", "s1", 9))  # another tenant
    for junk in ("s1:7", "", "[]", '["t","s1"]', '["t","s1","7"]', "7", "null"):
        assert not follower.wakes(junk), junk  # not a payload: ignored, never an error
    follower.read(9)
    assert not follower.wakes(payload("t", "s1", 8))  # the cursor moved past it
    assert follower.wakes(payload("t", "s1", 10))


def test_the_payload_round_trips_and_the_channel_is_quoted() -> None:
    assert payload("t:1", "s:1", 7) == '["t:1","s:1",7]'
    assert parse_payload(payload("t:1", "s:1", 7)) == ("t:1", "s:1", 7)
    assert parse_payload("s:1:7") is None
    assert "LISTEN" in repr(listen_statement('a"b'))
