"""How OpenAI Agents SDK items lie in a session_sql log, without I/O.

``openai_agents.SessionSQLSession`` does the storing; this module turns one ``add_items``
batch into the events that hold it and takes an item back out of a surface node. Each item is
one surface node whose message keeps the exact item (so ``get_items`` gives it back byte for
byte); where a core message says what the item says, the node is that core message (user
text, assistant text, a function call, its output) and the batch also carries the log-only
events the analytics read: ``turn/start``/``turn/end`` around a run, a ``tool/call`` beside
each function call, and the run's token usage on its assistant messages.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeGuard

import orjson

from session_sql import SurfaceMessage, thaw
from session_sql.errors import InvalidArgumentError
from session_sql.integrations import OPENAI_AGENTS_ITEM
from session_sql.jsonvalue import FrozenDict

SOURCE_KIND = "openai-agents"
"""``source.kind`` of the user messages, ``source.provider`` of the other core messages."""

MODEL = "unknown"
"""``source.model`` of assistant messages: the SDK's ``Session`` protocol does not name it."""

TURN_SCOPED = frozenset({"assistant/message", "tool/call", "tool/result"})

Batch = list[dict[str, Any]]


@dataclass(frozen=True)
class Position:
    """Where a session's log stands, turn-wise, when it holds ``seq`` events."""

    seq: int
    turn: int = 0  # the latest turn's number (0: none yet)
    open: bool = False  # whether that turn has not ended
    step: int = 0  # the latest step (one per batch of model output) of that turn


@dataclass(frozen=True)
class Usage:
    """Tokens the run used since the last batch that recorded its usage."""

    input_tokens: int
    output_tokens: int

    def to_json(self) -> dict[str, int]:
        return {"inputTokens": self.input_tokens, "outputTokens": self.output_tokens}


def new_id() -> str:
    return f"oa_{uuid.uuid4().hex}"


def id_source() -> Callable[[], str]:
    """Message ids for one batch: one random 128-bit number, counted up from (``new_id``'s
    form; one ``uuid4``, a system call, per batch instead of one per message)."""
    counter = itertools.count(uuid.uuid4().int)
    return lambda: f"oa_{next(counter) & _ID_MASK:032x}"


_ID_MASK = (1 << 128) - 1
_STR_ONLY = frozenset({str})


def _text_parts(content: Any) -> bool:
    """Content made of ``input_text`` parts only, with nothing else in them, each keyed in the
    order they are rebuilt in (another order is kept verbatim as an item, SPEC §12.1)."""
    return (
        isinstance(content, list)
        and len(content) > 0
        and all(
            isinstance(part, dict)
            and list(part) == ["type", "text"]
            and part["type"] == "input_text"
            and type(part["text"]) is str
            for part in content
        )
    )


def _nonempty(value: Any) -> bool:
    return type(value) is str and value != ""


def is_user_input(item: Any) -> bool:
    """A user message, whatever its content: what a run's input starts with."""
    return (
        isinstance(item, dict)
        and item.get("role") == "user"
        and item.get("type", "message") == "message"
    )


def _blocks(content: Any) -> list[Any] | None:
    """Text parts as ``text`` blocks, other parts as they are (None: not a list of parts)."""
    if type(content) is str:
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        return None
    blocks: list[Any] = []
    for part in content:
        if not (isinstance(part, dict) and type(part.get("type")) is str):
            return None
        kind = part["type"]
        if kind in ("output_text", "input_text", "text") and type(part.get("text")) is str:
            blocks.append({"type": "text", "text": part["text"]})
        elif kind == "refusal" and type(part.get("refusal")) is str:
            blocks.append({"type": "text", "text": part["refusal"]})
        else:
            blocks.append(part)
    return blocks


def _classified(item: Any) -> tuple[str, list[Any] | None]:
    """``kind_of(item)`` and, for ``assistant`` and ``result``, the message's content blocks."""
    if not isinstance(item, dict) or not _STR_ONLY.issuperset(map(type, item)):
        return "item", None
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role == "user":
            content = item.get("content")
            return ("user" if type(content) is str or _text_parts(content) else "item"), None
        if role == "assistant":
            blocks = _blocks(item.get("content"))
            return ("assistant", blocks) if blocks else ("item", None)
        return "item", None
    if kind == "function_call":
        ok = _nonempty(item.get("call_id")) and _nonempty(item.get("name"))
        return ("call" if ok and type(item.get("arguments")) is str else "item"), None
    if kind == "function_call_output" and _nonempty(item.get("call_id")):
        blocks = _blocks(item.get("output"))
        return ("result", blocks) if blocks else ("item", None)
    return "item", None


def kind_of(item: Any) -> str:
    """``user``, ``assistant``, ``call``, ``result`` (the core shapes) or ``item``."""
    return _classified(item)[0]


def _without(item: dict[str, Any], key: str) -> dict[str, Any]:
    """A copy of ``item`` without ``key`` (which it has), its other keys in their order."""
    rest = dict(item)
    del rest[key]
    return rest


def user_event(item: dict[str, Any], ids: Callable[[], str] = new_id) -> dict[str, Any]:
    """A user text message as a ``user/message`` whose ``source`` keeps the item's other keys."""
    content: Any = item["content"]
    texts = [content] if type(content) is str else [part["text"] for part in content]
    rest = _without(item, "content")
    source: dict[str, Any] = {
        "kind": SOURCE_KIND,
        "item": rest,
        "content": "text" if type(content) is str else "parts",
    }
    at = list(item).index("content")
    if at < len(rest):  # not the last key: say where it goes back (SPEC §12.1)
        source["contentAt"] = at
    message = {
        "id": ids(),
        "role": "user",
        "content": [{"type": "text", "text": text} for text in texts],
        "source": source,
    }
    return {"type": "user/message", "data": message}


def item_event(item: Any) -> dict[str, Any]:
    """The event that holds ``item`` outside a run: user text as a core message, the rest as
    an item (what compaction writes)."""
    if item is None:
        raise InvalidArgumentError("an item must not be None", argument="items")
    if kind_of(item) == "user":
        return user_event(item)
    return {"type": OPENAI_AGENTS_ITEM, "data": item}


def _kept(source: dict[str, Any], item: dict[str, Any], key: str | None) -> dict[str, Any]:
    """``source`` keeping ``item``: whole, or without ``key`` (a string the message holds
    already: a call's arguments, a tool's output), with where it goes back among the keys."""
    if key is None or type(item.get(key)) is not str:
        source["item"] = item
        return source
    source["item"] = _without(item, key)
    source["omitted"] = [key, list(item).index(key)]
    return source


def _assistant(
    item: dict[str, Any],
    blocks: list[Any],
    turn: int,
    step: int,
    ids: Callable[[], str],
    omit: str | None = None,
) -> dict[str, Any]:
    given = item.get("id")
    source = {"kind": "model", "provider": SOURCE_KIND, "model": MODEL}
    message = {
        "id": given if _nonempty(given) else ids(),
        "role": "assistant",
        "content": blocks,
        "source": _kept(source, item, omit),
    }
    return {"turn": turn, "step": step, "message": message}


def batch_of(items: list[Any], at: Position, usage: Usage | None) -> tuple[Batch, Position]:
    """The events that append ``items`` to a log standing at ``at``, and where it then stands.

    A user message starts a turn when it begins the batch (a run's input) or is user text
    after model output in it (a history added by hand), ending one left open (``interrupted``, or
    ``completed`` when it ended on assistant text); model output outside a turn starts one too.
    A batch with model output or tool results is one step. A batch whose last model item is
    assistant text and whose calls all have their outputs ends the turn (``completed``).
    ``usage`` goes on the batch's first assistant message.

    One pass over the items: each is classified once, and its message ids come from one
    random number for the whole batch (``id_source``).
    """
    events: Batch = []
    add = events.append
    ids = id_source()
    turn, open_, step = at.turn, at.open, at.step
    stepped = False  # this batch holds model output or tool results (one step)
    calls: dict[str, int] = {}  # call id -> seq of its tool/call in this batch
    answered: set[str] = set()
    last_model = ""

    def done() -> bool:
        return last_model == "assistant" and set(calls) <= answered

    def start() -> None:
        nonlocal turn, open_, step, stepped, last_model
        if open_:
            add(_turn_end(turn, "completed" if stepped and done() else "interrupted"))
        turn, open_, step, stepped, last_model = turn + 1, True, 0, False, ""
        calls.clear()
        answered.clear()
        add({"type": "turn/start", "data": {"turn": turn}})

    for index, item in enumerate(items):
        if item is None:
            raise InvalidArgumentError("an item must not be None", argument="items")
        kind, blocks = _classified(item)
        if kind == "user":
            if index == 0 or stepped:
                start()  # a run's input, or user text after model output
            event = user_event(item, ids)
            event["surface_op"] = "append"
            add(event)
            continue
        if kind == "item":
            if index == 0 and is_user_input(item):
                start()  # a run's input
            add({"type": OPENAI_AGENTS_ITEM, "data": item, "surface_op": "append"})
            continue
        if not open_:
            start()
        if not stepped:
            stepped, step = True, step + 1
        if kind == "assistant":
            data = _assistant(item, blocks or [], turn, step, ids)
            if usage is not None:
                data["usage"], usage = usage.to_json(), None
            add({"type": "assistant/message", "data": data, "surface_op": "append"})
            last_model = kind
        elif kind == "call":
            call_id, name, arguments = item["call_id"], item["name"], item["arguments"]
            block = {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}
            data = _assistant(item, [block], turn, step, ids, "arguments")
            if usage is not None:
                data["usage"], usage = usage.to_json(), None
            add({"type": "assistant/message", "data": data, "surface_op": "append"})
            call = {
                "turn": turn,
                "step": step,
                "callId": call_id,
                "name": name,
                "arguments": arguments,
            }
            calls[call_id] = at.seq + len(events)
            add({"type": "tool/call", "data": call})
            last_model = kind
        else:  # result
            event = _result(item, blocks, turn, step, calls.get(item["call_id"]), ids)
            event["surface_op"] = "append"
            add(event)
            answered.add(item["call_id"])
    if open_ and stepped and done():
        add(_turn_end(turn, "completed"))
        open_ = False
    return events, Position(at.seq + len(events), turn, open_, step)


def _turn_end(turn: int, reason: str) -> dict[str, Any]:
    return {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": reason}}}


def _result(
    item: dict[str, Any],
    blocks: list[Any] | None,
    turn: int,
    step: int,
    call_seq: int | None,
    ids: Callable[[], str],
) -> dict[str, Any]:
    call_id = item["call_id"]
    block = {"type": "tool-result", "toolCallId": call_id, "content": blocks}
    source = _kept({"kind": "tool", "callId": call_id, "provider": SOURCE_KIND}, item, "output")
    message = {"id": ids(), "role": "user", "content": [block], "source": source}
    event: dict[str, Any] = {
        "type": "tool/result",
        "data": {"turn": turn, "step": step, "message": message},
    }
    if call_seq is not None:
        event["source_event_seqs"] = [call_seq]
    return event


def item_of(node: SurfaceMessage) -> Any:
    """The item a surface node holds, or None for a node this integration did not write.

    A node read as plain values (``SessionStore._surface_items``) is the caller's own: its
    parts are taken as they are. A frozen one is a kept projection (``ctx.parsed``), which a
    short tail gives again every turn: its item is built once and kept as JSON text
    (``_Kept``), and each read gets a fresh copy of it, read back by orjson.
    """
    message = node.message
    if type(message) is not FrozenDict:
        return _item_of(node)
    kept = _Kept.items.get(id(message))
    if kept is not None and kept[0] is message and kept[1] == node.type:
        return None if kept[2] is None else orjson.loads(kept[2])
    item = _item_of(node)
    try:
        text = None if item is None else orjson.dumps(item)
    except TypeError:  # orjson.JSONEncodeError: nested deeper than it writes
        return item
    if len(_Kept.items) >= _Kept.MAX:
        _Kept.items.clear()
    _Kept.items[id(message)] = (message, node.type, text)
    return item


class _Kept:
    """Items built from kept frozen messages, as JSON text, by the message's identity: an
    entry holds its message, so the identity is not reused while it lasts. The text is
    exact: a stored value holds no non-finite float, no integer past 64 bits, no lone
    surrogate (SPEC's lossless JSON), and orjson keeps key order. Bounded: all go at once
    when full (a dict's single operations are atomic, so threads may share it)."""

    MAX = 4096
    items: ClassVar[dict[int, tuple[Any, str, bytes | None]]] = {}


def _item_of(node: SurfaceMessage) -> Any:
    """``item_of`` without the kept items."""
    kind, message = node.type, node.message
    if kind == OPENAI_AGENTS_ITEM:
        return _owned(message)
    source = message.get("source") if _is_mapping(message) else None
    if not _is_mapping(source):
        return None
    if kind in ("assistant/message", "tool/result"):
        if source.get("provider") != SOURCE_KIND or "item" not in source:
            return None
        item = _owned(source["item"])
        if "omitted" not in source:
            return item
        key, at = source["omitted"]
        block = message["content"][0]
        value = block["arguments"] if key == "arguments" else block["content"][0]["text"]
        pairs = list(item.items())
        pairs.insert(at, (key, value))
        return dict(pairs)
    if kind != "user/message" or source.get("kind") != SOURCE_KIND:
        return None
    texts = [block["text"] for block in message["content"]]
    if source.get("content") == "text":
        content: Any = texts[0]
    else:
        content = [{"type": "input_text", "text": text} for text in texts]
    # The item's keys in their order, ``content`` where it was (last when not recorded), so
    # that the item serialises as it did when it was added (SPEC §12.1).
    pairs = list(_owned(source["item"]).items())
    pairs.insert(source.get("contentAt", len(pairs)), ("content", content))
    return dict(pairs)


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, the dicts a read gives tested first (an ABC's check
    is slower than the rest of a short item)."""
    t = type(value)
    return t is dict or t is FrozenDict or isinstance(value, Mapping)


def _owned(value: Any) -> Any:
    """``value`` as a plain value of the caller's: itself when it is one already (a plain
    read's), else thawed."""
    t = type(value)
    return value if t is dict or t is list else thaw(value)


def position_after(events: list[Any], count: int) -> Position | None:
    """The position a log of ``count`` events stands at, from its last ``events`` (newest
    last); None when they hold no turn boundary."""
    step: int | None = None
    for event in reversed(events):
        data = event.data
        if not isinstance(data, Mapping):
            continue
        if step is None and event.type in TURN_SCOPED and type(data.get("step")) is int:
            step = data["step"]
        turn = data.get("turn")
        if type(turn) is not int:
            continue
        if event.type == "turn/start":
            return Position(count, turn, True, step or 0)
        if event.type == "turn/end":
            return Position(count, turn, False, 0)
    return None
