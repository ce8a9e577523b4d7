"""docs/citus.md's recipes on a distributed store: isolating one session into a shard of its
own, and a role under row-level security naming its tenant with ``SET LOCAL``."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from session_sql import open_store

from ..builders import say, tool_turn
from .cluster import CitusCluster

CITUS_MD = Path(__file__).resolve().parents[2] / "docs" / "citus.md"


def _block(first_line: str) -> list[str]:
    """The statements of the SQL block of docs/citus.md that starts with ``first_line``."""
    found = re.search(rf"```sql\n({re.escape(first_line)}\n.*?)```", CITUS_MD.read_text(), re.S)
    assert found, f"docs/citus.md lost its block {first_line!r}"
    sql = "\n".join(line for line in found.group(1).splitlines() if not line.startswith("--"))
    return [statement.strip() for statement in sql.split(";") if statement.strip()]


def test_isolating_a_session_gives_it_a_shard_of_its_own(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema, tenant="acme", distributed=True) as s:
        handle = s.create_session("the-session")
        tool_turn(handle, 1)
        others = [s.create_session(f"other-{i}") for i in range(3)]
        for other in others:
            say(other, "hi")
    find, isolate = _block("-- isolate one session: its session_key, then a shard of its own")
    find = find.replace("session_sql.", f"{citus_schema}.")
    with citus_admin.begin() as conn:
        key = conn.execute(text(find)).scalar_one()
    isolate = isolate.replace("session_sql.", f"{citus_schema}.").replace("1234", str(key))
    with citus_admin.begin() as conn:
        conn.execute(text(isolate))
    with citus_admin.connect() as conn:
        ranges = conn.execute(
            text(
                "SELECT logicalrelid::text, shardminvalue = shardmaxvalue FROM pg_dist_shard"
                " WHERE shardid = get_shard_id_for_distribution_column("
                "CAST(:t AS regclass), CAST(:k AS bigint))"
                " OR (logicalrelid::text LIKE :s AND shardid IN (SELECT shardid FROM"
                " pg_dist_shard WHERE shardminvalue = shardmaxvalue))"
            ),
            {"t": f"{citus_schema}.sessions", "k": key, "s": f"{citus_schema}.%"},
        ).all()
    alone = {table.split(".")[-1] for table, single in ranges if single}
    assert alone == {"sessions", "events", "surface"}
    with open_store(citus_cluster.url, schema=citus_schema, tenant="acme") as s:
        handle = s.open_session("the-session")
        say(handle, "after")
        assert s.verify("the-session").ok
        assert s.messages("the-session", last=1) == handle.messages(last=1)
        assert all(s.verify(o.id).ok for o in others)


def test_a_role_under_the_policy_names_its_tenant_with_set_local(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema, tenant="acme", distributed=True) as s:
        say(s.create_session("a1"), "for acme")
    with open_store(citus_cluster.url, schema=citus_schema, tenant="other") as s:
        say(s.create_session("o1"), "for other")
    role = f"reader_{uuid.uuid4().hex[:8]}"
    with citus_admin.begin() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN"))
    with citus_admin.begin() as conn:
        conn.execute(text(f"GRANT USAGE ON SCHEMA {citus_schema} TO {role}"))
        conn.execute(text(f"GRANT SELECT ON ALL TABLES IN SCHEMA {citus_schema} TO {role}"))
    url = make_url(citus_cluster.url).set(username=role)
    reader = create_engine(url, poolclass=NullPool)
    count = text(f"SELECT count(*) FROM {citus_schema}.session_ids")
    try:
        with reader.begin() as conn:
            for statement in _block("SET LOCAL citus.propagate_set_commands = 'local';"):
                conn.execute(text(statement))
            assert conn.execute(count).scalar_one() == 1
        with reader.begin() as conn:  # set_config() does not reach the workers
            conn.execute(text("SELECT set_config('session_sql.tenant', 'acme', true)"))
            assert conn.execute(count).scalar_one() == 0
    finally:
        reader.dispose()
        with citus_admin.begin() as conn:
            conn.execute(text(f"DROP OWNED BY {role}"))
        with citus_admin.begin() as conn:
            conn.execute(text(f"DROP ROLE {role}"))


def test_the_python_blocks_run_on_a_coordinator(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    """The doc's Python blocks (which tests/docs cannot run: they need a cluster), each
    with the coordinator's URL for the doc's and a schema of this test's."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "citus.md").read_text("utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", doc, re.S | re.M)
    assert blocks
    namespace: dict[str, object] = {"__name__": "docs_citus"}
    for block in blocks:
        code = block.replace(
            '"postgresql://owner@coordinator/agents"',
            f"{citus_cluster.url!r}, schema={citus_schema!r}",
        )
        assert code != block or "open_store(" not in block
        exec(compile(code, "docs/citus.md", "exec", dont_inherit=True), namespace)
    store = namespace["store"]
    assert store.distributed is True  # type: ignore[attr-defined]
    store.close()  # type: ignore[attr-defined]
