"""Fixtures of the Citus suite: one throwaway cluster (coordinator + 2 workers) per session.

The cluster is started on first use and stopped, its directory deleted, when the session ends.
Without Citus installed the tests skip with one line, unless ``SESSION_SQL_REQUIRE_CITUS=1``.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import DropSchema

from .cluster import ENV_REQUIRE_CITUS, CitusCluster, citus_missing, start_cluster

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


@pytest.fixture(scope="session")
def citus_cluster() -> Iterator[CitusCluster]:
    """A running Citus cluster: ``.url`` is the coordinator's; ``stop_worker(i)`` and
    ``start_worker(i)`` take a worker down and bring it back."""
    assert _missing() is None  # pytest_runtest_setup skipped the test otherwise
    cluster = start_cluster(workers=2)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def citus_admin(citus_cluster: CitusCluster) -> Iterator[Engine]:
    """An engine on the coordinator, for creating and dropping per-test schemas."""
    engine = create_engine(citus_cluster.url, poolclass=NullPool)
    yield engine
    engine.dispose()


@pytest.fixture
def citus_schema(citus_admin: Engine) -> Iterator[str]:
    """A schema name of this test alone on the coordinator, dropped (everywhere) after it."""
    schema = f"t_{uuid.uuid4().hex}"
    yield schema
    with citus_admin.begin() as conn:
        conn.execute(text("SET LOCAL lock_timeout = '10s'"))
        conn.execute(DropSchema(schema, cascade=True, if_exists=True))
