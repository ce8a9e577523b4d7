"""The ``session-sql`` command line: commands, rendering, the demo and the benchmark.

Everything here is a client of the public API; ``main`` is the console-script entry point.
"""

from session_sql.cli.app import app, main

__all__ = ["app", "main"]
