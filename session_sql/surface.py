"""The surface: one pure planner for every surface rule (SPEC §4–5), and its fold.

``plan`` decides what an event does to the surface and raises on any violation without changing
anything. The in-memory ``Surface`` and the SQL side table both apply the very Transition it
returns, so the live view, the stored table and a replay cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, TypeAlias

from session_sql.catalog import DEFAULT_CATALOG, REMOVED, SURFACE_TYPES, Catalog
from session_sql.errors import InvalidEventError, SurfaceError
from session_sql.events import Replace, SessionEvent
from session_sql.jsonvalue import FrozenList, json_equal
from session_sql.messages import result_block


class AppendNode(NamedTuple):
    """Push ``seq`` onto the end of the surface."""

    seq: int


class ReplaceNodes(NamedTuple):
    """Remove positions ``start_pos..end_pos`` (inclusive) and put ``seq`` at ``start_pos``.

    ``seq`` is None for a ``surface/removed``: the range goes and nothing takes its place. A
    removal is a replace in every other respect (coverage, ``replace_generation``, the
    replacement history), so it is this transition rather than a type of its own: an applier
    cannot miss it, and mypy makes each one say what it does with a missing ``seq``.
    """

    start_pos: int
    end_pos: int
    seq: int | None
    shadowed: tuple[int, ...]


Transition: TypeAlias = AppendNode | ReplaceNodes | None


def is_exempt(event: SessionEvent, catalog: Catalog) -> bool:
    """An unknown ``ignorable`` event: kept verbatim, its surface metadata ignored."""
    return event.ignorable and event.type not in catalog


def plan(
    nodes: Sequence[int],
    event: SessionEvent,
    lookup: Callable[[int], SessionEvent],
    items: frozenset[str] = frozenset(),
) -> Transition:
    """What ``event`` does to a surface holding ``nodes``; raises, never mutates.

    ``lookup(seq)`` returns a logged event (needed for the tool/result replacement rule);
    ``items`` are the catalog's item types, surface-eligible like the message types. The
    caller has already excluded exempt (unknown, ignorable) events.
    """
    seq, op, sources = event.seq, event.surface_op, event.source_event_seqs
    if event.type not in SURFACE_TYPES and event.type not in items:
        if op is not None or sources is not None:
            raise SurfaceError(
                f"{event.type} is not surface-eligible and may not carry surfaceOp or "
                f"sourceEventSeqs (seq {seq})",
                seq=seq,
            )
        return None
    if op is None:
        raise SurfaceError(
            f"{event.type} is surface-eligible and must carry a surfaceOp (seq {seq}); "
            "without one it would vanish from history on resume",
            seq=seq,
        )
    if sources is not None:
        _check_provenance(seq, sources)
    if op == "append":
        if event.type == REMOVED:
            raise SurfaceError(
                f"surface/removed must carry a replace range, never 'append' (seq {seq})",
                seq=seq,
            )
        return AppendNode(seq)
    assert isinstance(op, Replace)
    start, end = op
    if start >= seq or end >= seq:
        raise SurfaceError(
            f"replace endpoints must precede the event (start={start}, end={end}, seq {seq})",
            seq=seq,
        )
    start_pos = _position(nodes, start, seq, "start")
    end_pos = _position(nodes, end, seq, "end")
    if start_pos > end_pos:
        raise SurfaceError(
            f"replace range is reversed: start {start} is at position {start_pos}, "
            f"end {end} at {end_pos} (seq {seq})",
            seq=seq,
        )
    shadowed = FrozenList(nodes[start_pos : end_pos + 1])
    covered = set(sources or ())
    missing = [s for s in shadowed if s not in covered]
    if missing:
        raise SurfaceError(
            f"sourceEventSeqs must cover every shadowed node; missing {missing} (seq {seq})",
            seq=seq,
        )
    if event.type == "tool/result":
        _check_result_replacement(event, shadowed, lookup)
    return ReplaceNodes(start_pos, end_pos, None if event.type == REMOVED else seq, shadowed)


def _check_provenance(seq: int, sources: tuple[int, ...]) -> None:
    if not sources:
        raise InvalidEventError(f"sourceEventSeqs must not be empty (seq {seq})", seq=seq)
    if len(set(sources)) != len(sources):
        raise InvalidEventError(f"sourceEventSeqs has duplicates: {list(sources)}", seq=seq)
    for s in sources:
        if not 0 <= s < seq:
            raise InvalidEventError(
                f"sourceEventSeqs entry {s} must be >= 0 and < the event's seq {seq}", seq=seq
            )


def _position(nodes: Sequence[int], target: int, seq: int, which: str) -> int:
    # Newest nodes sit at the end and replaces usually aim near it: search from the back.
    for pos in range(len(nodes) - 1, -1, -1):
        if nodes[pos] == target:
            return pos
    raise SurfaceError(f"replace {which} {target} is not on the surface (seq {seq})", seq=seq)


def _without_result_content(data: Any) -> Any:
    """``data`` with the result block's ``content`` blanked, for the pruning comparison."""
    block = result_block(data)
    if block is None:
        return data
    message = data["message"]
    blanked = {k: v for k, v in block.items() if k != "content"}
    return {**data, "message": {**message, "content": [blanked]}}


def _check_result_replacement(
    event: SessionEvent, shadowed: tuple[int, ...], lookup: Callable[[int], SessionEvent]
) -> None:
    """A tool/result may replace one tool/result, changing only the result block's content."""
    if len(shadowed) != 1:
        raise SurfaceError(
            f"a tool/result may replace exactly one node, not {len(shadowed)} (seq {event.seq})",
            seq=event.seq,
        )
    target = lookup(shadowed[0])
    if target.type != "tool/result":
        raise SurfaceError(
            f"a tool/result may only replace a tool/result, not {target.type} (seq {shadowed[0]})",
            seq=event.seq,
        )
    new_block, old_block = result_block(event.data), result_block(target.data)
    if (
        new_block is None
        or old_block is None
        or ("content" in new_block) != ("content" in old_block)
        or not json_equal(_without_result_content(event.data), _without_result_content(target.data))
    ):
        raise SurfaceError(
            "a tool/result replacement may change only the result block's content; turn, "
            "step, error, meta, message id/role/source, toolCallId and isError must be equal "
            f"(seq {event.seq} replacing {shadowed[0]})",
            seq=event.seq,
        )


class Surface:
    """The incremental surface of a live session: node seqs in order, and a replace counter."""

    __slots__ = ("_nodes", "_tuple", "replace_generation")

    def __init__(self, nodes: Iterable[int] = (), replace_generation: int = 0) -> None:
        self._nodes: list[int] = list(nodes)
        self._tuple: tuple[int, ...] | None = None
        self.replace_generation = replace_generation

    @property
    def nodes(self) -> tuple[int, ...]:
        """The node seqs in surface order (an immutable snapshot)."""
        if self._tuple is None:
            self._tuple = FrozenList(self._nodes)  # also equals the same list
        return self._tuple

    def node_list(self) -> list[int]:
        """The live node list (read-only by convention; for planners)."""
        return self._nodes

    def apply(self, transition: Transition) -> None:
        """Apply a planned transition; never re-validates."""
        if transition is not None:
            self._tuple = None
            if Surface.apply_to(self._nodes, transition):
                self.replace_generation += 1

    @staticmethod
    def apply_to(nodes: list[int], transition: AppendNode | ReplaceNodes) -> bool:
        """Apply ``transition`` to a bare node list; True when it was a replace."""
        if type(transition) is AppendNode:
            nodes.append(transition.seq)
            return False
        assert isinstance(transition, ReplaceNodes)
        added = () if transition.seq is None else (transition.seq,)
        nodes[transition.start_pos : transition.end_pos + 1] = added
        return True

    def copy(self) -> Surface:
        return Surface(self._nodes, self.replace_generation)

    def __repr__(self) -> str:
        return f"Surface(nodes={self.nodes!r}, replace_generation={self.replace_generation})"


_new_step = tuple.__new__


class Step(NamedTuple):
    """One replayed event, what it did to the surface, and the stored position it touched.

    ``position`` is the ``surface`` table ``pos`` of an append (``next_pos``) or of a replace
    (the start row's, which the new seq keeps); None when the event leaves the surface alone
    or only takes nodes off it (a ``surface/removed``).
    """

    event: SessionEvent
    transition: Transition
    position: int | None


_MASK64 = (1 << 64) - 1
DIGEST_MODULUS = 1 << 63
"""Digests live in ``[0, 2**63)``: every backend stores them in a BIGINT."""


def _mix(a: int, b: int) -> int:
    """A 64-bit mix of two ints (a multiply-xorshift finaliser): any change to either moves it."""
    x = (a * 0x9E3779B97F4A7C15 ^ b * 0xC2B2AE3D27D4EB4F ^ 0x165667B19E3779F9) & _MASK64
    x = ((x ^ (x >> 32)) * 0xD6E8FEB86659FD93) & _MASK64
    return x ^ (x >> 32)


def node_digest(pos: int, seq: int) -> int:
    """One surface row's share of a surface digest."""
    return _mix(pos, seq) % DIGEST_MODULUS


_EMPTY_COUNTERS = _mix(-1, 0)


def surface_digest(row_sum: int, next_pos: int, replace_generation: int) -> int:
    """The digest of a surface: its rows' shares (summed), sealed with the two counters.

    Order-independent over the rows (a replace updates it by subtracting the shares of the
    rows it takes off), so every write keeps it in O(1) per row; 0 for an empty session.
    """
    counters = _mix(-1 - next_pos, replace_generation) - _EMPTY_COUNTERS
    return (row_sum + counters) % DIGEST_MODULUS


class Replay:
    """A fold in progress: the surface, the stored position of each node, the log length.

    Positions follow the ``surface`` table's sparse rule: an append takes ``next_pos`` and
    bumps it; a replace keeps the start row's position for the new seq and drops the rest of
    its range; a removal drops the whole range (``next_pos`` never moves back). So the stored
    table is a pure function of the log.

    ``plan`` needs earlier events only for the tool/result replacement rule, and only events
    still on the surface; with ``keep_surface_events`` the replay keeps exactly those, so a
    caller streaming a log needs memory for its surface, never for the whole log.

    ``digest`` (``surface_digest``) seals the stored rows and counters: a write handle opened
    without a replay compares it with the rows it reads, and ``verify`` with the replay.
    """

    __slots__ = ("_kept", "_row_sum", "length", "next_pos", "positions", "surface")

    def __init__(
        self,
        surface: Surface | None = None,
        positions: Iterable[int] = (),
        next_pos: int = 0,
        length: int = 0,
        *,
        keep_surface_events: bool = False,
    ) -> None:
        self.surface = Surface() if surface is None else surface
        self.positions: list[int] = list(positions)
        self.next_pos = next_pos
        self.length = length  # the next seq
        self._kept: dict[int, SessionEvent] | None = {} if keep_surface_events else None
        self._row_sum = sum(
            node_digest(p, s) for p, s in zip(self.positions, self.surface.node_list(), strict=True)
        )

    @property
    def replace_generation(self) -> int:
        return self.surface.replace_generation

    @property
    def digest(self) -> int:
        """The ``surface_digest`` of this state (see ``surface_digest``)."""
        return surface_digest(self._row_sum, self.next_pos, self.replace_generation)

    def rows(self) -> list[tuple[int, int]]:
        """The ``(pos, event_seq)`` rows of the surface table, in surface order."""
        return list(zip(self.positions, self.surface.node_list(), strict=True))

    def fold(
        self,
        event: SessionEvent,
        catalog: Catalog,
        lookup: Callable[[int], SessionEvent] | None = None,
    ) -> Step:
        """Plan ``event`` (with ``take``, the only call to ``plan`` in any replay) and apply it;
        raises first.

        ``lookup`` finds earlier events; without it the kept surface events serve.
        """
        if lookup is None:
            assert self._kept is not None, "a replay without lookup must keep surface events"
            lookup = self._kept.__getitem__
        # Once per replayed event: only an ignorable event can be exempt.
        transition = (
            None
            if event.ignorable and is_exempt(event, catalog)
            else plan(self.surface._nodes, event, lookup, catalog.item_types)
        )
        if transition is None:  # most of a log (chunks, steps, tool calls): nothing moves
            self.length = event.seq + 1
            # Once per replayed event: without NamedTuple's Python-level __new__.
            return _new_step(Step, (event, None, None))
        return Step(event, transition, self.advance(event, transition))

    def take(
        self, event: SessionEvent, catalog: Catalog, lookup: Callable[[int], SessionEvent]
    ) -> None:
        """``fold`` for a caller that keeps only the event (a load): no ``Step`` is built."""
        transition = (
            None
            if event.ignorable and is_exempt(event, catalog)
            else plan(self.surface._nodes, event, lookup, catalog.item_types)
        )
        if transition is None:
            self.length = event.seq + 1
        else:
            self.advance(event, transition)

    def advance(self, event: SessionEvent, transition: Transition) -> int | None:
        """Apply an already planned transition of ``event``; returns the position it touched."""
        self.length = event.seq + 1
        if transition is None:
            return None
        kept = self._kept
        position: int | None
        if type(transition) is AppendNode:
            position = self.next_pos
            self.positions.append(position)
            self.next_pos += 1
            self._row_sum += node_digest(position, event.seq)
        else:
            assert isinstance(transition, ReplaceNodes)
            start, end = transition.start_pos, transition.end_pos
            self._row_sum -= _shares(self.positions[start : end + 1], transition.shadowed)
            if transition.seq is None:  # a removal: the range goes, nothing takes its place
                position = None
                del self.positions[start : end + 1]
            else:
                position = self.positions[start]
                self.positions[start : end + 1] = [position]
                self._row_sum += node_digest(position, transition.seq)
            if kept is not None:
                for seq in transition.shadowed:
                    del kept[seq]
        if kept is not None and position is not None:
            kept[event.seq] = event
        self.surface.apply(transition)
        return position

    def counters_after(self, transitions: Sequence[Transition]) -> tuple[int, int, int]:
        """``(next_pos, replace_generation, digest)`` once ``transitions`` are applied.

        Changes nothing; copies the positions only for a batch holding a replace after
        another transition (whose range then refers to the batch's own staged surface).
        """
        next_pos, generation, row_sum = self.next_pos, self.replace_generation, self._row_sum
        positions: list[int] = self.positions
        staged = False
        for i, transition in enumerate(transitions):
            if type(transition) is AppendNode:
                if staged:
                    positions.append(next_pos)
                row_sum += node_digest(next_pos, transition.seq)
                next_pos += 1
            elif type(transition) is ReplaceNodes:
                if i and not staged:
                    positions, staged = self._staged(transitions[:i]), True
                start, end = transition.start_pos, transition.end_pos
                row_sum -= _shares(positions[start : end + 1], transition.shadowed)
                kept = [] if transition.seq is None else [positions[start]]
                if transition.seq is not None:
                    row_sum += node_digest(positions[start], transition.seq)
                if staged:
                    positions[start : end + 1] = kept
                generation += 1
        return next_pos, generation, surface_digest(row_sum, next_pos, generation)

    def _staged(self, transitions: Sequence[Transition]) -> list[int]:
        """The positions after ``transitions`` (a copy)."""
        positions, next_pos = list(self.positions), self.next_pos
        for transition in transitions:
            if type(transition) is AppendNode:
                positions.append(next_pos)
                next_pos += 1
            elif type(transition) is ReplaceNodes:
                start, end = transition.start_pos, transition.end_pos
                positions[start : end + 1] = [] if transition.seq is None else [positions[start]]
        return positions

    def copy(self) -> Replay:
        twin = Replay.__new__(Replay)
        twin.surface = self.surface.copy()
        twin.positions = list(self.positions)
        twin.next_pos, twin.length, twin._row_sum = self.next_pos, self.length, self._row_sum
        twin._kept = None if self._kept is None else dict(self._kept)
        return twin

    def __repr__(self) -> str:
        return (
            f"Replay(nodes={self.surface.nodes!r}, positions={self.positions!r}, "
            f"next_pos={self.next_pos}, length={self.length})"
        )


def _shares(positions: Sequence[int], seqs: Sequence[int]) -> int:
    return sum(node_digest(p, s) for p, s in zip(positions, seqs, strict=True))


def replay(
    events: Iterable[SessionEvent],
    state: Replay,
    catalog: Catalog,
    lookup: Callable[[int], SessionEvent] | None = None,
) -> Iterator[Step]:
    """Fold checked events onto ``state`` one by one, yielding each ``Step`` as it is applied.

    Every event is planned exactly once. A caller that checks events first (seeds, loads,
    ``verify``) calls ``Replay.fold`` per event instead, around its own checks.
    """
    for event in events:
        yield state.fold(event, catalog, lookup)


class Replacement(NamedTuple):
    """One committed replace: the replacing ``seq``, its endpoints and what it shadowed."""

    seq: int
    start: int
    end: int
    shadowed: tuple[int, ...]


class SurfaceFold(NamedTuple):
    nodes: tuple[int, ...]
    replacements: tuple[Replacement, ...]


def _in_order(events: Iterable[SessionEvent | dict[str, Any]]) -> Iterator[SessionEvent]:
    for i, raw in enumerate(events):
        event = raw if isinstance(raw, SessionEvent) else SessionEvent.from_json(raw)
        if event.seq != i:
            raise InvalidEventError(f"seq {event.seq} at index {i}: seqs must run 0, 1, 2, ...")
        yield event


def fold_surface(
    events: Iterable[SessionEvent | dict[str, Any]], *, catalog: Catalog | None = None
) -> SurfaceFold:
    """Replay a complete log from seq 0 and return its surface and replacement history.

    Streams: only the events on the surface are kept, so any iterable of events will do.
    """
    known = DEFAULT_CATALOG if catalog is None else catalog
    state = Replay(keep_surface_events=True)
    replacements: list[Replacement] = []
    for event, transition, _ in replay(_in_order(events), state, known):
        if type(transition) is ReplaceNodes:
            op = event.surface_op
            assert isinstance(op, Replace)
            replacements.append(Replacement(event.seq, op.start, op.end, transition.shadowed))
    return SurfaceFold(state.surface.nodes, tuple(replacements))


__all__ = [
    "AppendNode",
    "ReplaceNodes",
    "Replacement",
    "Replay",
    "Step",
    "Surface",
    "SurfaceFold",
    "Transition",
    "fold_surface",
    "is_exempt",
    "node_digest",
    "plan",
    "replay",
    "surface_digest",
]
