"""``session-sql bench``: the real workloads at a tiny scale, and the command's output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlalchemy import text

from session_sql._store.database import sqlite_pragmas
from session_sql.cli import bench
from session_sql.cli._support import CliError

from .conftest import Cli


@pytest.mark.slow
def test_every_workload_runs_against_the_raw_driver(backend):
    report = bench.run(_backend_url(backend), quick=True, scale=0.03)
    assert report["backend"] == backend.name
    names = [w["name"] for w in report["workloads"]]
    assert names == list(backend.expect.bench_workloads)
    by_name = {w["name"]: w for w in report["workloads"]}
    for name in names:
        if name.startswith(("W1 ", "W2", "W3", "W4", "W5", "W9", "W10")):
            w = by_name[name]
            assert w["events_per_s"] > 0 and w["raw_events_per_s"] > 0 and w["ratio"] > 0
            assert w["reps"] >= 2
    assert by_name["W4 messages() of 2k nodes"]["extra"]["log_growth_100k_over_10k"] > 0
    tail = by_name["W9 messages(last=20)"]["extra"]
    assert tail["tail_over_raw_time"] > 0 and tail["last"] == 20
    assert tail["cold_tail_over_raw_time"] > 0
    opened = by_name["W10 open_session + append"]["extra"]
    assert opened["open_append_ms"] > 0 and opened["log_growth_100k_over_10k"] > 0
    assert opened["open_over_raw_time"] > 0
    assert opened["open_ms"] > 0 and opened["open_growth_100k_over_10k"] > 0
    assert opened["cold_open_append_ms"] > 0 and opened["cold_over_raw_time"] > 0
    assert opened["log"] > opened["small_log"] > opened["surface_nodes"] > 0
    follow = by_name["W6 follow latency"]["extra"]
    assert follow["events"] > 0 and 0 < follow["p50_ms"] <= follow["p99_ms"]
    storage = by_name["W8 storage"]["extra"]
    assert storage["bytes_per_event"] > storage["json_bytes_per_event"] > 0
    if "W7 8 writers x 1 session" in by_name:  # the workloads that need a server
        shared = by_name["W7 8 writers x 1 session"]["extra"]
        assert shared["no_gaps_no_duplicates"] and shared["verify_ok"]
        fleet = by_name["W7 fleet 8 processes"]
        assert fleet["events_per_s"] > 0 and fleet["raw_events_per_s"] > 0
        assert fleet["extra"]["store_shaped_ratio"] > 0
        tasks = by_name["W11 async appends x16"]
        assert tasks["events_per_s"] > 0 and tasks["raw_events_per_s"] > 0 and tasks["reps"] >= 2
        assert tasks["extra"]["workers"] == 16
        assert tasks["extra"]["tasks_over_threads"] == tasks["ratio"] > 0


def _backend_url(backend) -> str | None:
    """The bench's server; none where the bench makes a database file of its own."""
    return None if backend.has("file") else backend.url


def test_the_raw_baseline_writes_rows_the_store_reads(backend):
    """The baseline's statements are compiled from the store's tables: the rows it writes are
    the store's rows, column for column."""
    items = bench.agent_events(40)
    with bench.bench_targets(_backend_url(backend)) as targets:
        target = targets[0]
        with target.store() as store, bench._closing(target.raw()) as raw:
            sid = raw.new_session()
            head = raw.write(sid, -1, items[:1])
            head = raw.write(sid, head, items[1:])
            stored = list(store.events(sid))
            log = raw.fetch_log(sid)
    assert head == len(items) - 1
    assert [(e.seq, e.type, e.data) for e in stored] == [
        (seq, it["type"], it["data"]) for seq, it in enumerate(items)
    ]
    assert [e.surface_op for e in stored] == [
        None if it.get("surface_op") is None else it["surface_op"] for it in items
    ]
    assert [(seq, type_, data) for seq, type_, _, data in log] == [
        (seq, it["type"], it["data"]) for seq, it in enumerate(items)
    ]


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
def test_the_raw_sqlite_baseline_runs_the_engines_pragmas(tmp_path: Path, synchronous: str):
    target = bench.Target(
        "sqlite", f"sqlite:///{tmp_path / 'x.db'}", "session_sql", str(tmp_path), synchronous
    )
    settings = ("journal_mode", "foreign_keys", "synchronous")
    with target.store() as store, store.engine.connect() as conn:
        ours = [conn.execute(text(f"PRAGMA {name}")).scalar() for name in settings]
    raw = target.raw()
    assert isinstance(raw, bench.RawSQLite)
    try:
        theirs = [raw.conn.execute(f"PRAGMA {name}").fetchone()[0] for name in settings]
    finally:
        raw.close()
    assert theirs == ours == ["wal", 1, 2 if synchronous == "FULL" else 1]
    assert sqlite_pragmas(synchronous)[-1] == f"PRAGMA synchronous = {synchronous}"


def test_sqlite_pragmas_refuse_an_unknown_mode():
    with pytest.raises(ValueError, match="synchronous"):
        sqlite_pragmas("OFF")


def test_w11_runs_the_async_api_against_the_sync_one(backend):
    """W11 (run by the bench on PostgreSQL) works on either backend: tasks through the async
    API vs threads through the sync one, every append committed, the stores closed."""
    with bench.bench_targets(_backend_url(backend)) as targets:
        target = targets[0]
        w = bench.w_async_appends(target, 3, 2)
        with target.store() as store:
            sessions = store.list_sessions(limit=1000)
    assert w.name == "W11 async appends x16" and w.reps == 2
    assert w.events_per_s > 0 and w.raw_events_per_s > 0 and w.ratio > 0
    assert w.extra["workers"] == bench.ASYNC_WORKERS == 16
    assert w.extra["appends_per_worker"] == 3
    assert w.extra["cpu_us_per_append_tasks"] > 0 and w.extra["cpu_us_per_append_threads"] > 0
    # 2 runs x 2 APIs x 16 sessions of 3 messages each
    assert len(sessions) == 64 and {s.head_seq for s in sessions} == {2}


def test_w8_measures_only_its_own_rows(backend):
    """W8 is the same whatever earlier workloads left in the bench database.

    Regression: W8 measured the growth of the shared database, so after earlier workloads had
    freed space (deleted or updated rows) the new rows landed there and the figure collapsed
    below the JSON size.
    """
    with bench.bench_targets(_backend_url(backend)) as targets:
        main = targets[0]
        clean = bench.w_storage(main, 200).extra
        with main.store() as store:
            for _ in range(2):
                handle = store.create_session()
                handle.append_many(bench.agent_events(1500))
                store.delete_session(handle.id)
            if backend.has("dead_rows"):
                with store.engine.connect() as conn:
                    conn.execution_options(isolation_level="AUTOCOMMIT")
                    conn.execute(text(f'VACUUM "{main.schema}".events, "{main.schema}".surface'))
        churned = bench.w_storage(main, 200).extra
    assert clean["bytes_per_event"] > clean["json_bytes_per_event"] > 0
    assert churned["json_bytes_per_event"] == clean["json_bytes_per_event"]
    assert churned["bytes_per_event"] == pytest.approx(clean["bytes_per_event"], rel=0.1)


def test_bench_on_a_sqlite_url_works_beside_that_file(tmp_path: Path):
    named = tmp_path / "mine.db"
    with bench.bench_targets(f"sqlite:///{named}") as targets:
        workdirs = {t.workdir for t in targets}
        assert len(workdirs) == 1
        workdir = Path(workdirs.pop())
        assert workdir.parent == tmp_path
        for target in targets:
            assert Path(str(target.url).removeprefix("sqlite:///")).parent == workdir
    assert not workdir.exists()
    assert not named.exists()  # the named file is never opened
    assert os.listdir(tmp_path) == []


def test_bench_on_a_sqlite_url_in_a_missing_directory_is_an_error(sqlite_cli: Cli, tmp_path):
    out = sqlite_cli("bench", "--quick", "--url", f"sqlite:///{tmp_path / 'nowhere' / 'x.db'}")
    assert out.code == 1
    assert "does not exist" in out.stderr


FAKE = {
    "backend": "sqlite",
    "quick": True,
    "workloads": [
        {
            "name": "W1 append (FULL)",
            "events_per_s": 2000.0,
            "raw_events_per_s": 2500.0,
            "ratio": 0.8,
            "reps": 3,
            "min_max_events_per_s": [1900.0, 2100.0],
            "extra": {"events": 300},
        },
        {
            "name": "W6 follow latency",
            "events_per_s": 0.0,
            "raw_events_per_s": 0.0,
            "ratio": 0.0,
            "reps": 1,
            "min_max_events_per_s": [0.0, 0.0],
            "extra": {"p50_ms": 4.2, "p99_ms": 9.9},
        },
    ],
}


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str | None, bool]]:
    calls: list[tuple[str | None, bool] | tuple[str | None, bool, str]] = []

    def run(url, *, quick, progress, only=None, citus_url=None):
        calls.append((url, quick) if citus_url is None else (url, quick, citus_url))
        progress("W1 append (FULL)")
        return FAKE

    monkeypatch.setattr(bench, "run", run)
    return calls


def test_bench_prints_a_table(sqlite_cli: Cli, fake_run):
    out = sqlite_cli("bench", "--quick")
    assert out.code == 0
    assert fake_run == [(None, True)]
    assert "W1 append (FULL)" in out.stdout and "0.80" in out.stdout and "500.0" in out.stdout
    assert "p50_ms=4.2" in out.stdout
    assert "bench: W1 append (FULL)" in out.stderr


def test_bench_json_is_the_report(sqlite_cli: Cli, fake_run):
    out = sqlite_cli("bench", "--json", "--url", "postgresql://u@h/db")
    assert out.code == 0
    assert json.loads(out.stdout) == FAKE
    assert fake_run == [("postgresql://u@h/db", False)]


def test_bench_takes_a_citus_url_from_the_option_or_the_environment(
    sqlite_cli: Cli, fake_run, monkeypatch
):
    pg, citus = "postgresql://u@h/db", "postgresql://u@c:9700/postgres"
    assert sqlite_cli("bench", "--url", pg, "--citus-url", citus).code == 0
    monkeypatch.setenv("SESSION_SQL_BENCH_CITUS_URL", citus)
    assert sqlite_cli("bench", "--url", pg, "--only", "W13").code == 0
    assert fake_run == [(pg, False, citus), (pg, False, citus)]


def test_w13_needs_a_citus_url_and_a_plain_postgresql(monkeypatch):
    monkeypatch.delenv("SESSION_SQL_BENCH_CITUS_URL", raising=False)
    with pytest.raises(CliError, match="--citus-url"):
        bench.run("postgresql://u@h/db", quick=True, only=frozenset({"W13"}))
    with pytest.raises(CliError, match="--url postgresql"):
        bench.run(None, quick=True, citus_url="postgresql://u@c/postgres")


def test_w10_opens_and_appends_to_compacted_sessions_of_two_lengths(backend):
    """W10's sessions: W4's, compacted (a tenth of the surface left), one event longer per
    open-and-append; the store reads them back whole."""
    with bench.bench_targets(_backend_url(backend)) as targets:
        target = targets[0]
        with target.store() as store, bench._closing(target.raw()) as raw:
            big = bench._big_session(store, 2000, 40)
            small = bench._big_session(store, 400, 40)
            w10 = bench.w_open(store, raw, big, small, 40, reps=2)
            assert w10.name == "W10 open_session + append"
            assert w10.reps >= 9  # interleaved samples, as W4's
            assert len(store.surface(big)) == len(store.surface(small)) == 5  # 4 kept + summary
            assert w10.extra["surface_nodes"] == 5
            # Each sample appends twice to the big session: after an open and a first open.
            assert w10.extra["log"] == store.head_seq(big) + 1 == 2000 + 1 + 1 + 2 * w10.reps
            assert store.verify(big).ok and store.verify(small).ok


def test_bench_url_sqlite_puts_its_files_beside_that_path(sqlite_cli: Cli, tmp_path, monkeypatch):
    """``bench --url sqlite:///dir/mine.db`` works in dir (same file system), never in the
    system temp directory, and never opens mine.db."""
    named = tmp_path / "data" / "mine.db"
    named.parent.mkdir()
    seen: list[str] = []

    def run(url, *, quick, progress, only=None, citus_url=None):
        with bench.bench_targets(url) as targets:
            for target in targets:
                seen.append(target.workdir)
                assert Path(target.workdir).exists()
        return FAKE

    monkeypatch.setattr(bench, "run", run)
    out = sqlite_cli("bench", "--quick", "--url", f"sqlite:///{named}")
    assert out.code == 0, out.stderr
    assert seen and {Path(w).parent for w in seen} == {named.parent}
    assert os.listdir(named.parent) == []  # the temp files are gone, mine.db never made


def test_only_runs_the_named_workloads(backend):
    report = bench.run(_backend_url(backend), quick=True, scale=0.03, only=frozenset({"W1", "W3"}))
    names = [w["name"] for w in report["workloads"]]
    assert names == [*backend.expect.bench_w1, "W3 compaction-heavy"]


def test_only_refuses_an_unknown_workload(sqlite_cli: Cli):
    out = sqlite_cli("bench", "--quick", "--only", "W1,W14")
    assert out.code == 2
    assert "W14" in out.stderr


def test_w12_grows_the_store_with_sessions_that_read_and_verify(backend):
    """W12 fills by copying its templates inside the database: each copy is a whole session
    (its events, its surface, its fork parent), and every operation is timed at each size."""
    with bench.bench_targets(_backend_url(backend)) as targets:
        target = targets[0]
        workloads = bench.w_scale(target, bench._store_bytes, (400, 2000))
        with target.store() as store:
            ids = {s.id for s in store.iter_sessions()}
            for name in ("full", "short-a", "compacted", "fork"):
                template = store.load_session(f"w12-{name}")
                for copy in (0, 7, 31):
                    sid = f"w12-{name}-{copy}"
                    assert store.verify(sid).ok, sid
                    assert store.messages(sid) == template.messages(), sid
                    assert [(e.type, e.data) for e in store.events(sid)] == [
                        (e.type, e.data) for e in store.events(f"w12-{name}")
                    ]
            fork = store.session_info("w12-fork-7")
            assert fork.parent_session == "w12-short-a-7" and fork.parent_session in ids
            assert store.session_info("w12-full-7").labels == {"team": "t7"}
            by_user = store.list_sessions(user_id="user7", limit=10000)
    assert {s.id.rsplit("-", 1)[-1] for s in by_user} == {"7"}
    by_name = {w.name: w for w in workloads}
    assert list(by_name) == [
        "W12 fill",
        *(f"W12 {op}" for op in bench.SCALE_OPERATIONS),
        "W12 bytes per event",
    ]
    events = by_name["W12 fill"].extra["events"]
    assert len(events) == 2 and 400 <= events[0] < 2000 <= events[1]
    for op in bench.SCALE_OPERATIONS:
        extra = by_name[f"W12 {op}"].extra
        assert len(extra["p50_ms"]) == len(extra["p99_ms"]) == 2, op
        assert all(p50 > 0 for p50 in extra["p50_ms"]), op
        assert extra["growth"] == round(extra["p50_ms"][1] / extra["p50_ms"][0], 3), op
    assert all(b > 0 for b in by_name["W12 bytes per event"].extra["bytes_per_event"])


def test_w12_runs_only_when_named(sqlite_cli: Cli, monkeypatch):
    seen = []
    monkeypatch.setattr(bench, "w_scale", lambda *a, **k: seen.append(a[2]) or [])
    report = bench.run(None, quick=True, scale=0.01, only=frozenset({"W12"}))
    assert report["workloads"] == [] and seen == [[1000, 1000, 10000]]
    assert bench.run(None, quick=True, scale=0.01, only=frozenset({"W2"}))["workloads"]
    assert len(seen) == 1
