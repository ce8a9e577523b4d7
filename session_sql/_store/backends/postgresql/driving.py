"""PostgreSQL's two loops: each runs the store's transactions (``transactions``' flows) on
psycopg, one on a ``Connection``, one on an ``AsyncConnection``.

A flow's :class:`~session_sql._store.transactions.Send` goes as one pipeline (one round trip
however many statements), a ``Query`` through a client-binding cursor (one message, bound on
the client), a ``Copy`` by ``COPY FROM STDIN``; each reply carries the row counts, the rows
asked for, or the error, and whether the connection broke. Nothing else differs between the
two loops: what to run, and what an outcome means, is the flows'.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg

from session_sql._store.transactions import (
    COMMIT,
    Copy,
    End,
    Flow,
    Instruction,
    Query,
    Reply,
    Send,
    T,
)

PG_IDLE = psycopg.pq.TransactionStatus.IDLE
PG_ACTIVE = psycopg.pq.TransactionStatus.ACTIVE


def run(
    flow: Flow[T],
    driver: psycopg.Connection[Any],
    client: psycopg.ClientCursor[Any] | None = None,
) -> T:
    """Drive ``flow`` on ``driver`` (idle, the caller's alone) to its end; ``client`` is the
    client-binding cursor its queries run on, if it has one already. An interrupt, or an
    error the flow raises, leaves the connection idle or broken (see :func:`settle`)."""
    cursors = _Cursors(driver, client)
    try:
        reply: Reply | None = None
        while True:
            try:
                instruction = next(flow) if reply is None else flow.send(reply)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            reply = _run(driver, cursors, instruction)
    except BaseException:
        settle(driver)
        raise
    finally:
        flow.close()


async def run_async(
    flow: Flow[T],
    driver: psycopg.AsyncConnection[Any],
    client: psycopg.AsyncClientCursor[Any] | None = None,
) -> T:
    """:func:`run` on psycopg's ``AsyncConnection``: each instruction awaited natively."""
    cursors = _AsyncCursors(driver, client)
    try:
        reply: Reply | None = None
        while True:
            try:
                instruction = next(flow) if reply is None else flow.send(reply)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            reply = await _run_async(driver, cursors, instruction)
    except BaseException:
        await settle_async(driver)
        raise
    finally:
        flow.close()


def settle(driver: psycopg.Connection[Any]) -> None:
    """After a flow that did not finish: roll back an open transaction; a connection lost,
    or left inside a query, is left for the caller to discard (``broken`` or not idle)."""
    status = driver.info.transaction_status
    if not driver.broken and status not in (PG_IDLE, PG_ACTIVE):
        with contextlib.suppress(psycopg.Error):  # the caller discards one that is not idle
            driver.rollback()


async def settle_async(driver: psycopg.AsyncConnection[Any]) -> None:
    status = driver.info.transaction_status
    if not driver.broken and status not in (PG_IDLE, PG_ACTIVE):
        with contextlib.suppress(psycopg.Error):
            await driver.rollback()


class _Cursors:
    """The cursors of one flow's run: a client-binding one for queries, one per statement
    of a pipeline (each keeps its own count)."""

    def __init__(
        self, driver: psycopg.Connection[Any], client: psycopg.ClientCursor[Any] | None
    ) -> None:
        self.driver = driver
        self._client = client

    def client(self) -> psycopg.ClientCursor[Any]:
        if self._client is None:
            self._client = psycopg.ClientCursor(self.driver)
        return self._client


class _AsyncCursors:
    def __init__(
        self, driver: psycopg.AsyncConnection[Any], client: psycopg.AsyncClientCursor[Any] | None
    ) -> None:
        self.driver = driver
        self._client = client

    def client(self) -> psycopg.AsyncClientCursor[Any]:
        if self._client is None:
            self._client = psycopg.AsyncClientCursor(self.driver)
        return self._client


def _failed(driver: Any, counts: list[int], exc: psycopg.Error) -> Reply:
    return Reply(counts, error=exc, broken=bool(driver.broken))


def _run(driver: psycopg.Connection[Any], cursors: _Cursors, instruction: Instruction) -> Reply:
    if isinstance(instruction, End):
        try:
            if instruction is COMMIT:
                driver.commit()
            elif not driver.broken:
                driver.rollback()
        except psycopg.Error as exc:
            return _failed(driver, [], exc)
        return Reply([])
    if isinstance(instruction, Query):
        cur = cursors.client()
        try:
            cur.execute(instruction.text)
            rows = None
            if instruction.last_rows:
                while cur.nextset():
                    pass
                rows = list(cur.fetchall()) if cur.description is not None else None
        except psycopg.Error as exc:
            return _failed(driver, [], exc)
        return Reply([cur.rowcount], rows)
    if isinstance(instruction, Copy):
        copying = driver.cursor()
        try:
            with copying.copy(instruction.statement) as copy:
                for row in instruction.rows:
                    copy.write_row(row)
        except psycopg.Error as exc:
            return _failed(driver, [-1], exc)
        return Reply([copying.rowcount])
    assert isinstance(instruction, Send)
    sent = []
    rows = None
    try:
        with driver.pipeline():
            for one in instruction.runs:
                each = driver.cursor()
                sent.append(each)
                if one.many:
                    each.executemany(one.sql, one.params)
                else:
                    each.execute(one.sql, one.params)
        for one, each in zip(instruction.runs, sent, strict=True):
            if one.fetch:
                rows = list(each.fetchall())
    except psycopg.Error as exc:
        return _failed(driver, _counts(sent, len(instruction.runs)), exc)
    return Reply([each.rowcount for each in sent], rows)


async def _run_async(
    driver: psycopg.AsyncConnection[Any], cursors: _AsyncCursors, instruction: Instruction
) -> Reply:
    if isinstance(instruction, End):
        try:
            if instruction is COMMIT:
                await driver.commit()
            elif not driver.broken:
                await driver.rollback()
        except psycopg.Error as exc:
            return _failed(driver, [], exc)
        return Reply([])
    if isinstance(instruction, Query):
        cur = cursors.client()
        try:
            await cur.execute(instruction.text)
            rows = None
            if instruction.last_rows:
                while cur.nextset():
                    pass
                rows = list(await cur.fetchall()) if cur.description is not None else None
        except psycopg.Error as exc:
            return _failed(driver, [], exc)
        return Reply([cur.rowcount], rows)
    if isinstance(instruction, Copy):
        copying = driver.cursor()
        try:
            async with copying.copy(instruction.statement) as copy:
                for row in instruction.rows:
                    await copy.write_row(row)
        except psycopg.Error as exc:
            return _failed(driver, [-1], exc)
        return Reply([copying.rowcount])
    assert isinstance(instruction, Send)
    sent = []
    rows = None
    try:
        async with driver.pipeline():
            for one in instruction.runs:
                each = driver.cursor()
                sent.append(each)
                if one.many:
                    await each.executemany(one.sql, one.params)
                else:
                    await each.execute(one.sql, one.params)
        for one, each in zip(instruction.runs, sent, strict=True):
            if one.fetch:
                rows = list(await each.fetchall())
    except psycopg.Error as exc:
        return _failed(driver, _counts(sent, len(instruction.runs)), exc)
    return Reply([each.rowcount for each in sent], rows)


def _counts(sent: list[Any], runs: int) -> list[int]:
    """The counts known after a failed pipeline: a statement that did not run reads -1."""
    return [cur.rowcount for cur in sent] + [-1] * (runs - len(sent))
