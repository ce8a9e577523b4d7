"""``delete``: an operator's action that asks first, and touches nothing but what it names."""

from __future__ import annotations

import io
import json

import pytest
from sqlalchemy import select

from session_sql import SessionNotFoundError
from session_sql._store.schema import tables_for

ERROR = "session-sql: error: "


def _state(store) -> dict[str, object]:
    """Everything the store holds, row by row (to show that a delete touched nothing else)."""
    tables = tables_for(store.schema)
    state: dict[str, object] = {}
    with store.engine.connect() as conn:
        for table in (tables.sessions, tables.events, tables.surface, tables.meta):
            rows = conn.execute(select(table).order_by(*table.primary_key.columns)).all()
            state[table.name] = [dict(row._mapping) for row in rows]
    return state


def _without(state: dict[str, object], session_id: str) -> dict[str, object]:
    """``state`` less the rows of ``session_id``: its ``sessions`` row and the ``events`` and
    ``surface`` rows that carry its ``session_key``."""
    sessions = state["sessions"]
    assert isinstance(sessions, list)
    keys = {row["session_key"] for row in sessions if row["id"] == session_id}
    assert keys, f"no session {session_id!r} in the state"
    kept: dict[str, object] = {}
    for name, rows in state.items():
        assert isinstance(rows, list)
        kept[name] = [row for row in rows if row.get("session_key") not in keys]
    return kept


def _exported(store, session_id: str) -> str:
    out = io.StringIO()
    store.export_jsonl(session_id, out)
    return out.getvalue()


def test_delete_removes_one_session_and_changes_nothing_else(cli, demo, store):
    other = store.create_session("bystander")
    other.append("todo/write", {"items": [{"text": "stay"}]})
    before = _state(store)
    fork_export = _exported(store, demo.fork_id)

    events = store.head_seq(demo.session_id) + 1
    out = cli("delete", "--yes", demo.session_id)
    assert out.code == 0, out.stderr
    assert out.stdout == f"deleted {demo.session_id} ({events} events)\n"

    with pytest.raises(SessionNotFoundError):
        store.head_seq(demo.session_id)
    assert _state(store) == _without(before, demo.session_id)
    # The fork keeps its own copy of what it inherited: it still reads, exports and verifies.
    assert _exported(store, demo.fork_id) == fork_export
    assert store.verify(demo.fork_id).ok
    assert cli("show", demo.session_id).code == 1


def test_delete_asks_and_a_no_or_no_answer_deletes_nothing(cli, demo, store):
    before = _state(store)
    for answer in ("n\n", "", "maybe\n"):
        out = cli("delete", demo.session_id[:8], input=answer)
        assert out.code == 1, answer
        assert f"  {demo.session_id}  " in out.stderr  # what it would delete, by full id
        assert "fork(s) keep their copies" in out.stderr
        assert out.error_lines[-1] == ERROR + "nothing deleted"
        assert _state(store) == before


def test_delete_asks_once_for_several_and_yes_deletes_them(cli, demo, store):
    out = cli("delete", demo.session_id, demo.fork_id[:10], "--json", input="y\n")
    assert out.code == 0, out.stderr
    assert "Delete these 2 sessions? [y/N]" in out.stderr
    # (CliRunner echoes the typed answer into stdout, as a terminal would show it.)
    printed = out.stdout.removeprefix(" y\n")
    assert [d["session_id"] for d in json.loads(printed)] == [demo.session_id, demo.fork_id]
    assert store.list_sessions() == []


def test_delete_yes_refuses_a_prefix(cli, demo, store):
    before = _state(store)
    out = cli("delete", "--yes", demo.session_id[:8])
    assert out.code == 2
    assert out.error_lines == [
        ERROR + f"{demo.session_id[:8]!r} is a prefix of {demo.session_id}: with --yes, "
        "give the full id"
    ]
    assert _state(store) == before


def test_delete_deletes_nothing_unless_every_id_names_a_session(cli, demo, store):
    before = _state(store)
    out = cli("delete", "--yes", demo.session_id, "no-such-session")
    assert out.code == 1
    assert out.error_lines[0].startswith(ERROR + "session 'no-such-session' not found")
    assert _state(store) == before
