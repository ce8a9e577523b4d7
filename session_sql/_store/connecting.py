"""Opening and closing a store's database: options checked, engine made, schema ensured."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from session_sql._store.backends import (
    DEFAULT_MAX_OVERFLOW,
    DEFAULT_POOL_SIZE,
    backend_for,
    database_label,
    make_engine,
    translate_errors,
)
from session_sql._store.context import StoreContext
from session_sql._store.gate import ensure_schema
from session_sql._store.metadata import check_tenant
from session_sql._store.schema import tables_for
from session_sql.arguments import check_options, followers_option
from session_sql.catalog import Catalog, default_catalog
from session_sql.errors import ConfigurationError, PermanentStoreError, SessionSQLError, StoreError
from session_sql.session import Clock, now_ms


def connect(
    url: str,
    *,
    schema: str,
    catalog: Catalog | None,
    clock: Clock | None,
    max_event_bytes: int | None,
    create: bool,
    tenant: str | None,
    max_followers: int | None,
    engine_options: dict[str, Any],
) -> StoreContext:
    """The context of a store opened on ``url`` (see ``open_store``)."""
    check_options(schema, catalog, clock, max_event_bytes)
    followers = followers_option(
        max_followers, engine_options, DEFAULT_POOL_SIZE, DEFAULT_MAX_OVERFLOW
    )
    tenant = check_tenant(tenant)
    engine = make_engine(url, **engine_options)
    backend = backend_for(engine)
    target = backend.target_schema(schema)
    try:
        if not create:
            backend.require_existing(engine.url)
        ensure_schema(engine, target, create=create)
        with translate_errors(database=database_label(engine)):
            backend.prepare_store(engine)
        backend.scope_transactions(engine, tenant)
    except (TypeError, ValueError) as exc:
        engine.dispose()
        if isinstance(exc, SessionSQLError) or not engine_options:
            raise
        # A create_engine keyword of the wrong kind shows up only at the first connect.
        raise ConfigurationError(
            f"a store option is invalid ({', '.join(sorted(engine_options))}): {exc}",
            option="engine_options",
        ) from exc
    except StoreError as exc:
        engine.dispose()
        clearer = backend.explain_open_failure(engine, exc)
        if clearer is None:
            raise
        raise clearer from exc
    except BaseException:
        engine.dispose()
        raise
    return StoreContext(
        engine=engine,
        tables=tables_for(target),
        catalog=default_catalog() if catalog is None else catalog,
        clock=now_ms if clock is None else clock,
        max_event_bytes=max_event_bytes,
        channel=backend.notify_channel(target),
        max_followers=followers,
        tenant=tenant,
    )


def close(ctx: StoreContext) -> None:
    """Release every pooled connection; afterwards every connect raises ``StoreError``."""
    engine: Engine = ctx.engine
    if not event.contains(engine, "do_connect", _refuse_closed):
        # Without this the engine would quietly open a new pool on its next use.
        event.listen(engine, "do_connect", _refuse_closed)
    ctx.idle.close()
    ctx.close_hub()
    engine.dispose()


def _refuse_closed(*_args: Any) -> None:
    raise PermanentStoreError.closed("open_store")
