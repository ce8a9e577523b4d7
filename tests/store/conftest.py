"""Fixtures of the store suite: a ``store`` on the current backend, and a second, empty one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.schema import DropSchema

from session_sql import SessionStore, open_store

from .async_facade import SyncFacade


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Modules with ``BOTH_APIS = True`` run their ``store`` tests on the async API too
    (through ``SyncFacade``), except the tests named in ``SYNC_ONLY``."""
    module = metafunc.module
    if "api" not in metafunc.fixturenames or not getattr(module, "BOTH_APIS", False):
        return
    if metafunc.function.__name__ in getattr(module, "SYNC_ONLY", ()):
        return
    metafunc.parametrize("api", ["sync", "async"])


@pytest.fixture
def api() -> str:
    """Which API the ``store`` fixture is: "sync", or "async" (see ``pytest_generate_tests``)."""
    return "sync"


@pytest.fixture
def store(backend, api) -> Iterator[Any]:
    """A fresh store on the current backend, closed after the test."""
    opened = open_store(backend.url, schema=backend.schema)
    if api == "async":
        facade = SyncFacade(backend.url, backend.schema, opened)
        yield facade
        facade.close()
        return
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
