"""PostgreSQL's package: its backend, append transactions, listener, prepared statements,
connection pool queue and catalog checks (psycopg is imported only here)."""
