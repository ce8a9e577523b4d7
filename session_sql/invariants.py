"""Relational invariants of a session log (SPEC §7.6), as a checker and as a validator.

A framework's session (its user messages' ``source.kind`` is one of ``FRAMEWORK_SOURCES``) is
checked for what its adapter guarantees, not for steps it does not write: the framework
runs a turn and numbers its model calls, but says nothing when a step (nor, for LangGraph,
a run that finishes) begins or ends. So in such a log a turn-scoped event names the open turn
(or turn 0 outside any turn: a rewritten LangGraph thread), whatever its step; a
``turn/start`` may close a turn left open; a ``tool/result`` answers a ``tool/call`` made
earlier in the log (a resume answers the call its interrupted run made). Seq order, turn
numbering, ``turn/end`` and every step event it does write are checked as in any log.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from session_sql.errors import InvalidEventError
from session_sql.events import SessionEvent
from session_sql.repair import NOT_STARTED

if TYPE_CHECKING:
    from session_sql.session import Session


class Violation(NamedTuple):
    seq: int
    code: str
    message: str


_TURN_SCOPED = frozenset(
    {"assistant/chunk", "assistant/message", "assistant/attempt", "tool/call", "tool/result"}
)
_REQUEST = frozenset({"request/header", "request/context"})

FRAMEWORK_SOURCES = frozenset(
    {"adk", "claude-agent-sdk", "langgraph", "openai-agents", "pydantic-ai"}
)
"""``source.kind`` of the user messages the framework adapters write (docs/integrations.md)."""


def is_framework_log(events: Iterable[SessionEvent]) -> bool:
    """Whether a log is a framework adapter's: a user message names a framework source."""
    for event in events:
        if event.type == "user/message":
            kind = _get(_get(event.data, "source"), "kind")
            if kind in FRAMEWORK_SOURCES:
                return True
    return False


def _get(data: Any, key: str) -> Any:
    return data.get(key) if isinstance(data, dict) else None


class InvariantState:
    """The fold state of the invariant checker; ``step`` checks one event and advances."""

    __slots__ = (
        "call_ids",
        "framework",
        "last_seq",
        "last_step",
        "last_turn",
        "open_step",
        "open_turn",
    )

    def __init__(self, *, framework: bool = False) -> None:
        self.framework = framework  # check what a framework adapter guarantees (see above)
        self.last_seq = -1
        self.last_turn = 0
        self.open_turn: int | None = None
        self.last_step = 0
        self.open_step: int | None = None
        self.call_ids: set[str] = set()

    def copy(self) -> InvariantState:
        new = copy.copy(self)
        new.call_ids = set(self.call_ids)
        return new

    def step(self, event: SessionEvent) -> list[Violation]:
        found: list[Violation] = []

        def bad(code: str, message: str) -> None:
            found.append(Violation(event.seq, code, message))

        if event.seq <= self.last_seq:
            bad("seq-order", f"seq {event.seq} does not follow {self.last_seq}")
        self.last_seq = max(self.last_seq, event.seq)
        t, data = event.type, event.data
        if t == "turn/start":
            turn = _get(data, "turn")
            if self.open_turn is not None and not self.framework:
                bad("turn-nested", f"turn/start while turn {self.open_turn} is open")
            if turn != self.last_turn + 1:
                bad("turn-number", f"turn/start {turn!r}, expected {self.last_turn + 1}")
            if type(turn) is int:
                self.last_turn = turn
            self.open_turn, self.open_step, self.last_step = turn, None, 0
            if not self.framework:
                self.call_ids.clear()
        elif t == "turn/end":
            if self.open_turn is None or _get(data, "turn") != self.open_turn:
                bad("turn-not-open", f"turn/end {_get(data, 'turn')!r} names no open turn")
            if self.open_step is not None:
                bad("step-open-at-turn-end", f"turn/end while step {self.open_step} is open")
            self.open_turn = self.open_step = None
        elif t == "step/start":
            step = _get(data, "step")
            if self.open_turn is None or _get(data, "turn") != self.open_turn:
                bad("step-outside-turn", "step/start outside its open turn")
            if self.open_step is not None:
                bad("step-nested", f"step/start while step {self.open_step} is open")
            if step != self.last_step + 1:
                bad("step-number", f"step/start {step!r}, expected {self.last_step + 1}")
            if type(step) is int:
                self.last_step = step
            self.open_step = step
            if not self.framework:
                self.call_ids.clear()
        elif t == "step/end":
            if self.open_step is None or (
                _get(data, "turn"),
                _get(data, "step"),
            ) != (self.open_turn, self.open_step):
                bad("step-not-open", "step/end names no open step")
            self.open_step = None
        elif t in _TURN_SCOPED and not (t == "tool/result" and event.surface_op != "append"):
            where = (_get(data, "turn"), _get(data, "step"))
            if self.framework:
                if where[0] != (0 if self.open_turn is None else self.open_turn):
                    bad("outside-turn", f"{t} names turn {where[0]!r}, open is {self.open_turn}")
            elif self.open_step is None or where != (self.open_turn, self.open_step):
                bad(
                    "outside-step",
                    f"{t} names turn/step {where}, open is ({self.open_turn}, {self.open_step})",
                )
            if t == "tool/call":
                call_id = _get(data, "callId")
                if type(call_id) is str:
                    self.call_ids.add(call_id)
            elif t == "tool/result":
                source = _get(_get(data, "message"), "source")
                call_id = _get(source, "callId")
                synthetic = _get(_get(data, "error"), "code") == NOT_STARTED
                if call_id not in self.call_ids and not synthetic:
                    bad("result-without-call", f"tool/result answers no tool/call {call_id!r}")
        elif t in _REQUEST and self.open_turn is None:
            bad("request-outside-turn", f"{t} outside an open turn")
        return found


def _as_event(raw: SessionEvent | dict[str, Any]) -> SessionEvent:
    return raw if isinstance(raw, SessionEvent) else SessionEvent.from_json(raw)


def check_invariants(events: Iterable[SessionEvent | dict[str, Any]]) -> list[Violation]:
    """Every invariant violation in ``events`` (an empty list means the log is sound); a
    framework's log is checked for what its adapter guarantees (see the module)."""
    log = [_as_event(raw) for raw in events]
    state = InvariantState(framework=is_framework_log(log))
    found: list[Violation] = []
    for event in log:
        found.extend(state.step(event))
    return found


def invariant_validator() -> Callable[[Session, SessionEvent], None]:
    """A pre-commit validator that refuses events breaking the invariants.

    Each candidate's transition is staged and only becomes the committed state once the event
    is in the session's log, so a veto by a later validator never advances this state.
    """
    committed = InvariantState()
    seen = 0  # how many logged events ``committed`` has folded
    staged: list[tuple[SessionEvent, InvariantState]] = []  # candidates of the current batch

    def validate(session: Session, candidate: SessionEvent) -> None:
        nonlocal committed, seen
        log = session.events
        while seen < len(log):
            event = log[seen]
            adopted = next((st for ev, st in staged if ev is event), None)
            if adopted is not None:
                committed = adopted
            else:
                committed.step(event)
            seen += 1
        # Earlier candidates of this batch (contiguous, below the candidate) stay staged.
        chain: list[tuple[SessionEvent, InvariantState]] = []
        for ev, st in staged:
            if ev.seq >= seen and ev.seq < candidate.seq:
                chain.append((ev, st))
        if [ev.seq for ev, _ in chain] != list(range(seen, candidate.seq)):
            chain = []
        base = chain[-1][1] if chain else committed
        state = base.copy()
        violations = state.step(candidate)
        if violations:
            first = violations[0]
            raise InvalidEventError(
                f"invariant {first.code}: {first.message}", seq=candidate.seq, code=first.code
            )
        staged[:] = [*chain, (candidate, state)]

    return validate
