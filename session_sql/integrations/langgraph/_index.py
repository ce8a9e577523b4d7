"""The in-memory index of a thread: what its log says, folded event by event (no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from session_sql import Replace, SessionEvent, thaw

from ._codec import raw
from ._ids import CHECKPOINT_TYPE, MOVED_TYPE, MOVING_TYPE, SETTLED_TYPE, WRITES_TYPE, starts_run


@dataclass
class Cp:
    """One checkpoint event of the log."""

    seq: int
    ns: str
    id: str
    parent: str | None
    data: Any  # the event's data (frozen)


def run_source(metadata: Any) -> bool:
    """Whether a checkpoint's stored metadata says a run stored it (not ``update_state``)."""
    meta = metadata.get("json")
    return isinstance(meta, Mapping) and meta.get("source") in ("input", "loop", "fork")


@dataclass
class Basis:
    """The messages value the surface shows: its version and length, and the surface it was
    checked against (``Index.surface_mark``)."""

    version: Any
    length: int
    surface: tuple[int, int] | None


@dataclass
class Index:
    """What a thread's log says, folded event by event (no I/O)."""

    handle: Any  # StoredSession | AsyncStoredSession
    folded: int = 0
    cps: dict[str, dict[str, Cp]] = field(default_factory=dict)
    blobs: dict[tuple[str, str, Any], int] = field(default_factory=dict)  # -> seq
    values: dict[int, Any] = field(default_factory=dict)  # seq -> values of that event
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, Any, str]]] = field(
        default_factory=dict
    )
    # what this integration put on the surface: (message id, seq, event data)
    surfaced: list[tuple[str, int, Any]] = field(default_factory=list)
    moved: Any = None
    # A generation a move created names the one it replaces until the move settles (see
    # ``_ops.Threads._settle``); ``settled``: the last move into, then out of, this one did.
    pending_from: str | None = None
    settled: bool = False
    # The saver's private decoded copy of each channel's latest list: (ns, channel) ->
    # (version, seq, value); and what a put in progress would make of them.
    decoded: dict[tuple[str, str], tuple[Any, int, Any]] = field(default_factory=dict)
    pending_decoded: dict[tuple[str, str, Any], Any] = field(default_factory=dict)
    # Which messages value the surface shows, so that a put appends only the new ones.
    basis: Basis | None = None
    pending_basis: Basis | None = None
    # The serde bytes of the pieces the last read of each channel decoded: (seq -> (type,
    # bytes)); the next version's read shares most of them, so base64 runs once a piece.
    pieces: dict[str, dict[int, tuple[str, bytes]]] = field(default_factory=dict)
    # The runs the log records (``turn/start``, ``turn/end``): the last turn's number,
    # whether it is open, the checkpoint its run went on from (named by its first writes, or
    # its first checkpoint's parent), the root checkpoint it last stored (or went on from: a
    # run's next checkpoint has it as parent), and the step of its last assistant message.
    turn: int = 0
    turn_open: bool = False
    turn_from: str | None = None
    turn_cp: str | None = None
    step: int = 0

    def value(self, serde: SerializerProtocol, seq: int, channel: str) -> tuple[bool, Any]:
        """The value of ``channel`` stored by the checkpoint event ``seq`` (False: empty)."""
        chain: list[tuple[int, Any]] = []  # (seq, encoded piece), the newest first
        blob = self.values[seq][channel]
        while "extends" in blob:
            chain.append((seq, blob["append"]))
            seq = blob["extends"]
            blob = self.values[seq][channel]
        if blob.get("empty"):
            return False, None
        chain.append((seq, blob))
        known = self.pieces.get(channel, {})
        kept: dict[int, tuple[str, bytes]] = {}
        parts = []
        for at, encoded in reversed(chain):
            if "json" in encoded:
                parts.append(thaw(encoded["json"]))
                continue
            piece = known.get(at) or raw(encoded)
            kept[at] = piece
            parts.append(serde.loads_typed(piece))
        self.pieces[channel] = kept
        value = parts[0]
        if len(parts) > 1:
            value = list(value)
            for part in parts[1:]:
                value.extend(part)
        return True, value

    def decoded_value(
        self, serde: SerializerProtocol, ns: str, channel: str, version: Any, seq: int
    ) -> Any:
        """The value of ``channel`` at ``version`` (stored at ``seq``), decoded once."""
        entry = self.decoded.get((ns, channel))
        if entry is not None and entry[0] == version and entry[1] == seq:
            return entry[2]
        present, value = self.value(serde, seq, channel)
        self.decoded[(ns, channel)] = (version, seq, value if present else None)
        return value if present else None

    def surface_mark(self) -> tuple[int, int]:
        """What the surface shows, in short: how many of our nodes, and the last one's seq."""
        return len(self.surfaced), self.surfaced[-1][1] if self.surfaced else -1

    def committed(self) -> None:
        """A put built on this index committed: adopt what it computed."""
        for (ns, channel, version), value in self.pending_decoded.items():
            seq = self.blobs.get((ns, channel, version))
            if seq is not None:
                self.decoded[(ns, channel)] = (version, seq, value)
        self.pending_decoded.clear()
        if self.pending_basis is not None:
            pending = self.pending_basis
            self.basis = Basis(pending.version, pending.length, self.surface_mark())
            self.pending_basis = None

    def fold(self) -> None:
        """Fold the events the handle holds that this index has not seen yet."""
        events = self.handle.events
        for event in events[self.folded :]:
            self._fold(event)
        self.folded = len(events)

    def _fold(self, event: SessionEvent) -> None:
        kind, data, seq = event.type, event.data, event.seq
        if kind == CHECKPOINT_TYPE:
            ns, cp_id = data["ns"], data["id"]
            self.cps.setdefault(ns, {})[cp_id] = Cp(seq, ns, cp_id, data["parent"], data)
            values = data["values"]
            self.values[seq] = values
            for channel, version in data["versions"].items():
                if channel in values:
                    self.blobs[(ns, channel, thaw(version))] = seq
            if ns == "" and self.turn_open and run_source(data["metadata"]):
                if self.turn_from is None:
                    self.turn_from = data["parent"]
                self.turn_cp = cp_id
        elif kind == WRITES_TYPE:
            key = (data["ns"], data["checkpoint"])
            if (
                key[0] == ""
                and self.turn_open
                and self.turn_cp is None
                and starts_run(data["task"], [w["channel"] for w in data["writes"]])
            ):
                self.turn_from = self.turn_cp = key[1]
            stored = self.writes.setdefault(key, {})
            for w in data["writes"]:
                inner = (data["task"], w["idx"])
                if inner[1] >= 0 and inner in stored:
                    continue
                stored[inner] = (data["task"], w["channel"], w["value"], data["path"])
        elif kind == MOVED_TYPE:
            self.moved, self.settled = data, False
        elif kind == MOVING_TYPE:
            self.pending_from = data["from"]
        elif kind == SETTLED_TYPE:
            self.pending_from, self.settled = None, True
        elif kind == "turn/start":
            turn = data.get("turn") if isinstance(data, Mapping) else None
            self.turn = turn if type(turn) is int else self.turn + 1
            self.turn_open, self.turn_from, self.turn_cp, self.step = True, None, None, 0
        elif kind == "turn/end":
            self.turn_open = False
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
        if event.type == "assistant/message" and data.get("turn") == self.turn:
            step = data.get("step")
            if type(step) is int and step > self.step:
                self.step = step

    def stop_reason(self, ns: str, cp_id: str) -> str | None:
        """How the run that stored ``cp_id`` stopped there, by the writes held for it: an
        ``interrupt()`` (``interrupted``), a task's error (``error``), or not (None)."""
        channels = {w[1] for w in self.writes.get((ns, cp_id), {}).values()}
        if INTERRUPT in channels:
            return "interrupted"
        if ERROR in channels:
            return "error"
        return None

    def latest(self, ns: str) -> Cp | None:
        found = self.cps.get(ns)
        if not found:
            return None
        return found[max(found)]

    def now(self) -> int:
        """The time of the log's last event (the time a rewrite's seed events carry)."""
        events = self.handle.events
        return int(events[-1].time) if len(events) else 0
