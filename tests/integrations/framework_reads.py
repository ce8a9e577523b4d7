"""How a framework's session is read back like a native one: the CLI's ``show``, ``tail`` and
``stats``, and the SQL views, on the test's backend."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from session_sql.cli import app

from ..docs.test_docs_sql import _run


def cli(backend: Any, *args: str) -> str:
    """What ``session-sql ARGS`` prints (it must succeed)."""
    env = {"SESSION_SQL_URL": backend.url, "SESSION_SQL_SCHEMA": backend.schema}
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


TOOL_CALLS = (
    "SELECT tool, call_id, arguments, turn, result_seq IS NOT NULL, is_error FROM tool_calls"
)
TURNS = (
    "SELECT turn, reason, user_messages, assistant_messages, tool_calls, tool_results,"
    " end_seq IS NOT NULL FROM turns"
)


def tool_calls(backend: Any, session_id: str) -> list[tuple[Any, ...]]:
    """``(tool, call_id, arguments, turn, answered, is_error)`` of the session's calls."""
    rows = _run(backend, f"{TOOL_CALLS} WHERE session_id = '{session_id}' ORDER BY call_seq")
    return [(*row[:4], bool(row[4]), bool(row[5])) for row in rows]


def turns(backend: Any, session_id: str) -> list[tuple[Any, ...]]:
    """``(turn, reason, users, assistants, calls, results, ended)`` of the session's turns."""
    rows = _run(backend, f"{TURNS} WHERE session_id = '{session_id}' ORDER BY start_seq")
    return [(*row[:6], bool(row[6])) for row in rows]
