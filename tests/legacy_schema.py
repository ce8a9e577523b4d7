"""Stores of an earlier schema version, created from that release's rendered DDL.

``tests/fixtures/schema_v2/`` and ``schema_v3/`` hold the DDL of schema versions 2 and 3 as
those releases rendered it (default schema ``session_sql``); the gate must refuse such a store
and ``migrate`` must copy from it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine

from session_sql._store.engine import write_tx

FIXTURES = Path(__file__).parent / "fixtures"


def legacy_ddl(version: int, dialect: str, schema: str) -> str:
    """The DDL of an older ``version`` (2 or 3) for ``dialect``, in ``schema``."""
    text = (FIXTURES / f"schema_v{version}" / f"{dialect}.sql").read_text(encoding="utf-8")
    if dialect == "postgresql":
        text = text.replace("SCHEMA IF NOT EXISTS session_sql;", f"SCHEMA IF NOT EXISTS {schema};")
        text = re.sub(r"\bsession_sql\.", f"{schema}.", text)
    return text


def run_ddl(engine: Engine, ddl: str) -> None:
    """Run ``;``-terminated statements (comment lines skipped) in one transaction."""
    body = "\n".join(line for line in ddl.splitlines() if not line.startswith("--"))
    with write_tx(engine) as conn:
        for statement in (s.strip() for s in body.split(";\n")):
            if statement:
                conn.exec_driver_sql(statement)


def create_legacy_store(
    engine: Engine, schema: str, version: int = 2, mutate: Callable[[str], str] = lambda s: s
) -> None:
    """Create an empty store of schema ``version`` (edited by ``mutate``) on ``engine``."""
    run_ddl(engine, mutate(legacy_ddl(version, engine.dialect.name, schema)))
