"""``init``, ``ls``, ``show``, ``tail``, ``stats`` and ``schema`` on both backends."""

from __future__ import annotations

import json
import time

import pytest

from session_sql import SCHEMA_VERSION, fold_surface, thaw
from session_sql._store.schema import render_ddl

ANSI = "\x1b["


def test_init_creates_and_rechecks_the_store(cli, backend, tmp_path):
    first = cli("init")
    assert first.code == 0, first.stderr
    assert f"schema version {SCHEMA_VERSION}" in first.stdout
    if backend.has("file"):
        assert (tmp_path / "sessions.db").exists()
    else:
        assert f"(schema {backend.schema})" in first.stdout
    again = cli("init")
    assert again.code == 0 and again.stdout == first.stdout


def test_init_distributed_without_citus_is_a_usage_error_and_creates_nothing(
    cli, backend, tmp_path
):
    """``--distributed`` needs a PostgreSQL database with the citus extension (Citus's own
    tests are in tests/citus); ``--plain`` creates the store as everywhere else."""
    refused = cli("init", "--distributed")
    assert refused.code == 2
    assert "citus" in refused.stderr and "distributed=True" in refused.stderr
    assert not (tmp_path / "sessions.db").exists()
    plain = cli("init", "--plain")
    assert plain.code == 0, plain.stderr
    assert not plain.stdout.rstrip().endswith(", distributed")
    again = cli("init", "--distributed")  # and a plain store is not what it asks for
    assert again.code == 2
    assert "distributed" in again.stderr


def test_ls_lists_sessions_newest_first(shared):
    cli, demo, store = shared.cli, shared.demo, shared.store
    out = cli("ls")
    assert out.code == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == [
        "ID",
        "TITLE",
        "USER",
        "EVENTS",
        "CREATED",
        "(UTC)",
        "UPDATED",
        "(UTC)",
        "PARENT",
    ]
    assert {demo.session_id, demo.fork_id} <= set(out.stdout.split())
    assert ANSI not in out.stdout

    listed = json.loads(cli("ls", "--json").stdout)
    infos = store.list_sessions()
    assert listed == [{**info.model_dump(), "event_count": info.head_seq + 1} for info in infos]
    assert {row["id"] for row in listed} == {demo.session_id, demo.fork_id}

    forks = json.loads(cli("ls", "--json", "--parent", demo.session_id).stdout)
    assert [row["id"] for row in forks] == [demo.fork_id]
    first = json.loads(cli("ls", "--json", "-n", "1").stdout)
    rest = json.loads(cli("ls", "--json", "--after", first[0]["id"]).stdout)
    assert [r["id"] for r in first + rest] == [info.id for info in infos]


def test_ls_shows_the_title_the_demo_agent_gave_its_session(shared):
    # The demo appends a session/title event; the TITLE column is that title.
    rows = {row["id"]: row for row in json.loads(shared.cli("ls", "--json").stdout)}
    title = "Failing billing tests: half-cent rounding"
    assert rows[shared.demo.session_id]["title"] == title
    assert title in shared.cli("ls").stdout


def test_ls_on_an_empty_store(cli):
    assert cli("init").code == 0
    assert cli("ls").stdout == "no sessions\n"
    assert json.loads(cli("ls", "--json").stdout) == []


def test_ls_draws_a_table_only_on_a_terminal(shared, monkeypatch):
    cli, demo = shared.cli, shared.demo
    monkeypatch.setattr("session_sql.cli._support.isatty", lambda stream: True)
    out = cli("ls")
    assert out.code == 0
    assert "━" in out.stdout  # rich's table rules
    assert demo.session_id in out.stdout


def test_ls_counts_the_sessions_on_a_terminal(shared, monkeypatch):
    cli, store = shared.cli, shared.store
    infos = store.list_sessions()
    assert len(infos) == 2  # the demo: a session and its fork
    piped = cli("ls").stdout.splitlines()  # a pipe gets the bare table: a row per session
    assert len(piped) == 1 + len(infos) and piped[-1].split()[0] == infos[-1].id
    monkeypatch.setattr("session_sql.cli._support.isatty", lambda stream: True)
    out = cli("ls")
    assert out.code == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "2 sessions"
    first = cli("ls", "-n", "1").stdout.splitlines()[-1]
    assert first == f"1 of 2 sessions; the next page: --after {infos[0].id}"
    last = cli("ls", "--after", infos[0].id).stdout.splitlines()[-1]
    assert last == "1 of 2 sessions"  # the total counts every match, not only what follows
    forks = cli("ls", "--parent", infos[-1].parent_session or infos[0].id).stdout
    assert forks.splitlines()[-1] == "1 session"
    listed = json.loads(cli("ls", "--json", "-n", "1").stdout)  # JSON: no count, one session
    assert [row["id"] for row in listed] == [infos[0].id]


def _created(store, times: dict[str, int]) -> None:
    for sid, at in times.items():
        store.create_session(header={"version": 0, "id": sid, "createdAt": at, "isSeeded": False})


DAY = 86_400_000
DEC_1 = 1_606_780_800_000  # 2020-12-01T00:00:00Z


def test_ls_sorts_by_update_or_creation(cli, store):
    _created(store, {"old": DEC_1, "mid": DEC_1 + DAY, "new": DEC_1 + 2 * DAY})
    store.open_session("old").append("todo/write", {"items": []})  # updated last

    def ids(*args: str) -> list[str]:
        out = cli("ls", "--json", *args)
        assert out.code == 0, out.stderr
        return [row["id"] for row in json.loads(out.stdout)]

    assert ids() == ids("--sort", "updated") == ["old", *ids("--after", "old")]
    assert ids()[0] == "old"
    assert ids("--sort", "created") == ["old", "mid", "new"]
    assert ids("--sort", "created", "-n", "1", "--after", "mid") == ["new"]
    assert ids("--sort", "created", "--reverse") == ["new", "mid", "old"]
    assert ids("--sort", "created", "-r", "-n", "1", "--after", "new") == ["mid"]
    assert ids("-r") == ids()[::-1]
    assert ids("-r", "--after", ids("-r")[0]) == ids("-r")[1:]
    bad = cli("ls", "--sort", "size")
    assert bad.code == 2 and "--sort" in bad.stderr and bad.stdout == ""


def test_ls_filters_by_creation_time(cli, store, monkeypatch):
    _created(store, {"old": DEC_1, "mid": DEC_1 + DAY, "new": DEC_1 + 2 * DAY})

    def ids(*args: str) -> list[str]:
        out = cli("ls", "--json", "--sort", "created", *args)
        assert out.code == 0, out.stderr
        return [row["id"] for row in json.loads(out.stdout)]

    assert ids("--since", "2020-12-02") == ["mid", "new"]  # from that instant on
    assert ids("--until", "2020-12-02") == ["old"]  # up to, not including, it
    assert ids("--since", "2020-12-01T12:00", "--until", "2020-12-03T00:00:00Z") == ["mid"]
    assert ids("--since", "2020-12-02T01:00+01:00") == ["mid", "new"]  # an offset is honoured
    assert ids("--since", "1d") == []  # a time ago: these sessions are from the past
    assert ids("--since", "5200w") == ["old", "mid", "new"]
    monkeypatch.setattr("session_sql.cli._support.isatty", lambda stream: True)
    counted = cli("ls", "--since", "2020-12-02", "-n", "1").stdout.splitlines()[-1]
    assert counted.startswith("1 of 2 sessions; the next page: --after ")
    for wrong in ("yesterday", "7 days", "2026-13-01", "d"):
        out = cli("ls", "--since", wrong)
        assert out.code == 2, (wrong, out.stderr)
        assert out.error_lines[0].startswith("session-sql: error: Invalid value for '--since': ")
        assert out.stdout == ""


def test_show_prints_the_messages_a_model_sees(shared):
    cli, demo, store = shared.cli, shared.demo, shared.store
    out = cli("show", demo.session_id)
    assert out.code == 0, out.stderr
    assert out.stdout.startswith("[0] user (compaction)\n")
    assert "Summary of the earlier conversation" in out.stdout
    assert "→ shell" in out.stdout and "✗ error result of call-8" in out.stdout
    assert ANSI not in out.stdout
    messages = json.loads(cli("show", demo.session_id, "--json").stdout)
    assert messages == thaw(store.messages(demo.session_id))


def test_show_events_prints_the_raw_log(shared):
    cli, demo, store = shared.cli, shared.demo, shared.store
    log = list(store.events(demo.session_id))
    out = cli("show", demo.session_id, "--events")
    assert out.code == 0
    assert len(out.stdout.splitlines()) == len(log)
    window = cli("show", demo.session_id, "--events", "--from", "10", "--to", "13")
    assert [line.split()[0] for line in window.stdout.splitlines()] == ["10", "11", "12"]
    wire = json.loads(cli("show", demo.session_id, "--events", "--json").stdout)
    assert wire == [thaw(e.to_json()) for e in log]
    empty = json.loads(cli("show", demo.session_id, "--events", "--json", "--from", "999").stdout)
    assert empty == []


def test_show_from_and_to_print_the_raw_log_without_events(shared):
    cli, demo = shared.cli, shared.demo
    for window in (["--from", "10", "--to", "13"], ["--to", "3"], ["--from", "100"]):
        ranged = cli("show", demo.session_id, *window)
        assert ranged.code == 0, ranged.stderr
        assert ranged.stdout == cli("show", demo.session_id, "--events", *window).stdout
    printed = cli("show", demo.session_id, "--to", "3").stdout.splitlines()
    assert [line.split()[0] for line in printed] == ["0", "1", "2"]
    as_json = json.loads(cli("show", demo.session_id, "--from", "104", "--json").stdout)
    assert [e["seq"] for e in as_json] == [104, 105]


def test_an_empty_range_says_so(shared):
    cli, demo, store = shared.cli, shared.demo, shared.store
    sid, head = demo.session_id, store.head_seq(demo.session_id)
    past = cli("show", sid, "--from", "999")
    assert (past.code, past.stderr) == (0, "")
    assert past.stdout == f"no events from seq 999 on: the log of {sid} holds seqs 0 to {head}\n"
    window = cli("show", sid, "--events", "--from", "500", "--to", "600")
    assert window.stdout == (
        f"no events from seqs 500 to 599: the log of {sid} holds seqs 0 to {head}\n"
    )
    backwards = cli("show", sid, "--from", "10", "--to", "5")
    assert (backwards.code, backwards.stdout) == (0, "no events: --to 5 is not after --from 10\n")
    assert cli("show", sid, "--from", "10", "--to", "10", "--json").stdout == "[]\n"


def test_show_surface_lists_nodes_and_what_replacements_shadow(shared):
    cli, demo, store = shared.cli, shared.demo, shared.store
    out = cli("show", demo.session_id, "--surface")
    assert out.code == 0, out.stderr
    assert f"(replaces {list(demo.summary_shadowed)})".replace("'", "") in out.stdout
    assert "Replacements" in out.stdout
    doc = json.loads(cli("show", demo.session_id, "--surface", "--json").stdout)
    fold = fold_surface(store.events(demo.session_id))
    assert doc["nodes"] == list(store.surface(demo.session_id)) == list(fold.nodes)
    assert [r["seq"] for r in doc["replacements"]] == [demo.prune_seq, demo.summary_seq]
    assert doc["replacements"][1]["shadowed"] == list(demo.summary_shadowed)


@pytest.mark.parametrize("extra", [["--events"], ["--from", "3"], ["--to", "9"]])
def test_show_refuses_a_raw_log_option_with_surface(shared, extra):
    cli, demo = shared.cli, shared.demo
    out = cli("show", demo.session_id, "--surface", *extra)
    assert out.code == 2
    assert out.error_lines == ["session-sql: error: --surface excludes --events, --from and --to"]


def test_tail_prints_the_last_events(shared):
    cli, demo, store = shared.cli, shared.demo, shared.store
    head = store.events(demo.session_id)
    seqs = [e.seq for e in head]
    out = cli("tail", demo.session_id, "-n", "3")
    assert out.code == 0
    assert [line.split()[0] for line in out.stdout.splitlines()] == [str(s) for s in seqs[-3:]]
    assert "turn/end" in out.stdout.splitlines()[-1]
    lines = cli("tail", demo.session_id, "-n", "2", "--json").stdout.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == seqs[-2:]
    assert cli("tail", demo.session_id, "-n", "0").stdout == ""


def test_tail_follow_stops_after_the_idle_timeout(shared):
    cli, demo = shared.cli, shared.demo
    started = time.monotonic()
    out = cli("tail", demo.session_id, "-n", "1", "-f", "--timeout", "0.3", "--json")
    assert out.code == 0
    assert len(out.stdout.splitlines()) == 1
    assert time.monotonic() - started < 10


def test_tail_follow_prints_what_another_process_appends(cli, demo, store):
    with cli.popen("tail", demo.session_id, "-n", "1", "-f", "--timeout", "60", "--json") as proc:
        try:
            assert proc.stdout is not None
            first = json.loads(proc.stdout.readline())  # following from here on
            writer = store.open_session(demo.session_id)
            added = writer.append("session/title", {"title": "followed"})
            second = json.loads(proc.stdout.readline())
        finally:
            proc.kill()
            proc.communicate()
    assert first["type"] == "turn/end"
    assert second == thaw(added.to_json())


def test_stats_counts_by_sql(shared):
    cli, demo, store = shared.cli, shared.demo, shared.store
    out = cli("stats")
    assert out.code == 0, out.stderr
    assert "all sessions: 2 sessions (1 fork)" in out.stdout
    assert "ERROR RATE" in out.stdout
    doc = json.loads(cli("stats", "--json").stdout)
    main = list(store.events(demo.session_id))
    fork = list(store.events(demo.fork_id))[demo.fork_boundary + 1 :]
    own = main + fork
    assert doc["events"] == len(own)
    assert sum(doc["events_by_type"].values()) == len(own)
    assert doc["events_by_type"]["assistant/chunk"] == sum(
        1 for e in own if e.type == "assistant/chunk"
    )
    tools = {t["tool"]: t for t in doc["tools"]}
    assert tools["shell"] == {"tool": "shell", "calls": 4, "errors": 1}
    assert tools["read_file"] == {"tool": "read_file", "calls": 2, "errors": 1}
    [tokens] = doc["tokens"]
    assert tokens["output_tokens"] == sum(
        e.data["usage"]["outputTokens"] for e in own if e.type == "assistant/message"
    )
    assert doc["replacements"] == {"tool/result": 1, "user/message": 1, "surface/removed": 1}

    one = json.loads(cli("stats", demo.fork_id, "--json").stdout)
    assert one["sessions"] == 1 and one["events"] == len(fork)
    assert {t["tool"] for t in one["tools"]} == {"shell"}


def test_stats_on_a_missing_session(shared):
    cli = shared.cli
    out = cli("stats", "no-such-session")
    assert out.code == 1
    assert out.error_lines == [
        "session-sql: error: session 'no-such-session' not found: no session id is or starts "
        "with it (see 'session-sql ls')"
    ]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_schema_prints_the_ddl(sqlite_cli, dialect):
    out = sqlite_cli("schema", "--dialect", dialect, "--schema", "agents")
    assert out.code == 0
    assert out.stdout == render_ddl(dialect, "agents")
    assert sqlite_cli("schema").stdout == render_ddl("sqlite")


def test_schema_help_names_the_public_module(sqlite_cli):
    out = sqlite_cli("schema", "--help")
    assert "session_sql.schema.render_ddl" in " ".join(out.stdout.split())


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_schema_header_names_the_public_module(sqlite_cli, dialect):
    header = sqlite_cli("schema", "--dialect", dialect).stdout.splitlines()[:2]
    assert "session_sql/store/" not in "\n".join(header)  # a path that no longer exists
    assert "session_sql.schema" in header[1]


def test_schema_refuses_an_unknown_dialect(sqlite_cli):
    out = sqlite_cli("schema", "--dialect", "oracle")
    assert out.code == 2
    assert len(out.error_lines) == 1
    assert "--dialect" in out.stderr and "see 'session-sql schema --help'" in out.stderr


def test_the_demo_fork_forgets_a_turn_without_losing_it(shared):
    """The fork's "forget that": a surface/removed takes the message and the reply off."""
    demo, store = shared.demo, shared.store
    fork = list(store.events(demo.fork_id))
    removal = fork[demo.forget_seq]
    assert removal.type == "surface/removed" and removal.data == {
        "reason": "the user said: forget that"
    }
    assert [fork[s].type for s in demo.forgotten] == ["user/message", "assistant/message"]
    surface = store.surface(demo.fork_id)
    assert not {demo.forget_seq, *demo.forgotten} & set(surface)
    ids = {m["id"] for m in store.messages(demo.fork_id)}
    assert not ids & {
        fork[s].data.get("id") or fork[s].data["message"]["id"] for s in demo.forgotten
    }
    assert store.verify(demo.fork_id).ok


def test_an_empty_session_says_so(cli, store):
    sid = store.create_session().id
    assert store.head_seq(sid) == -1
    assert cli("show", sid).stdout == f"no messages: the surface of {sid} is empty\n"
    assert cli("show", sid, "--events").stdout == f"no events: the log of {sid} is empty\n"
    assert cli("tail", sid).stdout == f"no events: the log of {sid} is empty\n"
    assert cli("tail", sid, "--json").stdout == ""
    assert cli("show", sid, "--json").stdout == "[]\n"


QUICK_COMMANDS = [
    ["ls"],
    ["ls", "--json"],
    ["ls", "--sort", "created", "-r", "--limit", "1"],
    ["ls", "--parent", "{prefix}"],
    ["ls", "--after", "{prefix}"],
    ["ls", "--user", "nobody"],
    ["ls", "--label", "bad name=x"],
    ["show", "{prefix}"],
    ["show", "{prefix}", "--json"],
    ["show", "{prefix}", "--events", "--from", "3", "--to", "9"],
    ["show", "{prefix}", "--surface"],
    ["show", "{prefix}", "--surface", "--json"],
    ["show", "{prefix}", "--events", "--from", "5000"],
    ["show", "missing"],
    ["show", ""],
    ["tail", "{prefix}", "-n", "3"],
    ["tail", "{prefix}", "--json"],
    ["tail", "missing"],
]


@pytest.mark.parametrize("command", QUICK_COMMANDS, ids=" ".join)
def test_reading_commands_say_the_same_through_the_quick_reader(sqlite_cli, monkeypatch, command):
    """On SQLite, ``ls``, ``show`` and ``tail`` read through ``backends.sqlite.quick``; what
    they print, and their exit codes, are those of the full store's reads."""
    from session_sql import quick
    from session_sql.cli.demo import record_demo

    run = record_demo(sqlite_cli.url)
    args = [a.replace("{prefix}", run.session_id[:6]) for a in command]
    opened: list[object] = []
    real = quick.open_quick

    def spy(*a: object, **kw: object) -> object:
        reader = real(*a, **kw)  # type: ignore[arg-type]
        opened.append(reader)
        return reader

    monkeypatch.setattr(quick, "open_quick", spy)
    fast = sqlite_cli(*args)
    assert opened and opened[0] is not None  # the quick reader was used
    monkeypatch.setattr(quick, "open_quick", lambda *a, **kw: None)
    full = sqlite_cli(*args)
    assert (fast.code, fast.stdout, fast.stderr) == (full.code, full.stdout, full.stderr)
    refused = {"missing", "", "bad name=x"} & set(command)
    assert (fast.code != 0) == bool(refused), fast.stderr
