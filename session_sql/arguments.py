"""Argument and option checks at the API, shared by the core and the store (no SQL here).

Every refusal is an ``InvalidArgumentError`` (a call's argument) or a ``ConfigurationError``
(a store option) naming what it refused, worded the same wherever the check runs.
"""

from __future__ import annotations

import re
from typing import Any

from session_sql.catalog import Catalog
from session_sql.errors import ConfigurationError, InvalidArgumentError, SessionNotFoundError
from session_sql.events import is_session_id

MAX_BOUND = 2**62
"""Beyond this no seq or row count can exist, and every driver binds it as a BIGINT."""
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")


def int_arg(name: str, value: object, *, minimum: int | None = None) -> int:
    """An int argument (not a bool), at least ``minimum``; ``InvalidArgumentError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(
            f"{name} must be an int, not {type(value).__name__} {value!r}", argument=name
        )
    if minimum is not None and value < minimum:
        raise InvalidArgumentError(f"{name} must be >= {minimum}, got {value}", argument=name)
    return value


def check_last(last: object) -> int | None:
    """``last`` of a tail read: None (everything) or an int >= 0; ``InvalidArgumentError``."""
    return None if last is None else int_arg("last", last, minimum=0)


def last_arg(last: object) -> int | None:
    """``check_last``, clamped to a BIGINT (the store binds it)."""
    count = check_last(last)
    return None if count is None else min(count, MAX_BOUND)


def clamp(value: int) -> int:
    """``value`` within what a BIGINT holds."""
    return max(-MAX_BOUND, min(value, MAX_BOUND))


def seq_bound(name: str, seq: object) -> int:
    """A seq bound, clamped to what a BIGINT holds (beyond it, no seq can exist anyway)."""
    return max(-1, min(int_arg(name, seq), MAX_BOUND))


def timeout_arg(timeout: object) -> float | None:
    """A timeout in seconds: None (wait forever) or a number >= 0."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidArgumentError(
            f"timeout must be a number of seconds or None, not {timeout!r}", argument="timeout"
        )
    if not timeout >= 0:  # also refuses NaN
        raise InvalidArgumentError(f"timeout must be >= 0, got {timeout}", argument="timeout")
    return float(timeout)


def lookup_id(session_id: Any) -> str:
    """Check an id about to be looked up; raises ``SessionNotFoundError`` for a malformed one.

    No session can have such an id, and the driver must not see it: a lone surrogate cannot
    be encoded, and PostgreSQL refuses to compare text with an int.
    """
    if not is_session_id(session_id):
        raise SessionNotFoundError(
            f"session {session_id!r} not found: not a valid session id "
            "(1–128 printable characters)",
            session_id=session_id,
        )
    return session_id


def check_options(schema: object, catalog: object, clock: object, max_event_bytes: object) -> None:
    """Refuse an unusable store option with ``ConfigurationError`` naming it."""
    if not isinstance(schema, str) or _SCHEMA_NAME.match(schema) is None:
        raise ConfigurationError(
            "schema must be a plain identifier (letters, digits, '_', at most 63 characters, "
            f"not starting with a digit), got {schema!r}",
            option="schema",
        )
    if catalog is not None and not isinstance(catalog, Catalog):
        raise ConfigurationError(
            f"catalog must be a Catalog (e.g. DEFAULT_CATALOG.extend(...)), not {catalog!r}",
            option="catalog",
        )
    if clock is not None and not callable(clock):
        raise ConfigurationError(
            f"clock must be a callable returning epoch milliseconds, not {clock!r}",
            option="clock",
        )
    if max_event_bytes is not None and (
        isinstance(max_event_bytes, bool)
        or not isinstance(max_event_bytes, int)
        or max_event_bytes < 1
    ):
        raise ConfigurationError(
            f"max_event_bytes must be an int >= 1 or None (no limit), not {max_event_bytes!r}",
            option="max_event_bytes",
        )


DEFAULT_MAX_FOLLOWERS = 10_000
"""The default bound on a store's listening followers (see ``followers_option``)."""


def followers_option(max_followers: object) -> int:
    """The bound on a store's listening followers: ``max_followers``, by default
    ``DEFAULT_MAX_FOLLOWERS``. Not the pool's size: followers share one listening connection
    and hold no pooled one while they wait (each borrows one for a read, then gives it back),
    so the bound only catches leaked iterators, each of which keeps a small mailbox (at most
    ``listening._Waiter.MAX_PENDING`` payloads) and reads at every commit to its session."""
    if max_followers is None:
        return DEFAULT_MAX_FOLLOWERS
    if isinstance(max_followers, bool) or not isinstance(max_followers, int) or max_followers < 1:
        raise ConfigurationError(
            "max_followers must be an int >= 1 (how many follow iterators may listen at "
            f"once) or None (the default, {DEFAULT_MAX_FOLLOWERS:,}), not {max_followers!r}",
            option="max_followers",
        )
    return max_followers
