"""The SQL store: schema and gate, the transactional writer, readers and follow."""

from session_sql.store.schema import SCHEMA_VERSION
from session_sql.store.store import SessionInfo, SessionStore, VerifyReport, open_store
from session_sql.store.writer import StoredSession

__all__ = [
    "SCHEMA_VERSION",
    "SessionInfo",
    "SessionStore",
    "StoredSession",
    "VerifyReport",
    "open_store",
]
