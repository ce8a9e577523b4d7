"""Child-process bodies of the reliability harnesses (started with the 'spawn' context).

* ``crash_writer`` writes forever (appends, ``append_many`` batches, replaces, forks, seeded
  creates, resumes, repairs) until the parent kills it. Before each store call it appends the
  call's intent to a journal with one ``os.write`` (which a SIGKILL cannot tear after the fact:
  the kernel already holds the bytes), and after the call returns an acknowledgement. The
  parent then knows what was attempted, in order, and what was acknowledged.
* ``contender`` appends to one shared session (or its own) and retries on conflict.

A child never raises past its body: it reports what went wrong so the parent can assert on it.
"""

from __future__ import annotations

import json
import os
import random
import time
import traceback
from pathlib import Path
from typing import Any

from session_sql import (
    ConcurrencyError,
    Replace,
    SessionSQLError,
    StoredSession,
    StoreError,
    interrupted_turn_closers,
    open_store,
)

from .reliability_builders import (
    assistant_data,
    item,
    tool_result_data,
    user_message,
)

BUSY_TIMEOUT_MS = 5000  # the library default, stated: contention must fit inside it


# --------------------------------------------------------------------------------------------
# Crash writer


class _Journal:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._next = 0

    def intent(self, record: dict[str, Any]) -> int:
        op_id = self._next
        self._next += 1
        self._write({"id": op_id, **record})
        return op_id

    def ack(self, op_id: int) -> None:
        self._write({"ack": op_id})

    def _write(self, record: dict[str, Any]) -> None:
        os.write(self._fd, (json.dumps(record) + "\n").encode())


def _last_turn(handle: StoredSession) -> int:
    turns = [e.data["turn"] for e in handle.events if e.type == "turn/start"]
    return max(turns, default=0)


def _text(rng: random.Random) -> str:
    # Mostly small; sometimes large enough that a kill often lands inside the write.
    size = rng.choice([0, 5, 40, 300, 3000, 60_000])
    return "".join(rng.choice("abcdéλ🙂 ") for _ in range(min(size, 200))) * max(1, size // 200)


class _Writer:
    def __init__(self, store: Any, journal: _Journal, rng: random.Random, trial: int) -> None:
        self.store = store
        self.journal = journal
        self.rng = rng
        self.trial = trial
        self.created = 0

    # -- one store call, journalled --------------------------------------------------------

    def append(self, handle: StoredSession, items: list[dict[str, Any]]) -> None:
        op = self.journal.intent(
            {"op": "append", "sid": handle.id, "base": handle.seq, "items": items}
        )
        if len(items) == 1 and self.rng.random() < 0.5:
            one = items[0]
            handle.append(
                one["type"],
                one["data"],
                surface_op=_op(one.get("surface_op")),
                source_event_seqs=one.get("source_event_seqs"),
                ignorable=one.get("ignorable", False),
            )
        else:
            handle.append_many([{**x, "surface_op": _op(x.get("surface_op"))} for x in items])
        self.journal.ack(op)

    def take_over(self, session_id: str) -> StoredSession:
        """Open a session another (dead) writer left: resume, then close an open turn."""
        peek = self.store.open_session(session_id)  # writes nothing
        log = list(peek.events)
        resume = self.rng.random() < 0.5
        if resume:
            marker = bool(log) and log[-1].type != "session/end-seed"
            op = self.journal.intent(
                {"op": "resume", "sid": session_id, "base": len(log), "marker": marker}
            )
            handle = self.store.open_session(session_id, resume=True)
            self.journal.ack(op)
        else:
            handle = peek
        if interrupted_turn_closers(handle.events):
            op = self.journal.intent({"op": "repair", "sid": session_id, "base": handle.seq})
            self.store.repair(session_id)
            self.journal.ack(op)
            handle.refresh()
        return handle

    def create(self) -> StoredSession:
        self.created += 1
        sid = f"t{self.trial}-{self.created}"
        seeded = self.rng.random() < 0.4
        seed = None
        if seeded:
            seed = [
                {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
                {
                    "type": "user/message",
                    "seq": 1,
                    "time": 2,
                    "data": user_message("seeded"),
                    "surfaceOp": "append",
                },
                {
                    "type": "turn/end",
                    "seq": 2,
                    "time": 3,
                    "data": {"turn": 1, "reason": {"kind": "completed"}},
                },
            ]
        op = self.journal.intent({"op": "create", "sid": sid, "seed": seed})
        handle = self.store.create_session(sid, seed=seed)
        self.journal.ack(op)
        return handle

    def fork(self, parent: StoredSession) -> StoredSession | None:
        if parent.seq == 0:
            return None
        self.created += 1
        child = f"t{self.trial}-{self.created}"
        boundary = self.rng.randrange(parent.seq)
        op = self.journal.intent(
            {"op": "fork", "sid": child, "parent": parent.id, "boundary": boundary}
        )
        handle = self.store.fork_session(parent.id, boundary=boundary, child_id=child)
        self.journal.ack(op)
        return handle

    # -- what a turn looks like ------------------------------------------------------------

    def turn(self, handle: StoredSession) -> None:
        """One agent turn, its events grouped at random into appends and batches."""
        rng = self.rng
        turn = _last_turn(handle) + 1
        pending: list[dict[str, Any]] = []

        def emit(entry: dict[str, Any], *, flush: bool = False) -> int:
            pending.append(entry)
            seq = handle.seq + len(pending) - 1
            if flush or rng.random() < 0.5:
                self.append(handle, pending[:])
                pending.clear()
            return seq

        emit(item("turn/start", {"turn": turn}))
        if rng.random() < 0.3:
            header = {
                "header": {"config": {"provider": "prov", "model": "mod"}},
                "reason": "initial",
            }
            emit(item("request/header", header))
        emit(item("user/message", user_message(_text(rng), id=f"u{turn}"), "append"))
        for step in range(1, rng.randint(1, 2) + 1):
            emit(item("step/start", {"turn": turn, "step": step}))
            chunks = [
                emit(
                    item(
                        "assistant/chunk",
                        {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": i}},
                    )
                )
                for i in range(rng.randint(0, 2))
            ]
            calls = [f"c{turn}-{step}-{k}" for k in range(rng.randint(0, 2))]
            emit(
                item(
                    "assistant/message",
                    assistant_data(turn, step, _text(rng), calls, id=f"a{turn}-{step}"),
                    "append",
                    chunks or None,
                )
            )
            for call in calls:
                call_seq = emit(
                    item(
                        "tool/call",
                        {
                            "turn": turn,
                            "step": step,
                            "callId": call,
                            "name": "shell",
                            "arguments": "{}",
                        },
                    )
                )
                emit(
                    item(
                        "tool/result",
                        tool_result_data(turn, step, call, _text(rng)),
                        "append",
                        [call_seq],
                    )
                )
            if rng.random() < 0.2:
                emit(item("x-plugin/note", {"n": rng.random()}, ignorable=True))
            emit(item("step/end", {"turn": turn, "step": step}))
        emit(item("turn/end", {"turn": turn, "reason": {"kind": "completed"}}), flush=True)

    def compact(self, handle: StoredSession) -> None:
        """A summary replacing a range of the surface (between turns)."""
        nodes = handle.surface.nodes
        if len(nodes) < 2:
            return
        a = self.rng.randrange(len(nodes))
        b = self.rng.randrange(a, len(nodes))
        summary = user_message(f"summary of {b - a + 1}", id=f"s{handle.seq}")
        self.append(
            handle,
            [
                item(
                    "user/message",
                    summary,
                    {"op": "replace", "start": nodes[a], "end": nodes[b]},
                    list(nodes[a : b + 1]),
                )
            ],
        )

    def prune(self, handle: StoredSession) -> None:
        """A tool/result replacing a tool/result node, only its content changed."""
        log = handle.events
        results = [s for s in handle.surface.nodes if log[s].type == "tool/result"]
        if not results:
            return
        target = log[self.rng.choice(results)]
        data = json.loads(json.dumps(target.data))
        data["message"]["content"][0]["content"] = [{"type": "text", "text": "[pruned]"}]
        self.append(
            handle,
            [
                item(
                    "tool/result",
                    data,
                    {"op": "replace", "start": target.seq, "end": target.seq},
                    [target.seq],
                )
            ],
        )


def _op(raw: Any) -> Any:
    if isinstance(raw, dict):
        return Replace(raw["start"], raw["end"])
    return raw


def crash_writer(
    url: str,
    schema: str,
    trial: int,
    seed: int,
    journal_path: str,
    known_path: str,
    ready: Any,
    go: Any,
) -> None:
    """Write until killed. Exits on its own only when something unexpected happened.

    ``known_path`` lists the sessions earlier writers left; it is read once ``go`` is set,
    since the parent writes it only after checking the previous trial.
    """
    journal = _Journal(journal_path)
    try:
        store = open_store(url, schema=schema, busy_timeout_ms=10_000)
        rng = random.Random(seed)
        writer = _Writer(store, journal, rng, trial)
        ready.set()
        if not go.wait(timeout=120):
            raise TimeoutError("never told to go")
        known: list[str] = json.loads(Path(known_path).read_text())
        handles: list[StoredSession] = []
        for sid in rng.sample(known, min(len(known), 2)):
            handles.append(writer.take_over(sid))
        while True:
            roll = rng.random()
            if not handles or roll < 0.12:
                handles.append(writer.create())
                continue
            handle = rng.choice(handles)
            if roll < 0.2:
                child = writer.fork(handle)
                if child is not None:
                    handles.append(child)
            elif roll < 0.3:
                writer.compact(handle)
            elif roll < 0.38:
                writer.prune(handle)
            else:
                writer.turn(handle)
    except BaseException:
        os.write(
            os.open(journal_path, os.O_WRONLY | os.O_APPEND),
            (json.dumps({"error": traceback.format_exc()}) + "\n").encode(),
        )


# --------------------------------------------------------------------------------------------
# Contention


def _wait_for_peers(rendezvous: str, worker: int, parties: int, timeout: float = 120) -> None:
    """A barrier over a directory: pool workers cannot inherit a multiprocessing.Barrier."""
    folder = Path(rendezvous)
    (folder / f"ready-{worker}").touch()
    deadline = time.monotonic() + timeout
    while len(list(folder.glob("ready-*"))) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError("peers did not start")
        time.sleep(0.005)


def contender(
    url: str,
    schema: str,
    session_id: str,
    worker: int,
    count: int,
    rendezvous: str,
    parties: int,
    seed: int,
) -> dict[str, Any]:
    """Append ``count`` marked operations (appends, batches, replaces), retrying on conflict.

    Returns the marks this worker saw committed, its conflicts, and any error other than a
    conflict (a 'database is locked' would be one).
    """
    rng = random.Random(seed)
    committed: list[str] = []
    conflicts = 0
    replaces = 0
    errors: list[str] = []
    try:
        with open_store(url, schema=schema, busy_timeout_ms=BUSY_TIMEOUT_MS) as store:
            handle = store.open_session(session_id)
            _wait_for_peers(rendezvous, worker, parties)
            for i in range(count):
                mark = f"w{worker}-{i}"
                roll = rng.random()
                while True:
                    try:
                        if roll < 0.15 and len(handle.surface.nodes) >= 2:
                            nodes = handle.surface.nodes
                            a = rng.randrange(len(nodes) - 1)
                            handle.append(
                                "user/message",
                                user_message(mark, id=mark),
                                surface_op=Replace(nodes[a], nodes[a + 1]),
                                source_event_seqs=list(nodes[a : a + 2]),
                            )
                            replaces += 1
                        elif roll < 0.5:
                            handle.append_many(
                                [
                                    item("user/message", user_message(mark, id=mark), "append"),
                                    item("todo/write", {"mark": mark}),
                                ]
                            )
                        else:
                            handle.append(
                                "user/message", user_message(mark, id=mark), surface_op="append"
                            )
                        committed.append(mark)
                        break
                    except ConcurrencyError:
                        conflicts += 1
                        handle.refresh()
    except StoreError as exc:
        errors.append(f"StoreError: {exc}")
    except SessionSQLError as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    except BaseException:
        errors.append(traceback.format_exc())
    return {
        "worker": worker,
        "committed": committed,
        "conflicts": conflicts,
        "replaces": replaces,
        "errors": errors,
    }


# --------------------------------------------------------------------------------------------
# First open


def first_open(url: str, schema: str, imported: Any, opened: Any) -> None:
    """Open (initialise) a store once the library is imported; then wait to be killed.

    ``opened`` is a shared byte set to 1, not an event: an event's lock, held by a process
    killed inside its ``set()``, would block the parent's next look at it for ever."""
    imported.set()
    store = open_store(url, schema=schema)
    opened.value = 1
    store.close()
    time.sleep(60)


def create_racer(
    url: str, schema: str, session_id: str, parent: str, rendezvous: str, worker: int, parties: int
) -> str:
    """Race the other workers to create ``session_id`` (a fork of ``parent`` for odd workers).

    Returns "created" or the name of the error class; anything else is reported verbatim.
    """
    try:
        with open_store(url, schema=schema, busy_timeout_ms=BUSY_TIMEOUT_MS) as store:
            _wait_for_peers(rendezvous, worker, parties)
            if worker % 2:
                store.fork_session(parent, child_id=session_id)
            else:
                store.create_session(session_id, seed=[])
            return "created"
    except SessionSQLError as exc:
        return type(exc).__name__
    except BaseException:
        return traceback.format_exc()
