"""session_sql: event-sourced LLM-agent sessions stored in SQL.

This module is the curated public API. The core (events, surface, ``Session``) imports
without SQLAlchemy or psycopg; the store's names are imported on first use, so that
``import session_sql`` for in-memory work stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from session_sql.catalog import DEFAULT_CATALOG, Catalog
from session_sql.errors import (
    ConcurrencyError,
    ConfigurationError,
    CorruptSessionError,
    ForkError,
    InvalidArgumentError,
    InvalidEventError,
    InvalidHeaderError,
    InvalidSeedError,
    NotJSONError,
    PermanentStoreError,
    ReadOnlyError,
    ReentrantAppendError,
    SchemaMismatchError,
    SchemaVersionError,
    SessionExistsError,
    SessionFormatUnsupportedError,
    SessionNotFoundError,
    SessionSQLError,
    StoreError,
    SurfaceError,
    TornTailWarning,
    TransientStoreError,
)
from session_sql.events import SESSION_FORMAT_VERSION, Replace, SessionEvent
from session_sql.invariants import Violation, check_invariants, invariant_validator
from session_sql.jsonl import jsonl_file_name
from session_sql.jsonvalue import snapshot_json, thaw
from session_sql.messages import SurfaceMessage
from session_sql.repair import interrupted_turn_closers
from session_sql.retrying import RetryPolicy, retry_on_conflict, retry_on_conflict_async
from session_sql.session import EventsView, Session
from session_sql.surface import Surface, SurfaceFold, fold_surface

if TYPE_CHECKING:
    from session_sql._store.async_store import (
        AsyncSessionStore,
        AsyncStoredSession,
        open_async_store,
    )
    from session_sql._store.migration import (
        MigrationFailure,
        MigrationProgress,
        MigrationReport,
        migrate,
    )
    from session_sql._store.parquet import ParquetExport
    from session_sql._store.retention import PrunedSession, PruneReport
    from session_sql._store.schema import SCHEMA_VERSION
    from session_sql._store.stats import ModelTokens, StoreStats, ToolStats
    from session_sql._store.store import SessionStore, VerifyReport, open_store
    from session_sql._store.stored import SessionInfo
    from session_sql._store.vacuum import VacuumReport
    from session_sql._store.writer import StoredSession

# Store names, imported lazily (they pull in SQLAlchemy and psycopg): name -> module.
_LAZY = {
    "AsyncSessionStore": "session_sql._store.async_store",
    "AsyncStoredSession": "session_sql._store.async_store",
    "MigrationFailure": "session_sql._store.migration",
    "MigrationProgress": "session_sql._store.migration",
    "MigrationReport": "session_sql._store.migration",
    "SCHEMA_VERSION": "session_sql._store.schema",
    "ModelTokens": "session_sql._store.stats",
    "SessionInfo": "session_sql._store.stored",
    "SessionStore": "session_sql._store.store",
    "StoreStats": "session_sql._store.stats",
    "ParquetExport": "session_sql._store.parquet",
    "PruneReport": "session_sql._store.retention",
    "PrunedSession": "session_sql._store.retention",
    "StoredSession": "session_sql._store.writer",
    "ToolStats": "session_sql._store.stats",
    "VacuumReport": "session_sql._store.vacuum",
    "VerifyReport": "session_sql._store.store",
    "migrate": "session_sql._store.migration",
    "open_async_store": "session_sql._store.async_store",
    "open_store": "session_sql._store.store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'session_sql' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AsyncSessionStore",
    "AsyncStoredSession",
    "Catalog",
    "ConcurrencyError",
    "ConfigurationError",
    "CorruptSessionError",
    "DEFAULT_CATALOG",
    "EventsView",
    "ForkError",
    "InvalidArgumentError",
    "InvalidEventError",
    "InvalidHeaderError",
    "InvalidSeedError",
    "MigrationFailure",
    "MigrationProgress",
    "MigrationReport",
    "ModelTokens",
    "NotJSONError",
    "ParquetExport",
    "PermanentStoreError",
    "PruneReport",
    "PrunedSession",
    "ReadOnlyError",
    "ReentrantAppendError",
    "Replace",
    "RetryPolicy",
    "SCHEMA_VERSION",
    "SESSION_FORMAT_VERSION",
    "SchemaMismatchError",
    "SchemaVersionError",
    "Session",
    "SessionEvent",
    "SessionExistsError",
    "SessionFormatUnsupportedError",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionSQLError",
    "SessionStore",
    "StoreError",
    "StoreStats",
    "StoredSession",
    "Surface",
    "SurfaceError",
    "SurfaceFold",
    "SurfaceMessage",
    "ToolStats",
    "TornTailWarning",
    "TransientStoreError",
    "VacuumReport",
    "VerifyReport",
    "Violation",
    "check_invariants",
    "fold_surface",
    "interrupted_turn_closers",
    "invariant_validator",
    "jsonl_file_name",
    "migrate",
    "open_async_store",
    "open_store",
    "retry_on_conflict",
    "retry_on_conflict_async",
    "snapshot_json",
    "thaw",
]
