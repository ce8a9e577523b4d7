"""Fixtures of the store suite: a ``store`` on the current backend, a second, empty one, and
an empty ``archive`` directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.schema import DropSchema

from session_sql import SessionStore, open_store

from .async_facade import SyncFacade

OTHER_TENANT = "acme"
"""The non-default tenant every ``store`` test also runs with."""


def sync_only_reason(module: Any, test_name: str) -> str | None:
    """Why a test of ``module`` runs on the sync API only, or ``None`` if it runs on both.

    Every module's ``store`` tests run on both APIs unless the module says why not: a whole
    module with ``SYNC_ONLY_BECAUSE = "reason"``, single tests with ``SYNC_ONLY = {name:
    reason}`` (tests/store/test_contract_shape.py checks that each reason is given)."""
    because = getattr(module, "SYNC_ONLY_BECAUSE", None)
    if because is not None:
        return str(because)
    reason = getattr(module, "SYNC_ONLY", {}).get(test_name)
    return None if reason is None else str(reason)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every ``store`` test runs for the default tenant and for ``OTHER_TENANT``, and on the
    async API too (through ``SyncFacade``) unless its module says why not (see
    ``sync_only_reason``).

    To keep the run short, the async API runs with the non-default tenant only: the sync
    API covers the default tenant, and both APIs cover a named one. Modules that look at
    rows around the store (``DEFAULT_TENANT_ONLY = True``) run for the default tenant only.
    """
    module = metafunc.module
    chosen = {
        name
        for mark in metafunc.definition.iter_markers("parametrize")
        for name in (mark.args[0].split(",") if isinstance(mark.args[0], str) else mark.args[0])
    }
    both = (
        "api" in metafunc.fixturenames
        and "api" not in chosen  # a test that runs the APIs itself
        and sync_only_reason(module, metafunc.function.__name__) is None
    )
    if "tenant" not in metafunc.fixturenames or getattr(module, "DEFAULT_TENANT_ONLY", False):
        if both:
            metafunc.parametrize("api", ["sync", "async"])
        return
    if both:
        combos = [("sync", ""), ("sync", OTHER_TENANT), ("async", OTHER_TENANT)]
        metafunc.parametrize(
            ("api", "tenant"), combos, ids=[f"{a}-{t or 'default'}" for a, t in combos]
        )
    else:
        metafunc.parametrize("tenant", ["", OTHER_TENANT], ids=["default", OTHER_TENANT])


@pytest.fixture
def api() -> str:
    """Which API the ``store`` fixture is: "sync", or "async" (see ``pytest_generate_tests``)."""
    return "sync"


@pytest.fixture
def tenant() -> str:
    """The tenant the ``store`` fixture is opened for (see ``pytest_generate_tests``)."""
    return ""


@pytest.fixture
def store(backend, api, tenant) -> Iterator[Any]:
    """A fresh store on the current backend for ``tenant``, closed after the test."""
    opened = open_store(backend.url, schema=backend.schema, tenant=tenant)
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
    if backend.has("file"):
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


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """An empty archive directory (the SQLite store lives beside it)."""
    folder = tmp_path / "archive"
    folder.mkdir()
    return folder
