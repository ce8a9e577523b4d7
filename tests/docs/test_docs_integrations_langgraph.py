"""docs/integrations.md: the SQL queries over a LangGraph thread run on both dialects and
answer what the text says they answer."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from session_sql.integrations.langgraph import SessionSQLSaver

from .test_docs_sql import _run

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
QUERY = re.compile(r"```sql\n-- langgraph: (?P<name>[a-z0-9-]+)\n(?P<body>.*?)```", re.S)


def queries() -> dict[str, str]:
    return {m["name"]: m["body"] for m in QUERY.finditer(DOC.read_text(encoding="utf-8"))}


def reply(state: MessagesState) -> dict[str, Any]:
    last = state["messages"][-1]
    if last.content == "Weather in Paris?":
        call = {"id": "c1", "name": "get_weather", "args": {"city": "Paris"}}
        return {"messages": [AIMessage("", id="a1", tool_calls=[call])]}
    return {"messages": [AIMessage(f"You said: {last.content}", id="a2")]}


def write_chat(backend: Any) -> None:
    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    with SessionSQLSaver.from_url(backend.url, schema=backend.schema) as saver:
        app = graph.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "chat-7"}}
        app.invoke({"messages": [HumanMessage("Weather in Paris?", id="h1")]}, config)
        app.invoke({"messages": [HumanMessage("Thanks", id="h2")]}, config)
        app.invoke(
            {"messages": [HumanMessage("Hi", id="h3")]}, {"configurable": {"thread_id": "t2"}}
        )


def test_the_sql_queries_answer_on_both_dialects(backend) -> None:
    write_chat(backend)
    found = queries()
    assert set(found) == {"threads", "conversation", "checkpoints", "turns"}
    results = {name: _run(backend, sql) for name, sql in found.items()}
    assert [row[:2] for row in results["threads"]] == [
        ("chat-7", "langgraph:chat-7"),
        ("t2", "langgraph:t2"),
    ]
    assert [row[1:] for row in results["conversation"]] == [
        ("user/message", "Weather in Paris?"),
        ("assistant/message", "get_weather"),
        ("user/message", "Thanks"),
        ("assistant/message", "You said: Thanks"),
    ]
    checkpoints = results["checkpoints"]
    assert [(row[1], row[3], row[4]) for row in checkpoints] == [
        ("", "input", -1),
        ("", "loop", 0),
        ("", "loop", 1),
        ("", "input", 2),
        ("", "loop", 3),
        ("", "loop", 4),
    ]
    # a run per question: the first called the tool (no tool node answers it in this graph)
    assert [tuple(row) for row in results["turns"]] == [
        (1, None, 1, 1, 1, 0),
        (2, None, 1, 1, 0, 0),
    ]
