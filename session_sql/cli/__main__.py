"""``python -m session_sql.cli``: the same as the ``session-sql`` console script."""

from session_sql.cli import main

raise SystemExit(main())
