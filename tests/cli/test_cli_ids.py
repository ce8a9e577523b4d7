"""Session ids by unique prefix (as in git) in arguments and options, and shell completion,
on both backends."""

from __future__ import annotations

import json

import pytest

from session_sql.cli._support import AMBIGUOUS_SHOWN

from .conftest import SCRIPT

ERROR = "session-sql: error: "
IDS = ["abc-1", "abc-2", "ab", "a_b", "axb", "xyz-session"]


@pytest.fixture
def named(cli, store):
    """Sessions whose ids share prefixes, each with one event (so every command has a log)."""
    for sid in IDS:
        store.create_session(sid).append("todo/write", {"items": [{"text": sid}]})
    return cli


COMMANDS = [
    ["show"],
    ["show", "--events"],
    ["tail"],
    ["export"],
    ["verify"],
    ["repair"],
    ["stats", "--json"],
]


def test_every_command_taking_an_id_takes_a_unique_prefix(named):
    for args in COMMANDS:
        full = named(args[0], "xyz-session", *args[1:])
        short = named(args[0], "xyz", *args[1:])
        assert full.code == 0, (args, full.stderr)
        assert (short.code, short.stdout, short.stderr) == (0, full.stdout, full.stderr), args


def test_an_exact_id_wins_over_a_longer_one_it_prefixes(named):
    out = named("export", "ab")  # "abc-1" and "abc-2" start with "ab" too
    assert out.code == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[0])["id"] == "ab"


def test_an_ambiguous_prefix_lists_the_candidates(named, store):
    out = named("show", "abc")
    assert (out.code, out.stdout) == (1, "")
    assert out.error_lines == [
        ERROR + "session id prefix 'abc' is ambiguous: 2 session ids start with it "
        "(abc-1, abc-2); give more of the id"
    ]
    assert named("show", "abc-2").code == 0


def test_a_prefix_is_compared_exactly(named):
    # No wildcards and no case folding: 'a_' names only 'a_b' (LIKE would also match 'axb').
    assert named("export", "a_").stdout == named("export", "a_b").stdout
    missing = named("show", "XYZ")
    assert missing.code == 1
    assert missing.error_lines == [
        ERROR + "session 'XYZ' not found: no session id is or starts with it (see 'session-sql ls')"
    ]


def test_many_candidates_are_cut_short(cli, store):
    for i in range(AMBIGUOUS_SHOWN + 3):
        store.create_session(f"run-{i:02d}")
    out = cli("show", "run-")
    assert out.code == 1
    [line] = out.error_lines
    assert f"more than {AMBIGUOUS_SHOWN} session ids start with it" in line
    assert line.count("run-") == AMBIGUOUS_SHOWN + 1  # the prefix, then the ids shown
    assert ", ...); give more of the id" in line


@pytest.fixture
def forked(named, store):
    """``named``, and a fork of ``xyz-session`` (whose id does not start with ``xyz``)."""
    store.fork_session("xyz-session", child_id="fork-of-xyz")
    return named


@pytest.mark.parametrize("option", ["--parent", "--after"])
def test_the_id_options_of_ls_take_a_unique_prefix(forked, store, option):
    full = forked("ls", "--json", option, "xyz-session")
    short = forked("ls", "--json", option, "xyz")
    assert full.code == 0, full.stderr
    assert (short.code, short.stdout, short.stderr) == (0, full.stdout, full.stderr)
    listed = [row["id"] for row in json.loads(short.stdout)]
    if option == "--parent":
        assert listed == ["fork-of-xyz"]
    else:
        assert listed == [info.id for info in store.list_sessions(after="xyz-session")]
    plain = forked("ls", option, "xyz")  # the table names what was resolved
    assert plain.code == 0 and plain.stdout == forked("ls", option, "xyz-session").stdout


@pytest.mark.parametrize("option", ["--parent", "--after"])
def test_the_id_options_of_ls_refuse_an_ambiguous_or_unknown_prefix(forked, option):
    ambiguous = forked("ls", option, "abc")
    assert (ambiguous.code, ambiguous.stdout) == (1, "")
    assert ambiguous.error_lines == [
        ERROR + f"{option}: session id prefix 'abc' is ambiguous: 2 session ids start with it "
        "(abc-1, abc-2); give more of the id"
    ]
    unknown = forked("ls", option, "nope", "--json")
    assert (unknown.code, unknown.stdout) == (1, "")
    assert unknown.error_lines == [
        ERROR + f"{option}: session 'nope' not found: no session id is or starts with it "
        "(see 'session-sql ls')"
    ]


def test_an_exact_id_wins_in_the_options_of_ls_too(forked, store):
    out = forked("ls", "--json", "--after", "ab")  # "abc-1" and "abc-2" start with "ab" too
    assert out.code == 0, out.stderr
    assert [r["id"] for r in json.loads(out.stdout)] == [
        info.id for info in store.list_sessions(after="ab")
    ]


def test_ls_parent_names_the_forks_of_a_deleted_session_by_its_full_id(forked, store):
    # Forks keep their parent's id (the PARENT column shows it) after the parent is deleted.
    store.delete_session("xyz-session")
    out = forked("ls", "--json", "--parent", "xyz-session")
    assert out.code == 0, out.stderr
    assert [row["id"] for row in json.loads(out.stdout)] == ["fork-of-xyz"]
    prefix = forked("ls", "--parent", "xyz")  # no live session: a prefix names nothing
    assert prefix.code == 1
    assert prefix.error_lines == [
        ERROR + "--parent: session 'xyz' not found: no session id is or starts with it "
        "(see 'session-sql ls')"
    ]


def test_an_empty_id_is_not_a_prefix_of_everything(named):
    out = named("show", "")
    assert out.code == 1
    assert "not a valid session id" in out.stderr


def _complete(cli, words: str) -> list[str]:
    """What the shell would offer after ``words`` (bash's protocol, through the real script)."""
    out = cli.script(
        env={
            "_SESSION_SQL_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
        }
    )
    assert out.code == 0, out.stderr
    assert out.stderr == ""
    return out.stdout.split()


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")
def test_shell_completion_of_commands_options_and_ids(named):
    # (Each run starts the real script, which is slow on a busy machine: few, telling ones.)
    assert _complete(named, "session-sql sh") == ["show"]
    assert sorted(_complete(named, "session-sql show abc")) == ["abc-1", "abc-2"]
    assert sorted(_complete(named, "session-sql delete ")) == sorted(IDS)


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")
def test_completing_ids_without_a_store_offers_nothing_and_creates_nothing(sqlite_cli, tmp_path):
    assert _complete(sqlite_cli, "session-sql show a") == []
    assert not (tmp_path / "sessions.db").exists()


def test_the_install_and_show_completion_options_are_there(sqlite_cli):
    out = sqlite_cli("--help")
    assert "--install-completion" in out.stdout and "--show-completion" in out.stdout


def test_title_takes_a_unique_prefix_and_refuses_an_ambiguous_one(named, store):
    out = named("title", "xyz", "Named by prefix")
    assert out.code == 0, out.stderr
    assert out.stdout == "xyz-session: title 'Named by prefix'\n"
    assert store.session_info("xyz-session").title == "Named by prefix"
    ambiguous = named("title", "abc", "Nope")
    assert (ambiguous.code, ambiguous.stdout) == (1, "")
    assert "session id prefix 'abc' is ambiguous" in ambiguous.stderr
    assert store.session_info("abc-1").title is None and store.session_info("abc-2").title is None
