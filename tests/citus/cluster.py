"""A throwaway Citus cluster for the tests: a coordinator and workers on free ports.

Each node is its own PostgreSQL cluster (initdb + pg_ctl in one temp directory, as the
``postgres`` OS user when the tests run as root) that preloads Citus; the coordinator knows
the workers through ``citus_add_node``. Citus is a test dependency (``../shared/citus``), not
part of the product, so a machine without it skips these tests with one line, unless
``SESSION_SQL_REQUIRE_CITUS=1`` makes that a failure (as ``.ci/run`` does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.reliability.conftest import _free_port, _postgres_bin, shared_temp_dir, stop_cluster

ENV_REQUIRE_CITUS = "SESSION_SQL_REQUIRE_CITUS"

URL = "postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"


def citus_missing() -> str | None:
    """Why a Citus cluster cannot be started here, or ``None`` when it can.

    Citus is installed when ``citus.so`` is in ``pg_config --pkglibdir`` and ``citus.control``
    in ``pg_config --sharedir``/extension, for the PostgreSQL whose initdb the tests use.
    """
    bin_dir = _postgres_bin()
    if bin_dir is None:
        return "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin"
    pg_config = bin_dir / "pg_config"
    command = str(pg_config) if pg_config.exists() else shutil.which("pg_config")
    if command is None:
        return f"no pg_config for PostgreSQL {bin_dir.parent.name}"
    done = subprocess.run(
        [command, "--pkglibdir", "--sharedir"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or len(done.stdout.split()) != 2:
        return f"{command} failed: {done.stderr.strip()}"
    libdir, sharedir = (Path(line) for line in done.stdout.split())
    wanted = (libdir / "citus.so", sharedir / "extension" / "citus.control")
    absent = [str(path) for path in wanted if not path.exists()]
    if absent:
        return f"Citus is not installed ({', '.join(absent)} missing; see ../shared/citus)"
    return None


@dataclass
class Node:
    """One PostgreSQL server of the cluster."""

    name: str
    port: int
    data: Path

    @property
    def url(self) -> str:
        return URL.format(port=self.port)


@dataclass
class CitusCluster:
    """A running coordinator and its workers; ``stop_worker``/``start_worker`` take a worker
    down and bring it back (its shards stay placed on it) for the failure tests."""

    coordinator: Node
    workers: tuple[Node, ...]
    base: Path
    _as_user: list[str] = field(repr=False)
    _bin: Path = field(repr=False)
    durable: bool = False
    """``fsync`` on, as on a server that keeps its commits (the bench's W13 compares with
    one); the tests run with it off."""

    @property
    def url(self) -> str:
        """The coordinator's URL: where a store is opened."""
        return self.coordinator.url

    def _run(self, *args: str, log: Path | None = None) -> None:
        done = subprocess.run(
            [*self._as_user, *args], check=False, timeout=120, capture_output=True, text=True
        )
        if done.returncode != 0:
            tail = log.read_text()[-2000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{args[0]} failed: {done.stderr.strip()}\n{tail}")

    def _log(self, node: Node) -> Path:
        return self.base / f"{node.name}.log"

    def init(self, node: Node) -> None:
        """initdb ``node`` with the settings of a Citus node on its port."""
        self._run(
            str(self._bin / "initdb"),
            *("-D", str(node.data), "-U", "postgres", "-A", "trust", "--no-sync"),
        )
        settings = {
            "port": str(node.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.base}'",
            "shared_preload_libraries": "'citus'",
            "fsync": "on" if self.durable else "off",
            "max_connections": "100",
            # Online shard moves (citus_rebalance_start, tenant isolation) copy by logical
            # replication.
            "wal_level": "logical",
            # Each move subscribes on the target node, whose launcher (PostgreSQL 15) starts
            # an apply worker at most once per wal_retrieve_retry_interval (5 s by default):
            # most of a move's time. And citus_rebalance_start runs its moves one at a time as
            # background tasks, picked up every background_task_queue_interval (5 s).
            "wal_retrieve_retry_interval": "'50ms'",
            "citus.background_task_queue_interval": "'100ms'",
            # The cluster is started and left for the session; Citus's statistics collector
            # would otherwise phone home from a test machine.
            "citus.enable_statistics_collection": "off",
            # A test creates a distributed store of its own: 4 shards per table (2 per
            # worker) instead of 32 make that a third as long.
            "citus.shard_count": "4",
            # pg_stat_user_functions counts the calls of PL/pgSQL functions: the tests read
            # on which worker a distributed store's delegated append ran.
            "track_functions": "'pl'",
        }
        with (node.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def start(self, node: Node) -> None:
        log = self._log(node)
        self._run(
            str(self._bin / "pg_ctl"),
            *("-D", str(node.data), "-l", str(log), "-w", "-t", "60", "start"),
            log=log,
        )

    def stop(self, node: Node) -> None:
        """Stop ``node`` at once (``-m immediate``): a worker that fails, not one shut down."""
        stop_cluster(self._as_user, str(self._bin / "pg_ctl"), node.data)

    def stop_worker(self, index: int) -> None:
        self.stop(self.workers[index])

    def start_worker(self, index: int) -> None:
        self.start(self.workers[index])

    def close(self) -> None:
        """Stop every node and delete the directory."""
        for node in (*self.workers, self.coordinator):
            if node.data.exists():
                self.stop(node)
        shutil.rmtree(self.base, ignore_errors=True)


def _sql(url: str, *statements: str) -> None:
    engine = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()


def _ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = _free_port()
        if port not in ports:
            ports.append(port)
    return ports


def start_cluster(workers: int = 2, *, durable: bool = False) -> CitusCluster:
    """Start a coordinator and ``workers`` workers; the caller must ``close()`` it.
    ``durable`` keeps ``fsync`` on (the tests turn it off).

    Call only when ``citus_missing()`` is ``None``.
    """
    bin_dir = _postgres_bin()
    assert bin_dir is not None
    base = shared_temp_dir("session_sql_citus_")  # the servers' user must reach it
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    names = ["coordinator", *(f"worker{i + 1}" for i in range(workers))]
    ports = _ports(len(names))
    nodes = [Node(name, port, base / name) for name, port in zip(names, ports, strict=True)]
    cluster = CitusCluster(nodes[0], tuple(nodes[1:]), base, as_user, bin_dir, durable)
    try:
        for node in nodes:
            cluster.init(node)
            cluster.start(node)
            _sql(node.url, "CREATE EXTENSION citus")
        _sql(
            cluster.url,
            f"SELECT citus_set_coordinator_host('127.0.0.1', {cluster.coordinator.port})",
            *(f"SELECT citus_add_node('127.0.0.1', {w.port})" for w in cluster.workers),
        )
    except BaseException:
        cluster.close()
        raise
    return cluster
