"""An integration's ``from_url``: a store of its own whose catalog knows the integration's types.

A ``catalog`` given in the options is kept and gains only the types it lacks, so a store opened
with an application's catalog reads the application's events as well as the integration's.
``EntersReady`` is the ``async with`` of an integration object on such a store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any, Self

from session_sql import AsyncSessionStore, open_async_store
from session_sql.catalog import Catalog, default_catalog


@asynccontextmanager
async def open_with_types(
    url: str,
    catalog: Catalog | None,
    options: dict[str, Any],
    types: Iterable[str],
    items: Iterable[str] = (),
) -> AsyncIterator[AsyncSessionStore]:
    """``open_async_store(url, **options)`` on ``catalog`` (the default one when None) plus
    those of ``types`` (log-only) and ``items`` (item types) it lacks; closed on exit."""
    catalog = default_catalog() if catalog is None else catalog
    missing = [t for t in types if t not in catalog]
    catalog = catalog.extend(missing) if missing else catalog
    missing = [t for t in items if t not in catalog]
    catalog = catalog.extend(missing, items=True) if missing else catalog
    async with open_async_store(url, catalog=catalog, **options) as store:
        yield store


class EntersReady:
    """``async with`` for an integration object: entering checks its store (``_ready``),
    leaving calls ``close()`` (which closes a store ``from_url`` opened)."""

    async def _ready(self) -> AsyncSessionStore:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self._ready()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
