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
from typing import Any, Final

import psycopg

from session_sql._store.transactions import (
    COMMIT,
    Copy,
    End,
    Flow,
    Instruction,
    Query,
    Reply,
    Run,
    Send,
    T,
    drive,
)

PG_IDLE: Final = psycopg.pq.TransactionStatus.IDLE
PG_ACTIVE: Final = psycopg.pq.TransactionStatus.ACTIVE
PG_INERROR: Final = psycopg.pq.TransactionStatus.INERROR
"""A connection's transaction states the package's code reads (one place for them)."""


def run(
    flow: Flow[T],
    driver: psycopg.Connection[Any],
    client: psycopg.ClientCursor[Any] | None = None,
) -> T:
    """Drive ``flow`` on ``driver`` (idle, the caller's alone) to its end; ``client`` is the
    client-binding cursor its queries run on, if it has one already. An interrupt, or an
    error the flow raises, leaves the connection idle or broken (see :func:`settle`)."""
    cursor = client or psycopg.ClientCursor(driver)
    try:
        return drive(flow, lambda instruction: _run(driver, cursor, instruction))
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
    cursor = client or psycopg.AsyncClientCursor(driver)
    try:
        reply: Reply | None = None
        while True:  # transactions.drive, awaited
            try:
                instruction = next(flow) if reply is None else flow.send(reply)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            reply = await _run_async(driver, cursor, instruction)
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


def _run(
    driver: psycopg.Connection[Any], client: psycopg.ClientCursor[Any], instruction: Instruction
) -> Reply:
    sent: list[Any] = []  # the cursors of the statements sent, each with its count
    try:
        if isinstance(instruction, End):
            if instruction is COMMIT:
                driver.commit()
            elif not driver.broken:
                driver.rollback()
            return Reply([])
        if isinstance(instruction, Query):
            cur = client
            cur.execute(instruction.text)
            if not instruction.last_rows:
                return Reply([cur.rowcount])
            while cur.nextset():
                pass
            return Reply([cur.rowcount], cur.fetchall() if cur.description is not None else None)
        if isinstance(instruction, Copy):
            sent.append(driver.cursor())
            with sent[0].copy(instruction.statement) as copy:
                for row in instruction.rows:
                    copy.write_row(row)
            return Reply([sent[0].rowcount])
        with driver.pipeline():
            for one in instruction.runs:
                sent.append(_queued(driver.cursor(), one))
        fetched = [cur.fetchall() if one.fetch else None for one, cur in _sent(instruction, sent)]
        return _reply(sent, fetched)
    except psycopg.Error as exc:
        return Reply(_counts(instruction, sent), error=exc, broken=bool(driver.broken))


async def _run_async(
    driver: psycopg.AsyncConnection[Any],
    client: psycopg.AsyncClientCursor[Any],
    instruction: Instruction,
) -> Reply:
    """:func:`_run`, awaited."""
    sent: list[Any] = []
    try:
        if isinstance(instruction, End):
            if instruction is COMMIT:
                await driver.commit()
            elif not driver.broken:
                await driver.rollback()
            return Reply([])
        if isinstance(instruction, Query):
            cur = client
            await cur.execute(instruction.text)
            if not instruction.last_rows:
                return Reply([cur.rowcount])
            while cur.nextset():
                pass
            rows = await cur.fetchall() if cur.description is not None else None
            return Reply([cur.rowcount], rows)
        if isinstance(instruction, Copy):
            sent.append(driver.cursor())
            async with sent[0].copy(instruction.statement) as copy:
                for row in instruction.rows:
                    await copy.write_row(row)
            return Reply([sent[0].rowcount])
        async with driver.pipeline():
            for one in instruction.runs:
                sent.append(await _queued_async(driver.cursor(), one))
        pairs = _sent(instruction, sent)
        fetched = [await cur.fetchall() if one.fetch else None for one, cur in pairs]
        return _reply(sent, fetched)
    except psycopg.Error as exc:
        return Reply(_counts(instruction, sent), error=exc, broken=bool(driver.broken))


def _queued(cur: psycopg.Cursor[Any], one: Run) -> psycopg.Cursor[Any]:
    if one.many:
        cur.executemany(one.sql, one.params)
    else:
        cur.execute(one.sql, one.params)
    return cur


async def _queued_async(cur: psycopg.AsyncCursor[Any], one: Run) -> psycopg.AsyncCursor[Any]:
    if one.many:
        await cur.executemany(one.sql, one.params)
    else:
        await cur.execute(one.sql, one.params)
    return cur


def _sent(instruction: Send, sent: list[Any]) -> list[tuple[Run, Any]]:
    return list(zip(instruction.runs, sent, strict=True))


def _reply(sent: list[Any], fetched: list[Any]) -> Reply:
    """The counts of a pipeline's statements, and the rows of the last that fetched."""
    rows = next((list(r) for r in reversed(fetched) if r is not None), None)
    return Reply([cur.rowcount for cur in sent], rows)


def _counts(instruction: Instruction, sent: list[Any]) -> list[int]:
    """The counts known after a failed instruction: a statement that did not run reads -1."""
    runs = len(instruction.runs) if isinstance(instruction, Send) else len(sent)
    return [cur.rowcount for cur in sent] + [-1] * (runs - len(sent))
