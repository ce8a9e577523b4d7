"""The code base stays ruff-clean and mypy --strict clean (the configuration is pyproject's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_check():
    done = _run("ruff", "check", "session_sql", "tests", "scripts")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format():
    """Code, and the Python examples in README.md and docs/ (ruff formats Markdown's code
    blocks), which the docs tests run."""
    done = _run("ruff", "format", "--check", "session_sql", "tests", "scripts", "README.md", "docs")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_mypy_strict():
    done = _run("mypy")
    assert done.returncode == 0, done.stdout + done.stderr
