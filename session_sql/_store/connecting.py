"""Opening and closing a store's database: options checked, engine made, schema ensured."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from session_sql._store import statistics
from session_sql._store.context import StoreContext
from session_sql._store.database import (
    backend_for,
    database_label,
    make_engine,
    translate_errors,
)
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
    replica_urls: Sequence[str] | None = None,
    distributed: bool | None = None,
) -> StoreContext:
    """The context of a store opened on ``url`` (see ``open_store``)."""
    check_options(schema, catalog, clock, max_event_bytes)
    if distributed not in (None, True, False):
        raise ConfigurationError(
            f"distributed must be None, True or False, not {distributed!r}",
            option="distributed",
        )
    if distributed and isinstance(url, str) and not backend_for(url).distributable:
        raise ConfigurationError(
            "distributed=True needs PostgreSQL with the citus extension; an SQLite store "
            "is never distributed",
            option="distributed",
        )
    followers = followers_option(max_followers)
    tenant = check_tenant(tenant)
    standbys = _replica_urls(url, replica_urls)
    engine = make_engine(url, **engine_options)
    backend = backend_for(engine)
    target = backend.target_schema(schema)
    replicas: list[Engine] = []
    try:
        if not create:
            backend.require_existing(engine.url)
        # The gate, and whatever it creates, on the primary alone: a standby is read-only,
        # and holds what the primary holds once it has replayed it.
        spread = ensure_schema(engine, target, create=create, distributed=distributed)
        sessions = tables_for(target).sessions
        confined = spread and backend.row_security_applies(engine, sessions)
        delegated = (
            spread
            and not confined
            and backend.delegates_append(engine, tables_for(target), create=create)
        )
        with translate_errors(database=database_label(engine)):
            backend.prepare_store(engine)
        backend.scope_transactions(engine, tenant, confined)
        for standby in standbys:
            # The store's own options: each replica's pool is bounded as the primary's is.
            replica = make_engine(standby, **engine_options)
            replicas.append(replica)
            backend.scope_transactions(replica, tenant, confined)
    except (TypeError, ValueError) as exc:
        _dispose(engine, replicas)
        if isinstance(exc, SessionSQLError) or not engine_options:
            raise
        # A create_engine keyword of the wrong kind shows up only at the first connect.
        raise ConfigurationError(
            f"a store option is invalid ({', '.join(sorted(engine_options))}): {exc}",
            option="engine_options",
        ) from exc
    except StoreError as exc:
        _dispose(engine, replicas)
        clearer = backend.explain_open_failure(engine.url, exc)
        if clearer is None:
            raise
        raise clearer from exc
    except BaseException:
        _dispose(engine, replicas)
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
        replicas=replicas,
        distributed=spread,
        tenant_on_workers=confined,
        delegated=delegated,
    )


def _replica_urls(url: str, replica_urls: object) -> list[str]:
    """The standbys' URLs (``open_store``'s ``replica_urls``), checked: a sequence of URL
    strings, beside a PostgreSQL primary only."""
    if replica_urls is None:
        return []
    if isinstance(replica_urls, str) or not isinstance(replica_urls, Sequence):
        raise ConfigurationError(
            "replica_urls must be a list of postgresql:// URLs of hot standbys of the "
            f"primary (or None), not {replica_urls!r}",
            option="replica_urls",
        )
    urls = list(replica_urls)
    for i, replica in enumerate(urls):
        if not isinstance(replica, str):
            raise ConfigurationError(
                f"replica_urls[{i}] must be a postgresql:// URL string, not {replica!r}",
                option="replica_urls",
            )
    if urls and isinstance(url, str) and not backend_for(url).standbys:
        raise ConfigurationError(
            "replica_urls needs a PostgreSQL primary: an SQLite store has no standbys "
            "(open it without replica_urls)",
            option="replica_urls",
        )
    for i, replica in enumerate(urls):
        if not backend_for(replica).standbys:
            raise ConfigurationError(
                f"replica_urls[{i}] must be a postgresql:// URL (a hot standby of the "
                "primary), not an SQLite URL",
                option="replica_urls",
            )
    return urls


def _dispose(engine: Engine, replicas: Sequence[Engine]) -> None:
    engine.dispose()
    for replica in replicas:
        replica.dispose()


def close(ctx: StoreContext) -> None:
    """Release every pooled connection; afterwards every connect raises ``StoreError``."""
    statistics.closing(ctx)  # (first: it may ANALYZE what this store appended)
    for engine in (ctx.engine, *ctx.replicas):
        if not event.contains(engine, "do_connect", _refuse_closed):
            # Without this the engine would quietly open a new pool on its next use.
            event.listen(engine, "do_connect", _refuse_closed)
    ctx.close_reads()
    ctx.close_hub()
    _dispose(ctx.engine, ctx.replicas)


def _refuse_closed(*_args: Any) -> None:
    raise PermanentStoreError.closed("open_store")
