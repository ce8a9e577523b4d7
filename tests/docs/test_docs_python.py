"""The Python blocks of README.md and docs/*.md run, in order, in a temp dir.

The blocks of one file share a namespace (like a notebook), so a later block can use what an
earlier one made. They run against ``sqlite:///sessions.db`` in a fresh temp directory, with
warnings as errors, and what they print must show no ``FrozenDict(...)`` reprs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# docs/citus.md's blocks need a Citus cluster: tests/citus/test_docs_citus.py runs them on one.
DOCS = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "citus.md"),
]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
QUICK_START = re.compile(r"## Quick start\n(.*?)\n## ", re.S)


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", [p for p in DOCS if python_blocks(p)], ids=lambda p: p.name)
def test_python_blocks_run(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SESSION_SQL_URL", raising=False)
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem}"}
    for i, block in enumerate(python_blocks(path)):
        # dont_inherit: a block runs as a user's script would, without this module's
        # ``from __future__ import annotations`` (declarative ORM classes read annotations).
        code = compile(block, f"{path.name}[python block {i + 1}]", "exec", dont_inherit=True)
        exec(code, namespace)
    printed = capsys.readouterr().out
    # What a reader sees when running an example is plain JSON-like data, not the reprs of the
    # library's frozen containers.
    assert "FrozenDict(" not in printed and "FrozenList(" not in printed, printed


def test_docs_have_python_examples():
    documented = {p.name for p in DOCS if python_blocks(p)}
    assert {"README.md", "python.md", "concepts.md", "errors.md"} <= documented


def test_readme_quick_start_is_two_commands_in_one_block():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = QUICK_START.search(text)
    assert section, "README.md needs a '## Quick start' section"
    blocks = re.findall(r"```(\w*)\n(.*?)```", section.group(1), re.S)
    assert len(blocks) == 1
    language, body = blocks[0]
    assert language == "sh"
    commands = [line for line in body.splitlines() if line.strip()]
    assert len(commands) == 2
    install_and_demo, tests = commands
    assert install_and_demo.startswith("python3 -m venv .venv && ")
    assert install_and_demo.endswith("session-sql demo")
    assert tests.startswith("python3 -m venv .venv && ")
    assert "pip install -e '.[test]'" in tests and tests.endswith("python -m pytest")


def test_readme_links_into_docs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ("index", "concepts", "python", "sql", "operations", "cli", "errors"):
        assert f"docs/{name}.md" in text, name
        assert (ROOT / "docs" / f"{name}.md").exists(), name
