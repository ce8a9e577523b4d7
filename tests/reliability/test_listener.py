"""The store's listening thread keeps waking followers: whatever its descriptor's number (a
process with thousands of open sockets), and after an error it did not expect.

Each test asserts that the follower was woken by the listener (``ListenHub.delivered``
counts the notifications it handed over), not by the read a follower does every second
anyway, and that the thread is listening (``backend_pid``), so none of it rests on timing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from session_sql import open_store
from session_sql._store.backends.postgresql import backend as postgresql
from session_sql._store.backends.postgresql import listening

from .reliability_builders import user_message
from .test_follower_bound import _Followers

LOW_DESCRIPTORS = 1024
"""``select.select`` refuses descriptors from this number on (FD_SETSIZE)."""


def _say(handle: Any, mark: str) -> int:
    return int(handle.append("user/message", user_message(mark, id=mark), surface_op="append").seq)


def _eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _hub(followers: _Followers) -> listening.ListenHub:
    inner = followers.store if followers.loop is None else followers.store._store
    return inner._ctx.hub()


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextlib.contextmanager
def _descriptors_taken(up_to: int) -> Iterator[None]:
    """Every descriptor number below ``up_to`` in use (the soft limit raised as needed,
    within the hard one), so each socket opened meanwhile gets a number past it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = up_to + 512
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.fail(f"the hard limit on open files ({hard}) is below {wanted}")
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    taken: list[int] = []
    try:
        while not taken or taken[-1] < up_to:
            taken.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.postgresql
def test_followers_are_woken_by_listen_in_a_process_with_many_descriptors(pg_backend, api):
    """More than 1,024 descriptors open: the listening connection's socket is numbered past
    what ``select`` takes, and the listener still hands every commit to its followers."""
    with _descriptors_taken(LOW_DESCRIPTORS + 64):
        followers = _Followers(api, pg_backend.url, pg_backend.schema)
        try:
            writer = open_store(pg_backend.url, schema=pg_backend.schema)
            try:
                session = writer.create_session("watched")
                _say(session, "e0")
                follower = followers.follow("watched")
                assert followers.step(follower).seq == 0
                hub = _hub(followers)
                _eventually(lambda: hub.backend_pid is not None, "the store never listened")
                for seq in range(1, 4):
                    assert _say(session, f"e{seq}") == seq
                    assert followers.step(follower).seq == seq
                _eventually(lambda: hub.delivered >= 1, "no follower was woken by LISTEN")
                assert hub.restarts == 0
                assert hub.backend_pid is not None  # still listening
                followers.end(follower)
            finally:
                writer.close()
        finally:
            followers.dispose()


class _Killed(BaseException):
    """An error no handler of the thread expects: it ends the thread."""


@pytest.mark.postgresql
@pytest.mark.parametrize("error", [RuntimeError, _Killed], ids=["error", "thread-killed"])
def test_a_listener_that_fails_listens_again_and_wakes_its_followers(
    pg_backend, api, error, monkeypatch, caplog
):
    """The listening thread's first wait fails: the error is logged with its traceback (never
    silent), the store listens again (the thread goes on, or another takes over when the
    error ended it), and followers are woken by LISTEN as before."""
    original = listening._Runner._listen
    calls: list[int] = []

    def failing_once(self: Any, pgconn: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise error("the LISTEN wait failed")
        original(self, pgconn)

    monkeypatch.setattr(listening._Runner, "_listen", failing_once)
    writer = open_store(pg_backend.url, schema=pg_backend.schema)
    followers = _Followers(api, pg_backend.url, pg_backend.schema)
    try:
        session = writer.create_session("watched")
        _say(session, "e0")
        with caplog.at_level(logging.ERROR, logger="session_sql"):
            follower = followers.follow("watched")
            assert followers.step(follower).seq == 0
            hub = _hub(followers)
            _eventually(lambda: hub.backend_pid is not None, "the store never listened again")
        assert len(calls) >= 2
        assert any("LISTEN" in r.getMessage() and r.exc_info for r in caplog.records)
        assert hub.restarts == (1 if error is _Killed else 0)
        for seq in range(1, 4):
            assert _say(session, f"e{seq}") == seq
            assert followers.step(follower).seq == seq
        _eventually(lambda: hub.delivered >= 1, "no follower was woken by LISTEN")
        followers.end(follower)
        _eventually(lambda: hub.backend_pid is None, "the last follower left: no listening")
    finally:
        followers.dispose()
        writer.close()


@pytest.mark.postgresql
def test_a_pooled_connection_past_1024_is_checked_out_without_a_round_trip(pg_backend):
    """The pool's check of an idle connection (``postgresql.is_quiet``: a poll, no round
    trip) holds for a socket numbered past what ``select`` takes."""
    with (
        _descriptors_taken(LOW_DESCRIPTORS + 64),
        open_store(pg_backend.url, schema=pg_backend.schema) as store,
        store._ctx.engine.connect() as conn,
    ):
        driver = conn.connection.driver_connection
        assert driver.pgconn.socket > LOW_DESCRIPTORS
        assert postgresql.is_quiet(driver)
