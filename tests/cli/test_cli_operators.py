"""What an operator reads: ``verify --quiet``, ``show --last``, progress on ``export --all``,
counts in words and with separators, and errors without pydantic's headings."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, field_validator
from sqlalchemy import delete

from session_sql import SessionStore
from session_sql._store.schema import tables_for

from ..builders import say
from ..store.store_builders import key_of
from .conftest import SCRIPT


def test_verify_quiet_prints_only_the_failures_and_the_summary(cli, demo, store):
    for n in range(3):
        say(store.create_session(f"fine{n}"), "hello")
    quiet = cli("verify", "--all", "--quiet")
    assert quiet.code == 0, quiet.stderr
    assert quiet.stdout == "5 ok, 0 failed\n"

    surface = tables_for(store.schema).surface
    with store.engine.begin() as conn:  # break one session's side table
        fork = surface.c.session_key == key_of(store, demo.fork_id)
        conn.execute(delete(surface).where(fork, surface.c.pos == 1))
    failing = cli("verify", "--all", "-q")
    assert failing.code == 1
    lines = failing.stdout.splitlines()
    assert lines[0].split()[:2] == ["FAIL", demo.fork_id]
    assert all(demo.fork_id not in line or "FAIL" in line for line in lines[:-1])
    assert not any(line.split()[:1] == ["ok"] for line in lines)
    assert lines[-1] == "4 ok, 1 failed"
    reports = json.loads(cli("verify", "--all", "-q", "--json").stdout)
    assert [r["session_id"] for r in reports] == [demo.fork_id]


def test_show_last_prints_the_final_messages(cli, demo, store):
    everything = store.messages(demo.session_id)
    out = cli("show", demo.session_id, "--last", "2")
    assert out.code == 0, out.stderr
    shown = cli("show", demo.session_id)
    numbered = [line for line in out.stdout.splitlines() if line.startswith("[")]
    assert [line.split()[0] for line in numbered] == ["[-2]", "[-1]"]
    tail = shown.stdout.split(f"[{len(everything) - 2}] ", 1)[1]
    assert out.stdout.split("[-2] ", 1)[1].replace("[-1] ", f"[{len(everything) - 1}] ") == tail
    as_json = cli("show", demo.session_id, "--last", "3", "--json")
    assert json.loads(as_json.stdout) == json.loads(json.dumps(everything[-3:]))
    assert json.loads(cli("show", demo.session_id, "--last", "0", "--json").stdout) == []
    assert cli("show", demo.session_id, "--last", "2", "--events").code == 2


def test_counts_are_words_with_separators(cli, store, tmp_path):
    handle = store.create_session("only", user_id="alice")
    say(handle, "x" * 2000)
    stats = cli("stats")
    assert "all sessions: 1 session (0 forks), 1 event" in stats.stdout
    exported = cli("export", "--all", str(tmp_path / "backup"))
    assert exported.code == 0, exported.stderr
    assert exported.stderr.splitlines() == [
        f"exported 1 event of only to {tmp_path / 'backup' / 'only.jsonl'}",
        f"exported 1 session to {tmp_path / 'backup'}",
    ]
    assert cli("verify", "only").stdout.split() == ["ok", "only", "1", "event"]
    pruned = cli("prune", "--user", "alice")
    assert pruned.code == 0, pruned.stderr
    [row] = pruned.stdout.splitlines()[1:-1]
    assert row.split()[-1].replace(",", "").isdigit() and "," in row.split()[-1]
    assert pruned.stdout.splitlines()[-1].startswith("deleted 1 session (1 event, 2,")


class _Title(BaseModel):
    title: str

    @field_validator("title")
    @classmethod
    def short(cls, value: str) -> str:
        raise ValueError("title is too long")


def test_a_refused_value_is_one_line_without_pydantic_headings(cli, store, monkeypatch):
    def refuse(self, *args, **kwargs):
        _Title(title="x")

    monkeypatch.setattr(SessionStore, "stats", refuse)
    out = cli("stats")
    assert out.code == 1
    assert out.error_lines == ["session-sql: error: title: title is too long"]


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")
def test_export_all_draws_a_progress_bar_on_a_terminal_only(sqlite_cli, tmp_path):
    with sqlite_cli.store() as store:
        for n in range(3):
            say(store.create_session(f"s{n}"), "hello")
    piped = sqlite_cli.script("export", "--all", str(tmp_path / "piped"))
    assert piped.code == 0 and "exporting sessions" not in piped.stderr
    done, drawn = sqlite_cli.on_a_terminal("export", "--all", str(tmp_path / "drawn"))
    assert done.returncode == 0
    assert b"exporting sessions" in drawn and b"exported 3 sessions" in drawn
