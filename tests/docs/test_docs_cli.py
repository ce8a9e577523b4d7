"""docs/cli.md is the generated help text, every command is in it, and every help ends with an
example."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from session_sql.cli import app
from session_sql.cli._docs import command_names, main, render_cli_docs

ROOT = Path(__file__).resolve().parents[2]
CLI_MD = ROOT / "docs" / "cli.md"
COMMANDS = [
    "demo",
    "init",
    "ls",
    "title",
    "show",
    "tail",
    "serve",
    "view",
    "prune",
    "import",
    "export",
    "migrate",
    "verify",
    "repair",
    "delete",
    "vacuum",
    "stats",
    "schema",
    "bench",
]


def test_cli_md_is_the_generated_reference():
    assert CLI_MD.read_text(encoding="utf-8") == render_cli_docs(), (
        "docs/cli.md is stale: run python -m session_sql.cli._docs --write docs/cli.md"
    )


def test_check_mode(tmp_path, capsys):
    assert main(["--check", str(CLI_MD)]) == 0
    stale = tmp_path / "cli.md"
    stale.write_text("old\n", encoding="utf-8")
    assert main(["--check", str(stale)]) == 1
    assert "is stale" in capsys.readouterr().err
    assert main(["--write", str(stale)]) == 0
    assert main(["--check", str(stale)]) == 0
    assert main(["--nonsense"]) == 2


def test_the_module_prints_the_reference():
    done = subprocess.run(
        [sys.executable, "-m", "session_sql.cli._docs"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == render_cli_docs()


def test_every_command_is_documented():
    assert command_names() == COMMANDS
    text = CLI_MD.read_text(encoding="utf-8")
    for name in COMMANDS:
        assert f"\n## `session-sql {name}`\n" in text, name
        assert f"Usage: session-sql {name} " in text, name


@pytest.mark.parametrize("command", [[], *([name] for name in COMMANDS)])
def test_every_help_ends_with_an_example(command):
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    example = lines.index("  Example:")
    assert example >= len(lines) - 3
    assert all(line.startswith("    session-sql") for line in lines[example + 1 :])
