"""docs/integrations.md: the pydantic-ai example runs as written, and the SQL queries over
pydantic-ai runs run on both dialects and answer what the text says they answer."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai_harness")

from session_sql import open_store
from session_sql.integrations.pydantic_ai import SessionSQLStepStore

from ..integrations.pai_agent import Script, agent
from .test_docs_sql import _run

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
QUERY = re.compile(r"```sql\n-- pydantic-ai: (?P<name>[a-z0-9-]+)\n(?P<body>.*?)```", re.S)


def section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text[text.index("## pydantic-ai") :].split("\n## ", 1)[0]


def test_the_pydantic_ai_example_runs_as_written(tmp_path, monkeypatch, capsys):
    [block] = re.findall(r"^```python\n(.*?)^```", section(), re.S | re.M)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "integrations.md[pydantic-ai example]", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.splitlines() == [
        "It is sunny in Paris.",
        "8",
        "['user', 'assistant', 'user', 'assistant']",
    ]
    with open_store("sqlite:///sessions.db") as store:
        runs = store.list_sessions(labels={"pydantic_ai": "run"})
        assert len(runs) == 2
        assert all(store.verify(info.id).ok for info in runs)


def test_the_sql_queries_answer_on_both_dialects(backend) -> None:
    async def main() -> None:
        async with SessionSQLStepStore.from_url(backend.url, schema=backend.schema) as steps:
            await agent(steps, Script(), run_id="run-7").run(
                "weather in Paris, Rome", conversation_id="chat-7"
            )
            await agent(steps, Script(), run_id="run-8").run(
                "weather in Oslo", conversation_id="c8"
            )

    asyncio.run(main())
    found = {m["name"]: m["body"] for m in QUERY.finditer(section())}
    assert set(found) == {"runs", "steps"}
    assert [tuple(r) for r in _run(backend, found["runs"])] == [
        ("run-7", "chat-7", 2),
        ("run-8", "c8", 1),
    ]
    steps = [tuple(r[1:]) for r in _run(backend, found["steps"])]
    assert steps[0] == ("run_started", 0, None)
    assert steps.count(("tool_call_completed", 1, "get_weather")) == 2
    assert steps[-1] == ("run_completed", 0, None)
