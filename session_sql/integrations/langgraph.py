"""LangGraph checkpointers over a session_sql store (SPEC §12.4).

``SessionSQLSaver`` (over a ``SessionStore``) and ``AsyncSessionSQLSaver`` (over an
``AsyncSessionStore``) are ``BaseCheckpointSaver``\\ s. A thread is one session (every
checkpoint namespace of the thread lives in it); its log holds:

* ``langgraph/checkpoint``: one checkpoint, ``{ns, id, parent, checkpoint, metadata, versions,
  values}``, where ``values`` holds only the channels whose version changed (``new_versions``),
  so a checkpoint costs what changed. A list channel that grew (``messages`` under
  ``add_messages``) is stored as what was appended since an earlier version (``extends``:
  the seq of the event holding that one; see ``_Logic._blob``);
* ``langgraph/writes``: the pending writes of one task, ``{ns, checkpoint, task, path,
  writes: [{idx, channel, value}]}``;
* the ``messages`` channel's chat messages of the root namespace, as core ``user/message``,
  ``assistant/message`` and ``tool/result`` events on the surface, so that ``messages()``, the
  SQL views and ``session-sql show`` read the conversation;
* ``langgraph/moved``: the last event of a thread rewritten by ``prune`` or
  ``delete_for_runs`` (see below).

A value is stored as ``{"json": value}`` when it is JSON (so SQL reads it) and as
``{"serde": type, "b64": bytes}`` through the saver's ``serde`` otherwise. The integration's
types are written ``ignorable``: every store reads them, with or without this module.

``delete_thread`` and ``prune(strategy="delete")`` delete the thread's session.
``prune(strategy="keep_latest")`` and ``delete_for_runs`` rewrite a thread into a new
*generation* (``<id>~<n>``): the old session is sealed by a ``langgraph/moved`` event that
names the new one and the operation (appended only if nobody appended meanwhile), the new
session is created with the kept checkpoints in one transaction, then the old one is deleted.
Whoever finds a sealed session without its successor (a crash between the steps) finishes
the move, which is deterministic; so readers see the thread before or after the operation,
never in between, and the removed rows leave the database. ``copy_thread`` is a fork.

Needs the extra: ``pip install 'session-sql[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import hashlib
import json
import math
import random
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "session_sql.integrations.langgraph needs LangGraph: pip install 'session-sql[langgraph]'"
    ) from exc

from session_sql import (
    AsyncSessionStore,
    AsyncStoredSession,
    ConcurrencyError,
    InvalidArgumentError,
    Replace,
    SessionEvent,
    SessionExistsError,
    SessionNotFoundError,
    SessionStore,
    loopsafe,
    open_async_store,
    open_store,
    thaw,
)

__all__ = [
    "CHECKPOINT_TYPE",
    "MOVED_TYPE",
    "WRITES_TYPE",
    "AsyncSessionSQLSaver",
    "SessionSQLSaver",
]

CHECKPOINT_TYPE = "langgraph/checkpoint"
WRITES_TYPE = "langgraph/writes"
MOVED_TYPE = "langgraph/moved"
ID_PREFIX = "langgraph:"
THREAD_LABEL = "langgraph_thread"
SOURCE_KIND = "langgraph"
MAX_ATTEMPTS = 100
MAX_INT = 2**63 - 1

Batch = list[dict[str, Any]]


# -- values -------------------------------------------------------------------------------


def _is_json(value: Any) -> bool:
    """Whether ``value`` is JSON that the store keeps as it is (exact types, no U+0000)."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if v is None or t is bool:
            continue
        if t is int:
            if -MAX_INT - 1 <= v <= MAX_INT:
                continue
            return False
        if t is float:
            if math.isfinite(v):
                continue
            return False
        if t is str:
            if "\x00" in v:
                return False
            continue
        if t is list:
            stack.extend(v)
            continue
        if t is dict:
            for k, item in v.items():
                if type(k) is not str or "\x00" in k:
                    return False
                stack.append(item)
            continue
        return False
    return True


def _encode(serde: SerializerProtocol, value: Any) -> dict[str, Any]:
    if _is_json(value):
        return {"json": value}
    kind, raw = serde.dumps_typed(value)
    return {"serde": kind, "b64": base64.b64encode(raw).decode("ascii")}


def _whole(serde: SerializerProtocol, value: Any) -> dict[str, Any]:
    """A whole value; a list says its length (the base of the parts that extend it)."""
    encoded = _encode(serde, value)
    if type(value) is list:
        encoded["len"] = len(value)
    return encoded


def _decode(serde: SerializerProtocol, encoded: Any) -> Any:
    if "json" in encoded:
        return thaw(encoded["json"])
    return serde.loads_typed((encoded["serde"], base64.b64decode(encoded["b64"])))


# -- ids ----------------------------------------------------------------------------------


def _base_id(thread_id: str) -> str:
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


def _generation(session_id: str, base: str) -> int | None:
    if session_id == base:
        return 0
    rest = session_id[len(base) :]
    if session_id.startswith(base) and rest.startswith("~") and rest[1:].isdigit():
        return int(rest[1:])
    return None


def _gen_id(base: str, gen: int) -> str:
    return base if gen == 0 else f"{base}~{gen}"


def _base_of(session_id: str) -> str:
    return session_id.split("~", 1)[0]


# -- the in-memory index of a thread ------------------------------------------------------


@dataclass
class _Cp:
    seq: int
    ns: str
    id: str
    parent: str | None
    data: Any  # the event's data (frozen)


@dataclass
class _Basis:
    """The messages value the surface shows: its version and length, the turn numbering
    after it, and the surface it was checked against (``_surface_mark``)."""

    version: Any
    length: int
    turns: tuple[int, int, bool]
    surface: tuple[int, int] | None


@dataclass
class _Index:
    """What a thread's log says, folded event by event (no I/O)."""

    handle: Any  # StoredSession | AsyncStoredSession
    folded: int = 0
    cps: dict[str, dict[str, _Cp]] = field(default_factory=dict)
    blobs: dict[tuple[str, str, Any], int] = field(default_factory=dict)  # -> seq
    values: dict[int, Any] = field(default_factory=dict)  # seq -> values of that event
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, Any, str]]] = field(
        default_factory=dict
    )
    # what this integration put on the surface: (message id, seq, event data)
    surfaced: list[tuple[str, int, Any]] = field(default_factory=list)
    moved: Any = None
    # The saver's private decoded copy of each channel's latest list: (ns, channel) ->
    # (version, seq, value); and what a put in progress would make of them.
    decoded: dict[tuple[str, str], tuple[Any, int, Any]] = field(default_factory=dict)
    pending_decoded: dict[tuple[str, str, Any], Any] = field(default_factory=dict)
    # Which messages value the surface shows, so that a put appends only the new ones.
    basis: _Basis | None = None
    pending_basis: _Basis | None = None

    def decoded_value(self, logic: _Logic, ns: str, channel: str, version: Any, seq: int) -> Any:
        """The value of ``channel`` at ``version`` (stored at ``seq``), decoded once."""
        entry = self.decoded.get((ns, channel))
        if entry is not None and entry[0] == version and entry[1] == seq:
            return entry[2]
        present, value = logic._value(self, seq, channel)
        self.decoded[(ns, channel)] = (version, seq, value if present else None)
        return value if present else None

    def committed(self) -> None:
        """A put built on this index committed: adopt what it computed."""
        for (ns, channel, version), value in self.pending_decoded.items():
            seq = self.blobs.get((ns, channel, version))
            if seq is not None:
                self.decoded[(ns, channel)] = (version, seq, value)
        self.pending_decoded.clear()
        if self.pending_basis is not None:
            pending = self.pending_basis
            self.basis = _Basis(pending.version, pending.length, pending.turns, _surface_mark(self))
            self.pending_basis = None

    def fold(self) -> None:
        events = self.handle.events
        for event in events[self.folded :]:
            self._fold(event)
        self.folded = len(events)

    def _fold(self, event: SessionEvent) -> None:
        kind, data, seq = event.type, event.data, event.seq
        if kind == CHECKPOINT_TYPE:
            ns, cp_id = data["ns"], data["id"]
            self.cps.setdefault(ns, {})[cp_id] = _Cp(seq, ns, cp_id, data["parent"], data)
            values = data["values"]
            self.values[seq] = values
            for channel, version in data["versions"].items():
                if channel in values:
                    self.blobs[(ns, channel, thaw(version))] = seq
        elif kind == WRITES_TYPE:
            key = (data["ns"], data["checkpoint"])
            stored = self.writes.setdefault(key, {})
            for w in data["writes"]:
                inner = (data["task"], w["idx"])
                if inner[1] >= 0 and inner in stored:
                    continue
                stored[inner] = (data["task"], w["channel"], w["value"], data["path"])
        elif kind == MOVED_TYPE:
            self.moved = data
        elif event.surface_op is not None:
            self._fold_surface(event)

    def _fold_surface(self, event: SessionEvent) -> None:
        data = event.data
        if event.type == "user/message":
            mid = data["id"]
        elif event.type in ("assistant/message", "tool/result"):
            mid = data["message"]["id"]
        else:
            mid = None
        op = event.surface_op
        entry = [] if mid is None else [(mid, event.seq, data)]
        if isinstance(op, Replace):
            seqs = [s for _, s, _ in self.surfaced]
            if op.start in seqs and op.end in seqs:
                i, j = seqs.index(op.start), seqs.index(op.end)
                self.surfaced[i : j + 1] = entry
        else:
            self.surfaced.extend(entry)

    def latest(self, ns: str) -> _Cp | None:
        found = self.cps.get(ns)
        if not found:
            return None
        return found[max(found)]


# -- the saver's logic (no I/O) -----------------------------------------------------------


class _Logic:
    """Builds events from LangGraph's calls and tuples from the index; shared by both savers."""

    serde: SerializerProtocol

    # reading

    def _value(self, index: _Index, seq: int, channel: str) -> tuple[bool, Any]:
        """The value of ``channel`` stored by the checkpoint event ``seq`` (False: empty)."""
        parts: list[Any] = []
        blob = index.values[seq][channel]
        while "extends" in blob:
            parts.append(blob["append"])
            blob = index.values[blob["extends"]][channel]
        if blob.get("empty"):
            return False, None
        value = _decode(self.serde, blob)
        if parts:
            value = list(value)
            for part in reversed(parts):
                value.extend(_decode(self.serde, part))
        return True, value

    def _channel_values(self, index: _Index, cp: _Cp, checkpoint: Any) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for channel, version in checkpoint.get("channel_versions", {}).items():
            seq = index.blobs.get((cp.ns, channel, version))
            if seq is None:
                continue
            present, value = self._value(index, seq, channel)
            if present:
                result[channel] = value
        return result

    def _pending(self, index: _Index, ns: str, cp_id: str) -> list[tuple[str, str, Any]]:
        stored = index.writes.get((ns, cp_id), {})
        keys = sorted(stored, key=lambda k: writes_sort_key(stored[k][3], *k))
        return [(stored[k][0], stored[k][1], _decode(self.serde, stored[k][2])) for k in keys]

    def _tuple(self, index: _Index, thread_id: str, cp: _Cp) -> CheckpointTuple:
        checkpoint = _decode(self.serde, cp.data["checkpoint"])
        full = {**checkpoint, "channel_values": self._channel_values(index, cp, checkpoint)}
        return CheckpointTuple(
            config=_config(thread_id, cp.ns, cp.id),
            checkpoint=cast(Checkpoint, full),
            metadata=cast(CheckpointMetadata, _decode(self.serde, cp.data["metadata"])),
            parent_config=_config(thread_id, cp.ns, cp.parent) if cp.parent else None,
            pending_writes=self._pending(index, cp.ns, cp.id),
        )

    def _get(self, index: _Index | None, config: RunnableConfig) -> CheckpointTuple | None:
        if index is None:
            return None
        conf = config["configurable"]
        ns = conf.get("checkpoint_ns", "")
        cp_id = get_checkpoint_id(config)
        cp = index.cps.get(ns, {}).get(cp_id) if cp_id else index.latest(ns)
        if cp is None:
            return None
        found = self._tuple(index, conf["thread_id"], cp)
        if cp_id:  # as InMemorySaver: the config asked for comes back as it was given
            return found._replace(config=config)
        return found

    def _matching(
        self,
        index: _Index,
        thread_id: str,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
    ) -> Iterator[CheckpointTuple]:
        conf = config["configurable"] if config else {}
        want_ns = conf.get("checkpoint_ns")
        want_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        for ns, cps in index.cps.items():
            if want_ns is not None and ns != want_ns:
                continue
            for cp_id in sorted(cps, reverse=True):
                if want_id and cp_id != want_id:
                    continue
                if before_id and cp_id >= before_id:
                    continue
                cp = cps[cp_id]
                if filter:
                    metadata = _decode(self.serde, cp.data["metadata"])
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                yield self._tuple(index, thread_id, cp)

    # writing

    def _put_batch(
        self,
        index: _Index,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Batch:
        conf = config["configurable"]
        ns = conf.get("checkpoint_ns", "")
        parent_id = conf.get("checkpoint_id")
        body = dict(checkpoint)
        values: dict[str, Any] = body.pop("channel_values")  # type: ignore[assignment]
        parent = index.cps.get(ns, {}).get(parent_id) if parent_id else None
        parent_versions: Mapping[str, Any] = {}
        if parent is not None:
            parent_versions = _decode(self.serde, parent.data["checkpoint"]).get(
                "channel_versions", {}
            )
        index.pending_decoded.clear()
        index.pending_basis = None
        stored: dict[str, Any] = {}
        extended: dict[str, bool] = {}
        for channel, version in new_versions.items():
            if channel not in values:
                stored[channel] = {"empty": True}
                continue
            stored[channel], extended[channel] = self._blob(
                index, ns, channel, values[channel], parent_versions.get(channel), version
            )
        data = {
            "ns": ns,
            "id": checkpoint["id"],
            "parent": parent_id,
            "checkpoint": _encode(self.serde, body),
            "metadata": _encode(self.serde, get_checkpoint_metadata(config, metadata)),
            "versions": {k: v for k, v in new_versions.items()},
            "values": stored,
        }
        batch: Batch = [{"type": CHECKPOINT_TYPE, "data": data, "ignorable": True}]
        messages = values.get("messages")
        if ns == "" and "messages" in new_versions and isinstance(messages, list):
            basis = index.basis
            if (
                basis is not None
                and extended.get("messages")
                and basis.version == parent_versions.get("messages")
                and basis.surface == _surface_mark(index)
            ):
                events, state = _surface_tail(messages[basis.length :], basis.turns)
            else:
                events, state = _surface_batch(index, messages)
            batch.extend(events)
            index.pending_basis = _Basis(new_versions["messages"], len(messages), state, None)
        return batch

    def _blob(
        self,
        index: _Index,
        ns: str,
        channel: str,
        value: Any,
        previous: Any,
        version: Any,
    ) -> tuple[dict[str, Any], bool]:
        """The stored form of ``value``, and whether it extends the previous version's list.

        A list that extends the previous version's is stored as what was appended since an
        earlier version of the run of such lists: the ``k``-th extension since a whole value
        extends the ``k - lowbit(k)``-th (a Fenwick tree), so a read decodes at most
        ``log2(k) + 1`` parts, each element is stored ``log2(k)`` times at most, and the
        comparison that proves the extension uses the saver's private decoded copy of the
        previous value (decoded once, then grown by the parts it appends).
        """
        if type(value) is list and previous is not None and previous != version:
            seq = index.blobs.get((ns, channel, previous))
            if seq is not None:
                prev_blob = index.values[seq][channel]
                if "len" in prev_blob:
                    old = index.decoded_value(self, ns, channel, previous, seq)
                    if type(old) is list and len(old) <= len(value) and value[: len(old)] == old:
                        k = prev_blob.get("k", 0) + 1
                        target = k - (k & -k)
                        base_seq, base = seq, prev_blob
                        while base.get("k", 0) != target and "extends" in base:
                            base_seq = base["extends"]
                            base = index.values[base_seq][channel]
                        tail = value[base["len"] :]
                        encoded = _encode(self.serde, tail)
                        grown = old + _decode(self.serde, encoded)[len(old) - base["len"] :]
                        index.pending_decoded[(ns, channel, version)] = grown
                        blob = {"extends": base_seq, "k": k, "len": len(value), "append": encoded}
                        return blob, True
        encoded = _whole(self.serde, value)
        if type(value) is list:
            index.pending_decoded[(ns, channel, version)] = _decode(self.serde, encoded)
        return encoded, False

    def _writes_batch(
        self,
        index: _Index | None,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Batch:
        conf = config["configurable"]
        ns = conf.get("checkpoint_ns", "")
        cp_id = conf["checkpoint_id"]
        existing = index.writes.get((ns, cp_id), {}) if index is not None else {}
        kept = []
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            if idx >= 0 and (task_id, idx) in existing:
                continue
            kept.append({"idx": idx, "channel": channel, "value": _encode(self.serde, value)})
        if not kept:
            return []
        data = {"ns": ns, "checkpoint": cp_id, "task": task_id, "path": task_path, "writes": kept}
        return [{"type": WRITES_TYPE, "data": data, "ignorable": True}]

    # rewriting

    def _rewritten(self, index: _Index, op: Mapping[str, Any], now: int) -> list[dict[str, Any]]:
        """The log of the thread after ``op`` (keep_latest, or delete_runs), as a seed."""
        keep: list[_Cp] = []
        if op.get("op") == "keep_latest":
            for ns in index.cps:
                latest = index.latest(ns)
                if latest is not None:
                    keep.append(latest)
        else:
            runs = set(op["runs"])
            for cps in index.cps.values():
                for cp in cps.values():
                    run = _decode(self.serde, cp.data["metadata"]).get("run_id")
                    if run not in runs:
                        keep.append(cp)
        keep.sort(key=lambda cp: cp.seq)
        out: list[dict[str, Any]] = []
        emitted: set[tuple[str, str, Any]] = set()
        emitted_at: dict[tuple[int, str], int] = {}  # (old seq, channel) -> new seq

        def add(kind: str, data: Any, **extra: Any) -> int:
            out.append({"type": kind, "seq": len(out), "time": now, "data": data, **extra})
            return len(out) - 1

        for cp in keep:
            checkpoint = _decode(self.serde, cp.data["checkpoint"])
            versions: dict[str, Any] = {}
            values: dict[str, Any] = {}
            for channel, version in checkpoint.get("channel_versions", {}).items():
                key = (cp.ns, channel, version)
                seq = index.blobs.get(key)
                if seq is None or key in emitted:
                    continue
                blob = thaw(index.values[seq][channel])
                if "extends" in blob:
                    base = emitted_at.get((blob["extends"], channel))
                    if base is not None:
                        blob = {**blob, "extends": base}
                    else:  # its base is gone: the value, whole
                        present, value = self._value(index, seq, channel)
                        blob = _whole(self.serde, value) if present else {"empty": True}
                versions[channel] = version
                values[channel] = blob
                emitted.add(key)
            data = {**thaw(cp.data), "versions": versions, "values": values}
            at = add(CHECKPOINT_TYPE, data, ignorable=True)
            for channel in values:
                emitted_at[(cp.seq, channel)] = at
            stored = index.writes.get((cp.ns, cp.id), {})
            for (task, idx), (_, channel, value, path) in stored.items():
                write = {"idx": idx, "channel": channel, "value": thaw(value)}
                wdata = {"ns": cp.ns, "checkpoint": cp.id, "task": task, "path": path}
                add(WRITES_TYPE, {**wdata, "writes": [write]}, ignorable=True)
        root = [cp for cp in keep if cp.ns == ""]
        if root:
            last = root[-1]
            checkpoint = _decode(self.serde, last.data["checkpoint"])
            version = checkpoint.get("channel_versions", {}).get("messages")
            seq = index.blobs.get(("", "messages", version))
            if seq is not None:
                present, messages = self._value(index, seq, "messages")
                if present and isinstance(messages, list):
                    for event in _surface_batch(_Index(handle=None), messages)[0]:
                        if "surface_op" in event:
                            add(event["type"], event["data"], surfaceOp="append")
                        else:
                            add(event["type"], event["data"])
        return out


def _config(thread_id: str, ns: str, cp_id: str | None) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cp_id}}


# -- the messages channel on the surface --------------------------------------------------


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                blocks.append({"type": "text", "text": part})
            elif (
                isinstance(part, dict)
                and type(part.get("type")) is str
                and part["type"]
                and _is_json(part)
            ):
                if part["type"] == "text" and type(part.get("text")) is not str:
                    continue
                blocks.append(dict(part))
    return blocks


def _core_event(message: Any, turn: int, step: int) -> dict[str, Any] | None:
    """A LangChain message as a core message event (None: not a chat message we show)."""
    kind = getattr(message, "type", None)
    mid = getattr(message, "id", None)
    if type(mid) is not str or not mid:
        return None
    if kind == "human":
        data = {
            "id": mid,
            "role": "user",
            "content": _blocks(message.content),
            "source": {"kind": SOURCE_KIND},
        }
        return {"type": "user/message", "data": data}
    if kind == "ai":
        content = _blocks(message.content)
        for call in getattr(message, "tool_calls", None) or []:
            if call.get("id") and call.get("name") and _is_json(call.get("args")):
                content.append(
                    {
                        "type": "tool-call",
                        "id": call["id"],
                        "name": call["name"],
                        "arguments": call.get("args"),
                    }
                )
        meta = getattr(message, "response_metadata", None) or {}
        provider = meta.get("model_provider") or SOURCE_KIND
        model = meta.get("model_name") or meta.get("model") or "unknown"
        body: dict[str, Any] = {
            "turn": turn,
            "step": step,
            "message": {
                "id": mid,
                "role": "assistant",
                "content": content,
                "source": {"kind": "model", "provider": str(provider), "model": str(model)},
            },
        }
        usage = getattr(message, "usage_metadata", None)
        if usage:
            body["usage"] = {
                "inputTokens": int(usage.get("input_tokens", 0)),
                "outputTokens": int(usage.get("output_tokens", 0)),
            }
        return {"type": "assistant/message", "data": body}
    if kind == "tool":
        call_id = getattr(message, "tool_call_id", None)
        if type(call_id) is not str or not call_id:
            return None
        result: dict[str, Any] = {
            "type": "tool-result",
            "toolCallId": call_id,
            "content": _blocks(message.content),
        }
        if getattr(message, "status", None) == "error":
            result["isError"] = True
        source: dict[str, Any] = {"kind": "tool", "callId": call_id}
        if getattr(message, "name", None):
            source["name"] = message.name
        tool: dict[str, Any] = {
            "turn": turn,
            "step": step,
            "message": {"id": mid, "role": "user", "content": [result], "source": source},
        }
        return {"type": "tool/result", "data": tool}
    return None


def _wanted(
    messages: Sequence[Any], turns: tuple[int, int, bool]
) -> tuple[list[tuple[str, dict[str, Any]]], tuple[int, int, bool]]:
    """The core events of ``messages`` (with their ids), numbered on from ``turns`` (turn,
    step, whether a message came before): a human message opens a turn."""
    wanted: list[tuple[str, dict[str, Any]]] = []
    turn, step, started = turns
    for message in messages:
        if getattr(message, "type", None) == "human" and started:
            turn, step = turn + 1, 0
        event = _core_event(message, turn, step)
        if event is not None:
            wanted.append((message.id, event))
            step += 1
            started = True
    return wanted, (turn, step, started)


def _surface_tail(
    messages: Sequence[Any], turns: tuple[int, int, bool]
) -> tuple[Batch, tuple[int, int, bool]]:
    """The events appending ``messages`` to a surface that shows the ones before them."""
    wanted, state = _wanted(messages, turns)
    return _with_calls([{**event, "surface_op": "append"} for _, event in wanted]), state


def _surface_batch(index: _Index, messages: list[Any]) -> tuple[Batch, tuple[int, int, bool]]:
    """Events that make the surface show ``messages``: the new ones appended, or the part
    that differs replaced (a ``RemoveMessage``, a time-travel fork)."""
    wanted, state = _wanted(messages, (0, 0, False))
    have = index.surfaced
    common = 0
    while (
        common < len(have)
        and common < len(wanted)
        and have[common][0] == wanted[common][0]
        and have[common][2] == wanted[common][1]["data"]
    ):
        common += 1
    new = [event for _, event in wanted[common:]]
    if common == len(have):
        return _with_calls([{**event, "surface_op": "append"} for event in new]), state
    shadowed = [seq for _, seq, _ in have[common:]]
    op = Replace(shadowed[0], shadowed[-1])
    if not new:
        removed = {"type": "surface/removed", "data": {"reason": "langgraph"}}
        return [{**removed, "surface_op": op, "source_event_seqs": shadowed}], state
    first = {**new[0], "surface_op": op, "source_event_seqs": shadowed}
    batch = [first] + [{**event, "surface_op": "append"} for event in new[1:]]
    return _with_calls(batch), state


def _surface_mark(index: _Index) -> tuple[int, int]:
    """What the surface shows, in short: how many of our nodes, and the last one's seq."""
    return len(index.surfaced), index.surfaced[-1][1] if index.surfaced else -1


def _with_calls(batch: Batch) -> Batch:
    """``batch`` with a log-only ``tool/call`` after each assistant message's tool calls, so
    that ``stats`` and the ``tool_calls`` view count them."""
    out: Batch = []
    for event in batch:
        out.append(event)
        if event["type"] != "assistant/message":
            continue
        data = event["data"]
        for block in data["message"]["content"]:
            if block.get("type") == "tool-call":
                call = {
                    "turn": data["turn"],
                    "step": data["step"],
                    "callId": block["id"],
                    "name": block["name"],
                    "arguments": json.dumps(block["arguments"], ensure_ascii=False),
                }
                out.append({"type": "tool/call", "data": call})
    return out


def _next_version(current: Any) -> str:
    if current is None:
        number = 0
    elif isinstance(current, int):
        number = current
    else:
        number = int(str(current).split(".")[0])
    return f"{number + 1:032}.{random.random():016}"


def _thread_of(config: RunnableConfig) -> str:
    thread_id = config.get("configurable", {}).get("thread_id")
    if thread_id is None:
        raise InvalidArgumentError(
            "a LangGraph config needs configurable.thread_id", argument="config"
        )
    return str(thread_id)


# -- the sync saver -----------------------------------------------------------------------


class SessionSQLSaver(BaseCheckpointSaver[str], _Logic):
    """LangGraph checkpoints in a ``SessionStore``, one session per thread.

    The store stays the caller's to close; ``from_url`` opens (and closes) one of its own.
    Calls are serialised by a lock; the ``a``-prefixed methods run the sync ones in a worker
    thread.
    """

    def __init__(self, store: SessionStore, *, serde: SerializerProtocol | None = None) -> None:
        if not isinstance(store, SessionStore):
            raise InvalidArgumentError(
                f"store must be a SessionStore, not {type(store).__name__} (an "
                "AsyncSessionStore goes with AsyncSessionSQLSaver)",
                argument="store",
            )
        super().__init__(serde=serde)
        self.store = store
        self._threads: dict[str, _Index] = {}
        self._lock = threading.RLock()

    @classmethod
    @contextlib.contextmanager
    def from_url(cls, url: str, **open_store_options: Any) -> Iterator[SessionSQLSaver]:
        """A saver on a store of its own (``open_store(url, **open_store_options)``)."""
        serde = open_store_options.pop("serde", None)
        store = open_store(url, **open_store_options)
        try:
            yield cls(store, serde=serde)
        finally:
            store.close()

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        return _next_version(current)

    # -- threads ------------------------------------------------------------------------

    def _index(self, thread_id: str, *, create: bool, fresh: bool = True) -> _Index | None:
        """The thread's current generation, refreshed unless ``fresh`` is False (None when it
        has none)."""
        index = self._threads.get(thread_id)
        if index is not None and not fresh and index.moved is None:
            return index  # a write: conditional on the head this index saw
        if index is not None:
            try:
                index.handle.refresh()
                index.fold()
                if index.moved is None:
                    return index
            except SessionNotFoundError:
                pass
            self._threads.pop(thread_id, None)
        for _ in range(MAX_ATTEMPTS):
            found = self._resolve(thread_id, create=create)
            if found is None or found.moved is None:
                if found is not None:
                    self._threads[thread_id] = found
                return found
            self._finish_move(found)
        raise ConcurrencyError(f"thread {thread_id!r}: could not settle its generations")

    def _resolve(self, thread_id: str, *, create: bool) -> _Index | None:
        base = _base_id(thread_id)
        gens = self._generations(base)
        for gen in sorted(gens)[:-1]:  # a finished move's leftover
            with contextlib.suppress(SessionNotFoundError):
                self._drop_if_sealed(_gen_id(base, gen))
        if gens:
            try:
                handle = self.store.open_session(_gen_id(base, max(gens)))
            except SessionNotFoundError:
                return self._resolve(thread_id, create=create)
        elif create:
            try:
                handle = self.store.create_session(base, labels=_labels(thread_id))
            except SessionExistsError:
                handle = self.store.open_session(base)
        else:
            return None
        index = _Index(handle)
        index.fold()
        return index

    def _generations(self, base: str) -> dict[int, str]:
        """The thread's sessions by generation: normally one; two while a move finishes.

        Later generations are listed by the prefix ``<base>~`` (no other thread's id starts
        with it: a thread id with ``~`` gets a digest id), the first is looked up by id.
        """
        infos = self.store.list_sessions(id_prefix=base + "~", limit=1000, order="created")
        gens = {}
        for info in infos:
            gen = _generation(info.id, base)
            if gen is not None:
                gens[gen] = info.id
        with contextlib.suppress(SessionNotFoundError):
            self.store.head_seq(base)
            gens[0] = base
        return gens

    def _drop_if_sealed(self, session_id: str) -> None:
        handle = self.store.open_session(session_id)
        if any(e.type == MOVED_TYPE for e in handle.events[-1:]):
            self.store.delete_session(session_id)

    def _finish_move(self, index: _Index) -> None:
        """Create the successor a sealed generation names (if nobody has), drop the old."""
        moved = index.moved
        seed = self._rewritten(index, moved["op"], _now(index))
        with contextlib.suppress(SessionExistsError):
            self.store.create_session(moved["to"], seed=seed, labels=moved.get("labels"))
        with contextlib.suppress(SessionNotFoundError):
            self.store.delete_session(index.handle.id)

    def _append(self, thread_id: str, build: Any, *, create: bool = True) -> Any:
        fresh = False  # the first try trusts the cached log: the append is conditional on it
        for _ in range(MAX_ATTEMPTS):
            index = self._index(thread_id, create=create, fresh=fresh)
            if index is None:
                return None
            batch = build(index)
            if not batch:
                if not fresh:  # nothing to write, by the cache's account: make sure
                    fresh = True
                    continue
                return index
            fresh = True
            try:
                index.handle.append_many(batch)
                index.fold()
                index.committed()
                return index
            except (ConcurrencyError, SessionNotFoundError):
                continue
        raise ConcurrencyError(f"thread {thread_id!r}: {MAX_ATTEMPTS} writes lost a race")

    def _move(self, index: _Index, thread_id: str, op: dict[str, Any]) -> bool:
        """Seal ``index``'s generation for ``op``, then finish the move (False: lost a race)."""
        base = _base_of(index.handle.id)
        gen = _generation(index.handle.id, base) or 0
        moved = {"to": _gen_id(base, gen + 1), "op": op, "labels": _labels(thread_id)}
        try:
            index.handle.append_many([{"type": MOVED_TYPE, "data": moved, "ignorable": True}])
        except (ConcurrencyError, SessionNotFoundError):
            return False
        index.fold()
        self._threads.pop(thread_id, None)
        self._finish_move(index)
        return True

    # -- BaseCheckpointSaver --------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        with self._lock:
            return self._get(self._index(_thread_of(config), create=False), config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        with self._lock:
            threads = [_thread_of(config)] if config else self._all_threads()
            found: builtins.list[CheckpointTuple] = []
            for thread_id in threads:
                index = self._index(thread_id, create=False)
                if index is None:
                    continue
                for item in self._matching(index, thread_id, config, filter, before):
                    if limit is not None and len(found) >= limit:
                        break
                    found.append(item)
        yield from found

    def _all_threads(self) -> builtins.list[str]:
        threads: builtins.list[str] = []
        for info in _paged(self.store, self.store.list_sessions):
            thread_id = info.labels.get(THREAD_LABEL)
            if thread_id is not None and thread_id not in threads:
                threads.append(thread_id)
        return threads

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id = _thread_of(config)
        with self._lock:
            self._append(
                thread_id,
                lambda index: self._put_batch(index, config, checkpoint, metadata, new_versions),
            )
        return _config(thread_id, config["configurable"].get("checkpoint_ns", ""), checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id = _thread_of(config)
        with self._lock:
            self._append(
                thread_id,
                lambda index: self._writes_batch(index, config, writes, task_id, task_path),
            )

    def delete_thread(self, thread_id: str) -> None:
        with self._lock:
            self._threads.pop(str(thread_id), None)
            for session_id in self._generations(_base_id(str(thread_id))).values():
                with contextlib.suppress(SessionNotFoundError):
                    self.store.delete_session(session_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = sorted({str(r) for r in run_ids})
        if not runs:
            return
        with self._lock:
            for thread_id in self._all_threads():
                self._rewrite(thread_id, {"op": "delete_runs", "runs": runs})

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise InvalidArgumentError(
                f"strategy must be 'keep_latest' or 'delete', not {strategy!r}",
                argument="strategy",
            )
        with self._lock:
            for thread_id in thread_ids:
                if strategy == "delete":
                    self.delete_thread(thread_id)
                else:
                    self._rewrite(str(thread_id), {"op": "keep_latest"})

    def _rewrite(self, thread_id: str, op: dict[str, Any]) -> None:
        for _ in range(MAX_ATTEMPTS):
            index = self._index(thread_id, create=False)
            if index is None or not _needs(self, index, op):
                return
            if self._move(index, thread_id, op):
                return
        raise ConcurrencyError(f"thread {thread_id!r}: {MAX_ATTEMPTS} rewrites lost a race")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = str(source_thread_id), str(target_thread_id)
        with self._lock:
            index = self._index(source, create=False)
            if index is None:
                return
            if self._generations(_base_id(target)):
                raise SessionExistsError(
                    f"thread {target!r} exists: copy_thread forks into a new thread",
                    session_id=_base_id(target),
                )
            child = _base_id(target)
            self.store.fork_session(index.handle.id, child_id=child)
            self.store.update_session(child, labels=_labels(target))

    # -- async forms: the sync calls in a worker thread -------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: [*self.list(config, filter=filter, before=before, limit=limit)]
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))


def _labels(thread_id: str) -> dict[str, str]:
    tid = str(thread_id)
    if len(tid) <= 1000 and tid.isprintable():
        return {THREAD_LABEL: tid}
    return {}


def _now(index: _Index) -> int:
    events = index.handle.events
    return int(events[-1].time) if len(events) else 0


def _needs(logic: _Logic, index: _Index, op: Mapping[str, Any]) -> bool:
    """Whether ``op`` would remove anything from the thread."""
    if op["op"] == "keep_latest":
        return any(len(cps) > 1 for cps in index.cps.values())
    runs = set(op["runs"])
    return any(
        _decode(logic.serde, cp.data["metadata"]).get("run_id") in runs
        for cps in index.cps.values()
        for cp in cps.values()
    )


def _paged(store: Any, lister: Any) -> Iterator[Any]:
    after = None
    while True:
        page = lister(id_prefix=ID_PREFIX, limit=500, order="created", after=after)
        yield from page
        if len(page) < 500:
            return
        after = page[-1]


# -- the async saver ----------------------------------------------------------------------


class AsyncSessionSQLSaver(BaseCheckpointSaver[str], _Logic):
    """LangGraph checkpoints in an ``AsyncSessionStore``, one session per thread.

    The ``a``-prefixed methods are the API; the sync ones run them on the saver's event loop
    from another thread (as LangGraph's async savers do) and refuse to run on that loop.
    """

    def __init__(
        self, store: AsyncSessionStore, *, serde: SerializerProtocol | None = None
    ) -> None:
        if not isinstance(store, AsyncSessionStore):
            raise InvalidArgumentError(
                f"store must be an AsyncSessionStore, not {type(store).__name__} (a "
                "SessionStore goes with SessionSQLSaver)",
                argument="store",
            )
        super().__init__(serde=serde)
        self.store = store
        self._threads: dict[str, _Index] = {}
        self._lock = loopsafe.Semaphore()
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()

    @classmethod
    @contextlib.asynccontextmanager
    async def from_url(
        cls, url: str, **open_store_options: Any
    ) -> AsyncIterator[AsyncSessionSQLSaver]:
        """A saver on a store of its own (``open_async_store(url, **open_store_options)``)."""
        serde = open_store_options.pop("serde", None)
        async with open_async_store(url, **open_store_options) as store:
            yield cls(store, serde=serde)

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        return _next_version(current)

    # -- threads ------------------------------------------------------------------------

    async def _index(self, thread_id: str, *, create: bool, fresh: bool = True) -> _Index | None:
        self._loop = asyncio.get_running_loop()
        index = self._threads.get(thread_id)
        if index is not None and not fresh and index.moved is None:
            return index  # a write: conditional on the head this index saw
        if index is not None:
            try:
                await index.handle.refresh()
                index.fold()
                if index.moved is None:
                    return index
            except SessionNotFoundError:
                pass
            self._threads.pop(thread_id, None)
        for _ in range(MAX_ATTEMPTS):
            found = await self._resolve(thread_id, create=create)
            if found is None or found.moved is None:
                if found is not None:
                    self._threads[thread_id] = found
                return found
            await self._finish_move(found)
        raise ConcurrencyError(f"thread {thread_id!r}: could not settle its generations")

    async def _resolve(self, thread_id: str, *, create: bool) -> _Index | None:
        base = _base_id(thread_id)
        for _ in range(MAX_ATTEMPTS):
            gens = await self._generations(base)
            for gen in sorted(gens)[:-1]:  # a finished move's leftover
                with contextlib.suppress(SessionNotFoundError):
                    await self._drop_if_sealed(_gen_id(base, gen))
            handle: AsyncStoredSession
            if gens:
                try:
                    handle = await self.store.open_session(_gen_id(base, max(gens)))
                except SessionNotFoundError:
                    continue
            elif create:
                try:
                    handle = await self.store.create_session(base, labels=_labels(thread_id))
                except SessionExistsError:
                    continue
            else:
                return None
            index = _Index(handle)
            index.fold()
            return index
        raise ConcurrencyError(f"thread {thread_id!r}: could not open its session")

    async def _generations(self, base: str) -> dict[int, str]:
        """The thread's sessions by generation: normally one; two while a move finishes.

        Later generations are listed by the prefix ``<base>~`` (no other thread's id starts
        with it: a thread id with ``~`` gets a digest id), the first is looked up by id.
        """
        infos = await self.store.list_sessions(id_prefix=base + "~", limit=1000, order="created")
        gens = {}
        for info in infos:
            gen = _generation(info.id, base)
            if gen is not None:
                gens[gen] = info.id
        with contextlib.suppress(SessionNotFoundError):
            await self.store.head_seq(base)
            gens[0] = base
        return gens

    async def _drop_if_sealed(self, session_id: str) -> None:
        handle = await self.store.open_session(session_id)
        if any(e.type == MOVED_TYPE for e in handle.events[-1:]):
            await self.store.delete_session(session_id)

    async def _finish_move(self, index: _Index) -> None:
        moved = index.moved
        seed = self._rewritten(index, moved["op"], _now(index))
        with contextlib.suppress(SessionExistsError):
            await self.store.create_session(moved["to"], seed=seed, labels=moved.get("labels"))
        with contextlib.suppress(SessionNotFoundError):
            await self.store.delete_session(index.handle.id)

    async def _append(self, thread_id: str, build: Any, *, create: bool = True) -> Any:
        fresh = False  # the first try trusts the cached log: the append is conditional on it
        for _ in range(MAX_ATTEMPTS):
            index = await self._index(thread_id, create=create, fresh=fresh)
            if index is None:
                return None
            batch = build(index)
            if not batch:
                if not fresh:  # nothing to write, by the cache's account: make sure
                    fresh = True
                    continue
                return index
            fresh = True
            try:
                await index.handle.append_many(batch)
                index.fold()
                index.committed()
                return index
            except (ConcurrencyError, SessionNotFoundError):
                continue
        raise ConcurrencyError(f"thread {thread_id!r}: {MAX_ATTEMPTS} writes lost a race")

    async def _move(self, index: _Index, thread_id: str, op: dict[str, Any]) -> bool:
        base = _base_of(index.handle.id)
        gen = _generation(index.handle.id, base) or 0
        moved = {"to": _gen_id(base, gen + 1), "op": op, "labels": _labels(thread_id)}
        try:
            await index.handle.append_many([{"type": MOVED_TYPE, "data": moved, "ignorable": True}])
        except (ConcurrencyError, SessionNotFoundError):
            return False
        index.fold()
        self._threads.pop(thread_id, None)
        await self._finish_move(index)
        return True

    async def _all_threads(self) -> builtins.list[str]:
        threads: builtins.list[str] = []
        after = None
        while True:
            page = await self.store.list_sessions(
                id_prefix=ID_PREFIX, limit=500, order="created", after=after
            )
            for info in page:
                thread_id = info.labels.get(THREAD_LABEL)
                if thread_id is not None and thread_id not in threads:
                    threads.append(thread_id)
            if len(page) < 500:
                return threads
            after = page[-1]

    async def _rewrite(self, thread_id: str, op: dict[str, Any]) -> None:
        for _ in range(MAX_ATTEMPTS):
            index = await self._index(thread_id, create=False)
            if index is None or not _needs(self, index, op):
                return
            if await self._move(index, thread_id, op):
                return
        raise ConcurrencyError(f"thread {thread_id!r}: {MAX_ATTEMPTS} rewrites lost a race")

    # -- BaseCheckpointSaver, async -------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        async with self._lock:
            return self._get(await self._index(_thread_of(config), create=False), config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found: builtins.list[CheckpointTuple] = []
        async with self._lock:
            threads = [_thread_of(config)] if config else await self._all_threads()
            for thread_id in threads:
                index = await self._index(thread_id, create=False)
                if index is None:
                    continue
                for item in self._matching(index, thread_id, config, filter, before):
                    if limit is not None and len(found) >= limit:
                        break
                    found.append(item)
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id = _thread_of(config)
        async with self._lock:
            await self._append(
                thread_id,
                lambda index: self._put_batch(index, config, checkpoint, metadata, new_versions),
            )
        return _config(thread_id, config["configurable"].get("checkpoint_ns", ""), checkpoint["id"])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id = _thread_of(config)
        async with self._lock:
            await self._append(
                thread_id,
                lambda index: self._writes_batch(index, config, writes, task_id, task_path),
            )

    async def adelete_thread(self, thread_id: str) -> None:
        async with self._lock:
            await self._delete_thread(str(thread_id))

    async def _delete_thread(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)
        for session_id in (await self._generations(_base_id(thread_id))).values():
            with contextlib.suppress(SessionNotFoundError):
                await self.store.delete_session(session_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = sorted({str(r) for r in run_ids})
        if not runs:
            return
        async with self._lock:
            for thread_id in await self._all_threads():
                await self._rewrite(thread_id, {"op": "delete_runs", "runs": runs})

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise InvalidArgumentError(
                f"strategy must be 'keep_latest' or 'delete', not {strategy!r}",
                argument="strategy",
            )
        async with self._lock:
            for thread_id in thread_ids:
                if strategy == "delete":
                    await self._delete_thread(str(thread_id))
                else:
                    await self._rewrite(str(thread_id), {"op": "keep_latest"})

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = str(source_thread_id), str(target_thread_id)
        async with self._lock:
            index = await self._index(source, create=False)
            if index is None:
                return
            child = _base_id(target)
            if await self._generations(child):
                raise SessionExistsError(
                    f"thread {target!r} exists: copy_thread forks into a new thread",
                    session_id=child,
                )
            await self.store.fork_session(index.handle.id, child_id=child)
            await self.store.update_session(child, labels=_labels(target))

    # -- sync forms: the async calls on the saver's loop, from another thread ---------------

    def _run(self, coro: Any) -> Any:
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop or loop.is_closed():
            coro.close()
            raise InvalidArgumentError(
                "AsyncSessionSQLSaver's sync methods run its async ones on its event loop "
                "from another thread; on that loop, use the a-prefixed methods (or "
                "graph.ainvoke / astream / aget_state)",
                argument="saver",
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return cast(CheckpointTuple | None, self._run(self.aget_tuple(config)))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> builtins.list[CheckpointTuple]:
            return [
                item async for item in self.alist(config, filter=filter, before=before, limit=limit)
            ]

        yield from self._run(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return cast(
            RunnableConfig, self._run(self.aput(config, checkpoint, metadata, new_versions))
        )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._run(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._run(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._run(self.aprune(thread_ids, strategy=strategy))
