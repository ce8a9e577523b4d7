"""Fixtures of the Citus suite: one throwaway cluster (coordinator + 2 workers) per session.

The cluster (``citus_cluster``, ``citus_admin``: tests/conftest.py, where the store's contract
cases use it too) is started on first use and stopped, its directory deleted, when the session
ends.
Without Citus installed the tests skip with one line, unless ``SESSION_SQL_REQUIRE_CITUS=1``.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.schema import DropSchema

from .cluster import ENV_REQUIRE_CITUS, citus_missing

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this directory needs the cluster: mark it ``citus``."""
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.citus)


@functools.cache
def _missing() -> str | None:
    return citus_missing()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip (or fail, when it is required) every test here without Citus. From this hook,
    not a fixture, so that the skips share this location and the summary folds them into
    one line."""
    reason = _missing()
    if reason is None:
        return
    if os.environ.get(ENV_REQUIRE_CITUS) == "1":
        pytest.fail(f"{ENV_REQUIRE_CITUS}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def citus_schema(citus_admin: Engine) -> Iterator[str]:
    """A schema name of this test alone on the coordinator, dropped (everywhere) after it."""
    schema = f"t_{uuid.uuid4().hex}"
    yield schema
    with citus_admin.begin() as conn:
        conn.execute(text("SET LOCAL lock_timeout = '10s'"))
        conn.execute(DropSchema(schema, cascade=True, if_exists=True))
