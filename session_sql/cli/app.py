"""The ``session-sql`` command line: a thin client of the public API.

Each command opens the store, calls the library and prints; the plumbing (exit codes, the
terminal/pipe/JSON output policy, progress bars) is in ``_support``, the human-readable
renderings in ``_render`` and ``_stats`` (the statistics themselves are
``SessionStore.stats``), and the demo session in ``demo``. The commands are in ``_browse``,
``_retention``, ``_transfer``, ``_upkeep`` and ``_inspect`` (the web inspector), on the app
of ``_root``. ``docs/cli.md`` is generated from their help texts by ``_docs``.
"""

from __future__ import annotations

from collections.abc import Sequence

import typer

# The command modules register their commands on ``app`` when imported, in this order (the
# order of ``session-sql --help`` and docs/cli.md).
from session_sql.cli import _browse, _inspect, _retention, _transfer, _upkeep  # noqa: F401
from session_sql.cli._root import app
from session_sql.cli._support import PROG

__all__ = ["app", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    command = typer.main.get_command(app)
    return int(command.main(args=argv, prog_name=PROG, standalone_mode=False))
