"""PostgreSQL's errors as session_sql errors, by SQLSTATE and constraint name.

The constraint's name comes from the error's fields; Citus relays a worker's error without
them, so there (and only when the field is empty) it is read from the message, less the
suffix that names the shard (``pk_session_ids_102008``)."""

from __future__ import annotations

import re
from typing import Final

import psycopg

from session_sql._store.schema import NAMING_CONVENTION
from session_sql._store.transactions import taken_key
from session_sql.errors import (
    ConcurrencyError,
    PermanentStoreError,
    SessionExistsError,
    SessionSQLError,
    StoreError,
    TransientStoreError,
)

ID_SESSIONS: Final = NAMING_CONVENTION["pk"] % {"table_name": "session_ids"}
"""The key of a session's public id (a taken id: ``SessionExistsError``)."""
PK_EVENTS: Final = NAMING_CONVENTION["pk"] % {"table_name": "events"}

_CONNECTION_SQLSTATES: Final = frozenset({"57P01", "57P02", "57P03"})
# The branch of the other SQLSTATEs whose cause says what to do. Retrying may succeed after a
# serialization failure, a deadlock, a statement timeout (or cancel), too many connections or
# no memory; it fails the same way on a full disk, a database or role that does not exist, a
# refused login or a missing privilege.
_ERROR_KINDS: Final[dict[str, type[StoreError]]] = {
    **dict.fromkeys(("40001", "40P01", "57014", "53300", "53200"), TransientStoreError),
    **dict.fromkeys(("53100", "3D000", "28000", "28P01", "42501"), PermanentStoreError),
}


# duplicate_prepared_statement, invalid_sql_statement_name (the statement is not there).
_PREPARED_STATEMENT_SQLSTATES: Final = frozenset({"42P05", "26000"})


_SHARD_CONSTRAINT: Final = re.compile(r'constraint "([a-z_]+?)(?:_[0-9]+)?"')
"""A constraint named in a unique violation's message, without a shard's number."""


def _constraint(orig: psycopg.Error) -> str | None:
    """The violated constraint's name: the error field, or from a Citus worker's message."""
    named = orig.diag.constraint_name
    if named is not None:
        return named
    found = _SHARD_CONSTRAINT.search(orig.diag.message_primary or "")
    return None if found is None else found.group(1)


def translate(orig: psycopg.Error, session_id: str | None) -> SessionSQLError:
    """The session_sql error for a psycopg error, by SQLSTATE and constraint name."""
    sqlstate = orig.sqlstate or ""
    if sqlstate == "XX000" and taken_key(orig):  # a worker's violation, relayed by Citus
        sqlstate = "23505"
    constraint = _constraint(orig) if sqlstate == "23505" else None
    if sqlstate == "23505" and constraint == ID_SESSIONS:
        return SessionExistsError.for_session(session_id)
    if sqlstate == "23505" and constraint == PK_EVENTS:
        return ConcurrencyError.appended_first(session_id)
    if (
        sqlstate.startswith("08")
        or sqlstate in _CONNECTION_SQLSTATES
        or (not sqlstate and isinstance(orig, psycopg.OperationalError))
    ):
        return TransientStoreError(
            f"cannot reach the PostgreSQL server: {orig}", session_id=session_id
        )
    if sqlstate == "55P03":  # lock_not_available: lock_timeout expired
        what = f"session {session_id!r}" if session_id else "the database object"
        return TransientStoreError(
            f"{what} is locked by another transaction for longer than lock_timeout_ms; nothing "
            "was written: retry later, or end the transaction holding the lock",
            session_id=session_id,
        )
    if sqlstate == "25006":
        return PermanentStoreError(f"database is read-only: {orig}", session_id=session_id)
    if sqlstate in _PREPARED_STATEMENT_SQLSTATES:
        return PermanentStoreError(
            f"PostgreSQL error (SQLSTATE {sqlstate}): {orig}; the server connection changed "
            "under a prepared statement, as behind a transaction-pooling proxy (PgBouncer in "
            "transaction mode): open the store with connect_args={'prepare_threshold': None}",
            session_id=session_id,
        )
    label = f"SQLSTATE {sqlstate}" if sqlstate else type(orig).__name__
    kind = _ERROR_KINDS.get(sqlstate, StoreError)
    return kind(f"PostgreSQL error ({label}): {orig}", session_id=session_id)
