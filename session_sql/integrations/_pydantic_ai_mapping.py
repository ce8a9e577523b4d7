"""How a pydantic-ai run lies in a session_sql session, without I/O.

``events_of_message`` renders a model message a snapshot adds as the core events that hold
it (the message itself kept in the first of them); ``Run`` folds a run's log back into what
the ``StepStore`` protocol reads (the run record, step events, snapshots, the tool-effect
ledger) and builds the events that bring the surface to a new snapshot's history.
``pydantic_ai.SessionSQLStepStore`` does the storing; the module docstring there describes
the mapping.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from session_sql import Replace, thaw
from session_sql.catalog import REMOVED
from session_sql.events import SessionEvent
from session_sql.integrations import (
    PYDANTIC_AI_EFFECT,
    PYDANTIC_AI_MESSAGE,
    PYDANTIC_AI_REVISION,
    PYDANTIC_AI_RUN,
    PYDANTIC_AI_SNAPSHOT,
    PYDANTIC_AI_STEP,
)
from session_sql.jsoncodec import dumps_frozen

ID_PREFIX = "pydantic-ai:"
KEY = "pydantic_ai"
"""Where a core message keeps the model message it renders (on its group's first event)."""
PROVIDER = "pydantic-ai"
"""``source.provider`` when the model response names no provider."""
LABEL_RUN = "pydantic_ai_run"
LABEL_CONVERSATION = "pydantic_ai_conversation"
LABEL_PARENT = "pydantic_ai_parent"
LABEL_AGENT = "pydantic_ai_agent"
LABEL_RECORD_AT = "pydantic_ai_record_at"
"""The seq of the run record's event, when it is not the first event of the session."""
LOG_ONLY = (
    PYDANTIC_AI_RUN,
    PYDANTIC_AI_STEP,
    PYDANTIC_AI_SNAPSHOT,
    PYDANTIC_AI_EFFECT,
    PYDANTIC_AI_REVISION,
)
"""The log-only types a run's session holds (model messages are item types)."""

Batch = list[dict[str, Any]]


def session_id(run_id: str) -> str:
    """The store id of a run: ``pydantic-ai:<run id>``, or a digest of a long or odd id."""
    if run_id and len(run_id) <= 100 and run_id.isprintable():
        return ID_PREFIX + run_id
    return ID_PREFIX + "#" + hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()


def label_value(value: str | None) -> str | None:
    """``value`` when a label can hold it (printable, at most 1,000 characters)."""
    if value is None or len(value) > 1000 or not value.isprintable():
        return None
    return value


def run_labels(record: Mapping[str, Any]) -> dict[str, str]:
    """The labels ``list_runs`` filters on (a value a label cannot hold is left out)."""
    labels = {}
    for label, name in (
        (LABEL_RUN, "run_id"),
        (LABEL_CONVERSATION, "conversation_id"),
        (LABEL_PARENT, "parent_run_id"),
        (LABEL_AGENT, "agent_name"),
    ):
        value = label_value(record.get(name))
        if value is not None:
            labels[label] = value
    return labels


def title_of(message: Any) -> str:
    """A session title from a user message: its text, on one line, at most 200 characters."""
    text = " ".join(b["text"] for b in message.get("content") or () if b.get("type") == "text")
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line if len(line) <= 200 else line[:199] + "…"


def message_text(message: Any) -> str:
    """The compact text of a model message's JSON, the same for its plain and its frozen
    value (what ``Run`` compares histories on, and validates snapshots from)."""
    return dumps_frozen(message)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    items = [content] if isinstance(content, str) else content
    if not isinstance(items, list):
        return []
    return [
        {"type": "text", "text": item}
        if isinstance(item, str)
        else {"type": "pydantic-ai-content", "content": item}
        for item in items
    ]


def _arguments(args: Any) -> str:
    if isinstance(args, str):
        return args
    return json.dumps({} if args is None else args, ensure_ascii=False)


@dataclass
class Position:
    """Where the log stands: its next seq, the open turn (0: none) and its last step."""

    seq: int = 0
    turn: int = 0
    turns: int = 0
    step: int = 0


def events_of_message(
    message: dict[str, Any], at: Position, calls: dict[str, tuple[int, int]]
) -> Batch:
    """The events that put one model message (its JSON) on the surface at ``at``; the first
    keeps the message. ``at`` advances past them; ``calls`` (a tool call id: the seq of its
    ``tool/call`` and its step, for provenance) gains the calls a response makes."""
    group = (
        _response_events(message, at, calls)
        if message.get("kind") == "response"
        else _request_events(message, at, calls)
    )
    if not group:
        group = [{"type": PYDANTIC_AI_MESSAGE, "data": message, "surface_op": "append"}]
    else:
        first = group[0]["data"]
        first.get("message", first)[KEY] = message
    at.seq += len(group)
    return group


def _response_events(
    message: dict[str, Any], at: Position, calls: dict[str, tuple[int, int]]
) -> Batch:
    at.step += 1
    head = at.seq
    blocks: list[dict[str, Any]] = []
    tool_calls: Batch = []
    for part in message.get("parts") or []:
        kind = part.get("part_kind")
        if kind == "text":
            blocks.append({"type": "text", "text": _text(part.get("content"))})
        elif kind == "thinking":
            blocks.append({"type": "reasoning", "text": _text(part.get("content"))})
        elif kind == "tool-call" and isinstance(part.get("tool_call_id"), str):
            call_id, name = part["tool_call_id"], _text(part.get("tool_name"))
            arguments = _arguments(part.get("args"))
            blocks.append(
                {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}
            )
            calls[call_id] = (head + 1 + len(tool_calls), at.step)
            call = {"turn": at.turn, "step": at.step, "callId": call_id, "name": name}
            tool_calls.append({"type": "tool/call", "data": {**call, "arguments": arguments}})
    source = {
        "kind": "model",
        "provider": message.get("provider_name") or PROVIDER,
        "model": message.get("model_name") or "unknown",
    }
    assistant = {"id": f"pydantic-ai-{head}", "role": "assistant", "content": blocks}
    data: dict[str, Any] = {
        "turn": at.turn,
        "step": at.step,
        "message": {**assistant, "source": source},
    }
    usage = message.get("usage") or {}
    tokens_in, tokens_out = usage.get("input_tokens"), usage.get("output_tokens")
    if type(tokens_in) is int and type(tokens_out) is int:
        data["usage"] = {"inputTokens": tokens_in, "outputTokens": tokens_out}
    event = {"type": "assistant/message", "data": data, "surface_op": "append"}
    return [event, *tool_calls]


def _request_events(
    message: dict[str, Any], at: Position, calls: dict[str, tuple[int, int]]
) -> Batch:
    events: Batch = []
    for part in message.get("parts") or []:
        kind = part.get("part_kind")
        seq = at.seq + len(events)
        call_id = part.get("tool_call_id")
        if kind == "user-prompt":
            blocks = _user_blocks(part.get("content"))
            source = {"kind": PROVIDER}
            user = {"id": f"pydantic-ai-{seq}", "role": "user", "content": blocks}
            events.append({"type": "user/message", "data": {**user, "source": source}})
        elif kind in ("tool-return", "retry-prompt") and isinstance(call_id, str):
            if kind == "retry-prompt" and part.get("tool_name") is None:
                continue
            block: dict[str, Any] = {
                "type": "tool-result",
                "toolCallId": call_id,
                "content": [{"type": "text", "text": _text(part.get("content"))}],
            }
            if kind == "retry-prompt" or part.get("outcome") not in (None, "success"):
                block["isError"] = True
            source = {"kind": "tool", "callId": call_id}
            result = {"id": f"pydantic-ai-{seq}", "role": "user", "content": [block]}
            cited, step = calls.get(call_id, (None, at.step))
            data = {"turn": at.turn, "step": step, "message": {**result, "source": source}}
            event: dict[str, Any] = {"type": "tool/result", "data": data}
            if cited is not None:
                event["source_event_seqs"] = [cited]
            events.append(event)
        else:
            continue
        events[-1]["surface_op"] = "append"
    return events


def signature(message: Any) -> list[Any]:
    """What the surface shows of a model message: two messages with one signature render to
    the same core events (turn, step, ids and the kept JSON aside)."""
    shown: list[Any] = []
    for event in events_of_message(thaw(message), Position(), {}):
        data = event["data"]
        if event["type"] == PYDANTIC_AI_MESSAGE:
            shown.append(data)
            continue
        body = data.get("message", data)
        shown.append((event["type"], body.get("content"), body.get("source"), data.get("name")))
    return shown


def kept_message(event: SessionEvent) -> tuple[Any, int | None]:
    """The model message JSON an event of the log keeps (or None), and for a revision the
    seq of the message it revises."""
    if event.type == PYDANTIC_AI_MESSAGE:
        return event.data, None
    if event.type == PYDANTIC_AI_REVISION:
        return event.data["message"], event.data["of"]
    if event.type == "user/message":
        return event.data.get(KEY), None
    if event.type in ("assistant/message", "tool/result"):
        return event.data["message"].get(KEY), None
    return None, None


@dataclass
class Run:
    """A run's log folded into what the protocol reads; kept per run and brought up to date
    with the events appended since (by this process or another)."""

    at: Position = field(default_factory=Position)
    record: dict[str, Any] | None = None
    steps: list[Any] = field(default_factory=list)
    step_keys: set[str] = field(default_factory=set)
    snapshots: list[Any] = field(default_factory=list)
    snapshot_keys: set[str] = field(default_factory=set)
    effects: dict[str, Any] = field(default_factory=dict)
    texts: dict[int, str] = field(default_factory=dict)
    """Each kept message's JSON text by the seq that keeps it."""
    groups: dict[int, int] = field(default_factory=dict)
    """The surface head of each kept message (a revision's is the revised message's)."""
    current: list[int] = field(default_factory=list)
    """The latest snapshot's history, by the seqs that keep its messages."""
    nodes: list[int] = field(default_factory=list)
    calls: dict[str, tuple[int, int]] = field(default_factory=dict)
    prompt: str | None = None
    """The text of the run's first user message (its session's title)."""

    def fold(self, events: Iterable[SessionEvent]) -> None:
        """Take in events that follow the ones folded so far, in seq order."""
        for event in events:
            if event.seq != self.at.seq:
                continue  # already folded (a read that overlapped a write)
            self.at.seq += 1
            self._fold_surface(event)
            kind, data = event.type, event.data
            if kind == PYDANTIC_AI_STEP:
                self.steps.append(data)
                if data.get("idempotency_key") is not None:
                    self.step_keys.add(data["idempotency_key"])
            elif kind == PYDANTIC_AI_SNAPSHOT:
                self.snapshots.append(data)
                self.current = list(data["message_seqs"])
                if data.get("idempotency_key") is not None:
                    self.snapshot_keys.add(data["idempotency_key"])
            elif kind == PYDANTIC_AI_EFFECT:
                self.effects[data["tool_call_id"]] = data
            elif kind == PYDANTIC_AI_RUN:
                self.record = data
            elif kind == "turn/start":
                self.at.turn = self.at.turns = data["turn"]
                self.at.step = 0
            elif kind == "turn/end":
                self.at.turn = 0
            elif kind == "tool/call":
                self.calls[data["callId"]] = (event.seq, data["step"])
            elif kind == "assistant/message":
                self.at.step = max(self.at.step, data["step"])
            elif kind == "user/message" and self.prompt is None:
                self.prompt = title_of(data)
            kept, of = kept_message(event)
            if kept is not None:
                self.texts[event.seq] = message_text(kept)
                self.groups[event.seq] = event.seq if of is None else self.groups.get(of, of)

    def _fold_surface(self, event: SessionEvent) -> None:
        op = event.surface_op
        if op == "append":
            self.nodes.append(event.seq)
        elif isinstance(op, Replace) and op.start in self.nodes and op.end in self.nodes:
            a, b = self.nodes.index(op.start), self.nodes.index(op.end)
            self.nodes[a : b + 1] = [] if event.type == REMOVED else [event.seq]

    def latest(self, include_interrupted: bool) -> Any:
        """The newest snapshot's data (``complete`` only unless ``include_interrupted``)."""
        for data in reversed(self.snapshots):
            if include_interrupted or data.get("state") == "complete":
                return data
        return None

    def history_json(self, snapshot: Mapping[str, Any]) -> str:
        """A snapshot's model messages as one JSON list (pydantic validates JSON text faster
        than Python values)."""
        return "[" + ",".join(self.texts[seq] for seq in snapshot["message_seqs"]) + "]"

    def snapshot_batch(self, messages: list[Any], texts: list[str]) -> tuple[Batch, list[int]]:
        """The events that make the surface show ``messages`` (a snapshot's history, as JSON)
        after the latest snapshot's history, and the seqs keeping each of them.

        The history usually extends the last one: its new messages are appended. A message
        that pydantic-ai filled in since (a request gets its timestamp when it is sent) and
        that renders the same is a ``pydantic-ai/revision``; from the first message that
        differs otherwise, the old history is taken off the surface (``surface/removed``) and
        the rest is appended.
        """
        at, calls = replace(self.at), dict(self.calls)
        batch: Batch = []
        seqs: list[int] = []
        current = self.current
        matching = True
        for i, (message, text) in enumerate(zip(messages, texts, strict=True)):
            old = current[i] if matching and i < len(current) else None
            if old is not None and self.texts.get(old) == text:
                seqs.append(old)
                continue
            if old is not None and signature(json.loads(self.texts[old])) == signature(message):
                seqs.append(at.seq)
                revision = {"of": old, "message": message}
                batch.append({"type": PYDANTIC_AI_REVISION, "data": revision})
                at.seq += 1
                continue
            if matching:
                matching = False
                batch.extend(self._removal(current[i:], at))
            seqs.append(at.seq)
            batch.extend(events_of_message(message, at, calls))
        if matching:
            batch.extend(self._removal(current[len(messages) :], at))
        return batch, seqs

    def _removal(self, dropped: list[int], at: Position) -> Batch:
        """A ``surface/removed`` taking the messages ``dropped`` (and what follows) off."""
        head = self.groups.get(dropped[0]) if dropped else None
        if head is None or head not in self.nodes:
            return []
        shadowed = self.nodes[self.nodes.index(head) :]
        at.seq += 1
        return [
            {
                "type": REMOVED,
                "data": {"reason": "pydantic-ai: the history was rewritten"},
                "surface_op": Replace(shadowed[0], shadowed[-1]),
                "source_event_seqs": shadowed,
            }
        ]
