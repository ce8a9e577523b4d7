"""``migrate`` from a version 5 store into a version 6 store distributed on Citus (SPEC §13.1),
and out of a distributed store into plain ones.

The source is a version 5 store built from that release's DDL in a fresh schema of the local
PostgreSQL (the one the other suites use), holding what a store of this build holds: two tenants
sharing session ids, metadata, a fork and a compaction. It is copied into a new schema on the
cluster's coordinator, created distributed; every session verifies there and answers as the
source's did, and a rerun (the command, as after an interruption) checks and skips them all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.schema import DropSchema
from typer.testing import CliRunner

from session_sql import ConfigurationError, SessionStore, migrate, open_store, thaw
from session_sql._store.database import make_engine
from session_sql.cli import app

from ..legacy_schema import create_legacy_store, insert_legacy_session
from ..store.store_builders import remove, say, summarize, tool_turn
from .cluster import CitusCluster

TENANTS = ("", "acme")
T0 = 1_700_000_000_000
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def v5_source(postgres_admin: Engine) -> Iterator[tuple[str, str]]:
    """``(url, schema)``: an empty schema on the local PostgreSQL, dropped after the test."""
    schema = f"t_{uuid.uuid4().hex}"
    yield postgres_admin.url.render_as_string(hide_password=False), schema
    with postgres_admin.begin() as conn:
        conn.execute(DropSchema(schema, cascade=True, if_exists=True))


def _fill(url: str, schema: str = "session_sql") -> None:
    """What the version 5 store will hold, written by this build: per tenant, a session with
    metadata, a tool turn and a compaction, its fork with a removal, and an empty one."""
    for tenant in TENANTS:
        name = tenant or "default"
        clock = iter(range(T0, T0 + 10_000)).__next__
        with open_store(url, schema=schema, tenant=tenant, clock=clock) as store:
            s1 = store.create_session("s1", user_id=f"user-{name}", labels={"app": name})
            say(s1, f"hello from {name}")
            tool_turn(s1, 1)
            fork = store.fork_session("s1", boundary=5, child_id="s2")
            taken = fork.surface.nodes[1]
            remove(fork, taken, taken, [taken])
            tool_turn(s1, 2)
            nodes = s1.surface.nodes
            summarize(s1, nodes[0], nodes[2], list(nodes[0:3]))
            store.update_session("s1", title=f"renamed {name}")
            store.create_session("s3", labels={"empty": "yes"})


def _build_v5(reference: str, url: str, schema: str, tenants: tuple[str, ...] = TENANTS) -> None:
    """A version 5 store at ``url``/``schema`` holding what ``reference`` holds, row for row as
    that release wrote it."""
    engine = make_engine(url)
    try:
        create_legacy_store(engine, schema, 5)
        for tenant in tenants:
            with open_store(reference, tenant=tenant, create=False) as store:
                for info in store.iter_sessions():
                    session = store.load_session(info.id)
                    insert_legacy_session(
                        engine,
                        schema,
                        5,
                        session.header,
                        list(store.events(info.id)),
                        tenant=tenant,
                        user_id=info.user_id,
                        title=info.title,
                        labels=info.labels,
                        inherited_event_count=session.inherited_event_count,
                        updated_at=info.updated_at,
                    )
    finally:
        engine.dispose()


def _snapshot(store: SessionStore) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for info in store.iter_sessions():
        session = store.load_session(info.id)
        out[info.id] = {
            "info": info.model_dump(),
            "header": thaw(session.header),
            "events": [e.to_json() for e in store.events(info.id)],
            "surface": store.surface(info.id),
            "messages": thaw(store.messages(info.id)),
            "children": [c.id for c in store.list_sessions(parent=info.id)],
            "verify": store.verify(info.id).ok,
        }
    return out


def _distributed_tables(admin: Engine, schema: str) -> set[str]:
    with admin.connect() as conn:
        return set(
            conn.execute(
                text(
                    "SELECT c.relname FROM pg_dist_partition p "
                    "JOIN pg_class c ON c.oid = p.logicalrelid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = :s AND p.partmethod = 'h'"
                ),
                {"s": schema},
            ).scalars()
        )


def test_a_version_5_store_migrates_into_a_distributed_store(
    citus_cluster: CitusCluster,
    citus_admin: Engine,
    citus_schema: str,
    v5_source: tuple[str, str],
    tmp_path: Path,
) -> None:
    reference = f"sqlite:///{tmp_path / 'reference.db'}"
    _fill(reference)
    source_url, source_schema = v5_source
    _build_v5(reference, source_url, source_schema)

    report = migrate(
        source_url,
        citus_cluster.url,
        from_schema=source_schema,
        to_schema=citus_schema,
        distributed=True,
    )

    assert report.ok, report.failures
    assert (report.source_version, report.tenants, report.sessions) == (5, 2, 6)
    assert (report.copied, report.skipped) == (6, 0)
    assert report.copied_events == report.events
    with pytest.raises(ConfigurationError, match="distributed"):  # not the kind it is
        migrate(
            source_url,
            citus_cluster.url,
            from_schema=source_schema,
            to_schema=citus_schema,
            distributed=False,
        )
    assert _distributed_tables(citus_admin, citus_schema) == {
        "sessions",
        "session_ids",
        "events",
        "surface",
    }
    for tenant in TENANTS:
        with (
            open_store(reference, tenant=tenant, create=False) as original,
            open_store(
                citus_cluster.url, schema=citus_schema, tenant=tenant, create=False
            ) as copied,
        ):
            assert copied.distributed is True
            held = _snapshot(copied)
            assert held == _snapshot(original)
            assert sorted(held) == ["s1", "s2", "s3"]
            assert all(s["verify"] for s in held.values())
            assert held["s2"]["info"]["parent_session"] == "s1"

    # A rerun, as after an interruption, by the command: everything checked and skipped.
    again = CliRunner().invoke(
        app,
        [
            "migrate",
            "--from",
            source_url,
            "--from-schema",
            source_schema,
            "--to",
            citus_cluster.url,
            "--to-schema",
            citus_schema,
            "--distributed",
            "--json",
        ],
    )
    assert again.exit_code == 0, again.output
    rerun = json.loads(again.stdout)
    assert (rerun["ok"], rerun["copied"], rerun["skipped"]) == (True, 0, 6)


KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from session_sql import migrate

    def progress(step):
        if step.outcome == "copying" and step.session_id == "m-big":
            os.kill(os.getpid(), signal.SIGKILL)

    migrate(sys.argv[1], sys.argv[2], from_schema=sys.argv[3], to_schema=sys.argv[4],
            distributed=True, progress=progress)
    """
)


def _session_rows(admin: Engine, schema: str) -> tuple[int, int]:
    """``(sessions rows, session_ids rows)`` of every tenant (to see duplicates or strays)."""
    with admin.connect() as conn:
        return (
            int(conn.execute(text(f'SELECT count(*) FROM "{schema}".sessions')).scalar_one()),
            int(conn.execute(text(f'SELECT count(*) FROM "{schema}".session_ids')).scalar_one()),
        )


def test_a_migration_into_a_distributed_store_killed_mid_session_resumes(
    citus_cluster: CitusCluster,
    citus_admin: Engine,
    citus_schema: str,
    v5_source: tuple[str, str],
    tmp_path: Path,
) -> None:
    """``kill -9`` inside a large session's copy from version 5 onto Citus: the sessions
    committed before it are there, that one is absent, and the rerun copies the rest; every
    session is there once, verified and identical."""
    reference = f"sqlite:///{tmp_path / 'reference.db'}"
    with open_store(reference) as store:
        for sid in ("a1", "a2", "a3"):
            say(store.create_session(sid), f"hi {sid}")
        big = store.create_session("m-big")
        for turn in range(1, 101):
            tool_turn(big, turn)
        say(store.create_session("z1"), "hi z1")  # after m-big, by creation and by id
    source_url, source_schema = v5_source
    _build_v5(reference, source_url, source_schema, tenants=("",))
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }

    done = subprocess.run(
        [sys.executable, str(script), source_url, citus_cluster.url, source_schema, citus_schema],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )

    assert done.returncode == -signal.SIGKILL, done.stderr
    assert _session_rows(citus_admin, citus_schema) == (3, 3)  # a1..a3; m-big died with it
    report = migrate(
        source_url,
        citus_cluster.url,
        from_schema=source_schema,
        to_schema=citus_schema,
        distributed=True,
    )
    assert report.ok, report.failures
    assert (report.source_version, report.copied, report.skipped) == (5, 2, 3)
    assert _session_rows(citus_admin, citus_schema) == (5, 5)
    with (
        open_store(reference, create=False) as original,
        open_store(citus_cluster.url, schema=citus_schema, create=False) as copied,
    ):
        assert copied.distributed is True
        assert _snapshot(copied) == _snapshot(original)


def test_a_distributed_store_migrates_out_into_plain_stores(
    citus_cluster: CitusCluster,
    citus_schema: str,
    v5_source: tuple[str, str],
    tmp_path: Path,
) -> None:
    """Off the cluster: a distributed store copied into SQLite and into a plain schema of
    the local PostgreSQL (whose server has no ``citus`` extension), every session verified
    and answering as the source does; the source keeps its distribution and its rows."""
    _fill(citus_cluster.url, schema=citus_schema)
    plain_url, plain_schema = v5_source  # an empty schema, dropped after the test
    targets = {
        "sqlite": (f"sqlite:///{tmp_path / 'off.db'}", "session_sql"),
        "postgresql": (plain_url, plain_schema),
    }
    for url, schema in targets.values():
        report = migrate(citus_cluster.url, url, from_schema=citus_schema, to_schema=schema)
        assert report.ok, report.failures
        assert (report.source_version, report.tenants, report.sessions) == (6, 2, 6)
        assert (report.copied, report.skipped) == (6, 0)
        assert report.copied_events == report.events
    for tenant in TENANTS:
        with open_store(
            citus_cluster.url, schema=citus_schema, tenant=tenant, create=False
        ) as source:
            assert source.distributed is True
            held = _snapshot(source)
            assert sorted(held) == ["s1", "s2", "s3"]
            for url, schema in targets.values():
                with open_store(url, schema=schema, tenant=tenant, create=False) as copied:
                    assert copied.distributed is False
                    assert _snapshot(copied) == held
                    assert all(s["verify"] for s in _snapshot(copied).values())
