"""The few statements every PostgreSQL open runs (the gate's), compiled once per process.

SQLAlchemy keeps compiled statements per engine, and a store opened per request makes a new
engine each time, so each open compiled them again: about a millisecond of client CPU, as
much as the statements' own round trips. Here each is compiled the first time for its
dialect's class and parameter style, and run as driver SQL from then on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Connection, CursorResult

__all__ = ["execute"]

_SQL: dict[tuple[Any, ...], tuple[str, tuple[str, ...] | None]] = {}


def execute(
    conn: Connection,
    key: tuple[Any, ...],
    build: Callable[[], Any],
    params: Mapping[str, Any],
) -> CursorResult[Any]:
    """``conn.execute(build(), params)``, with ``build()`` compiled once per process under
    ``key`` (which names everything the statement's text depends on besides the dialect).

    Only for statements whose results need no SQLAlchemy type processing (text, numbers,
    booleans); one without parameters must not hold a ``%`` (the driver reads ``%%`` as a
    percent sign only when parameters are given).
    """
    dialect = conn.dialect
    found_key = (*key, type(dialect), dialect.paramstyle)
    found = _SQL.get(found_key)
    if found is None:
        compiled = build().compile(dialect=dialect)
        order = tuple(compiled.positiontup or ()) if dialect.positional else None
        if len(_SQL) >= 1024:  # keys name schemas: bounded
            _SQL.clear()
        found = _SQL[found_key] = (compiled.string, order)
    sql, order = found
    bound = dict(params) if order is None else tuple(params[name] for name in order)
    return conn.exec_driver_sql(sql, bound)
