"""docs/integrations.md: the SQL queries over Claude Agent SDK transcripts run on both dialects
and answer what the text says they answer."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")

from session_sql.integrations.claude_agent_sdk import SessionSQLSessionStore

from ..integrations.claude_transcript import (
    SESSION_ID,
    SUBPATH,
    main_entries,
    subagent_entries,
)
from .test_docs_sql import _run

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
QUERY = re.compile(r"```sql\n-- claude-agent-sdk: (?P<name>[a-z0-9-]+)\n(?P<body>.*?)```", re.S)
PROJECT = "-home-dev-proj"


def queries() -> dict[str, str]:
    return {m["name"]: m["body"] for m in QUERY.finditer(DOC.read_text(encoding="utf-8"))}


def write_transcripts(backend: Any) -> None:
    async def main() -> None:
        async with SessionSQLSessionStore.from_url(backend.url, schema=backend.schema) as store:
            key = {"project_key": PROJECT, "session_id": SESSION_ID}
            await store.append(key, main_entries())  # type: ignore[arg-type]
            await store.append({**key, "subpath": SUBPATH}, subagent_entries())  # type: ignore[arg-type]
            other = {"project_key": "-elsewhere", "session_id": "s2"}
            await store.append(other, subagent_entries())  # type: ignore[arg-type]

    asyncio.run(main())


def test_the_sql_queries_answer_on_both_dialects(backend) -> None:
    write_transcripts(backend)
    found = queries()
    assert set(found) == {"transcripts", "tokens-by-model", "tool-calls"}
    results = {name: _run(backend, sql) for name, sql in found.items()}
    assert results["transcripts"] == [(SESSION_ID, "Fix slugify", 1)]
    # The main transcript's four API messages and the subagent's one, each counted once.
    assert results["tokens-by-model"] == [
        ("claude-sonnet-4-5-20250929", 5 * 1200, 61 + 12 + 44 + 15 + 7)
    ]
    assert results["tool-calls"] == [("Bash", 1), ("Grep", 1), ("Read", 1)]


def test_the_example_runs_alone_and_prints_what_the_text_says(tmp_path, monkeypatch, capsys):
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Claude Agent SDK") :].split("\n## ", 1)[0]
    [block] = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "integrations.md[Claude example]", "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["['user', 'assistant']", "Fix slugify, please. ['user', 'assistant']"]
    assert "prints `['user', 'assistant']` and `Fix slugify, please. ['user', 'assistant']`" in (
        section
    )
