"""The SQL store's internals: schema and gate, the writer, readers and follow.

Private: the public names are re-exported by ``session_sql``, ``session_sql.schema`` and
``session_sql.metadata``.
"""
