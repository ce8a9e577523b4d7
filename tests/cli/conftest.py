"""Fixtures of the CLI suite: run ``session-sql`` in process or through the real entry point.

``cli`` runs a command in process with typer's ``CliRunner`` (fast; same exit codes and error
lines as the console script, since both go through ``GuardedGroup.main``). ``script`` runs the
installed console script (or ``python -m session_sql.cli``) in a subprocess. Both point the
command at the current backend through ``SESSION_SQL_URL`` / ``SESSION_SQL_SCHEMA``.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.schema import DropSchema
from typer.testing import CliRunner

from session_sql import SessionStore, open_store
from session_sql.cli import app
from session_sql.cli.demo import DemoRun, record_demo

from ..conftest import CAPABILITIES

SCRIPT = Path(sys.executable).with_name("session-sql")


@dataclass
class Outcome:
    """What one command run produced."""

    code: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


class Cli:
    """Runs ``session-sql`` commands against one store location."""

    def __init__(self, url: str, schema: str, cwd: Path) -> None:
        self.url = url
        self.schema = schema
        self.cwd = cwd
        self.env = {"SESSION_SQL_URL": url, "SESSION_SQL_SCHEMA": schema}

    def __call__(
        self, *args: str, env: dict[str, str] | None = None, input: str | None = None
    ) -> Outcome:
        """Run in process (``CliRunner``); ``input`` is what stdin holds."""
        result = CliRunner().invoke(app, list(args), env={**self.env, **(env or {})}, input=input)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return Outcome(result.exit_code, result.stdout, result.stderr)

    def script(
        self, *args: str, module: bool = False, env: dict[str, str] | None = None, **kw: Any
    ) -> Outcome:
        """Run the console script (``module=True``: ``python -m session_sql.cli``)."""
        command = [sys.executable, "-m", "session_sql.cli"] if module else [str(SCRIPT)]
        kw.setdefault("capture_output", True)
        done = subprocess.run(
            [*command, *args],
            text=True,
            cwd=self.cwd,
            env={**os.environ, **self.env, **(env or {})},
            timeout=120,
            check=False,
            **kw,
        )
        return Outcome(done.returncode, done.stdout or "", done.stderr or "")

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(SCRIPT), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.cwd,
            env={**os.environ, **self.env},
        )

    def on_a_terminal(self, *args: str) -> tuple[subprocess.CompletedProcess[bytes], bytes]:
        """Run the console script with stderr on a pseudo-terminal 100 columns wide: the run
        (stdout captured) and everything drawn on the terminal."""
        controller, terminal = pty.openpty()
        try:
            done = subprocess.run(
                [str(SCRIPT), *args],
                stdout=subprocess.PIPE,
                stderr=terminal,
                cwd=self.cwd,
                env={**os.environ, **self.env, "COLUMNS": "100"},
                timeout=120,
                check=False,
            )
            os.close(terminal)
            drawn = b""
            while True:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                drawn += chunk
        finally:
            os.close(controller)
        return done, drawn

    def store(self) -> SessionStore:
        return open_store(self.url, schema=self.schema)


@pytest.fixture
def cli(backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """A CLI runner on the current backend's (empty) store; the cwd is a temp directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SESSION_SQL_DEBUG", raising=False)
    return Cli(backend.url, backend.schema, tmp_path)


@pytest.fixture
def demo(cli: Cli) -> DemoRun:
    """The demo session (and its fork) recorded in the CLI's store."""
    return record_demo(cli.url, schema=cli.schema)


@pytest.fixture
def store(cli: Cli) -> Iterator[SessionStore]:
    opened = cli.store()
    yield opened
    opened.close()


@pytest.fixture
def sqlite_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """A CLI runner on a temp SQLite file, for tests that need no second backend."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SESSION_SQL_DEBUG", raising=False)
    return Cli(f"sqlite:///{tmp_path / 'sessions.db'}", "session_sql", tmp_path)


@dataclass
class Shared:
    """A demo store shared by the read-only tests of a module (recording it takes a second)."""

    cli: Cli
    demo: DemoRun
    store: SessionStore


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgresql),
    ],
)
def shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shared]:
    """The demo, recorded once per module and backend. Tests using it must not write."""
    base = tmp_path_factory.mktemp("shared")
    admin = None
    if "file" in CAPABILITIES[request.param]:
        url, schema = f"sqlite:///{base / 'sessions.db'}", "session_sql"
    else:
        admin = request.getfixturevalue("postgres_admin")
        url, schema = admin.url.render_as_string(hide_password=False), f"t_{uuid.uuid4().hex}"
    run = record_demo(url, schema=schema)
    cli = Cli(url, schema, base)
    store = cli.store()
    yield Shared(cli, run, store)
    store.close()
    if admin is not None:
        with admin.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '10s'"))
            conn.execute(DropSchema(schema, cascade=True, if_exists=True))
