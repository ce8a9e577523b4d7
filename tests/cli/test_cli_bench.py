"""``session-sql bench``: the real workloads at a tiny scale, and the command's output."""

from __future__ import annotations

import json

import pytest

from session_sql.cli import bench

from .conftest import Cli

SQLITE_WORKLOADS = [
    "W1 append (FULL)",
    "W1 append (NORMAL)",
    "W2 append_many x100",
    "W3 compaction-heavy",
    "W4 messages() of 2k nodes",
    "W5 load_session",
    "W6 follow latency",
    "W8 storage",
]
POSTGRES_WORKLOADS = [
    "W1 append",
    "W2 append_many x100",
    "W3 compaction-heavy",
    "W4 messages() of 2k nodes",
    "W5 load_session",
    "W6 follow latency",
    "W7 4 writers x 4 sessions",
    "W7 4 writers x 1 session",
    "W8 storage",
]


@pytest.mark.slow
def test_every_workload_runs_against_the_raw_driver(backend):
    url = None if backend.name == "sqlite" else backend.url
    report = bench.run(url, quick=True, scale=0.03)
    assert report["backend"] == backend.name
    names = [w["name"] for w in report["workloads"]]
    assert names == (SQLITE_WORKLOADS if backend.name == "sqlite" else POSTGRES_WORKLOADS)
    by_name = {w["name"]: w for w in report["workloads"]}
    for name in names:
        if name.startswith(("W1", "W2", "W3", "W4", "W5")):
            w = by_name[name]
            assert w["events_per_s"] > 0 and w["raw_events_per_s"] > 0 and w["ratio"] > 0
            assert w["reps"] >= 2
    assert by_name["W4 messages() of 2k nodes"]["extra"]["log_growth_100k_over_10k"] > 0
    follow = by_name["W6 follow latency"]["extra"]
    assert follow["events"] > 0 and 0 < follow["p50_ms"] <= follow["p99_ms"]
    storage = by_name["W8 storage"]["extra"]
    assert storage["bytes_per_event"] > storage["json_bytes_per_event"] > 0
    if backend.name == "postgresql":
        shared = by_name["W7 4 writers x 1 session"]["extra"]
        assert shared["no_gaps_no_duplicates"] and shared["verify_ok"]


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
    calls: list[tuple[str | None, bool]] = []

    def run(url, *, quick, progress):
        calls.append((url, quick))
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
