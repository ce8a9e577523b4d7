"""An integration's ``from_url``: a store of its own whose catalog knows the integration's types.

A ``catalog`` given in the options is kept and gains only the types it lacks, so a store opened
with an application's catalog reads the application's events as well as the integration's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

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
