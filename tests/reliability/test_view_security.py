"""Every view reads with the caller's rights (SPEC §13.0), on PostgreSQL, with real roles.

A view that runs with its owner's rights skips the row-level security of the tables it reads:
any role that may select from it reads every tenant's rows. These tests give two tenant roles
the documented grants (operations.md: ``SELECT`` on every table and view of the schema), fill
both tenants with sessions that have rows in every view, and read each view with raw SQL under
both policies the docs describe: the store's setting, and one role per tenant
(``tenant = current_user``). The schema gate refuses a store whose views do not.
"""

from __future__ import annotations

from typing import Any

import pytest

from session_sql import open_store
from session_sql.errors import SchemaMismatchError

from ..store.analytics_data import PRUNE_EVERY, TURN, append_session
from .test_privileges import text_role, writer_grants
from .test_row_security import _count as _tenants_in
from .test_row_security import _run

pytestmark = pytest.mark.postgresql

VIEWS = ("surface_messages", "tool_calls", "turns", "replacements", "source_event_seqs")
TABLES = ("sessions", "events", "surface")


def _store_with_two_tenants(
    pg_backend: Any, postgres_admin: Any, login_role: Any, *, tenant_is_role: bool = False
) -> tuple[str, dict[str, str]]:
    """An owner's store holding sessions of two tenants with rows in every view, and a LOGIN
    role per tenant with the documented grants. Returns the owner's URL and each tenant's URL
    by tenant name (``a`` and ``b``, or the roles' names when ``tenant_is_role``)."""
    schema = pg_backend.schema
    owner_url = login_role("owner")
    _run(postgres_admin, [f'CREATE SCHEMA "{schema}" AUTHORIZATION "{text_role(owner_url)}"'])
    open_store(owner_url, schema=schema).close()  # the owner creates the tables
    roles = {}
    for name in ("a", "b"):
        url = login_role(f"tenant_{name}")
        role = text_role(url)
        grant_all = f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"'
        _run(postgres_admin, [*writer_grants(schema, role), grant_all])
        roles[role if tenant_is_role else name] = url
    for tenant in roles:
        # Written as the owner, whom the policies do not restrict.
        with open_store(owner_url, schema=schema, tenant=tenant) as store:
            append_session(store, "s", TURN * PRUNE_EVERY)
    return owner_url, roles


def test_every_view_keeps_a_tenant_role_to_the_tenant_its_transaction_names(
    pg_backend, postgres_admin, login_role
) -> None:
    schema = pg_backend.schema
    owner_url, roles = _store_with_two_tenants(pg_backend, postgres_admin, login_role)
    for view in VIEWS:
        everything = _tenants_in(owner_url, schema, view, None)
        assert set(everything) == {"a", "b"}, view  # the owner sees both: there is data
        assert _tenants_in(roles["a"], schema, view, "a") == {"a": everything["a"]}, view
        assert _tenants_in(roles["b"], schema, view, "b") == {"b": everything["b"]}, view
        assert _tenants_in(roles["a"], schema, view, None) == {}, view


def test_every_view_keeps_a_per_tenant_role_to_its_own_rows(
    pg_backend, postgres_admin, login_role
) -> None:
    """operations.md's per-tenant roles: the policy is ``tenant = current_user``, and the
    setting grants nothing, so naming another tenant reads nothing of it."""
    schema = pg_backend.schema
    owner_url, roles = _store_with_two_tenants(
        pg_backend, postgres_admin, login_role, tenant_is_role=True
    )
    q = f'"{schema}"'
    statements = []
    for table in TABLES:
        statements += [
            f"CREATE POLICY tenant_is_role ON {q}.{table} "
            "USING (tenant = current_user) WITH CHECK (tenant = current_user)",
            f'ALTER POLICY tenant_isolation ON {q}.{table} TO "{text_role(owner_url)}"',
        ]
    _run(postgres_admin, statements)

    for view in VIEWS:
        everything = _tenants_in(owner_url, schema, view, None)
        assert set(everything) == set(roles), view
        for tenant, url in roles.items():
            mine = {tenant: everything[tenant]}
            (other,) = set(roles) - {tenant}
            assert _tenants_in(url, schema, view, None) == mine, view
            # Naming the other tenant in the setting reads nothing more.
            assert _tenants_in(url, schema, view, other) == mine, view


@pytest.mark.parametrize("view", VIEWS)
def test_the_gate_refuses_a_view_that_reads_with_its_owners_rights(
    pg_backend, postgres_admin, view
) -> None:
    """(SQLite has no roles: a view there reads what its reader may read.)"""
    open_store(pg_backend.url, schema=pg_backend.schema).close()
    _run(postgres_admin, [f'ALTER VIEW "{pg_backend.schema}".{view} RESET (security_invoker)'])
    with pytest.raises(SchemaMismatchError) as raised:
        open_store(pg_backend.url, schema=pg_backend.schema)
    assert f"view {view}: reads with its owner's rights" in str(raised.value)
