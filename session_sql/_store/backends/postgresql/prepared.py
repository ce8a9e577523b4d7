"""Which of the appends' prepared statements each PostgreSQL connection holds.

The one-query append ``EXECUTE``s statements it ``PREPARE``d on the connection
(``one_query``); this is the store's record of them, per psycopg connection, and the
dialect rollback that forgets them when psycopg may have dropped them.
"""

from __future__ import annotations

import weakref
from contextlib import suppress
from typing import Any, Final

import psycopg

__all__ = ["forget_prepared", "forgetting_rollback", "know_prepared", "prepared_on"]

_PREPARED: Final[weakref.WeakKeyDictionary[Any, set[str]]] = weakref.WeakKeyDictionary()
"""The names of the store's statements known to be prepared (SQL ``PREPARE``) on each psycopg
connection, by connection (``one_query``: the one-query append ``EXECUTE``s them).
A connection without an entry is not known: its statements are read from the server first."""


def prepared_on(driver_connection: Any) -> set[str] | None:
    """The names known to be prepared on ``driver_connection``; None when not known."""
    return _PREPARED.get(driver_connection)


def know_prepared(driver_connection: Any, names: set[str]) -> None:
    """Record ``names`` as what is prepared on ``driver_connection``."""
    _PREPARED[driver_connection] = names


def forget_prepared(driver_connection: Any) -> None:
    """What is prepared on ``driver_connection`` is no longer known (psycopg's ``rollback``
    may have sent ``DEALLOCATE ALL``, or a statement failed)."""
    _PREPARED.pop(driver_connection, None)


def forgetting_rollback(rollback: Any, dbapi_connection: Any) -> None:
    """The dialect's rollback, forgetting the connection's prepared statements first when a
    transaction is open: psycopg's ``rollback`` then sends ``ROLLBACK`` and, if it has
    prepared statements of its own, ``DEALLOCATE ALL``, which drops the store's too (a
    rollback of an idle connection sends nothing)."""
    driver = getattr(dbapi_connection, "driver_connection", None) or dbapi_connection
    try:
        idle = driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    except Exception:  # not a psycopg connection, or a closed one: nothing to keep
        idle = False
    if not idle:
        with suppress(TypeError):  # (an object that takes no weak reference)
            forget_prepared(driver)
    rollback(dbapi_connection)
