"""Fixtures of the store suite: a ``store`` on the current backend, and a second, empty one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.schema import DropSchema

from session_sql import SessionStore, open_store


@pytest.fixture
def store(backend) -> Iterator[SessionStore]:
    """A fresh store on the current backend, closed after the test."""
    opened = open_store(backend.url, schema=backend.schema)
    yield opened
    opened.close()


@pytest.fixture
def other_store(backend, tmp_path, request) -> Iterator[SessionStore]:
    """Another fresh store on the same backend: a second file, or a second schema."""
    if backend.name == "sqlite":
        opened = open_store(f"sqlite:///{tmp_path / 'other.db'}")
        yield opened
        opened.close()
        return
    admin = request.getfixturevalue("postgres_admin")
    schema = f"{backend.schema}_b"
    opened = open_store(backend.url, schema=schema)
    yield opened
    opened.close()
    with admin.begin() as conn:
        conn.execute(text("SET LOCAL lock_timeout = '10s'"))
        conn.execute(DropSchema(schema, cascade=True, if_exists=True))
