"""PostgreSQL: what a new engine's dialect learns at its first connection is what it learned
by asking the server itself, though the store's connect statement answered it
(``backends.postgresql.first_connect``), on the sync and the async driver, whatever the
connection's settings."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import create_engine, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from session_sql._store.database import make_engine

pytestmark = pytest.mark.postgresql

LEARNED = (
    "server_version_info",
    "default_schema_name",
    "default_isolation_level",
    "_backslash_escapes",
    "supports_identity_columns",
    "_supports_jsonb_subscripting",
)
"""What the dialect's first-connect initialisation sets from the server's answers."""

SETTINGS = {
    "as the server has them": "",
    "changed for the connection": (
        "-c default_transaction_isolation=serializable -c search_path=pg_catalog "
        "-c standard_conforming_strings=off"
    ),
}


def _learned(dialect: Any) -> dict[str, Any]:
    return {name: getattr(dialect, name) for name in LEARNED}


def _url(server: str, options: str) -> str:
    url = make_url(server).set(drivername="postgresql+psycopg")
    if options:
        url = url.update_query_dict({"options": options})
    return url.render_as_string(hide_password=False)


@pytest.mark.parametrize("settings", list(SETTINGS))
def test_the_sync_dialect_learns_what_it_would_ask(postgres_server: str, settings: str):
    url = _url(postgres_server, SETTINGS[settings])
    ours, asked = make_engine(url), create_engine(url)
    try:
        for engine in (ours, asked):
            with engine.connect():
                pass
        assert _learned(ours.dialect) == _learned(asked.dialect)
    finally:
        ours.dispose()
        asked.dispose()


@pytest.mark.parametrize("settings", list(SETTINGS))
def test_the_async_dialect_learns_what_it_would_ask(postgres_server: str, settings: str):
    url = _url(postgres_server, SETTINGS[settings])

    async def learned() -> tuple[dict[str, Any], dict[str, Any]]:
        ours = make_engine(url, async_driver=True)
        asked = create_async_engine(url)
        try:
            async with AsyncEngine(ours).connect():
                pass
            async with asked.connect():
                pass
            return _learned(ours.dialect), _learned(asked.sync_engine.dialect)
        finally:
            await AsyncEngine(ours).dispose()
            await asked.dispose()

    mine, theirs = asyncio.run(learned())
    assert mine == theirs
    assert theirs["default_isolation_level"] == (
        "SERIALIZABLE" if SETTINGS[settings] else "READ COMMITTED"
    )
