"""PostgreSQL's vacuum and the store's size on disk (``SessionStore.vacuum``)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine, Table, text

from session_sql._store.backends.base import Vacuumed


def store_bytes(engine: Engine, tables: Sequence[Table]) -> int:
    """The tables with their indexes and TOAST."""
    preparer = engine.dialect.identifier_preparer
    names = [preparer.format_table(t) for t in tables]  # quoted, as regclass reads them
    total = text(
        "SELECT sum(pg_total_relation_size(CAST(n AS regclass))) "
        "FROM unnest(CAST(:names AS text[])) AS n"
    )
    with engine.connect() as conn:
        return int(conn.execute(total, {"names": names}).scalar_one())


def vacuum(engine: Engine, tables: Sequence[Table], *, full: bool) -> Vacuumed:
    """``VACUUM (ANALYZE)`` of the store's tables, online: the space of deleted rows becomes
    reusable; ``VACUUM FULL`` gives it back to the file system, under an exclusive lock."""
    preparer = engine.dialect.identifier_preparer
    names = ", ".join(preparer.format_table(t) for t in tables)
    options = "FULL, ANALYZE" if full else "ANALYZE"
    # VACUUM cannot run in a transaction block.
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # Identifiers quoted by the dialect; there are no values.
        conn.exec_driver_sql("VACUUM (" + options + ") " + names)
    if full:
        return Vacuumed(f"VACUUM ({options})")
    return Vacuumed(
        f"VACUUM ({options})",
        (
            "PostgreSQL keeps the space of deleted rows for the tables' new rows; to give it "
            "back to the file system run 'session-sql vacuum --full' (VACUUM FULL: it locks the "
            "tables against readers and writers while it rewrites them) or pg_repack",
        ),
    )
