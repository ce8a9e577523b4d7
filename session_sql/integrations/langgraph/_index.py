"""The in-memory index of a thread: what its log says, folded event by event (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from session_sql import Replace, SessionEvent, thaw

from ._codec import raw
from ._ids import CHECKPOINT_TYPE, MOVED_TYPE, WRITES_TYPE


@dataclass
class Cp:
    """One checkpoint event of the log."""

    seq: int
    ns: str
    id: str
    parent: str | None
    data: Any  # the event's data (frozen)


@dataclass
class Basis:
    """The messages value the surface shows: its version and length, the turn numbering
    after it, and the surface it was checked against (``Index.surface_mark``)."""

    version: Any
    length: int
    turns: tuple[int, int, bool]
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
            self.basis = Basis(pending.version, pending.length, pending.turns, self.surface_mark())
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

    def latest(self, ns: str) -> Cp | None:
        found = self.cps.get(ns)
        if not found:
            return None
        return found[max(found)]

    def now(self) -> int:
        """The time of the log's last event (the time a rewrite's seed events carry)."""
        events = self.handle.events
        return int(events[-1].time) if len(events) else 0
