"""Child-process bodies for the multi-process tests (run in 'spawn' processes).

Each opens its own store from ``(url, schema)``. Tasks run in a pool of worker processes and
return their results (an exception travels back to the parent with its traceback). Processes
meet at file barriers in ``sync_dir``, so no manager process is needed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from session_sql import ConcurrencyError, open_store


def _message(text: str) -> dict[str, Any]:
    content = [{"type": "text", "text": text}]
    return {"id": text, "role": "user", "content": content, "source": {"kind": "user"}}


def arrive_and_wait(sync_dir: str, name: str, parties: int, timeout: float = 60) -> None:
    """A barrier: announce this process under ``name`` and wait until ``parties`` have."""
    directory = Path(sync_dir)
    (directory / f"{name}.{os.getpid()}").touch()
    deadline = time.monotonic() + timeout
    while len(list(directory.glob(f"{name}.*"))) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {name!r}: fewer than {parties} processes arrived")
        time.sleep(0.005)


def append_with_retry(
    url: str, schema: str, session_id: str, worker: int, count: int, sync_dir: str, parties: int
) -> tuple[int, int]:
    """Append ``count`` user messages to a shared session, refreshing and retrying on conflict.

    Returns ``(pid, conflicts)``.
    """
    with open_store(url, schema=schema, busy_timeout_ms=30_000) as store:
        handle = store.open_session(session_id)
        arrive_and_wait(sync_dir, "start", parties)
        conflicts = 0
        for i in range(count):
            while True:
                try:
                    handle.append("user/message", _message(f"w{worker}-{i}"), surface_op="append")
                    break
                except ConcurrencyError:
                    conflicts += 1
                    handle.refresh()
    return os.getpid(), conflicts


def append_alone(
    url: str, schema: str, session_id: str, count: int, sync_dir: str, parties: int
) -> tuple[int, str, int]:
    """Append ``count`` events to a session nobody else writes (a conflict would raise).

    Returns ``(pid, session id, next seq)``.
    """
    with open_store(url, schema=schema, busy_timeout_ms=30_000) as store:
        handle = store.create_session(session_id)
        arrive_and_wait(sync_dir, "start", parties)
        for i in range(count):
            handle.append("todo/write", {"i": i})
        return os.getpid(), session_id, handle.seq


def follow_session(
    url: str, schema: str, session_id: str, after_seq: int, expect: int, sync_dir: str
) -> list[tuple[int, Any]]:
    """Follow a session until ``expect`` events arrived (or 10 s pass without one)."""
    with open_store(url, schema=schema) as store:
        seen: list[tuple[int, Any]] = []
        stream = store.follow(session_id, after_seq=after_seq, timeout=10)
        (Path(sync_dir) / "following").touch()
        for event in stream:
            seen.append((event.seq, event.data))
            if len(seen) == expect:
                break
        return seen


def write_session(url: str, schema: str, session_id: str, count: int, sync_dir: str) -> int:
    """Append ``count`` events, a few at a time, once the follower is following."""
    ready = Path(sync_dir) / "following"
    deadline = time.monotonic() + 60
    with open_store(url, schema=schema) as store:
        handle = store.open_session(session_id)
        while not ready.exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the follower never started")
            time.sleep(0.005)
        for i in range(count):
            handle.append("todo/write", {"i": i, "f": 1.0})
            if i % 5 == 4:
                time.sleep(0.01)
        return handle.seq


def crashing_writer(url: str, schema: str, session_ids: list[str], attempts_path: str) -> None:
    """Stream turns into several sessions round-robin until killed; log each attempt first.

    Every session gets an endless turn (steps of chunks, a reply calling a tool, the call, its
    result, the step's end, the next step...), so a kill always lands inside an open turn. Each
    line of ``attempts_path`` is ``<session id> <seq> <type>``, written and flushed just before
    the append that tries to commit it.
    """
    with (
        open(attempts_path, "a", encoding="utf-8") as attempts,
        open_store(url, schema=schema) as store,
    ):
        handles = [store.create_session(sid) for sid in session_ids]
        plans = {h.id: _endless_turn(h) for h in handles}
        while True:
            for handle in handles:
                type_, data, kwargs = next(plans[handle.id])
                attempts.write(f"{handle.id} {handle.seq} {type_}\n")
                attempts.flush()
                handle.append(type_, data, **kwargs)


def _endless_turn(handle: Any) -> Any:
    """Yield ``(type, data, append kwargs)``; reads ``handle.seq`` as the events commit."""
    yield "turn/start", {"turn": 1}, {}
    yield "user/message", _message("go"), {"surface_op": "append"}
    step = 0
    while True:
        step += 1
        yield "step/start", {"turn": 1, "step": step}, {}
        chunks = []
        for i in range(3):
            chunks.append(handle.seq)
            delta = {"type": "text-delta", "index": 0, "text": str(i)}
            yield "assistant/chunk", {"turn": 1, "step": step, "chunk": delta}, {}
        call_id = f"c{step}"
        message = {
            "id": f"a{step}",
            "role": "assistant",
            "content": [
                {"type": "text", "text": "calling"},
                {"type": "tool-call", "id": call_id, "name": "shell", "arguments": {}},
            ],
            "source": {"kind": "model", "provider": "prov", "model": "mod"},
        }
        yield (
            "assistant/message",
            {"turn": 1, "step": step, "message": message},
            {"surface_op": "append", "source_event_seqs": chunks},
        )
        call_seq = handle.seq
        call = {"turn": 1, "step": step, "callId": call_id, "name": "shell", "arguments": "{}"}
        yield "tool/call", call, {}
        block = {
            "type": "tool-result",
            "toolCallId": call_id,
            "content": [_message("ok")["content"][0]],
        }
        result = {"id": f"r{step}", "role": "user", "content": [block]}
        result["source"] = {"kind": "tool", "callId": call_id}
        yield (
            "tool/result",
            {"turn": 1, "step": step, "message": result},
            {"surface_op": "append", "source_event_seqs": [call_seq]},
        )
        yield "step/end", {"turn": 1, "step": step}, {}
