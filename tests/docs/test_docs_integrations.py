"""docs/integrations.md: the SQL queries over an OpenAI Agents SDK session run on both dialects
and answer what the text says they answer."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from session_sql.integrations.openai_agents import SessionSQLSession

from .test_docs_sql import _run

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
QUERY = re.compile(r"```sql\n-- openai-agents: (?P<name>[a-z0-9-]+)\n(?P<body>.*?)```", re.S)


def queries() -> dict[str, str]:
    return {m["name"]: m["body"] for m in QUERY.finditer(DOC.read_text(encoding="utf-8"))}


def write_chat(backend: Any) -> None:
    async def main() -> None:
        async with SessionSQLSession.from_url("chat-42", backend.url, schema=backend.schema) as s:
            await s.add_items(
                [
                    {"role": "user", "content": "What's the weather in Paris?"},
                    {
                        "type": "function_call",
                        "call_id": "c1",
                        "name": "get_weather",
                        "arguments": '{"city": "Paris"}',
                    },
                    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}],
                    },
                    {"role": "user", "content": "And in Rome?"},
                ]
            )
            await s.pop_item()

    asyncio.run(main())


def test_the_sql_queries_answer_on_both_dialects(backend) -> None:
    write_chat(backend)
    found = queries()
    assert set(found) == {"history-now", "tool-calls-per-session", "what-users-asked", "turns"}
    results = {name: _run(backend, sql) for name, sql in found.items()}
    assert [row[1:] for row in results["history-now"]] == [
        ("user/message", "user"),
        ("assistant/message", "function_call"),
        ("tool/result", "function_call_output"),
        ("assistant/message", "message"),
    ]
    assert results["tool-calls-per-session"] == [("chat-42", "get_weather", 1)]
    assert results["what-users-asked"] == [
        ("chat-42", 1, "What's the weather in Paris?"),  # seq 0 is the turn/start
        ("chat-42", 8, "And in Rome?"),  # popped, still in the log
    ]
    assert results["turns"] == [
        (1, "completed", 1, 2, 1),
        (2, None, 1, 0, 0),  # "And in Rome?" was never answered
    ]
