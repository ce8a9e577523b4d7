"""How a LangGraph thread is named in the store: event types, session ids of its
generations, its label, and the configs LangGraph passes in and gets back."""

from __future__ import annotations

import base64
import binascii
import hashlib
import random
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.types import RESUME

from session_sql import InvalidArgumentError

CHECKPOINT_TYPE = "langgraph/checkpoint"
WRITES_TYPE = "langgraph/writes"
MOVED_TYPE = "langgraph/moved"
MOVING_TYPE = "langgraph/moving"
SETTLED_TYPE = "langgraph/settled"
ID_PREFIX = "langgraph:"
THREAD_LABEL = "langgraph_thread"
# A thread id no label value can hold (over 1,000 characters, or not printable) is kept as
# its UTF-8 bytes in base64, in pieces of 1,000 characters: ``langgraph_thread.b64.00``, ...
ENCODED_LABEL = THREAD_LABEL + ".b64."
PIECE = 1000
MAX_PIECES = 64  # the store's limit of labels on a session
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
    """The thread's session labels: its id, as is when a label value can hold it, else
    encoded (so that ``list(None)`` and ``delete_for_runs`` find every thread)."""
    tid = str(thread_id)
    if len(tid) <= PIECE and tid.isprintable():
        return {THREAD_LABEL: tid}
    encoded = base64.b64encode(tid.encode("utf-8", "surrogatepass")).decode("ascii")
    pieces = [encoded[i : i + PIECE] for i in range(0, len(encoded), PIECE)]
    if len(pieces) > MAX_PIECES:
        raise InvalidArgumentError(
            f"a LangGraph thread id must be at most {MAX_PIECES * PIECE * 3 // 4} bytes in "
            f"UTF-8, not {len(tid.encode('utf-8', 'surrogatepass'))}",
            argument="config",
        )
    return {f"{ENCODED_LABEL}{i:02d}": piece for i, piece in enumerate(pieces)}


def thread_from_labels(found: Mapping[str, str]) -> str | None:
    """The thread id ``labels`` wrote (None: the session names no thread)."""
    plain = found.get(THREAD_LABEL)
    if plain is not None:
        return plain
    names = sorted(name for name in found if name.startswith(ENCODED_LABEL))
    if not names:
        return None
    try:
        data = base64.b64decode("".join(found[name] for name in names), validate=True)
        return data.decode("utf-8", "surrogatepass")
    except (binascii.Error, UnicodeDecodeError):
        return None


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
