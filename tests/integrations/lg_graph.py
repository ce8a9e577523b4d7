"""A LangGraph graph for the end-to-end tests: a scripted model, a tool node, a human approval.

The model is a function that answers from a script (no network); the tool node is LangGraph's
``ToolNode``; ``approve`` asks a human through ``interrupt()``. ``run_sync`` and ``run_async``
drive one script against any checkpointer and return what a user would see, normalised (no
random ids), so that two savers running it can be compared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    approved: str


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def model(state: State) -> dict[str, Any]:
    """A scripted model: a tool call for a question, then an answer from the tool's result."""
    last = state["messages"][-1]
    n = len(state["messages"])
    if last.type == "human":
        call = {"id": f"call_{n}", "name": "get_weather", "args": {"city": "Paris"}}
        reply = AIMessage(
            "",
            id=f"ai_{n}",
            tool_calls=[call],
            usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
            response_metadata={"model_name": "scripted-1", "model_provider": "fake"},
        )
    else:
        reply = AIMessage(
            f"It is {last.content}.",
            id=f"ai_{n}",
            usage_metadata={"input_tokens": 20, "output_tokens": 7, "total_tokens": 27},
            response_metadata={"model_name": "scripted-1", "model_provider": "fake"},
        )
    return {"messages": [reply]}


def approve(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "send the answer?"})
    return {"approved": answer}


def after_model(state: State) -> str:
    return "tools" if tools_condition(state) == "tools" else "approve"


def build(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    graph = StateGraph(State)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([get_weather]))
    graph.add_node("approve", approve)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", after_model, ["tools", "approve"])
    graph.add_edge("tools", "model")
    graph.add_edge("approve", END)
    return graph.compile(checkpointer=checkpointer)


def build_chat(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    """The model and the tool node without the approval: each question is one run that calls
    the tool and answers."""
    graph = StateGraph(State)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([get_weather]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)


def normal(values: dict[str, Any]) -> dict[str, Any]:
    """State values without LangGraph's random message ids."""
    out = dict(values)
    if "messages" in out:
        out["messages"] = [
            (m.type, m.content, [(c["name"], c["args"]) for c in getattr(m, "tool_calls", [])])
            for m in out["messages"]
        ]
    return out


def snapshot(state: Any) -> dict[str, Any]:
    return {
        "values": normal(state.values),
        "next": state.next,
        "step": state.metadata.get("step") if state.metadata else None,
        "source": state.metadata.get("source") if state.metadata else None,
        "interrupts": [i.value for i in state.interrupts],
    }


QUESTION = "What is the weather in Paris?"
ROME = AIMessage(
    "",
    id="ai_1",  # replaces the model's first call (add_messages matches ids): ask about Rome
    tool_calls=[{"id": "call_rome", "name": "get_weather", "args": {"city": "Rome"}}],
    response_metadata={"model_name": "scripted-1", "model_provider": "fake"},
)


def pause(url: str, schema: str, thread: str) -> dict[str, Any]:
    """In a process of its own: run the question to the interrupt (sync saver)."""
    from session_sql.integrations.langgraph import SessionSQLSaver

    cfg: Any = {"configurable": {"thread_id": thread}}
    with SessionSQLSaver.from_url(url, schema=schema) as saver:
        graph = build(saver)
        graph.invoke({"messages": [HumanMessage(QUESTION, id="h1")]}, cfg)
        return snapshot(graph.get_state(cfg))


def resume(url: str, schema: str, thread: str) -> dict[str, Any]:
    """In another process: resume the interrupted thread with ``Command(resume=...)``."""
    from session_sql.integrations.langgraph import SessionSQLSaver

    cfg: Any = {"configurable": {"thread_id": thread}}
    with SessionSQLSaver.from_url(url, schema=schema) as saver:
        return normal(build(saver).invoke(Command(resume="yes"), cfg))


def run_sync(make: Callable[[], BaseCheckpointSaver[Any]], thread: str) -> dict[str, Any]:
    """The script, sync: run to the interrupt, resume with a fresh saver, time-travel."""
    cfg: Any = {"configurable": {"thread_id": thread}}
    record: dict[str, Any] = {}
    graph = build(make())
    graph.invoke({"messages": [HumanMessage(QUESTION, id="h1")]}, cfg)
    record["paused"] = snapshot(graph.get_state(cfg))
    graph = build(make())  # a fresh saver: nothing but the store carries the thread
    record["resumed"] = normal(graph.invoke(Command(resume="yes"), cfg))
    history = list(graph.get_state_history(cfg))
    record["history"] = [snapshot(s) for s in history]
    old = next(s for s in history if s.next == ("tools",))
    fork = graph.update_state(old.config, {"messages": [ROME]})
    record["fork_state"] = snapshot(graph.get_state(fork))
    graph.invoke(None, fork)
    record["fork_paused"] = snapshot(graph.get_state(cfg))
    record["fork_done"] = normal(graph.invoke(Command(resume="no"), cfg))
    record["history_after"] = [snapshot(s) for s in graph.get_state_history(cfg)]
    return record


async def run_async(make: Callable[[], BaseCheckpointSaver[Any]], thread: str) -> dict[str, Any]:
    """``run_sync``'s script through the async API."""
    cfg: Any = {"configurable": {"thread_id": thread}}
    record: dict[str, Any] = {}
    graph = build(make())
    await graph.ainvoke({"messages": [HumanMessage(QUESTION, id="h1")]}, cfg)
    record["paused"] = snapshot(await graph.aget_state(cfg))
    graph = build(make())
    record["resumed"] = normal(await graph.ainvoke(Command(resume="yes"), cfg))
    history = [s async for s in graph.aget_state_history(cfg)]
    record["history"] = [snapshot(s) for s in history]
    old = next(s for s in history if s.next == ("tools",))
    fork = await graph.aupdate_state(old.config, {"messages": [ROME]})
    record["fork_state"] = snapshot(await graph.aget_state(fork))
    await graph.ainvoke(None, fork)
    record["fork_paused"] = snapshot(await graph.aget_state(cfg))
    record["fork_done"] = normal(await graph.ainvoke(Command(resume="no"), cfg))
    record["history_after"] = [snapshot(s) async for s in graph.aget_state_history(cfg)]
    return record


def apause(url: str, schema: str, thread: str) -> dict[str, Any]:
    """``pause`` through the async saver, in a process (and event loop) of its own."""
    import asyncio

    from session_sql.integrations.langgraph import AsyncSessionSQLSaver

    async def main() -> dict[str, Any]:
        cfg: Any = {"configurable": {"thread_id": thread}}
        async with AsyncSessionSQLSaver.from_url(url, schema=schema) as saver:
            graph = build(saver)
            await graph.ainvoke({"messages": [HumanMessage(QUESTION, id="h1")]}, cfg)
            return snapshot(await graph.aget_state(cfg))

    return asyncio.run(main())


def aresume(url: str, schema: str, thread: str) -> dict[str, Any]:
    """``resume`` through the async saver, in another process."""
    import asyncio

    from session_sql.integrations.langgraph import AsyncSessionSQLSaver

    async def main() -> dict[str, Any]:
        cfg: Any = {"configurable": {"thread_id": thread}}
        async with AsyncSessionSQLSaver.from_url(url, schema=schema) as saver:
            return normal(await build(saver).ainvoke(Command(resume="yes"), cfg))

    return asyncio.run(main())
