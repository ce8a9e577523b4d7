"""``demo``, ``import``/``export``, ``verify`` and ``repair`` on both backends."""

from __future__ import annotations

import io
import json
import re
import sqlite3

import psycopg
import pytest
from sqlalchemy import delete, update

from session_sql import jsonl_file_name, thaw
from session_sql._store.schema import tables_for

from ..store.store_builders import key_of

NOT_FOUND = (
    "session-sql: error: session {!r} not found: no session id is or starts with it "
    "(see 'session-sql ls')"
)
SECTIONS = [
    "1. What the model sees now",
    "2. The raw log, in brief",
    "3. Replacements: what each one shadows",
    "4. The crash",
    "5. verify",
    "6. Explore it with SQL",
]


def _ids(stdout: str) -> tuple[str, str]:
    session = re.search(r"^  session (\w+) ", stdout, re.M)
    fork = re.search(r"^  fork    (\w+) ", stdout, re.M)
    assert session and fork, stdout
    return session.group(1), fork.group(1)


def _printed_sql(stdout: str) -> list[str]:
    """The statements section 6 of the demo prints, in order."""
    section = stdout.split("6. Explore it with SQL", 1)[1].split("\nNext: ", 1)[0]
    body = "\n".join(
        line for line in section.splitlines()[1:] if line and not line.startswith("--")
    )
    return [stmt.strip() + ";" for stmt in body.split(";") if stmt.strip()]


def _run_pasted(backend, statements: list[str]) -> list[list[tuple]]:
    """Run statements the way a user pasting them into sqlite3 or psql would (raw driver)."""
    results = []
    if backend.has("file"):
        conn = sqlite3.connect(backend.path)
        try:
            for stmt in statements:
                results.append(conn.execute(stmt).fetchall())
        finally:
            conn.close()
        return results
    with psycopg.connect(backend.driver_dsn, autocommit=True) as conn:
        for stmt in statements:
            cur = conn.execute(stmt)
            results.append(cur.fetchall() if cur.description else [])
    return results


def test_demo_records_and_explains_a_session(cli, backend):
    out = cli("demo")
    assert out.code == 0, out.stderr
    assert out.stderr == ""
    positions = [out.stdout.index(title) for title in SECTIONS]
    assert positions == sorted(positions)
    session_id, fork_id = _ids(out.stdout)
    assert "user (compaction)" in out.stdout
    assert "⇄ 11..11" in out.stdout  # the pruning replaces one surface entry
    assert "turn 3 interrupted" in out.stdout
    assert "the user asked to forget: seq " in out.stdout
    assert f"  ok    {session_id}" in out.stdout and f"  ok    {fork_id}" in out.stdout
    assert "\x1b[" not in out.stdout
    assert backend.expect.cli_sql_hint in out.stdout
    if backend.has("schema"):
        assert f"SET search_path TO {backend.schema};" in out.stdout

    # The printed SQL runs as pasted, and answers about this session.
    statements = _printed_sql(out.stdout)
    assert sum(session_id in stmt for stmt in statements) == 2
    results = [r for r in _run_pasted(backend, statements) if r]
    surface_rows, shadowed_rows, token_rows = results
    with cli.store() as store:
        assert [row[1] for row in surface_rows] == list(store.surface(session_id))
    assert [row[1] for row in shadowed_rows][:3] == [
        "user/message",
        "assistant/message",
        "tool/result",
    ]
    assert {row[0] for row in token_rows} == {session_id, fork_id}

    again = cli("demo")
    assert again.code == 0, again.stderr
    assert set(_ids(again.stdout)).isdisjoint({session_id, fork_id})
    listed = json.loads(cli("ls", "--json").stdout)
    assert len(listed) == 4
    assert cli("verify", "--all", "--invariants").code == 0


def _small_session(store, *, open_turn: bool = False):
    """A short, sound session (``open_turn``: it stops inside a tool call, as after a crash)."""
    s = store.create_session()
    s.append("turn/start", {"turn": 1})
    user = {
        "id": "u1",
        "role": "user",
        "content": [{"type": "text", "text": "hi"}],
        "source": {"kind": "user"},
    }
    s.append("user/message", user, surface_op="append")
    s.append("step/start", {"turn": 1, "step": 1})
    call = {"type": "tool-call", "id": "c1", "name": "shell", "arguments": {"cmd": "ls"}}
    message = {
        "id": "a1",
        "role": "assistant",
        "content": [call],
        "source": {"kind": "model", "provider": "p", "model": "m"},
    }
    s.append("assistant/message", {"turn": 1, "step": 1, "message": message}, surface_op="append")
    s.append(
        "tool/call",
        {"turn": 1, "step": 1, "callId": "c1", "name": "shell", "arguments": '{"cmd":"ls"}'},
    )
    if not open_turn:
        result = {
            "id": "r1",
            "role": "user",
            "source": {"kind": "tool", "callId": "c1"},
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "c1",
                    "content": [{"type": "text", "text": "a.txt"}],
                }
            ],
        }
        s.append(
            "tool/result",
            {"turn": 1, "step": 1, "message": result},
            surface_op="append",
            source_event_seqs=[4],
        )
        s.append("step/end", {"turn": 1, "step": 1})
        s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    return s


def test_export_to_stdout_and_to_a_file(cli, store, tmp_path):
    session = _small_session(store)
    out = cli("export", session.id)
    assert out.code == 0, out.stderr
    expected = io.StringIO()
    assert store.export_jsonl(session.id, expected) == session.seq
    assert out.stdout == expected.getvalue()
    lines = out.stdout.splitlines()
    assert json.loads(lines[0])["id"] == session.id
    assert [json.loads(line)["seq"] for line in lines[1:]] == list(range(session.seq))

    target = tmp_path / "out.jsonl"
    to_file = cli("export", session.id, "-o", str(target))
    assert to_file.code == 0
    assert to_file.stdout == ""
    assert to_file.stderr == f"exported {session.seq} events of {session.id} to {target}\n"
    assert target.read_text(encoding="utf-8") == expected.getvalue()


def test_export_failures_leave_no_file(cli, store, tmp_path):
    session = _small_session(store)
    missing = cli("export", "nope", "-o", str(tmp_path / "x.jsonl"))
    assert missing.code == 1
    assert missing.error_lines == [NOT_FOUND.format("nope")]
    unwritable = cli("export", session.id, "-o", str(tmp_path / "no" / "dir" / "x.jsonl"))
    assert unwritable.code == 1
    assert unwritable.error_lines[0].startswith("session-sql: error: cannot write ")
    assert sorted(p.name for p in tmp_path.iterdir() if "jsonl" in p.name) == []


def test_import_round_trips_an_export(cli, store, tmp_path):
    session = _small_session(store)
    before = [thaw(e.to_json()) for e in store.events(session.id)]
    path = tmp_path / "s.jsonl"
    store.export_jsonl(session.id, path)
    store.delete_session(session.id)

    out = cli("import", str(path))
    assert out.code == 0, out.stderr
    assert out.stdout == f"{session.id}  ← {path}\n"
    assert [thaw(e.to_json()) for e in store.events(session.id)] == before

    again = cli("import", str(path))
    assert again.code == 1
    assert again.error_lines == [
        f"session-sql: error: {path}: session {session.id!r} already exists "
        "(pass --skip-existing to skip it)"
    ]


def test_import_reports_each_file(cli, store, tmp_path):
    good = _small_session(store)
    torn = _small_session(store)
    paths = {}
    for name, s in (("good", good), ("torn", torn)):
        paths[name] = tmp_path / f"{name}.jsonl"
        store.export_jsonl(s.id, paths[name])
        store.delete_session(s.id)
    text = paths["torn"].read_text(encoding="utf-8")
    paths["torn"].write_text(text + '{"type": "turn/st', encoding="utf-8")  # a torn tail
    bad_lines = paths["good"].read_text(encoding="utf-8").splitlines(keepends=True)
    paths["bad"] = tmp_path / "bad.jsonl"
    paths["bad"].write_text(
        "".join([*bad_lines[:2], "not json\n", *bad_lines[2:]]).replace(good.id, "other"),
        encoding="utf-8",
    )

    out = cli("import", str(paths["good"]), str(paths["bad"]), str(paths["torn"]), "--json")
    assert out.code == 1
    assert json.loads(out.stdout) == [
        {"file": str(paths["good"]), "session_id": good.id, "skipped": False},
        {"file": str(paths["torn"]), "session_id": torn.id, "skipped": False},
    ]
    errors = out.error_lines
    assert len(errors) == 2
    assert errors[0].startswith(f"session-sql: error: {paths['bad']}: ")
    assert "line 3" in errors[0]
    assert errors[1].startswith("session-sql: warning: ") and "torn" in errors[1]
    assert store.load_session(torn.id).seq >= torn.seq


def test_import_refuses_a_missing_file(cli, tmp_path):
    out = cli("import", str(tmp_path / "nope.jsonl"))
    assert out.code == 2
    assert len(out.error_lines) == 1
    assert "does not exist" in out.stderr


def test_verify_reports_ok_and_failures(cli, demo, store):
    ok = cli("verify", demo.session_id)
    assert ok.code == 0, ok.stderr
    assert ok.stdout.split() == ["ok", demo.session_id, str(demo.repaired[-1].seq + 1), "events"]
    everything = cli("verify", "--all")
    assert everything.code == 0
    assert everything.stdout.splitlines()[-1] == "2 ok, 0 failed"
    assert everything.stderr == ""  # no progress bar: stderr is not a terminal

    surface = tables_for(store.schema).surface
    with store.engine.begin() as conn:  # break the side table behind the library's back
        fork = surface.c.session_key == key_of(store, demo.fork_id)
        conn.execute(delete(surface).where(fork, surface.c.pos == 1))
    shown = cli("show", demo.fork_id, "--surface")
    assert shown.code == 1
    assert shown.error_lines == [
        f"session-sql: error: the stored surface of {demo.fork_id} differs from the replay "
        f"of its log; run 'session-sql verify {demo.fork_id}'"
    ]
    bad = cli("verify", demo.fork_id)
    assert bad.code == 1
    assert bad.stdout.startswith(f"  FAIL  {demo.fork_id}")
    assert "surface table differs from the fold" in bad.stdout
    report = json.loads(cli("verify", "--all", "--json").stdout)
    assert {r["session_id"]: r["ok"] for r in report} == {
        demo.session_id: True,
        demo.fork_id: False,
    }
    assert cli("verify", "--all").code == 1


def test_verify_invariants_flag(cli, store):
    session = _small_session(store)
    session.append("turn/end", {"turn": 7, "reason": {"kind": "completed"}})  # closes nothing
    assert cli("verify", session.id).code == 0
    out = cli("verify", session.id, "--invariants")
    assert out.code == 1
    assert "invariant turn-not-open at seq 8" in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Neither: say what to give, not "(not both)", which reads as if both were given.
        ([], "give a session id, or --all to verify every session"),
        (["some-id", "--all"], "give a session id or --all, not both"),
    ],
)
def test_verify_needs_exactly_one_target(cli, args, message):
    out = cli("verify", *args)
    assert (out.code, out.stdout) == (2, "")
    assert out.error_lines == ["session-sql: error: " + message]


def test_verify_a_missing_session(cli, store):
    out = cli("verify", "nope")
    assert out.code == 1
    assert out.error_lines == [NOT_FOUND.format("nope")]


def test_repair_closes_an_open_turn_once(cli, store):
    session = _small_session(store, open_turn=True)
    out = cli("repair", session.id)
    assert out.code == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"appended 3 events to {session.id}:"
    types = [e.type for e in store.events(session.id, from_seq=session.seq)]
    assert types == ["tool/result", "step/end", "turn/end"]
    again = cli("repair", session.id, "--json")
    assert again.code == 0 and json.loads(again.stdout) == []
    assert cli("repair", session.id).stdout == f"nothing to repair: {session.id} has no open turn\n"
    assert cli("verify", session.id, "--invariants").code == 0


def test_repair_json_lists_the_closers(cli, store):
    session = _small_session(store, open_turn=True)
    out = cli("repair", session.id, "--json")
    closers = json.loads(out.stdout)
    assert [c["seq"] for c in closers] == [5, 6, 7]
    assert closers[0]["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert closers[-1]["data"]["reason"] == {"kind": "interrupted"}


def test_commands_refuse_a_store_of_another_schema_version(cli, store):
    meta = tables_for(store.schema).meta
    with store.engine.begin() as conn:
        conn.execute(update(meta).where(meta.c.key == "schema_version").values(value="999"))
    for args in (["init"], ["ls"], ["stats"]):
        out = cli(*args)
        assert out.code == 1, args
        assert len(out.error_lines) == 1
        assert out.error_lines[0].startswith("session-sql: error: ")
        assert "999" in out.stderr


def test_verify_all_draws_a_progress_bar_on_a_terminal(cli, demo, monkeypatch):
    monkeypatch.setattr("session_sql.cli._support.isatty", lambda stream: True)
    out = cli("verify", "--all")
    assert out.code == 0
    assert "verifying" in out.stderr
    assert f"{demo.session_id}" in out.stdout


HOSTILE_IDS = ["a/b", "..", "../x", ".hidden", "☃ snow", "Ab", "ab"]


def test_export_into_a_folder_derives_safe_file_names(cli, store, tmp_path):
    for session_id in HOSTILE_IDS:
        store.create_session(session_id).append("todo/write", {"items": [{"text": session_id}]})
    folder = tmp_path / "backup"
    folder.mkdir()
    one = cli("export", "../x", "--dir", str(folder))
    assert one.code == 0, one.stderr
    assert [p.name for p in folder.iterdir()] == [jsonl_file_name("../x")]
    every = cli("export", "--all", "--dir", str(folder))
    assert every.code == 0, every.stderr
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        jsonl_file_name(i) for i in HOSTILE_IDS
    )
    assert [p.name for p in tmp_path.iterdir() if "sessions" not in p.name] == ["backup"]
    for session_id in HOSTILE_IDS:
        expected = io.StringIO()
        store.export_jsonl(session_id, expected)
        text = (folder / jsonl_file_name(session_id)).read_text(encoding="utf-8")
        assert text == expected.getvalue()


@pytest.mark.parametrize(
    "args",
    [["--all"], ["x", "--all", "--dir", "d"], ["x", "-o", "f", "--dir", "d"], []],
    ids=["all-without-dir", "id-and-all", "output-and-dir", "nothing"],
)
def test_export_usage_errors(cli, args):
    out = cli("export", *args)
    assert out.code == 2, out.stderr


def test_verify_all_scans_in_creation_order(cli, store):
    # The scan pages by creation, so a session written during it keeps its place (updated_at
    # order would put "first" last-written, hence first, and could skip sessions).
    for sid in ("first", "second", "third"):
        store.create_session(sid)
    store.open_session("first").append("session/title", {"title": "written last"})
    report = json.loads(cli("verify", "--all", "--json").stdout)
    assert [r["session_id"] for r in report] == ["first", "second", "third"]
