"""The databases a store runs on, one package each: ``sqlite`` and ``postgresql``.

Each package owns what differs for its database: its ``Backend`` (``backend.py``: engines,
error translation, the dialect's forms of statements), its append transactions
(``appending.py``), and what only it has (SQLite's quick reader; PostgreSQL's listener,
prepared statements and pool). ``base.py`` is the interface they implement. The driver
(``sqlite3``, ``psycopg``) is imported nowhere else. Nothing here is imported eagerly: a
process using only SQLite never loads PostgreSQL's package, and the quick reader loads
neither SQLAlchemy nor the rest of the store (docs/performance.md, "CLI startup").
"""
