"""What SQLAlchemy asks a new engine's first connection, answered by the store's own
connect statement.

At its first connection an engine's dialect asks the server four things, each a round trip
(five with the rollback after the isolation level): its version, the current schema, the
default isolation level and ``standard_conforming_strings``. A store opened per request
makes a new engine each time, so each open paid them before its first statement. The
store already runs one statement on every new connection (``backend``'s ``on_connect``:
its settings), so that statement reads the four answers too (``ANSWERS``), and the
dialect's questions take them from there (``answer_first_connect``). A connection whose
answers were not read (another ``creator``, a failed read) is asked as before.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect

__all__ = ["ANSWERS", "answer_first_connect", "keep_answers"]

ANSWERS: Final = (
    "pg_catalog.version(), pg_catalog.current_schema(), "
    "pg_catalog.current_setting('transaction_isolation'), "
    "pg_catalog.current_setting('standard_conforming_strings')"
)
"""The select-list items that read the answers, in order (appended to ``on_connect``'s)."""

_ANSWERS: weakref.WeakKeyDictionary[Any, tuple[Any, ...]] = weakref.WeakKeyDictionary()
"""The answers read on each psycopg connection, until it is gone."""


def keep_answers(driver_connection: Any, answers: Sequence[Any]) -> None:
    """Keep what ``ANSWERS`` read on ``driver_connection`` (the psycopg connection)."""
    _ANSWERS[driver_connection] = tuple(answers)


class _Answer:
    """Stands for the connection a dialect asks one question of, whose answer is known."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def exec_driver_sql(self, _sql: str) -> _Answer:
        return self

    def scalar(self) -> Any:
        return self.value


def _answers(connection: Any) -> tuple[Any, ...] | None:
    """The answers kept for the psycopg connection behind a Core or DBAPI connection."""
    if isinstance(connection, Connection):
        connection = connection.connection  # its pool's proxy
    driver = getattr(connection, "driver_connection", connection)
    try:
        return _ANSWERS.get(driver)
    except TypeError:  # not weakly referable: not a connection ``on_connect`` saw
        return None


def answer_first_connect(dialect: Dialect) -> None:
    """Make ``dialect`` (one engine's) take its first-connect answers from ``ANSWERS``.

    Each question keeps the dialect's own code, given the answer in place of the server: the
    version string is parsed as before, the isolation level upper-cased as
    ``PGDialect.get_isolation_level`` does.
    """
    d: Any = dialect

    def asked(index: int, question: Any, connection: Any) -> Any:
        answers = _answers(connection)
        return question(connection if answers is None else _Answer(answers[index]))

    d._get_server_version_info = functools.partial(asked, 0, d._get_server_version_info)
    d._get_default_schema_name = functools.partial(asked, 1, d._get_default_schema_name)
    d._set_backslash_escapes = functools.partial(asked, 3, d._set_backslash_escapes)
    isolation = d.get_default_isolation_level

    def default_isolation_level(dbapi_connection: Any) -> Any:
        answers = _answers(dbapi_connection)
        return isolation(dbapi_connection) if answers is None else str(answers[2]).upper()

    d.get_default_isolation_level = default_isolation_level
