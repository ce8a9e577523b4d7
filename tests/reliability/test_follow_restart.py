"""A follower whose server restarts logs no error: the listening connection the store opens
again may be one the server ends at that moment, and it is closed as is, not reset (a
rollback of a dead connection, which the pool would log as "Exception during reset").

The restarts run on a private cluster (restarting the shared test server would break other
tests); the connection lost while it is being opened is made deterministic on the shared
server by a ``LISTEN`` that ends its own connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import sql

from session_sql import StoreError, open_async_store, open_store
from session_sql._store.backends.postgresql import listening

from .reliability_builders import user_message

RESTARTS = 3


def _say(handle: Any, mark: str) -> int:
    return int(handle.append("user/message", user_message(mark, id=mark), surface_op="append").seq)


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What was logged at ERROR or above, and any pool reset that failed, at any level."""
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.ERROR or "Exception during reset" in r.getMessage()
    ]


def _follow_sync(store: Any, after: int) -> Iterator[int]:
    """Follow from ``after``; on a ``StoreError`` (the server down), follow again."""
    while True:
        try:
            for event in store.follow("followed", after_seq=after, timeout=60):
                after = event.seq
                yield event.seq
        except StoreError:
            continue


async def _next_async(store: Any, after: int) -> int:
    """The next seq after ``after``, following again on a ``StoreError``."""
    while True:
        try:
            async for event in store.follow("followed", after_seq=after, timeout=60):
                return int(event.seq)
        except StoreError:
            await asyncio.sleep(0.05)


@pytest.mark.postgresql
@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_follower_whose_server_restarts_logs_no_error(private_postgres, api, caplog):
    """Restarted three times under a follower: it gets each event appended after each
    restart, and nothing logs an error."""
    caplog.set_level(logging.DEBUG)
    writer = open_store(private_postgres.url, schema=private_postgres.schema)
    handle = writer.create_session("followed")
    _say(handle, "e0")

    def append_after_restart(seq: int) -> None:
        private_postgres.restart()
        while True:
            try:
                handle.refresh()
                assert _say(handle, f"e{seq}") == seq
                return
            except StoreError:
                continue  # the server still starting

    try:
        if api == "sync":
            follower = _follow_sync(writer, -1)
            assert next(follower) == 0
            for seq in range(1, RESTARTS + 1):
                append_after_restart(seq)
                assert next(follower) == seq
        else:

            async def run() -> None:
                url, schema = private_postgres.url, private_postgres.schema
                async with open_async_store(url, schema=schema) as store:
                    assert await _next_async(store, -1) == 0
                    for seq in range(1, RESTARTS + 1):
                        following = asyncio.ensure_future(_next_async(store, seq - 1))
                        await asyncio.sleep(0.2)  # following: listening, or reading
                        await asyncio.to_thread(append_after_restart, seq)
                        assert await asyncio.wait_for(following, 120) == seq

            asyncio.run(run())
    finally:
        writer.close()
    assert _errors(caplog) == []


@pytest.mark.postgresql
@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_listening_connection_lost_while_opening_is_closed_without_a_reset(
    pg_backend, api, monkeypatch, caplog
):
    """The connection the store opens to listen on is ended by the server before it listens:
    the follower gets a ``StoreError``, and the connection is closed, not reset (no error
    logged); the next follow listens."""
    caplog.set_level(logging.DEBUG)
    ending = sql.SQL("SELECT pg_terminate_backend(pg_backend_pid())")
    monkeypatch.setattr(listening, "listen_statement", lambda _channel: ending)
    with open_store(pg_backend.url, schema=pg_backend.schema) as writer:
        _say(writer.create_session("followed"), "e0")
        if api == "sync":
            with pytest.raises(StoreError):
                next(writer.follow("followed", timeout=5))
            monkeypatch.undo()
            assert next(writer.follow("followed", timeout=5)).seq == 0
        else:

            async def run() -> None:
                async with open_async_store(pg_backend.url, schema=pg_backend.schema) as store:
                    with pytest.raises(StoreError):
                        await anext(store.follow("followed", timeout=5))
                    monkeypatch.undo()
                    assert (await anext(store.follow("followed", timeout=5))).seq == 0

            asyncio.run(run())
    assert _errors(caplog) == []
