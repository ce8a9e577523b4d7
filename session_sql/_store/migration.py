"""``migrate``: copy every session of every tenant from one store into a new one (SPEC §11.4).

The source may be of this build (read through the gate) or of an earlier schema version that
the gate refuses: version 5 (this build's tables, the public id kept unique by ``sessions``
itself instead of a ``session_ids`` table), versions 3 and 4 (events and surface rows under
the tenant and session id), version 2 (no tenants, no metadata) and version 1 (no incarnation
either). Those are read with
plain SQL over the columns migrate reads; the sessions of versions 1 and 2 go to the default
tenant ``""``. A session is read in one snapshot of the source, a page of events at a
time, and stored by the destination's import (``transfer.import_source``): the same checks, fold
and batched writes as a JSONL import, in one write transaction per session. Memory follows one
session's surface and one page of events, never a log or the store.

Every copy is verified twice. Before its commit, the fold of the copied log must give the
source row's counters and the digest of the source's surface rows (so a source whose row or
surface table disagrees with its log is reported, not copied). After it, the destination's own
``verify`` replays the stored copy, and the events it reads must hash to what was read from the
source.

Resuming needs no bookkeeping: a session is written in one transaction, so an interrupted copy
is absent. A rerun first checks every session the destination already holds against the source
(header, metadata, times and a verified, identical log) and refuses a destination holding
anything else, before writing; then it copies what is missing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from sqlalchemy import Engine, select

from session_sql._store import transfer
from session_sql._store.database import (
    backend_for,
    make_engine,
    read_tx,
    store_label,
    target_schema,
    translate_errors,
)
from session_sql._store.schema import DEFAULT_SCHEMA, tables_for
from session_sql._store.source import (
    Source,
    SourceSession,
    check_url,
    current_layout,
    describe,
    refuse_row_security,
    session_keys,
)
from session_sql._store.store import SessionStore, open_store
from session_sql.arguments import check_options
from session_sql.catalog import Catalog
from session_sql.errors import (
    ConfigurationError,
    CorruptSessionError,
    InvalidArgumentError,
    InvalidEventError,
    InvalidHeaderError,
    NotJSONError,
    SessionExistsError,
    SessionFormatUnsupportedError,
    SessionNotFoundError,
    StoreError,
)
from session_sql.events import SessionEvent
from session_sql.jsonvalue import FrozenList, json_equal
from session_sql.surface import Replay

__all__ = ["MigrationFailure", "MigrationProgress", "MigrationReport", "migrate"]

PROGRESS_EVENTS = 1000
"""Within a session, progress is reported after this many events."""

# What fails one session (reported, the others still copy); anything else stops the run.
_SESSION_ERRORS = (
    CorruptSessionError,
    InvalidEventError,
    InvalidHeaderError,
    InvalidArgumentError,
    NotJSONError,
    SessionFormatUnsupportedError,
    SessionNotFoundError,
)


# --------------------------------------------------------------------------------------------
# What the caller sees


@dataclass(frozen=True)
class MigrationProgress:
    """Where a migration stands, passed to ``migrate(progress=...)``.

    ``outcome`` is ``"copying"`` while a session's events go in (every ``PROGRESS_EVENTS``),
    then ``"copied"``, ``"skipped"`` (the destination already held it, checked equal) or
    ``"failed"`` once that session is done.
    """

    sessions_done: int
    sessions_total: int
    events_done: int
    events_total: int
    tenant: str
    session_id: str
    outcome: Literal["copying", "copied", "skipped", "failed"]


@dataclass(frozen=True)
class MigrationFailure:
    """A session that was not copied, and why (nothing of it was written)."""

    tenant: str
    session_id: str
    error: str


@dataclass(frozen=True)
class MigrationReport:
    """The outcome of ``migrate``; ``ok`` when every session of the source is in the
    destination, verified."""

    source: str
    destination: str
    source_version: int
    tenants: int
    sessions: int
    events: int
    copied: int
    skipped: int
    """Sessions the destination already held (an earlier, interrupted run), checked equal."""
    copied_events: int
    failures: tuple[MigrationFailure, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures

    def __bool__(self) -> bool:
        return self.ok

    def summary(self) -> str:
        """One line: what was copied, from where to where, and whether all of it verified."""
        done = f"{self.copied} copied ({self.copied_events} events)"
        if self.skipped:
            done += f", {self.skipped} already there"
        if self.failures:
            done += f", {len(self.failures)} FAILED"
        outcome = "every session verified" if self.ok else "not every session was copied"
        return (
            f"migrated {_count(self.sessions, 'session')} of {_count(self.tenants, 'tenant')}, "
            f"schema version {self.source_version}, from {self.source} to {self.destination}: "
            f"{done}; {outcome}"
        )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


Progress = Callable[[MigrationProgress], None]


# --------------------------------------------------------------------------------------------
# The entry point


def migrate(
    from_url: str,
    to_url: str,
    *,
    from_schema: str = DEFAULT_SCHEMA,
    to_schema: str = DEFAULT_SCHEMA,
    catalog: Catalog | None = None,
    progress: Progress | None = None,
    distributed: bool | None = None,
    **options: Any,
) -> MigrationReport:
    """Copy every session of every tenant from the store at ``from_url`` into ``to_url``.

    The source is only read; it may be of this build or of any earlier schema version (1 and
    2 had no tenants: their sessions go to the default tenant). The destination must be empty
    (it is initialised) or the destination of an earlier, interrupted migration from the same
    source: its sessions are checked against the source, and the missing ones copied. Each
    session is copied in one transaction with its metadata, times, fork lineage and tenant,
    then verified. ``catalog`` checks the events (pass the one your sessions need);
    ``options`` open the destination (as ``open_store``'s: ``max_event_bytes``,
    ``synchronous``, ...); ``progress`` is called as sessions and events go by.
    ``distributed`` is ``open_store``'s, for the destination (PostgreSQL with Citus): ``None``
    creates it distributed where the ``citus`` extension is installed, ``True`` requires
    Citus, ``False`` creates plain tables even there; a destination that already exists (an
    interrupted migration) must be of the kind asked for.

    Raises ``ConfigurationError`` (an unusable URL or option, both URLs naming one store),
    ``StoreError`` (no store at ``from_url``, an unreachable database),
    ``SchemaVersionError`` (a source of an unknown version, a destination of another
    version) or ``SessionExistsError`` (the destination holds a session the source does not
    have, or has with other data), all before anything is written. A session that cannot be
    copied (a corrupt source, an event the destination refuses) is reported in
    ``failures`` and the others are still copied.
    """
    source = Source(from_url, from_schema)
    try:
        destination = _Destination(to_url, to_schema, catalog, distributed, options)
        try:
            if _same_store(source.engine, source.schema, destination.engine, to_schema):
                raise ConfigurationError(
                    f"the source and the destination are the same store ({source.label}): "
                    "migrate into another database, file or schema",
                    option="url",
                )
            return _Run(source, destination, progress).run()
        finally:
            destination.close()
    finally:
        source.close()


class _Run:
    """One migration: the check of what the destination holds, then the copy."""

    def __init__(self, source: Source, destination: _Destination, progress: Progress | None):
        self.source = source
        self.destination = destination
        self.progress = progress
        self.tenants, self.sessions_total, self.events_total = source.totals()
        self.sessions_done = self.events_done = 0
        self.copied = self.skipped = self.copied_events = 0
        self.failures: list[MigrationFailure] = []

    def run(self) -> MigrationReport:
        held = self.destination.exists() and self._check_held()
        self.destination.store("")  # created now, even when there is nothing to copy
        for tenant, session_id in self.source.session_keys():
            if held and self.destination.holds(tenant, session_id):
                continue  # checked equal above
            self._copy(tenant, session_id)
        if self.copied:
            self.destination.analyze()
        return MigrationReport(
            source=self.source.label,
            destination=self.destination.label,
            source_version=self.source.version,
            tenants=self.tenants,
            sessions=self.sessions_total,
            events=self.events_total,
            copied=self.copied,
            skipped=self.skipped,
            copied_events=self.copied_events,
            failures=tuple(self.failures),
        )

    def _check_held(self) -> bool:
        """Check every session the destination holds against the source; ``True`` if any.

        Raises ``SessionExistsError`` naming the first that the source does not have, or has
        with other data: that destination is not an unfinished migration of this source.
        """
        held = False
        for tenant, session_id in self.destination.session_keys():
            held = True
            store = self.destination.store(tenant)
            events = _check_equal(self.source, store, self.destination.label, tenant, session_id)
            self.skipped += 1
            self._done(tenant, session_id, events, "skipped")
        return held

    def _copy(self, tenant: str, session_id: str) -> None:
        start = self.events_done

        def on_events(count: int) -> None:
            self.events_done = start + count
            self._report(tenant, session_id, "copying")

        store = self.destination.store(tenant)
        try:
            events = _copy_session(self.source, store, tenant, session_id, on_events)
        except _SESSION_ERRORS as exc:
            self.failures.append(MigrationFailure(tenant, session_id, str(exc)))
            self.events_done = start
            self._done(tenant, session_id, self.source.event_count(tenant, session_id), "failed")
            return
        self.copied += 1
        self.copied_events += events
        self.events_done = start
        self._done(tenant, session_id, events, "copied")

    def _done(
        self,
        tenant: str,
        session_id: str,
        events: int,
        outcome: Literal["copied", "skipped", "failed"],
    ) -> None:
        self.sessions_done += 1
        self.events_done += events
        self._report(tenant, session_id, outcome)

    def _report(
        self,
        tenant: str,
        session_id: str,
        outcome: Literal["copying", "copied", "skipped", "failed"],
    ) -> None:
        if self.progress is not None:
            self.progress(
                MigrationProgress(
                    self.sessions_done,
                    self.sessions_total,
                    self.events_done,
                    self.events_total,
                    tenant,
                    session_id,
                    outcome,
                )
            )


# --------------------------------------------------------------------------------------------
# One session


def _copy_session(
    source: Source,
    store: SessionStore,
    tenant: str,
    session_id: str,
    on_events: Callable[[int], None],
) -> int:
    """Copy one session in one transaction of ``store`` and verify the copy; returns its
    number of events. Raises (one of ``_SESSION_ERRORS``) with nothing written."""
    where = describe(store.display_url, tenant, session_id)
    with source.read(tenant, session_id) as session:
        copy = _SessionCopy(session, source.label, on_events)

        def check(state: Replay, inherited: int) -> None:
            problems = session.problems(state, inherited)
            if problems:
                raise CorruptSessionError(
                    f"{describe(source.label, tenant, session_id)} does not verify in the source "
                    f"({'; '.join(problems)}); nothing was copied: run 'session-sql verify' on "
                    "it there",
                    session_id=session_id,
                )

        transfer.import_source(
            store._ctx,
            copy,
            metadata=session.metadata,
            updated_at=session.updated_at,
            check=check,
            analyze=False,
        )
    seen = _LogHash()
    report = store._verify(session_id, seen.add)
    problems = list(report.problems)
    if (seen.count, seen.digest()) != (copy.log.count, copy.log.digest()):
        problems.append(
            f"its {seen.count} events differ from the {copy.log.count} read from the source"
        )
    if problems:
        store.delete_session(session_id)
        raise CorruptSessionError(
            f"the copy of {where} does not verify ({'; '.join(problems)}); it was removed again",
            session_id=session_id,
        )
    return copy.log.count


def _check_equal(
    source: Source, store: SessionStore, label: str, tenant: str, session_id: str
) -> int:
    """Check that a session the destination holds is the source's, copied whole and verified;
    returns its number of events. Raises ``SessionExistsError`` when it is not."""
    differences: list[str] = []
    if not source.has(tenant, session_id):
        differences.append("the source has no such session")
    else:
        read = _LogHash()
        with source.read(tenant, session_id) as session:
            for event in session.events():
                read.add(event)
        info = store.session_info(session_id)
        if not json_equal(session.header, store._header(session_id)):
            differences.append("its header differs")
        for name, theirs, ours in (
            ("user_id", session.metadata.user_id, info.user_id),
            ("title", session.metadata.title, info.title),
            ("labels", dict(session.metadata.labels), info.labels),
            ("updated_at", session.updated_at, info.updated_at),
        ):
            if theirs != ours:
                differences.append(f"its {name} is {ours!r}, the source's {theirs!r}")
        held = _LogHash()
        report = store._verify(session_id, held.add)
        if not report.ok:
            differences.append("it does not verify: " + "; ".join(report.problems))
        elif (held.count, held.digest()) != (read.count, read.digest()):
            differences.append(f"its {held.count} events differ from the source's {read.count}")
    if differences:
        raise SessionExistsError(
            f"{label} already holds session {session_id!r} of tenant {tenant!r}, and "
            f"{'; '.join(differences)}: it is not an unfinished migration from "
            f"{source.label}, and nothing was written; migrate into an empty database, file "
            "or schema",
            session_id=session_id,
            tenant=tenant,
        )
    return read.count


class _LogHash:
    """An order-sensitive hash of a log's events, equal for equal JSON whatever the key order
    (a version 4 source on PostgreSQL gives its data back from JSONB, keys reordered)."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self.count = 0

    def add(self, event: SessionEvent) -> None:
        self._hash.update(_canonical(event.to_wire()))
        self._hash.update(b"\n")
        self.count += 1

    def digest(self) -> bytes:
        return self._hash.digest()


def _list_default(value: Any) -> Any:
    if isinstance(value, FrozenList):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _canonical(value: Any) -> bytes:
    try:
        return orjson.dumps(value, default=_list_default, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # nested deeper than orjson goes: the stdlib encoder, same values
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return text.encode()


class _SessionCopy:
    """A source session as the destination's import reads it (``transfer.ImportSource``)."""

    def __init__(
        self, session: SourceSession, label: str, on_events: Callable[[int], None]
    ) -> None:
        self.header = session.header
        self._session = session
        self._label = label
        self._on_events = on_events
        self.log = _LogHash()

    def raw_events(self) -> Iterator[tuple[int, Any]]:
        for event in self._session.events():
            self.log.add(event)
            if self.log.count % PROGRESS_EVENTS == 0:
                self._on_events(self.log.count)
            yield event.seq, event

    def corrupt(self, seq: int, exc: Exception, session_id: str) -> CorruptSessionError:
        return CorruptSessionError(
            f"{describe(self._label, self._session.tenant, session_id)} seq {seq}: {exc}",
            session_id=session_id,
            seq=seq,
        )

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# The destination: stores of this build, one per tenant, opened one at a time


class _Destination:
    """The store migrated into, opened for one tenant at a time (the source lists sessions
    tenant by tenant, so each tenant is opened once)."""

    def __init__(
        self,
        url: str,
        schema: str,
        catalog: Catalog | None,
        distributed: bool | None,
        options: Mapping[str, Any],
    ) -> None:
        check_url(url, "to_url")
        check_options(schema, catalog, None, None)
        self._url = url
        self._schema = schema
        self._catalog = catalog
        self._distributed = distributed
        self._options = dict(options)
        self._store: SessionStore | None = None
        self._existing = self._probe()
        # The engine that looks across tenants (the stores are scoped to one each).
        self.engine: Engine = make_engine(url)
        self.label = store_label(self.engine, schema)

    def _open(self, tenant: str, *, create: bool) -> SessionStore:
        return open_store(
            self._url,
            schema=self._schema,
            catalog=self._catalog,
            tenant=tenant,
            create=create,
            distributed=self._distributed,
            **self._options,
        )

    def _probe(self) -> bool:
        """Open the destination without creating anything: whether a store is there (checked
        by the gate), or the database is empty."""
        try:
            store = self._open("", create=False)
        except StoreError as exc:
            if exc.path is None:
                raise  # unreachable, locked, not a database: not merely empty
            return False
        self._store = store
        try:
            refuse_row_security(store.engine, tables_for(store.schema).sessions, "destination")
        except BaseException:
            self._close_store()
            raise
        return True

    def exists(self) -> bool:
        """Whether a store was there before the migration started."""
        return self._existing

    def store(self, tenant: str) -> SessionStore:
        """The destination opened for ``tenant`` (created on the first call when empty)."""
        if self._store is not None and self._store.tenant == tenant:
            return self._store
        store = self._open(tenant, create=True)
        self._close_store()
        self._store = store
        return store

    def session_keys(self) -> Iterator[tuple[str, str]]:
        """Every ``(tenant, id)`` the destination holds, in primary-key order."""
        layout = current_layout(target_schema(self.engine, self._schema))
        return session_keys(self.engine, layout, self.label)

    def holds(self, tenant: str, session_id: str) -> bool:
        s = tables_for(target_schema(self.engine, self._schema)).sessions
        query = select(s.c.id).where(s.c.tenant == tenant, s.c.id == session_id)
        with translate_errors(session_id), read_tx(self.engine) as conn:
            return conn.execute(query).first() is not None

    def analyze(self) -> None:
        """Refresh the planner statistics once, after the copy."""
        if self._store is not None:
            self._store._refresh_statistics()

    def close(self) -> None:
        self._close_store()
        self.engine.dispose()

    def _close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def _same_store(engine: Engine, schema: str | None, other: Engine, other_schema: str) -> bool:
    """Whether two engines reach the same store (the same SQLite file, or the same PostgreSQL
    database and schema by URL)."""
    backend = backend_for(engine)
    if backend is not backend_for(other):
        return False
    return backend.same_store(engine, schema, other, other_schema)
