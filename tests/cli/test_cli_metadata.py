"""Session metadata and tenants in the CLI: ``ls`` columns and filters, ``title``, ``--tenant``,
on both backends."""

from __future__ import annotations

import json

import pytest

from session_sql import open_store

ERROR = "session-sql: error: "


@pytest.fixture
def labelled(cli, store):
    """Three sessions of the default tenant with users, titles and labels."""
    a = store.create_session(
        "alpha-1", user_id="alice", title="Refund", labels={"team": "support", "tier": "gold"}
    )
    a.append("todo/write", {"items": [{"text": "a"}]})
    store.create_session("alpha-2", user_id="alice", labels={"team": "sales"})
    store.create_session("beta-1", user_id="bob", title="Hello", labels={"team": "support"})
    return cli


def _ids(out) -> list[str]:
    assert out.code == 0, out.stderr
    return sorted(row["id"] for row in json.loads(out.stdout))


def test_ls_shows_title_user_and_event_count(labelled):
    out = labelled("ls")
    assert out.code == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split()[:4] == ["ID", "TITLE", "USER", "EVENTS"]
    row = next(line.split() for line in rows if line.startswith("alpha-1 "))
    assert row[:4] == ["alpha-1", "Refund", "alice", "1"]  # the one todo/write
    empty = next(line.split() for line in rows if line.startswith("alpha-2 "))
    assert empty[:3] == ["alpha-2", "alice", "0"]  # no title: the column is blank

    listed = {row["id"]: row for row in json.loads(labelled("ls", "--json").stdout)}
    assert listed["alpha-1"]["title"] == "Refund"
    assert listed["alpha-1"]["user_id"] == "alice"
    assert listed["alpha-1"]["labels"] == {"team": "support", "tier": "gold"}
    assert listed["alpha-1"]["event_count"] == 1
    assert listed["alpha-2"]["event_count"] == 0
    assert listed["alpha-2"]["title"] is None


def test_ls_filters_by_user_and_labels(labelled):
    assert _ids(labelled("ls", "--json", "--user", "alice")) == ["alpha-1", "alpha-2"]
    assert _ids(labelled("ls", "--json", "--label", "team=support")) == ["alpha-1", "beta-1"]
    both = labelled("ls", "--json", "--label", "team=support", "--label", "tier=gold")
    assert _ids(both) == ["alpha-1"]
    assert _ids(labelled("ls", "--json", "--user", "bob", "--label", "team=sales")) == []
    assert _ids(labelled("ls", "--json", "--user", "nobody")) == []
    assert labelled("ls", "--user", "nobody").stdout == "no sessions\n"


@pytest.mark.parametrize("pair", ["team", "=support", ""])
def test_a_malformed_label_is_a_usage_error(labelled, pair):
    out = labelled("ls", "--label", pair)
    assert (out.code, out.stdout) == (2, "")
    assert len(out.error_lines) == 1
    assert out.error_lines[0].startswith(ERROR) and "NAME=VALUE" in out.error_lines[0]


def test_a_label_given_twice_with_different_values_is_a_usage_error(labelled):
    out = labelled("ls", "--label", "team=support", "--label", "team=sales")
    assert (out.code, out.stdout) == (2, "")
    assert "given twice" in out.stderr


def test_title_sets_and_clears_the_title_by_prefix(labelled, store):
    before = store.list_sessions(id_prefix="beta-1")[0]
    out = labelled("title", "beta", "Greeting the user")
    assert out.code == 0, out.stderr
    assert out.stdout == "beta-1: title 'Greeting the user'\n"
    after = store.list_sessions(id_prefix="beta-1")[0]
    assert after.title == "Greeting the user"
    assert (after.updated_at, after.head_seq) == (before.updated_at, before.head_seq)

    cleared = labelled("title", "beta-1", "")
    assert (cleared.code, cleared.stdout) == (0, "beta-1: title cleared\n")
    assert store.list_sessions(id_prefix="beta-1")[0].title is None


def test_title_errors_change_nothing(labelled, store):
    ambiguous = labelled("title", "alpha", "x")
    assert ambiguous.code == 1 and "ambiguous" in ambiguous.stderr
    missing = labelled("title", "zzz", "x")
    assert missing.code == 1 and "not found" in missing.stderr
    bad = labelled("title", "alpha-1", "bad\x00title")
    assert bad.code == 1 and bad.error_lines[0].startswith(ERROR + "title must be")
    titles = {i.id: i.title for i in store.list_sessions(id_prefix="alpha")}
    assert titles == {"alpha-1": "Refund", "alpha-2": None}


def test_tenant_b_never_sees_tenant_a(labelled, cli):
    with open_store(cli.url, schema=cli.schema, tenant="b") as b:
        b.create_session("beta-1", user_id="bob", title="B's own")
        b.create_session("gamma", user_id="alice", labels={"team": "support"})

    as_b = _ids(labelled("ls", "--json", "--tenant", "b"))
    assert as_b == ["beta-1", "gamma"]
    by_env = labelled("ls", "--json", env={"SESSION_SQL_TENANT": "b"})
    assert _ids(by_env) == ["beta-1", "gamma"]
    assert _ids(labelled("ls", "--json", "--tenant", "b", "--user", "alice")) == ["gamma"]
    assert _ids(labelled("ls", "--json")) == ["alpha-1", "alpha-2", "beta-1"]

    # A's sessions cannot be read, titled or listed by prefix as b.
    for args in (["show", "alpha-1"], ["export", "alpha"], ["title", "alpha-1", "x"]):
        out = labelled(*args, "--tenant", "b")
        assert out.code == 1 and "not found" in out.stderr, args
    # The same id names each tenant's own session.
    assert labelled("title", "beta-1", "renamed", "--tenant", "b").code == 0
    default_beta = json.loads(labelled("ls", "--json", "--user", "bob").stdout)
    assert [row["title"] for row in default_beta] == ["Hello"]
    b_rows = json.loads(labelled("ls", "--json", "--tenant", "b", "--user", "bob").stdout)
    assert [(row["title"], row["tenant"]) for row in b_rows] == [("renamed", "b")]
    exported = labelled("export", "beta-1", "--tenant", "b")
    assert exported.code == 0, exported.stderr


def test_a_bad_tenant_is_a_usage_error(labelled):
    out = labelled("ls", "--tenant", "bad\ttenant")
    assert (out.code, out.stdout) == (2, "")
    assert out.error_lines[0].startswith(ERROR + "invalid --tenant")
