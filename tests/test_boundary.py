"""The public boundary: the CLI, the integrations, the inspector and the scripts use session_sql's
public API.

A name is private when a segment of its dotted path starts with ``_`` (``session_sql._store``,
``session_sql._gc``, ``session_sql.cli.bench._chunk``). A package may use its own private names
(``session_sql/cli/x.py`` may import ``session_sql.cli._support``); nothing else may, whether by
an import (anywhere in a file, including inside a function), a from-import of a private name,
or an attribute of an imported module. The store's private members (``store._ctx`` and the
like) are off limits too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = ("session_sql/cli", "session_sql/integrations", "session_sql/inspector", "scripts")
STORE_CLASSES = frozenset(
    {"SessionStore", "StoredSession", "AsyncSessionStore", "AsyncStoredSession"}
)
KNOWN = {
    # The ADK service appends to (and creates) a session only while its handle is at the head
    # the caller's session object saw, with the state sessions in the same transaction: the
    # async store's ``heads=`` and create-with-writes variants, not (yet) public API.
    ("session_sql/integrations/adk.py", "_append_together"),
    ("session_sql/integrations/adk.py", "_create_together"),
    # The OpenAI Agents session's ``get_items`` has the store build its items where it reads
    # the surface, from plain values, with the collector paused, so that only the items
    # cross back (docs/performance.md): a read for integrations that copy, not (yet) public.
    ("session_sql/integrations/openai_agents.py", "_surface_items"),
}


def _files() -> list[Path]:
    return sorted(p for folder in CLIENTS for p in (ROOT / folder).rglob("*.py"))


def _own_package(rel: str) -> str | None:
    """The package whose private names the file ``rel`` may use: ``session_sql.cli`` for the
    CLI's modules, ``session_sql.integrations`` for the integrations', none for a script."""
    parts = Path(rel).parts
    return ".".join(parts[:2]) if parts[0] == "session_sql" else None


def _private(dotted: str, own: str | None) -> bool:
    """Whether ``dotted`` (a session_sql path) names something private to another package."""
    parts = dotted.split(".")
    if parts[0] != "session_sql":
        return False
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            owner = ".".join(parts[:i])
            return own is None or not (owner + ".").startswith(own + ".")
    return False


def _store_private_members() -> frozenset[str]:
    """Every private method and ``self._x`` attribute of the store's public classes."""
    names: set[str] = set()
    for path in (ROOT / "session_sql/_store").glob("*.py"):
        for cls in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(cls, ast.ClassDef) and cls.name in STORE_CLASSES):
                continue
            for node in ast.walk(cls):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(node.name)
                elif (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                ):
                    names.add(node.attr)
    return frozenset(n for n in names if n.startswith("_") and not n.startswith("__"))


def _dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """``a.b.c`` as a session_sql path, when ``a`` was bound by an import of session_sql."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in bound:
        return None
    return ".".join([bound[node.id], *reversed(attrs)])


def offences(rel: str, source: str, store_members: frozenset[str]) -> Iterator[str]:
    """Each private name of session_sql that ``source`` (the file ``rel``, relative to the
    repository) reaches, as ``file:line: what``."""
    own = _own_package(rel)
    tree = ast.parse(source)
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is None:
                    top = alias.name.split(".")[0]
                    bound[top] = top
                else:
                    bound[alias.asname] = alias.name
                if _private(alias.name, own):
                    yield f"{rel}:{node.lineno}: import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = list(Path(rel).with_suffix("").parts[: -node.level])
                module = ".".join([*base, *([module] if module else [])])
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{module}.{alias.name}"
                if _private(module, own) or _private(f"{module}.{alias.name}", own):
                    yield f"{rel}:{node.lineno}: from {module} import {alias.name}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        dotted = _dotted(node, bound)
        if dotted is not None and _private(dotted, own):
            yield f"{rel}:{node.lineno}: {dotted}"
        elif (
            node.attr in store_members
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            and (rel, node.attr) not in KNOWN
        ):
            yield f"{rel}:{node.lineno}: {ast.unparse(node)} (a private member of the store)"


def test_clients_use_the_public_api_only():
    members = _store_private_members()
    assert {"_ctx", "_append_together"} <= members  # the scan finds the store's privates
    found = [
        line
        for path in _files()
        for line in offences(
            path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"), members
        )
    ]
    assert found == [], "private session_sql names used outside their package:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "where", "caught"),
    [
        ("from session_sql._store.schema import render_ddl\n", "session_sql/cli/x.py", True),
        ("def f():\n    import session_sql._gc\n", "session_sql/cli/x.py", True),
        ("from session_sql import _gc\n", "scripts/x.py", True),
        ("from session_sql.cli import bench\nbench._chunk(1, 1, 1)\n", "scripts/x.py", True),
        ("import session_sql.cli.bench\nsession_sql.cli.bench._noop\n", "scripts/x.py", True),
        ("def f(store):\n    return store._ctx.parsed\n", "scripts/x.py", True),
        ("from session_sql.cli._support import CliError\n", "scripts/x.py", True),
        ("from session_sql.cli._support import CliError\n", "session_sql/cli/x.py", False),
        ("from ._support import CliError\n", "session_sql/cli/x.py", False),
        ("from session_sql.cli import _support\n", "session_sql/integrations/x.py", True),
        ("from session_sql.schema import render_ddl\n", "scripts/x.py", False),
        ("def f(self):\n    return self._ctx\n", "session_sql/cli/x.py", False),
    ],
)
def test_the_check_catches_private_use(source, where, caught):
    """The scan, on small sources placed where a client module would be."""
    found = list(offences(where, source, frozenset({"_ctx"})))
    assert bool(found) is caught, found


def test_the_wheel_ships_no_script():
    """``scripts/`` is outside the package; nothing in the package imports from it."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'include = ["session_sql*"]' in text
    for path in (ROOT / "session_sql").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
                assert not any(n.split(".")[0] == "scripts" for n in names), path
