"""A first open that races another one on PostgreSQL: its look at the empty schema must not
be torn by the other's commit (SPEC §8.2)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.engine.reflection import Inspector

from session_sql import open_async_store, open_store
from session_sql._store.database import make_engine
from session_sql._store.gate import ensure_schema

# The race is PostgreSQL's: on SQLite, BEGIN IMMEDIATE serialises the whole first open.
pytestmark = pytest.mark.requires("racing_first_open")


@pytest.fixture
def rival_between_reflections(backend: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Another opener initialises the schema (and commits) between the first opener's
    reflection of table names and of view names, the widest window a READ COMMITTED look
    leaves. Yields the schemas the rival initialised."""
    rival: Engine = make_engine(backend.url)
    original = Inspector.get_view_names
    done: list[str] = []

    def get_view_names(self: Inspector, schema: str | None = None, **kw: Any) -> list[str]:
        if schema == backend.schema and not done:
            done.append(schema)
            ensure_schema(rival, schema)  # runs to its commit on a connection of its own
        return original(self, schema, **kw)

    monkeypatch.setattr(Inspector, "get_view_names", get_view_names)
    yield done
    rival.dispose()


def test_a_sync_first_open_is_not_torn_by_a_rival(
    backend: Any, engine: Engine, rival_between_reflections: list[str]
) -> None:
    ensure_schema(engine, backend.schema)
    assert rival_between_reflections == [backend.schema]
    open_store(backend.url, schema=backend.schema).close()


def test_an_async_first_open_is_not_torn_by_a_rival(
    backend: Any, rival_between_reflections: list[str]
) -> None:
    async def main() -> None:
        store = await open_async_store(backend.url, schema=backend.schema)
        await store.close()

    asyncio.run(main())
    assert rival_between_reflections == [backend.schema]
