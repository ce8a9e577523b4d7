"""session_sql: event-sourced LLM-agent sessions stored in SQL."""

from session_sql.catalog import DEFAULT_CATALOG, Catalog
from session_sql.errors import (
    ConcurrencyError,
    CorruptSessionError,
    ForkError,
    InvalidEventError,
    InvalidHeaderError,
    InvalidSeedError,
    NotJSONError,
    ReentrantAppendError,
    SchemaMismatchError,
    SchemaVersionError,
    SessionExistsError,
    SessionFormatUnsupportedError,
    SessionNotFoundError,
    SessionSQLError,
    StoreError,
    SurfaceError,
)
from session_sql.events import SESSION_FORMAT_VERSION, Replace, SessionEvent
from session_sql.invariants import Violation, check_invariants, invariant_validator
from session_sql.jsonvalue import snapshot_json, thaw
from session_sql.repair import interrupted_turn_closers
from session_sql.session import Session
from session_sql.store import (
    SCHEMA_VERSION,
    SessionInfo,
    SessionStore,
    StoredSession,
    VerifyReport,
    open_store,
)
from session_sql.surface import SurfaceFold, fold_surface

__all__ = [
    "Catalog",
    "ConcurrencyError",
    "CorruptSessionError",
    "DEFAULT_CATALOG",
    "ForkError",
    "InvalidEventError",
    "InvalidHeaderError",
    "InvalidSeedError",
    "NotJSONError",
    "ReentrantAppendError",
    "Replace",
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
    "StoredSession",
    "SurfaceError",
    "SurfaceFold",
    "VerifyReport",
    "Violation",
    "check_invariants",
    "fold_surface",
    "interrupted_turn_closers",
    "invariant_validator",
    "open_store",
    "snapshot_json",
    "thaw",
]
