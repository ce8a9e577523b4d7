"""The store's earlier home of engines and transactions, kept so its names still import.

Everything that differs between SQLite and PostgreSQL lives in ``_store/backends/`` (one
``Backend`` per database, chosen by ``backends.backend_for``). This module re-exports the
names callers imported from here, and keeps the few functions that took an engine where the
backend now has a method. ``fastpath`` still imports ``PG_IDLE``, ``begin_raw_write``,
``pipeline`` and ``write_tx`` from here until its append transactions move into the backends.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine

from session_sql._store.backends import (
    DEFAULT_MAX_OVERFLOW,
    DEFAULT_POOL_SIZE,
    analyze,
    backend_for,
    database_label,
    dumps_json,
    make_engine,
    read_tx,
    snapshot_tx,
    target_schema,
    translate_errors,
    write_tx,
)
from session_sql._store.backends.connections import AsyncWriteConnections, IdleConnection
from session_sql._store.backends.postgresql import PG_IDLE, SET_TENANT, pipeline
from session_sql._store.backends.sqlite import ANALYZE_SAMPLE_ROWS, sqlite_pragmas

__all__ = [
    "ANALYZE_SAMPLE_ROWS",
    "DEFAULT_MAX_OVERFLOW",
    "DEFAULT_POOL_SIZE",
    "PG_IDLE",
    "SET_TENANT",
    "AsyncWriteConnections",
    "IdleConnection",
    "analyze",
    "begin_raw_write",
    "database_label",
    "dumps_json",
    "enable_wal",
    "is_sqlite",
    "lock_schema_init",
    "make_engine",
    "pipeline",
    "read_tx",
    "scope_transactions",
    "snapshot_tx",
    "sqlite_pragmas",
    "target_schema",
    "translate_errors",
    "write_tx",
]


def is_sqlite(engine: Engine | Connection) -> bool:
    """Whether ``engine`` talks to SQLite (else PostgreSQL)."""
    return backend_for(engine).name == "sqlite"


def begin_raw_write(engine: Engine, cursor: Any) -> None:
    """Open a write transaction on a pooled DBAPI connection's cursor, as ``write_tx`` does."""
    backend_for(engine).begin_raw_write(cursor)


def enable_wal(engine: Engine) -> None:
    """Switch an SQLite store's file to WAL; no-op on PostgreSQL (``Backend.prepare_store``)."""
    backend_for(engine).prepare_store(engine)


def lock_schema_init(conn: Connection, schema: str | None) -> None:
    """Serialise schema initialisation of ``schema`` until the transaction ends."""
    backend_for(conn).lock_schema_init(conn, schema)


def scope_transactions(engine: Engine, tenant: str) -> None:
    """Set the tenant settings at the start of every transaction on ``engine`` (PostgreSQL)."""
    backend_for(engine).scope_transactions(engine, tenant)
