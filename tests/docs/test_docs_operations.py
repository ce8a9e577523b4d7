"""docs/operations.md: the roles block works on PostgreSQL as described."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from session_sql import Replace, StoreError, open_store

OPERATIONS_MD = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
ROLES = re.compile(r"```sql\n-- roles: writers and analysts\n(.*?)```", re.S)
ROLE_NAMES = ("session_sql_owner", "session_sql_writer", "session_sql_analyst")
LOGINS = ("agent_service", "alice")


def _user_message(msg_id: str, text: str, kind: str = "user") -> dict:
    return {
        "id": msg_id,
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "source": {"kind": kind},
    }


@pytest.mark.postgresql
def test_roles_block_gives_writers_and_read_only_analysts(postgres_admin):
    block = ROLES.search(OPERATIONS_MD.read_text(encoding="utf-8"))
    assert block, "docs/operations.md lost its roles block"
    suffix = uuid.uuid4().hex[:10]
    # Roles are cluster-wide: give them (and the schema) names of their own for this test.
    names = {name: f"{name}_{suffix}" for name in (*ROLE_NAMES, *LOGINS)}
    schema = f"ops_{suffix}"
    sql = block.group(1)
    for name, unique in names.items():
        sql = re.sub(rf"\b{name}\b", unique, sql)
    sql = re.sub(r"\bsession_sql\b", schema, sql)
    url = make_url(postgres_admin.url)
    sql = re.sub(r"\bagents\b", str(url.database), sql)
    before_init, after_init = sql.split("-- run `session-sql init", 1)
    admin_dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(before_init)
        owner_url = url.set(username=names["session_sql_owner"], password="change me, owner")
        with open_store(owner_url.render_as_string(hide_password=False), schema=schema):
            pass  # `session-sql init` as the owner: creates the schema and its tables
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(after_init.split("\n", 1)[1])

        writer_url = url.set(username=names["agent_service"], password="change me")
        analyst_url = url.set(username=names["alice"], password="change me too")

        with open_store(writer_url.render_as_string(hide_password=False), schema=schema) as w:
            s = w.create_session()
            first = s.append("user/message", _user_message("u1", "hello"), surface_op="append")
            s.append("user/message", _user_message("u2", "again"), surface_op="append")
            s.append(
                "user/message",
                _user_message("s1", "summary", "compaction"),
                surface_op=Replace(first.seq, first.seq + 1),
                source_event_seqs=[first.seq, first.seq + 1],
            )
            doomed = w.create_session()
            w.delete_session(doomed.id)

        with open_store(analyst_url.render_as_string(hide_password=False), schema=schema) as r:
            assert [info.id for info in r.list_sessions()] == [s.id]
            assert [m["id"] for m in r.messages(s.id)] == ["s1"]
            assert r.verify(s.id).ok
            with pytest.raises(StoreError, match="42501"):  # insufficient_privilege
                r.create_session()
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            for unique in names.values():
                exists = conn.execute(
                    "SELECT 1 FROM pg_roles WHERE rolname = %s", (unique,)
                ).fetchone()
                if exists:
                    conn.execute(f'DROP OWNED BY "{unique}"')
                    conn.execute(f'DROP ROLE "{unique}"')


HOSTILE_IDS = ["a/b", "..", "../x", ".hidden", "☃ snow", "Ab", "ab"]
MOVE_BLOCK = re.compile(r"```python\n(from pathlib import Path\n.*?jsonl_file_name.*?)```", re.S)


def test_the_move_recipe_keeps_every_file_inside_its_folder(tmp_path, monkeypatch):
    block = MOVE_BLOCK.search(OPERATIONS_MD.read_text(encoding="utf-8"))
    assert block, "docs/operations.md lost its export/import recipe (using jsonl_file_name)"
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///sessions.db") as old:
        for session_id in HOSTILE_IDS:
            old.create_session(session_id).append(
                "user/message", _user_message("u", session_id), surface_op="append"
            )
    exec(compile(block.group(1), "operations.md[move recipe]", "exec"), {"__name__": "recipe"})
    assert len(list((tmp_path / "export").iterdir())) == len(HOSTILE_IDS)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "export",
        *sorted(p.name for p in tmp_path.glob("sessions*.db*")),
    ]
    with open_store("sqlite:///sessions-new.db") as new:
        assert sorted(i.id for i in new.list_sessions()) == sorted(HOSTILE_IDS)
        assert new.messages("../x")[0]["content"][0]["text"] == "../x"
