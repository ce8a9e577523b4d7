"""The exception hierarchy of session_sql.

One root, branches by what the caller can do, leaves named after the broken rule. Every leaf
also inherits the nearest built-in so ``except ValueError`` keeps working::

    SessionSQLError
    ├── NotJSONError                      (TypeError)   a value is not lossless JSON
    ├── InvalidEventError                 (ValueError)  envelope / data / surface / provenance
    │   ├── SurfaceError                                a surface op breaks §4
    │   └── InvalidSeedError                            a seed event is bad (.index)
    ├── InvalidHeaderError                (ValueError)  session header or seed/header mismatch
    ├── ReentrantAppendError              (RuntimeError) append from inside an observer
    ├── SessionFormatUnsupportedError     (ValueError)  other format version / unknown type
    ├── CorruptSessionError               (ValueError)  stored or imported data is broken
    ├── SchemaVersionError                (RuntimeError) database of another build
    │   └── SchemaMismatchError                         structure differs from this build
    ├── ConcurrencyError                  (RuntimeError) another writer appended first
    ├── SessionNotFoundError              (LookupError)
    ├── SessionExistsError                (ValueError)
    ├── ForkError                         (ValueError)  bad fork boundary (.code)
    ├── ReadOnlyError                     (TypeError)   a write through the ORM read models
    ├── ConfigurationError                (ValueError)  bad URL or store option (.option)
    ├── InvalidArgumentError              (ValueError)  bad argument to a call (.argument)
    └── StoreError                        (RuntimeError) the database failed or is unusable
        ├── TransientStoreError                         retrying later may succeed
        └── PermanentStoreError                         retrying fails until someone acts

Errors keep their structured fields as attributes; ``args`` holds only the message, so every
error pickles and unpickles (fields travel in ``__dict__``).
"""

from __future__ import annotations

from typing import Any


class SessionSQLError(Exception):
    """Root of every error raised by session_sql."""

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message)
        for name, value in fields.items():
            setattr(self, name, value)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class NotJSONError(SessionSQLError, TypeError):
    """A value is outside the lossless JSON domain; ``path`` names where."""

    path: str = ""


class InvalidEventError(SessionSQLError, ValueError):
    """An event envelope, its data, its surface op or its provenance breaks a rule."""

    seq: int | None = None
    code: str = "invalid_event"


class SurfaceError(InvalidEventError):
    """A surface op cannot apply to the current surface (§4)."""

    code = "surface"


class InvalidSeedError(InvalidEventError):
    """A seed event is invalid; ``index`` is its position in the seed."""

    index: int | None = None


class InvalidHeaderError(SessionSQLError, ValueError):
    """A session header is malformed or contradicts the seed."""


class ReentrantAppendError(SessionSQLError, RuntimeError):
    """``append`` was called on a session while that session was notifying observers."""


class SessionFormatUnsupportedError(SessionSQLError, ValueError):
    """The log was written with another format version or holds an unknown required type."""


class CorruptSessionError(SessionSQLError, ValueError):
    """Stored or imported data cannot be read back as a valid session."""

    session_id: str | None = None
    seq: int | None = None
    line: int | None = None


class SchemaVersionError(SessionSQLError, RuntimeError):
    """The database was written by another build (or has no version)."""

    expected: int | None = None
    actual: str | None = None


class SchemaMismatchError(SchemaVersionError):
    """The live database structure differs from this build's; ``differences`` lists how."""

    differences: tuple[str, ...] = ()


class ConcurrencyError(SessionSQLError, RuntimeError):
    """Another writer appended to the session first; refresh and retry."""

    session_id: str | None = None
    expected: int | None = None

    @classmethod
    def appended_first(
        cls, session_id: str | None, *, head: int | None = None, expected: int | None = None
    ) -> ConcurrencyError:
        """Another writer won the race; ``head`` and ``expected`` say by how much, if known."""
        lead = f"session {session_id!r}: another writer" if session_id else "another writer"
        seen = "" if head is None else f" (head is now seq {head}, this handle expected {expected})"
        return cls(
            f"{lead} appended first{seen}; refresh() and retry",
            session_id=session_id,
            expected=expected,
        )


class SessionNotFoundError(SessionSQLError, LookupError):
    """No session with this id exists in the store."""

    session_id: str | None = None

    @classmethod
    def for_session(cls, session_id: str) -> SessionNotFoundError:
        return cls(f"session {session_id!r} not found", session_id=session_id)

    @classmethod
    def deleted_since_opened(cls, session_id: str, *, recreated: bool) -> SessionNotFoundError:
        """A handle's session was deleted (and, with ``recreated``, created again) under it."""
        how = "deleted (and recreated)" if recreated else "deleted"
        return cls(
            f"session {session_id!r} was {how} since this handle opened it", session_id=session_id
        )

    @classmethod
    def deleted_while_read(cls, session_id: str) -> SessionNotFoundError:
        """A stream's (``events``, ``follow``) session was deleted under it: the stream ends
        here, and a session created again under the id is another one, never spliced in."""
        return cls(
            f"session {session_id!r} was deleted while it was read (a session created again "
            "under its id is another one: read it anew)",
            session_id=session_id,
        )

    def __str__(self) -> str:  # LookupError would otherwise quote the message
        return self.message


class SessionExistsError(SessionSQLError, ValueError):
    """A session with this id already exists."""

    session_id: str | None = None

    @classmethod
    def for_session(cls, session_id: str | None) -> SessionExistsError:
        what = f"session {session_id!r}" if session_id else "session"
        return cls(f"{what} already exists", session_id=session_id)


class ForkError(SessionSQLError, ValueError):
    """A fork boundary is invalid; ``code`` says why."""

    code: str = "invalid_boundary"


class ReadOnlyError(SessionSQLError, TypeError):
    """A write through the read-only ORM models (``session_sql.orm``) was refused.

    ``operation`` is ``insert``, ``update`` or ``delete``; ``entity`` names the class.
    """

    operation: str | None = None
    entity: str | None = None


class ConfigurationError(SessionSQLError, ValueError):
    """A database URL or a store option is unusable; ``option`` names it (``url``, ...)."""

    option: str | None = None


class InvalidArgumentError(SessionSQLError, ValueError):
    """An argument of a store call has the wrong type or range; ``argument`` names it."""

    argument: str | None = None


class StoreError(SessionSQLError, RuntimeError):
    """The database failed, is unreachable, read-only, locked, or not a database at all;
    or the store is closed, or already has its ``max_followers`` listening.

    Raised as one of its two branches when the cause says what to do: ``TransientStoreError``
    (retry later) or ``PermanentStoreError`` (retrying fails the same way); a plain
    ``StoreError`` is a failure session_sql cannot classify. ``path`` names the database when
    there is no store there to open (``create=False``).
    """

    path: str | None = None


class TransientStoreError(StoreError):
    """The same call may succeed later, and nothing was written: the database was locked
    beyond the busy or lock timeout, the server could not be reached or the connection was
    lost, a statement timed out, the transaction lost a serialization check or a deadlock, or
    no pooled connection came free in time. Retry, with a backoff."""


class PermanentStoreError(StoreError):
    """Retrying fails the same way until someone changes something: the database is
    read-only, full, corrupt, missing or not a database; the server refuses the role; the
    store is closed; or all its ``max_followers`` are listening."""

    @classmethod
    def closed(cls, opener: str) -> PermanentStoreError:
        """The store was closed; ``opener`` names the function that opens a new one."""
        return cls(f"the store is closed; open a new one with {opener}()")

    @classmethod
    def no_store(cls, where: str, why: str, *, hint: bool = True) -> PermanentStoreError:
        """Nothing to open at ``where`` (``create=False``); ``path`` names it."""
        how = "; create one with `session-sql init` or open_store(..., create=True)" if hint else ""
        return cls(f"no store at {where}: {why}{how}", path=where)


class TornTailWarning(UserWarning):
    """A JSONL import dropped an incomplete final line."""
