"""The harness of ``session-sql bench``: where a workload runs (``Target``), timing, medians,
and the temporary databases every run uses and removes."""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import create_engine, make_url
from sqlalchemy.schema import DropSchema

from session_sql import SessionStore, open_store
from session_sql.cli._bench_raw import Raw, RawPostgres, RawSQLite
from session_sql.cli._support import CliError


@dataclass
class Workload:
    name: str
    events_per_s: float
    raw_events_per_s: float
    ratio: float
    reps: int
    extra: dict[str, Any] = field(default_factory=dict)
    spread: tuple[float, float] = (0.0, 0.0)  # min-max of our events/s

    @classmethod
    def once(cls, name: str, rate: float, baseline: float, extra: dict[str, Any]) -> Workload:
        """A workload run once: its rate beside the baseline's, and their ratio."""
        return cls(name, rate, baseline, rate / baseline, reps=1, extra=extra)


@dataclass
class Target:
    """Where the bench runs: a store factory and a matching raw baseline."""

    backend: str
    url: str
    schema: str
    workdir: str
    synchronous: str = "FULL"
    tenant: str = ""
    """The tenant both sides write (the store's ``tenant=``, the raw rows' tenant column)."""
    distributed: bool | None = None
    """The store's ``distributed=`` (W13's store on a Citus coordinator: True)."""

    def store(self, **options: Any) -> SessionStore:
        if self.backend == "sqlite":
            options.setdefault("synchronous", self.synchronous)
        if self.distributed is not None:
            options.setdefault("distributed", self.distributed)
        return open_store(self.url, schema=self.schema, tenant=self.tenant, **options)

    def fresh(self, name: str) -> Target:
        """The same backend and settings on an empty database: a new file, or a new schema."""
        if self.backend == "sqlite":
            url = f"sqlite:///{os.path.join(self.workdir, name + '.db')}"
            return Target("sqlite", url, self.schema, self.workdir, self.synchronous)
        return Target(self.backend, self.url, f"{self.schema}_{name}", self.workdir)

    def drop(self) -> None:
        """Remove this target's database: its files, or its schema."""
        if self.backend == "sqlite":
            path = str(make_url(self.url).database)
            for name in (path, path + "-wal", path + "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(name)
        else:
            _drop_schema(self.url, self.schema)

    def raw(self) -> Raw:
        if self.backend == "sqlite":
            return RawSQLite(str(make_url(self.url).database), self.synchronous, self.tenant)
        conninfo = make_url(self.url).set(drivername="postgresql")
        return RawPostgres(conninfo.render_as_string(hide_password=False), self.schema, self.tenant)


def _median_rate(samples: list[float]) -> float:
    return statistics.median(samples)


def _rates(count: int, seconds: list[float]) -> list[float]:
    return [count / s for s in seconds if s > 0]


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _workload(
    name: str, count: int, ours: list[float], raw: list[float], extra: dict[str, Any]
) -> Workload:
    mine, base = _rates(count, ours), _rates(count, raw)
    m, b = _median_rate(mine), _median_rate(base)
    return Workload(
        name=name,
        events_per_s=m,
        raw_events_per_s=b,
        ratio=m / b if b else 0.0,
        reps=len(ours),
        extra=extra,
        spread=(min(mine), max(mine)),
    )


@contextmanager
def _closing(raw: Raw) -> Iterator[Raw]:
    try:
        yield raw
    finally:
        raw.close()


def _sqlite_workdir(url: str | None) -> str | None:
    """Where the SQLite temp files go: beside the file ``url`` names, else the system temp."""
    if url is None:
        return None
    database = make_url(url).database
    if not database or database == ":memory:":
        return None
    directory = os.path.dirname(os.path.abspath(database))
    if not os.path.isdir(directory):
        raise CliError(f"bench: the directory of {database!r} does not exist")
    return directory


@contextmanager
def bench_targets(url: str | None) -> Iterator[list[Target]]:
    """Temp SQLite files (FULL and NORMAL), or throwaway schemas on the given PostgreSQL.

    A ``sqlite:///path`` URL puts the temp files in a temporary directory beside ``path`` (on
    the same file system) and never opens ``path`` itself; without a URL they go to the system
    temp directory. Everything is removed afterwards.
    """
    sqlite = url is None or make_url(url).get_backend_name() == "sqlite"
    workdir = tempfile.mkdtemp(
        prefix="session-sql-bench-", dir=_sqlite_workdir(url) if sqlite else None
    )
    schema = f"bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        if sqlite:
            yield [
                Target("sqlite", f"sqlite:///{workdir}/full.db", "session_sql", workdir, "FULL"),
                Target(
                    "sqlite", f"sqlite:///{workdir}/normal.db", "session_sql", workdir, "NORMAL"
                ),
            ]
        else:
            assert url is not None
            main = Target("postgresql", url, schema, workdir)
            try:
                yield [main]
            finally:
                main.drop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _drop_schema(url: str, schema: str) -> None:
    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"))
    try:
        with engine.begin() as conn:
            conn.execute(DropSchema(schema, cascade=True, if_exists=True))
    finally:
        engine.dispose()
