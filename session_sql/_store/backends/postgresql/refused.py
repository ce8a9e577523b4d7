"""PostgreSQL: why a connection was refused, told with its remedy (a database or role that
does not exist). Apart from SQLite's ``opening`` since it needs psycopg, which a process
using only SQLite never imports."""

from __future__ import annotations

import os
import socket
from typing import Any, Final

import psycopg

from session_sql.errors import PermanentStoreError

__all__ = ["explain_refused_connection", "quote_identifier"]

_MAINTENANCE_DATABASES: Final = ("postgres", "template1")


def explain_refused_connection(orig: BaseException | None) -> PermanentStoreError | None:
    """PostgreSQL: libpq gives no SQLSTATE for a refused connection, so a second connection
    to a maintenance database asks the server whether the database exists. It blocks: the
    async store asks from a worker thread (``AsyncSessionStore._open``)."""
    if not (isinstance(orig, psycopg.OperationalError) and not orig.sqlstate and orig.pgconn):
        return None
    return _ask_maintenance_database(orig.pgconn)


def _ask_maintenance_database(pgconn: Any) -> PermanentStoreError | None:
    """Ask the server (through a maintenance database) whether the database exists."""
    options = {
        option.keyword.decode(): option.val.decode()
        for option in pgconn.info
        if option.val is not None
    }
    database, user = options.get("dbname", ""), options.get("user", "")
    where = f"{options.get('host', '')}:{options.get('port', '')}"
    for maintenance in _MAINTENANCE_DATABASES:
        if maintenance == database:
            continue
        try:
            with psycopg.connect(**{**options, "dbname": maintenance}) as conn:
                found = conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (database,)
                ).fetchone()
        except psycopg.Error:
            continue
        if found is not None:
            return None
        return PermanentStoreError(
            f"database {database!r} does not exist on the PostgreSQL server at {where}: "
            f"create it (CREATE DATABASE {quote_identifier(database)} ENCODING 'UTF8' "
            f"TEMPLATE template0, or createdb -E UTF8 -T template0 {database}) or fix the "
            "database name in the URL"
        )
    if not _listening(options):
        return None
    message = (pgconn.error_message or b"").decode(errors="replace").strip()
    return PermanentStoreError(
        f"the PostgreSQL server at {where} refused the connection of role {user!r} to "
        f"database {database!r} (a role or database that does not exist, or authentication "
        f"that failed): {message}; check the user and database in the URL "
        f"(CREATE ROLE {quote_identifier(user)} LOGIN creates a role) and the server's "
        "authentication rules (pg_hba.conf)"
    )


def _listening(options: dict[str, str]) -> bool:
    """Whether a server accepts connections where libpq connected (TCP or Unix socket)."""
    host = options.get("hostaddr") or options.get("host") or "/var/run/postgresql"
    port = int(options.get("port") or 5432)
    try:
        timeout = float(options.get("connect_timeout") or 10)
        if host.startswith("/"):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(timeout)
                sock.connect(os.path.join(host, f".s.PGSQL.{port}"))
        else:
            socket.create_connection((host.split(",")[0], port), timeout=timeout).close()
    except (OSError, ValueError):
        return False
    return True


def quote_identifier(name: str) -> str:
    """``name`` as a PostgreSQL identifier, for a command the user can paste."""
    return '"' + name.replace('"', '""') + '"'
