"""How a LangGraph thread is named in the store: event types, session ids of its
generations, its label, and the configs LangGraph passes in and gets back."""

from __future__ import annotations

import hashlib
import random
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.types import RESUME

from session_sql import InvalidArgumentError

CHECKPOINT_TYPE = "langgraph/checkpoint"
WRITES_TYPE = "langgraph/writes"
MOVED_TYPE = "langgraph/moved"
ID_PREFIX = "langgraph:"
THREAD_LABEL = "langgraph_thread"
SOURCE_KIND = "langgraph"
MAX_ATTEMPTS = 100

# The task id of the writes an invocation's ``Command`` makes (LangGraph's NULL_TASK_ID).
NULL_TASK = "00000000-0000-0000-0000-000000000000"

Batch = list[dict[str, Any]]


def starts_run(task_id: Any, channels: list[Any]) -> bool:
    """Whether writes of ``task_id`` to ``channels`` are an invocation's own: a
    ``Command``'s (its ``update``, ``goto``) or a resume's (``Command(resume=...)``)."""
    return task_id == NULL_TASK or RESUME in channels


def base_id(thread_id: str) -> str:
    """The session id of a thread's first generation (later ones add ``~<n>``)."""
    tid = str(thread_id)
    plain = (
        0 < len(tid) <= 100
        and tid.isprintable()
        and "~" not in tid
        and not tid.startswith("#")
        and tid.strip() == tid
    )
    if plain:
        return ID_PREFIX + tid
    return ID_PREFIX + "#" + hashlib.sha256(tid.encode("utf-8", "surrogatepass")).hexdigest()


def generation(session_id: str, base: str) -> int | None:
    """Which generation of the thread ``base`` the session ``session_id`` is (None: not one)."""
    if session_id == base:
        return 0
    rest = session_id[len(base) :]
    if session_id.startswith(base) and rest.startswith("~") and rest[1:].isdigit():
        return int(rest[1:])
    return None


def gen_id(base: str, gen: int) -> str:
    return base if gen == 0 else f"{base}~{gen}"


def base_of(session_id: str) -> str:
    return session_id.split("~", 1)[0]


def labels(thread_id: str) -> dict[str, str]:
    """The thread's session labels: its id, when a label can hold it."""
    tid = str(thread_id)
    if len(tid) <= 1000 and tid.isprintable():
        return {THREAD_LABEL: tid}
    return {}


def config(thread_id: str, ns: str, cp_id: str | None) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cp_id}}


def thread_of(config: RunnableConfig) -> str:
    thread_id = config.get("configurable", {}).get("thread_id")
    if thread_id is None:
        raise InvalidArgumentError(
            "a LangGraph config needs configurable.thread_id", argument="config"
        )
    return str(thread_id)


def next_version(current: Any) -> str:
    """LangGraph's channel version after ``current``: a counter, then a random tie-break."""
    if current is None:
        number = 0
    elif isinstance(current, int):
        number = current
    else:
        number = int(str(current).split(".")[0])
    return f"{number + 1:032}.{random.random():016}"
