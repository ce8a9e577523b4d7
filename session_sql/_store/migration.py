"""``migrate``: copy every session of every tenant from one store into a new one (SPEC §11.4).

The source may be of this build (read through the gate) or of an earlier schema version that
the gate refuses: version 2 (no tenants, no metadata) and version 1 (no incarnation either).
Those are read with plain SQL over the columns every version has; their sessions go to the
default tenant ``""``. A session is read in one snapshot of the source, a page of events at a
time, and stored by the destination's import (``SessionStore._import``): the same checks, fold
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

import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ColumnElement,
    Connection,
    Engine,
    MetaData,
    Table,
    Text,
    cast,
    false,
    func,
    inspect,
    literal,
    select,
    true,
    tuple_,
)

from session_sql._store.engine import (
    database_label,
    is_sqlite,
    make_engine,
    read_tx,
    snapshot_tx,
    target_schema,
    translate_errors,
)
from session_sql._store.gate import ensure_schema, stored_version
from session_sql._store.metadata import Metadata, check_labels, check_title, check_user_id
from session_sql._store.rows import event_from_row, frozen_header
from session_sql._store.schema import DEFAULT_SCHEMA, SCHEMA_VERSION, tables_for
from session_sql._store.store import (
    SessionStore,
    _check_options,
    _labels_value,
    _require_sqlite_file,
    open_store,
)
from session_sql.catalog import Catalog
from session_sql.errors import (
    ConfigurationError,
    CorruptSessionError,
    InvalidArgumentError,
    InvalidEventError,
    InvalidHeaderError,
    NotJSONError,
    SchemaMismatchError,
    SchemaVersionError,
    SessionExistsError,
    SessionFormatUnsupportedError,
    SessionNotFoundError,
    StoreError,
)
from session_sql.events import SessionEvent
from session_sql.jsonvalue import FrozenDict, FrozenList, json_equal
from session_sql.surface import Replay, node_digest, surface_digest

__all__ = ["MigrationFailure", "MigrationProgress", "MigrationReport", "migrate"]

READABLE_VERSIONS = (1, 2, SCHEMA_VERSION)
"""The schema versions a source may have: this build's and the two before it."""

PAGE = 500
"""Sessions listed, and events read, per statement."""

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
            f"migrated {self.sessions} sessions of {self.tenants} tenant(s) from "
            f"{self.source} (schema version {self.source_version}) to {self.destination}: "
            f"{done}; {outcome}"
        )


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
    **options: Any,
) -> MigrationReport:
    """Copy every session of every tenant from the store at ``from_url`` into ``to_url``.

    The source is only read; it may be of this build or of schema version 1 or 2 (whose
    sessions go to the default tenant). The destination must be empty (it is initialised) or
    the destination of an earlier, interrupted migration from the same source: its sessions
    are checked against the source, and the missing ones copied. Each session is copied in one
    transaction with its metadata, times, fork lineage and tenant, then verified. ``catalog``
    checks the events (pass the one your sessions need); ``options`` open the destination (as
    ``open_store``'s: ``max_event_bytes``, ``synchronous``, ...); ``progress`` is called as
    sessions and events go by.

    Raises ``ConfigurationError`` (an unusable URL or option, both URLs naming one store),
    ``StoreError`` (no store at ``from_url``, an unreachable database),
    ``SchemaVersionError`` (a source of an unknown version, a destination of another
    version) or ``SessionExistsError`` (the destination holds a session the source does not
    have, or has with other data), all before anything is written. A session that cannot be
    copied (a corrupt source, an event the destination refuses) is reported in
    ``failures`` and the others are still copied.
    """
    source = _Source(from_url, from_schema)
    try:
        destination = _Destination(to_url, to_schema, catalog, options)
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

    def __init__(self, source: _Source, destination: _Destination, progress: Progress | None):
        self.source = source
        self.destination = destination
        self.progress = progress
        self.tenants, self.sessions_total, self.events_total = source.totals()
        self.sessions_done = self.events_done = 0
        self.copied = self.skipped = self.copied_events = 0
        self.failures: list[MigrationFailure] = []

    def run(self) -> MigrationReport:
        held = self.destination.exists() and self._check_held()
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
    source: _Source,
    store: SessionStore,
    tenant: str,
    session_id: str,
    on_events: Callable[[int], None],
) -> int:
    """Copy one session in one transaction of ``store`` and verify the copy; returns its
    number of events. Raises (one of ``_SESSION_ERRORS``) with nothing written."""
    where = _where(store.display_url, tenant, session_id)
    with source.read(tenant, session_id) as session:
        copy = _SessionCopy(session, source.label, on_events)

        def check(state: Replay, inherited: int) -> None:
            problems = session.problems(state, inherited)
            if problems:
                raise CorruptSessionError(
                    f"{_where(source.label, tenant, session_id)} does not verify in the source "
                    f"({'; '.join(problems)}); nothing was copied: run 'session-sql verify' on "
                    "it there",
                    session_id=session_id,
                )

        store._import(
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
    source: _Source, store: SessionStore, label: str, tenant: str, session_id: str
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


def _where(label: str, tenant: str, session_id: str) -> str:
    return f"{label}: session {session_id!r}" + (f" of tenant {tenant!r}" if tenant else "")


class _LogHash:
    """An order-sensitive hash of a log's events, equal for equal JSON whatever the backend
    (PostgreSQL's JSONB reorders object keys, so keys are sorted)."""

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
    """A source session as the destination's import reads it (``store.ImportSource``)."""

    def __init__(
        self, session: _SourceSession, label: str, on_events: Callable[[int], None]
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
            f"{_where(self._label, self._session.tenant, session_id)} seq {seq}: {exc}",
            session_id=session_id,
            seq=seq,
        )

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# The source: a store of any readable version, read with plain SQL


@dataclass(frozen=True)
class _Layout:
    """The tables of a source and what its version keeps: tenants and metadata since 3."""

    sessions: Table
    events: Table
    surface: Table
    tenanted: bool

    def tenant(self, table: Table) -> ColumnElement[Any]:
        return table.c.tenant if self.tenanted else literal("", Text)

    def own(self, table: Table, tenant: str) -> ColumnElement[bool]:
        if self.tenanted:
            return table.c.tenant == tenant
        return true() if tenant == "" else false()


@functools.cache
def _legacy_layout(schema: str | None) -> _Layout:
    """Versions 1 and 2: no tenant, no metadata; only the columns every version has."""
    md = MetaData(schema=schema)
    sessions = Table(
        "sessions",
        md,
        Column("id", Text, primary_key=True),
        Column("inherited_event_count", BigInteger),
        Column("header", Text),
        Column("head_seq", BigInteger),
        Column("surface_next_pos", BigInteger),
        Column("replace_generation", BigInteger),
        Column("updated_at", BigInteger),
    )
    events = Table(
        "events",
        md,
        Column("session_id", Text),
        Column("seq", BigInteger),
        Column("type", Text),
        Column("time", BigInteger),
        Column("data", Text),
        Column("source_event_seqs", Text),
        Column("surface_op", Text),
        Column("ignorable", Boolean),
    )
    surface = Table(
        "surface",
        md,
        Column("session_id", Text),
        Column("pos", BigInteger),
        Column("event_seq", BigInteger),
    )
    return _Layout(sessions, events, surface, tenanted=False)


def _current_layout(schema: str | None) -> _Layout:
    t = tables_for(schema)
    return _Layout(t.sessions, t.events, t.surface, tenanted=True)


class _Source:
    """The store migrated from; only ever read."""

    def __init__(self, url: str, schema: str) -> None:
        _check_url(url, "from_url")
        _check_options(schema, None, None, None)
        engine = make_engine(url)
        try:
            target = target_schema(engine, schema)
            try:
                _require_sqlite_file(engine.url)
                self.version = stored_version(engine, target)
            except StoreError as exc:
                if exc.path is None:
                    raise
                raise StoreError(
                    f"nothing to migrate: no store at {exc.path}", path=exc.path
                ) from exc
            if self.version == SCHEMA_VERSION:
                ensure_schema(engine, target, create=False)  # the whole gate
                self.layout = _current_layout(target)
                _refuse_row_security(engine, self.layout.sessions, "source")
            elif self.version in READABLE_VERSIONS:
                self.layout = _legacy_layout(target)
                _check_legacy_columns(engine, self.layout, self.version)
            else:
                label = database_label(engine)
                raise SchemaVersionError(
                    f"{label}: schema version {self.version} is not one migrate can read "
                    f"(it reads versions {', '.join(map(str, READABLE_VERSIONS))})"
                    + ("; upgrade session_sql to read it" if self.version > SCHEMA_VERSION else ""),
                    expected=SCHEMA_VERSION,
                    actual=str(self.version),
                )
        except BaseException:
            engine.dispose()
            raise
        self.engine = engine
        self.schema = target
        self.label = database_label(engine) + (f" (schema {target})" if target else "")

    def close(self) -> None:
        self.engine.dispose()

    def totals(self) -> tuple[int, int, int]:
        """``(tenants, sessions, events)`` in the source."""
        s = self.layout.sessions
        with translate_errors(database=self.label), read_tx(self.engine) as conn:
            tenants = conn.execute(
                select(func.count(func.distinct(self.layout.tenant(s))))
            ).scalar_one()
            sessions, events = conn.execute(
                select(func.count(), func.coalesce(func.sum(s.c.head_seq + 1), 0))
            ).one()
        return int(tenants), int(sessions), int(events)

    def session_keys(self) -> Iterator[tuple[str, str]]:
        """Every ``(tenant, id)`` in primary-key order, a page per read."""
        s = self.layout.sessions
        tenant = self.layout.tenant(s)
        query = select(tenant, s.c.id).order_by(tenant, s.c.id).limit(PAGE)
        after: tuple[str, str] | None = None
        while True:
            page = query
            if after is not None:
                page = page.where(
                    tuple_(s.c.tenant, s.c.id) > tuple_(*after)
                    if self.layout.tenanted
                    else s.c.id > after[1]
                )
            with translate_errors(database=self.label), read_tx(self.engine) as conn:
                rows = [(str(t), str(i)) for t, i in conn.execute(page)]
            yield from rows
            if len(rows) < PAGE:
                return
            after = rows[-1]

    def has(self, tenant: str, session_id: str) -> bool:
        s = self.layout.sessions
        with translate_errors(session_id), read_tx(self.engine) as conn:
            query = select(s.c.id).where(self.layout.own(s, tenant), s.c.id == session_id)
            return conn.execute(query).first() is not None

    def event_count(self, tenant: str, session_id: str) -> int:
        """The number of events the session's row claims (0 when it is gone)."""
        s = self.layout.sessions
        with translate_errors(session_id), read_tx(self.engine) as conn:
            head = conn.execute(
                select(s.c.head_seq).where(self.layout.own(s, tenant), s.c.id == session_id)
            ).scalar()
        return 0 if head is None else max(int(head) + 1, 0)

    @contextmanager
    def read(self, tenant: str, session_id: str) -> Iterator[_SourceSession]:
        """One session in one snapshot: its row and surface digest now, its events paged."""
        layout = self.layout
        s, sf = layout.sessions, layout.surface
        columns = [
            cast(s.c.header, Text).label("header"),
            s.c.head_seq,
            s.c.surface_next_pos,
            s.c.replace_generation,
            s.c.inherited_event_count,
            s.c.updated_at,
        ]
        if layout.tenanted:
            columns += [s.c.surface_digest, s.c.user_id, s.c.title, s.c.labels]
        with translate_errors(session_id), snapshot_tx(self.engine) as conn:
            row = conn.execute(
                select(*columns).where(layout.own(s, tenant), s.c.id == session_id)
            ).first()
            if row is None:
                raise SessionNotFoundError(
                    f"{_where(self.label, tenant, session_id)} was deleted from the source "
                    "during the migration",
                    session_id=session_id,
                )
            header = frozen_header(session_id, row.header)
            if str(header["id"]) != session_id:
                raise CorruptSessionError(
                    f"{_where(self.label, tenant, session_id)}: its header names id "
                    f"{header['id']!r}",
                    session_id=session_id,
                )
            metadata = Metadata()
            if layout.tenanted:
                metadata = Metadata(
                    check_user_id(row.user_id),
                    check_title(row.title),
                    check_labels(_labels_value(session_id, row.labels), "labels"),
                )
            row_sum = 0
            nodes = select(sf.c.pos, sf.c.event_seq).where(
                layout.own(sf, tenant), sf.c.session_id == session_id
            )
            for pos, seq in conn.execute(nodes):
                row_sum += node_digest(pos, seq)
            yield _SourceSession(
                conn,
                layout,
                tenant,
                session_id,
                header,
                metadata,
                row,
                surface_digest(row_sum, row.surface_next_pos, row.replace_generation),
            )


class _SourceSession:
    """One source session inside its snapshot transaction."""

    def __init__(
        self,
        conn: Connection,
        layout: _Layout,
        tenant: str,
        session_id: str,
        header: FrozenDict,
        metadata: Metadata,
        row: Any,
        digest: int,
    ) -> None:
        self._conn = conn
        self._layout = layout
        self.tenant = tenant
        self.session_id = session_id
        self.header = header
        self.metadata = metadata
        self.updated_at = int(row.updated_at)
        self._row = row
        self._digest = digest

    def events(self) -> Iterator[SessionEvent]:
        """Events ``0..head_seq`` in pages; a missing seq is ``CorruptSessionError``."""
        e = self._layout.events
        head = int(self._row.head_seq)
        query = (
            select(
                e.c.seq,
                e.c.type,
                e.c.time,
                cast(e.c.data, Text).label("data"),
                e.c.source_event_seqs,
                e.c.surface_op,
                e.c.ignorable,
            )
            .where(self._layout.own(e, self.tenant), e.c.session_id == self.session_id)
            .order_by(e.c.seq)
            .limit(PAGE)
        )
        expected = 0
        while expected <= head:
            rows = self._conn.execute(query.where(e.c.seq >= expected, e.c.seq <= head)).all()
            for row in rows:
                if row[0] != expected:  # its seq: one is missing
                    break
                yield event_from_row(self.session_id, row)
                expected += 1
            if expected <= head and (len(rows) < PAGE or rows[-1][0] != expected - 1):
                raise CorruptSessionError(
                    f"session {self.session_id!r}: event seq {expected} is missing below the "
                    f"head {head} in the source; run 'session-sql verify' on it there",
                    session_id=self.session_id,
                    seq=expected,
                )

    def problems(self, state: Replay, inherited: int) -> list[str]:
        """How the fold of the copied log differs from the source's row and surface table."""
        row = self._row
        found: list[str] = []
        for column, stored, folded in (
            ("head_seq", row.head_seq, state.length - 1),
            ("surface_next_pos", row.surface_next_pos, state.next_pos),
            ("replace_generation", row.replace_generation, state.replace_generation),
            ("inherited_event_count", row.inherited_event_count, inherited),
        ):
            if stored != folded:
                found.append(f"sessions.{column} is {stored}, the log implies {folded}")
        if self._digest != state.digest:
            found.append("the surface table differs from the fold of the log")
        stored_digest = getattr(row, "surface_digest", None)
        if stored_digest is not None and stored_digest != state.digest:
            found.append(
                f"sessions.surface_digest is {stored_digest}, the log implies {state.digest}"
            )
        return found


def _check_legacy_columns(engine: Engine, layout: _Layout, version: int) -> None:
    """Refuse an earlier-version source that lacks a column migrate reads."""
    missing: list[str] = []
    with translate_errors(database=database_label(engine)), read_tx(engine) as conn:
        insp = inspect(conn)
        for table in (layout.sessions, layout.events, layout.surface):
            live = {c["name"] for c in insp.get_columns(table.name, table.schema)}
            missing += [f"{table.name}.{c.name}" for c in table.c if c.name not in live]
    if missing:
        raise SchemaMismatchError(
            f"{database_label(engine)}: a schema version {version} store without the columns "
            f"{', '.join(missing)}; refusing to read it",
            expected=SCHEMA_VERSION,
            actual=str(version),
            differences=tuple(f"missing column {m}" for m in missing),
        )


def _refuse_row_security(engine: Engine, sessions: Table, side: str) -> None:
    """Refuse a role that row-level security keeps to one tenant (PostgreSQL): it would see
    no session, or only some, and a migration must see them all."""
    if is_sqlite(engine):
        return
    name = engine.dialect.identifier_preparer.format_table(sessions)
    with translate_errors(database=database_label(engine)), read_tx(engine) as conn:
        active, role = conn.execute(
            select(func.row_security_active(literal(name, Text)), func.current_user())
        ).one()
    if active:
        raise ConfigurationError(
            f"the {side} {database_label(engine)}: role {role!r} is subject to row-level "
            "security and sees one tenant's sessions at most; migrate reads and checks every "
            "tenant's: connect as the owner of the tables (the role that ran 'session-sql "
            "init') or a superuser",
            option="url",
        )


# --------------------------------------------------------------------------------------------
# The destination: stores of this build, one per tenant, opened one at a time


class _Destination:
    """The store migrated into, opened for one tenant at a time (the source lists sessions
    tenant by tenant, so each tenant is opened once)."""

    def __init__(
        self, url: str, schema: str, catalog: Catalog | None, options: Mapping[str, Any]
    ) -> None:
        _check_url(url, "to_url")
        _check_options(schema, catalog, None, None)
        self._url = url
        self._schema = schema
        self._catalog = catalog
        self._options = dict(options)
        self._store: SessionStore | None = None
        self._existing = self._probe()
        # The engine that looks across tenants (the stores are scoped to one each).
        self.engine: Engine = make_engine(url)
        self.label = database_label(self.engine) + (
            "" if is_sqlite(self.engine) else f" (schema {schema})"
        )

    def _open(self, tenant: str, *, create: bool) -> SessionStore:
        return open_store(
            self._url,
            schema=self._schema,
            catalog=self._catalog,
            tenant=tenant,
            create=create,
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
            _refuse_row_security(store.engine, tables_for(store.schema).sessions, "destination")
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
        s = tables_for(target_schema(self.engine, self._schema)).sessions
        query = select(s.c.tenant, s.c.id).order_by(s.c.tenant, s.c.id).limit(PAGE)
        after: tuple[str, str] | None = None
        while True:
            page = query if after is None else query.where(tuple_(s.c.tenant, s.c.id) > after)
            with translate_errors(database=self.label), read_tx(self.engine) as conn:
                rows = [(str(t), str(i)) for t, i in conn.execute(page)]
            yield from rows
            if len(rows) < PAGE:
                return
            after = rows[-1]

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
    if is_sqlite(engine) != is_sqlite(other):
        return False
    if is_sqlite(engine):
        paths = [e.url.database or "" for e in (engine, other)]
        if any(p in ("", ":memory:") for p in paths):
            return False
        return os.path.realpath(paths[0]) == os.path.realpath(paths[1])
    return engine.url.set(password=None) == other.url.set(password=None) and (
        schema == other_schema
    )


def _check_url(url: object, name: str) -> None:
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"{name} must be a database URL, not {url!r}", option="url")
