"""What a put, a put_writes or a rewrite of a thread writes, planned from its index (no I/O):
the event batches both savers append, and the seed of a thread's next generation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from session_sql import thaw

from ._codec import decode, encode, whole
from ._ids import CHECKPOINT_TYPE, WRITES_TYPE, Batch, starts_run
from ._index import Basis, Cp, Index
from ._surface import surface_batch, surface_tail


def put_batch(
    serde: SerializerProtocol,
    index: Index,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> Batch:
    """The events of one ``put``: the checkpoint, then the surface's new messages."""
    conf = config["configurable"]
    ns = conf.get("checkpoint_ns", "")
    parent_id = conf.get("checkpoint_id")
    body = dict(checkpoint)
    values: dict[str, Any] = body.pop("channel_values")  # type: ignore[assignment]
    parent = index.cps.get(ns, {}).get(parent_id) if parent_id else None
    parent_versions: Mapping[str, Any] = {}
    if parent is not None:
        parent_versions = decode(serde, parent.data["checkpoint"]).get("channel_versions", {})
    index.pending_decoded.clear()
    index.pending_basis = None
    stored: dict[str, Any] = {}
    extended: dict[str, bool] = {}
    for channel, version in new_versions.items():
        if channel not in values:
            stored[channel] = {"empty": True}
            continue
        stored[channel], extended[channel] = blob(
            serde, index, ns, channel, values[channel], parent_versions.get(channel), version
        )
    meta = get_checkpoint_metadata(config, metadata)
    # A run begins with its input (or a replay's fork), or goes on from a checkpoint that is
    # not the last one its turn stored (a run from an ``update_state``, a resume after an
    # interrupt): the checkpoint opens a turn.
    source = meta.get("source")
    starts = ns == "" and (
        source in ("input", "fork")
        or (source == "loop" and (not index.turn_open or parent_id != index.turn_cp))
    )
    numbering = (index.turn + 1, 0) if starts else (index.turn, index.step)
    data = {
        "ns": ns,
        "id": checkpoint["id"],
        "parent": parent_id,
        "checkpoint": encode(serde, body),
        "metadata": encode(serde, meta),
        "versions": {k: v for k, v in new_versions.items()},
        "values": stored,
    }
    batch: Batch = [{"type": "turn/start", "data": {"turn": numbering[0]}}] if starts else []
    batch.append({"type": CHECKPOINT_TYPE, "data": data, "ignorable": True})
    messages = values.get("messages")
    if ns == "" and "messages" in new_versions and isinstance(messages, list):
        basis = index.basis
        if (
            basis is not None
            and extended.get("messages")
            and basis.version == parent_versions.get("messages")
            and basis.surface == index.surface_mark()
        ):
            events = surface_tail(messages[basis.length :], numbering)
        else:
            events = surface_batch(index.surfaced, messages, numbering)
        batch.extend(events)
        index.pending_basis = Basis(new_versions["messages"], len(messages), None)
    if ns == "" and (starts or index.turn_open):
        # an interrupt or an error written for this checkpoint before it: the run ended here
        reason = index.stop_reason(ns, checkpoint["id"])
        if reason is not None:
            batch.append(turn_end(numbering[0], reason))
    return batch


def turn_end(turn: int, reason: str) -> dict[str, Any]:
    return {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": reason}}}


def blob(
    serde: SerializerProtocol,
    index: Index,
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
                old = index.decoded_value(serde, ns, channel, previous, seq)
                if type(old) is list and len(old) <= len(value) and value[: len(old)] == old:
                    k = prev_blob.get("k", 0) + 1
                    target = k - (k & -k)
                    base_seq, base = seq, prev_blob
                    while base.get("k", 0) != target and "extends" in base:
                        base_seq = base["extends"]
                        base = index.values[base_seq][channel]
                    tail = value[base["len"] :]
                    encoded = encode(serde, tail)
                    grown = old + decode(serde, encoded)[len(old) - base["len"] :]
                    index.pending_decoded[(ns, channel, version)] = grown
                    part = {"extends": base_seq, "k": k, "len": len(value), "append": encoded}
                    return part, True
    encoded = whole(serde, value)
    if type(value) is list:
        index.pending_decoded[(ns, channel, version)] = decode(serde, encoded)
    return encoded, False


def writes_batch(
    serde: SerializerProtocol,
    index: Index,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> Batch:
    """The event of one ``put_writes``: the writes the log does not hold yet (none: [])."""
    conf = config["configurable"]
    ns = conf.get("checkpoint_ns", "")
    cp_id = conf["checkpoint_id"]
    existing = index.writes.get((ns, cp_id), {})
    kept = []
    for i, (channel, value) in enumerate(writes):
        idx = WRITES_IDX_MAP.get(channel, i)
        if idx >= 0 and (task_id, idx) in existing:
            continue
        kept.append({"idx": idx, "channel": channel, "value": encode(serde, value)})
    if not kept:
        return []
    data = {"ns": ns, "checkpoint": cp_id, "task": task_id, "path": task_path, "writes": kept}
    batch: Batch = [{"type": WRITES_TYPE, "data": data, "ignorable": True}]
    if ns != "":
        return batch
    channels = [w["channel"] for w in kept]
    if starts_run(task_id, channels) and not (index.turn_open and index.turn_from == cp_id):
        # an invocation's Command, or a resume: a run goes on from this checkpoint
        batch.insert(0, {"type": "turn/start", "data": {"turn": index.turn + 1}})
    elif index.turn_open and index.turn_cp == cp_id:
        # the run stopped at its last checkpoint: an interrupt(), or a task's error
        if INTERRUPT in channels:
            batch.append(turn_end(index.turn, "interrupted"))
        elif ERROR in channels:
            batch.append(turn_end(index.turn, "error"))
    return batch


def _kept(serde: SerializerProtocol, index: Index, op: Mapping[str, Any]) -> list[Cp]:
    """The checkpoints that ``op`` (keep_latest, or delete_runs) keeps, in log order."""
    keep: list[Cp] = []
    if op.get("op") == "keep_latest":
        for ns in index.cps:
            latest = index.latest(ns)
            if latest is not None:
                keep.append(latest)
    else:
        runs = set(op["runs"])
        for cps in index.cps.values():
            for cp in cps.values():
                run = decode(serde, cp.data["metadata"]).get("run_id")
                if run not in runs:
                    keep.append(cp)
    keep.sort(key=lambda cp: cp.seq)
    return keep


def needs(serde: SerializerProtocol, index: Index, op: Mapping[str, Any]) -> bool:
    """Whether ``op`` would remove anything from the thread."""
    if op["op"] == "keep_latest":
        return any(len(cps) > 1 for cps in index.cps.values())
    runs = set(op["runs"])
    return any(
        decode(serde, cp.data["metadata"]).get("run_id") in runs
        for cps in index.cps.values()
        for cp in cps.values()
    )


def rewritten(
    serde: SerializerProtocol, index: Index, op: Mapping[str, Any], now: int
) -> list[dict[str, Any]]:
    """The log of the thread after ``op`` (keep_latest, or delete_runs), as a seed."""
    keep = _kept(serde, index, op)
    out: list[dict[str, Any]] = []
    emitted: set[tuple[str, str, Any]] = set()
    emitted_at: dict[tuple[int, str], int] = {}  # (old seq, channel) -> new seq

    def add(kind: str, data: Any, **extra: Any) -> int:
        out.append({"type": kind, "seq": len(out), "time": now, "data": data, **extra})
        return len(out) - 1

    for cp in keep:
        checkpoint = decode(serde, cp.data["checkpoint"])
        versions: dict[str, Any] = {}
        values: dict[str, Any] = {}
        for channel, version in checkpoint.get("channel_versions", {}).items():
            key = (cp.ns, channel, version)
            seq = index.blobs.get(key)
            if seq is None or key in emitted:
                continue
            stored = thaw(index.values[seq][channel])
            if "extends" in stored:
                base = emitted_at.get((stored["extends"], channel))
                if base is not None:
                    stored = {**stored, "extends": base}
                else:  # its base is gone: the value, whole
                    present, value = index.value(serde, seq, channel)
                    stored = whole(serde, value) if present else {"empty": True}
            versions[channel] = version
            values[channel] = stored
            emitted.add(key)
        data = {**thaw(cp.data), "versions": versions, "values": values}
        at = add(CHECKPOINT_TYPE, data, ignorable=True)
        for channel in values:
            emitted_at[(cp.seq, channel)] = at
        for (task, idx), (_, channel, value, path) in index.writes.get((cp.ns, cp.id), {}).items():
            write = {"idx": idx, "channel": channel, "value": thaw(value)}
            wdata = {"ns": cp.ns, "checkpoint": cp.id, "task": task, "path": path}
            add(WRITES_TYPE, {**wdata, "writes": [write]}, ignorable=True)
    root = [cp for cp in keep if cp.ns == ""]
    if root:
        checkpoint = decode(serde, root[-1].data["checkpoint"])
        version = checkpoint.get("channel_versions", {}).get("messages")
        seq = index.blobs.get(("", "messages", version))
        if seq is not None:
            present, messages = index.value(serde, seq, "messages")
            if present and isinstance(messages, list):
                for event in surface_batch([], messages, (0, 0)):
                    if "surface_op" in event:
                        add(event["type"], event["data"], surfaceOp="append")
                    else:
                        add(event["type"], event["data"])
    return out
