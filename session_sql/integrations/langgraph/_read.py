"""LangGraph's checkpoint tuples from a thread's index (no I/O)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ._codec import decode
from ._ids import config as make_config
from ._index import Cp, Index


def channel_values(
    serde: SerializerProtocol, index: Index, cp: Cp, checkpoint: Any
) -> dict[str, Any]:
    """The values of the channels ``checkpoint`` names, from the events that stored them."""
    result: dict[str, Any] = {}
    for channel, version in checkpoint.get("channel_versions", {}).items():
        seq = index.blobs.get((cp.ns, channel, version))
        if seq is None:
            continue
        present, value = index.value(serde, seq, channel)
        if present:
            result[channel] = value
    return result


def pending(
    serde: SerializerProtocol, index: Index, ns: str, cp_id: str
) -> list[tuple[str, str, Any]]:
    """The pending writes of a checkpoint, in LangGraph's order."""
    stored = index.writes.get((ns, cp_id), {})
    keys = sorted(stored, key=lambda k: writes_sort_key(stored[k][3], *k))
    return [(stored[k][0], stored[k][1], decode(serde, stored[k][2])) for k in keys]


def checkpoint_tuple(
    serde: SerializerProtocol, index: Index, thread_id: str, cp: Cp
) -> CheckpointTuple:
    checkpoint = decode(serde, cp.data["checkpoint"])
    full = {**checkpoint, "channel_values": channel_values(serde, index, cp, checkpoint)}
    return CheckpointTuple(
        config=make_config(thread_id, cp.ns, cp.id),
        checkpoint=cast(Checkpoint, full),
        metadata=cast(CheckpointMetadata, decode(serde, cp.data["metadata"])),
        parent_config=make_config(thread_id, cp.ns, cp.parent) if cp.parent else None,
        pending_writes=pending(serde, index, cp.ns, cp.id),
    )


def get(
    serde: SerializerProtocol, index: Index | None, config: RunnableConfig
) -> CheckpointTuple | None:
    """``get_tuple``'s answer: the checkpoint ``config`` names, or its namespace's latest."""
    if index is None:
        return None
    conf = config["configurable"]
    ns = conf.get("checkpoint_ns", "")
    cp_id = get_checkpoint_id(config)
    cp = index.cps.get(ns, {}).get(cp_id) if cp_id else index.latest(ns)
    if cp is None:
        return None
    found = checkpoint_tuple(serde, index, conf["thread_id"], cp)
    if cp_id:  # as InMemorySaver: the config asked for comes back as it was given
        return found._replace(config=config)
    return found


def matching(
    serde: SerializerProtocol,
    index: Index,
    thread_id: str,
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
) -> Iterator[CheckpointTuple]:
    """``list``'s answer for one thread, newest first in each namespace."""
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
                metadata = decode(serde, cp.data["metadata"])
                if not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
            yield checkpoint_tuple(serde, index, thread_id, cp)
