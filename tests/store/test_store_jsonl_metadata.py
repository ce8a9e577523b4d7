"""A JSONL export carries the whole session row, and an import restores it (SPEC §1.3, §1.4).

The header line's ``x-session-sql`` key holds the tenant, ``user_id``, ``title``, ``labels``
and ``updated_at``: export → import into a fresh store gives every column of the session row
back (on each backend and from SQLite to PostgreSQL), except ``incarnation``, new at every
creation by design. A file without the key imports as before; a bad key writes nothing; the
store's tenant, never the file's, decides where a session goes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from session_sql import InvalidHeaderError, SessionStore, open_store
from session_sql._store.schema import tables_for

from ..conftest import Backend
from .store_builders import refused, remove, say, summarize, surface_table, tool_turn, wires

T0 = 1_700_000_000_000
PG = pytest.mark.postgresql
DIRECTIONS = [
    pytest.param("sqlite", "sqlite", id="sqlite-to-sqlite"),
    pytest.param("postgresql", "postgresql", id="postgresql-to-postgresql", marks=PG),
    pytest.param("sqlite", "postgresql", id="sqlite-to-postgresql", marks=PG),
    pytest.param("postgresql", "sqlite", id="postgresql-to-sqlite", marks=PG),
]
NEW_AT_CREATION = {"incarnation", "session_key"}
"""The columns an import sets afresh by design: ``incarnation`` is a uuid4 per creation, so
that a handle on the exported session never writes to the restored one as if it were its own,
and ``session_key`` is the surrogate key the target database gives each new row. Every other
column (tenant, id, times, header, counters, digest, metadata) comes back."""


def _open(where: Backend, tenant: str, **options: Any) -> SessionStore:
    return open_store(where.url, schema=where.schema, tenant=tenant, **options)


def row_of(store: SessionStore, session_id: str) -> dict[str, Any]:
    """Every column of a session's row, as Python values."""
    s = tables_for(store.schema).sessions
    query = select(s).where(s.c.tenant == store.tenant, s.c.id == session_id)
    with store.engine.connect() as conn:
        return dict(conn.execute(query).one()._mapping)


def _lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def fill(store: SessionStore) -> list[str]:
    """Sessions with every kind of row: metadata, a compaction, a fork with a removal (and its
    own title), extra header keys, an empty session without metadata. Returns their ids."""
    s1 = store.create_session(
        "s1",
        header={"version": 0, "id": "s1", "createdAt": T0 - 1, "isSeeded": False}
        | {"cwd": "/srv/app", "extra": {"k": [1, 2.5]}},
        user_id="u-1",
        title="first ☃",
        labels={"app": "support", "adk_kind": "session"},
    )
    say(s1, "hello")
    tool_turn(s1, 1)
    a, b = say(s1, "a"), say(s1, "b")
    summarize(s1, a, b, sources=[a, b])
    fork = store.fork_session("s1", boundary=5, child_id="s1/fork")
    taken = fork.surface.nodes[1]
    remove(fork, taken, taken, [taken])
    store.update_session("s1/fork", title="the fork", labels={"copy": "yes"})
    store.create_session("empty")
    return ["s1", "s1/fork", "empty"]


@pytest.mark.parametrize(("source", "target"), DIRECTIONS)
def test_export_then_import_restores_every_column(place, tmp_path, source, target, tenant):
    clock = iter(range(T0, T0 + 100_000, 7)).__next__
    with _open(place(source), tenant, clock=clock) as old:
        ids = fill(old)
        for session_id in ids:
            old.export_jsonl(session_id, tmp_path / f"{ids.index(session_id)}.jsonl")
        with _open(place(target), tenant) as new:
            for session_id in reversed(ids):  # the child before its parent: order is free
                assert new.import_jsonl(tmp_path / f"{ids.index(session_id)}.jsonl") == session_id
            for session_id in ids:
                before, after = row_of(old, session_id), row_of(new, session_id)
                assert after["tenant"] == tenant
                kept = set(before) - NEW_AT_CREATION
                assert {c: after[c] for c in kept} == {c: before[c] for c in kept}, session_id
                assert after["incarnation"] != before["incarnation"]
                assert new.session_info(session_id) == old.session_info(session_id)
                assert wires(new.events(session_id)) == wires(old.events(session_id))
                assert surface_table(new, session_id) == surface_table(old, session_id)
                assert new.verify(session_id).ok
            # And back out: the same file.
            for session_id in ids:
                path = tmp_path / f"{ids.index(session_id)}.jsonl"
                again = tmp_path / "again.jsonl"
                new.export_jsonl(session_id, again)
                # As JSON: PostgreSQL's JSONB orders object keys its own way.
                assert _lines(again) == _lines(path)


def test_the_export_header_names_the_row_and_the_stored_header_does_not(backend, tmp_path):
    with _open(backend, "acme", clock=lambda: T0) as store:
        header = {"version": 0, "id": "s", "createdAt": T0, "isSeeded": False, "cwd": "/x"}
        store.create_session("s", header=header, user_id="u", title="t", labels={"a": "b"})
        store.export_jsonl("s", tmp_path / "s.jsonl")
        line = json.loads((tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()[0])
        assert line == {
            "version": 0,
            "id": "s",
            "createdAt": T0,
            "isSeeded": False,
            "cwd": "/x",
            "x-session-sql-events": 0,
            "x-session-sql": {
                "tenant": "acme",
                "userId": "u",
                "title": "t",
                "labels": {"a": "b"},
                "updatedAt": T0,
            },
        }
        store.delete_session("s")
        store.import_jsonl(tmp_path / "s.jsonl")
        for key in ("x-session-sql", "x-session-sql-events"):
            assert key not in store.load_session("s").header
            assert key not in row_of(store, "s")["header"]


def _write(path: Path, header: dict[str, Any]) -> Path:
    path.write_text(json.dumps(header) + "\n", encoding="utf-8")
    return path


def test_a_file_without_the_extension_imports_as_before(backend, tmp_path):
    plain = {"version": 0, "id": "s", "createdAt": 5, "isSeeded": False, "cwd": "/x"}
    with _open(backend, "", clock=lambda: T0) as store:
        store.import_jsonl(_write(tmp_path / "s.jsonl", plain))
        info = store.session_info("s")
        assert (info.user_id, info.title, info.labels) == (None, None, {})
        assert (info.created_at, info.updated_at) == (5, T0)  # updated now, as before
        assert dict(store.load_session("s").header) == plain


def test_partial_extension_fields_take_their_defaults(backend, tmp_path):
    header = {"version": 0, "id": "s", "createdAt": 5, "isSeeded": False}
    with _open(backend, "", clock=lambda: T0) as store:
        store.import_jsonl(_write(tmp_path / "s.jsonl", header | {"x-session-sql": {}}))
        info = store.session_info("s")
        assert (info.user_id, info.title, info.labels, info.updated_at) == (None, None, {}, T0)


@pytest.mark.parametrize(
    ("extension", "match"),
    [
        ("nope", "must be an object"),
        ({"userId": "u", "owner": "x"}, r"unknown keys \['owner'\]"),
        ({"userId": ""}, "x-session-sql.userId"),
        ({"title": 3}, "title"),
        ({"labels": {"bad name": "v"}}, "x-session-sql.labels"),
        ({"labels": ["a"]}, "x-session-sql.labels"),
        ({"updatedAt": -1}, "updatedAt"),
        ({"updatedAt": 1.5}, "updatedAt"),
        ({"tenant": "t" * 200}, "tenant must be a string of at most 128"),
    ],
)
def test_a_bad_extension_is_refused_and_writes_nothing(backend, tmp_path, extension, match):
    header = {"version": 0, "id": "s", "createdAt": 5, "isSeeded": False}
    path = _write(tmp_path / "s.jsonl", header | {"x-session-sql": extension})
    with _open(backend, "") as store:
        store.create_session("other")
        with refused(store, InvalidHeaderError, match=match):
            store.import_jsonl(path)


def test_the_key_is_reserved_in_a_created_header(backend):
    with _open(backend, "") as store, refused(store, InvalidHeaderError, match="reserved"):
        store.create_session("s", header={"x-session-sql": {"userId": "u"}})


def test_the_store_tenant_decides_not_the_file(place, tmp_path):
    """A file recording another tenant cannot put its session there: the store's scope wins."""
    where = place("sqlite")
    header = {"version": 0, "id": "s", "createdAt": 5, "isSeeded": False}
    path = _write(tmp_path / "s.jsonl", header | {"x-session-sql": {"tenant": "victim"}})
    with _open(where, "acme") as acme, _open(where, "victim") as victim:
        acme.import_jsonl(path)
        assert [i.id for i in acme.list_sessions()] == ["s"]
        assert acme.session_info("s").tenant == "acme"
        assert victim.list_sessions() == []
