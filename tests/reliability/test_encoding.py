"""PostgreSQL encodings: the store always talks UTF-8, and refuses a database that is not.

A LATIN1 database cannot store an emoji and a SQL_ASCII one stores bytes unchecked: both are
refused on connect with a ``ConfigurationError`` saying how to create a UTF-8 database, and
nothing is created in them. A client encoding other than UTF-8 from the environment
(``PGCLIENTENCODING``) is overridden; one given as a store option is refused. The sync and
the async store alike. Each throwaway database has a unique name and is dropped after.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from session_sql import ConfigurationError, open_async_store, open_store
from session_sql.cli import app

from .reliability_builders import user_message

pytestmark = pytest.mark.postgresql

WIDE = "日本語 🎉 Ωμέγα"
"""Text no single-byte encoding holds."""


@pytest.fixture
def database(postgres_admin: Engine) -> Iterator[Any]:
    """``database(encoding)`` creates a throwaway database of that server encoding and
    returns its URL; every one is dropped after the test."""
    made: list[str] = []
    admin = postgres_admin.execution_options(isolation_level="AUTOCOMMIT")

    def make(encoding: str) -> str:
        name = f"x_{uuid.uuid4().hex}"
        with admin.connect() as conn:
            conn.execute(
                text(
                    f"CREATE DATABASE {name} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' "
                    "TEMPLATE template0"
                )
            )
        made.append(name)
        url = make_url(postgres_admin.url).set(database=name)
        return url.render_as_string(hide_password=False)

    yield make
    with admin.connect() as conn:
        for name in made:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def _schemas(url: str) -> list[str]:
    """The schemas of the database at ``url`` that are not PostgreSQL's own (read with
    psycopg itself: SQLAlchemy cannot initialise on a SQL_ASCII database)."""
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo) as conn:
        rows = conn.execute(
            "SELECT nspname::text FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
            "AND nspname NOT IN ('information_schema', 'public')"
        ).fetchall()
    return sorted(str(r[0]) for r in rows)


async def _async_open(url: str, **options: Any) -> None:
    async with open_async_store(url, **options) as store:
        await store.list_sessions()


@pytest.mark.parametrize("encoding", ["LATIN1", "SQL_ASCII"])
def test_a_database_that_is_not_utf8_is_refused_and_left_as_it_was(
    database: Any, encoding: str
) -> None:
    url = database(encoding)
    with pytest.raises(ConfigurationError) as raised:
        open_store(url)
    message = str(raised.value)
    assert f"server encoding {encoding}" in message, message
    assert "ENCODING 'UTF8' TEMPLATE template0" in message, message
    assert raised.value.option == "url"
    # The same with store options given (they are not to blame), and for the async store.
    with pytest.raises(ConfigurationError, match=f"server encoding {encoding}"):
        open_store(url, pool_size=2, connect_args={"application_name": "x"})
    with pytest.raises(ConfigurationError, match=f"server encoding {encoding}"):
        asyncio.run(_async_open(url))
    result = CliRunner().invoke(app, ["init", "--url", url], env={"SESSION_SQL_DEBUG": ""})
    assert result.exit_code != 0 and "server encoding" in result.stderr, result.output
    assert "Traceback" not in result.output
    assert _schemas(url) == []  # nothing was created


def _round_trip(url: str, schema: str, **options: Any) -> None:
    with open_store(url, schema=schema, **options) as store:
        handle = store.create_session("s1", title=WIDE, labels={"k": WIDE})
        handle.append("user/message", user_message(WIDE), surface_op="append")
        info = store.list_sessions()[0]
        assert (info.title, dict(info.labels)) == (WIDE, {"k": WIDE})
        assert store.messages("s1")[0]["content"][0]["text"] == WIDE
        with store.engine.connect() as conn:
            assert conn.execute(text("SHOW client_encoding")).scalar() == "UTF8"
    asyncio.run(_async_round_trip(url, schema, **options))


async def _async_round_trip(url: str, schema: str, **options: Any) -> None:
    async with open_async_store(url, schema=schema, **options) as store:
        handle = await store.create_session("s2", title=WIDE)
        await handle.append("user/message", user_message(WIDE), surface_op="append")
        assert (await store.messages("s2", last=1))[0]["content"][0]["text"] == WIDE
        assert {i.title for i in await store.list_sessions()} == {WIDE}


def test_the_store_talks_utf8_whatever_pgclientencoding_says(
    pg_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
    _round_trip(pg_backend.url, pg_backend.schema)


def test_a_client_encoding_option_must_be_utf8(pg_backend: Any) -> None:
    url, schema = pg_backend.url, pg_backend.schema
    for options in ({"connect_args": {"client_encoding": "latin1"}}, {}):
        given = url if options else f"{url}?client_encoding=LATIN1"
        with pytest.raises(ConfigurationError) as raised:
            open_store(given, schema=schema, **options)
        assert raised.value.option == "client_encoding"
        assert "UTF-8" in str(raised.value)
        with pytest.raises(ConfigurationError, match="client_encoding"):
            asyncio.run(_async_open(given, schema=schema, **options))
    assert _schemas(url).count(schema) == 0  # refused before anything was created
    _round_trip(url, schema, connect_args={"client_encoding": "utf-8"})
