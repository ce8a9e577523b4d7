"""How Claude Agent SDK transcripts lie in a session_sql log, without I/O.

``claude_agent_sdk.SessionSQLSessionStore`` does the storing; this module turns one ``append``
batch into the events that hold it. Every transcript entry is one ``claude-agent-sdk/entry``
event whose data is the entry exactly as appended (``load`` reads those back). A user or
assistant entry is also mapped onto the surface, each mapped event citing its entry in
``sourceEventSeqs``:

* a user prompt (text, images) is a ``user/message``; each ``tool_result`` block a
  ``tool/result``;
* an assistant entry is an ``assistant/message`` (text, thinking as ``reasoning``, ``tool_use``
  as a ``tool-call`` block with a log-only ``tool/call`` beside it) whose source names the model,
  with the token usage the entry adds to its API message (Claude Code writes one entry per
  content block, each repeating the message's usage so far, so only the growth is counted);
* a prompt after model output starts a turn (``turn/start``; the open one gets its
  ``turn/end``), and an assistant entry that stops with nothing left to answer ends it;
* a compaction boundary (a ``system`` entry of subtype ``compact_boundary``) takes the whole
  surface off (``surface/removed``), as the model sees only the summary that follows it.

A batch of a main transcript ends with ``claude-agent-sdk/summary`` (the SDK's
``fold_session_summary`` after it), and a ``session/title`` when the title changes (the
custom or AI title, the summary, else the first prompt).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from claude_agent_sdk import SessionKey, SessionStoreEntry, SessionSummaryEntry
from claude_agent_sdk import fold_session_summary as _fold_summary

from session_sql import NotJSONError, snapshot_json, thaw
from session_sql.events import make_header
from session_sql.integrations import CLAUDE_ENTRY, CLAUDE_SUMMARY

SOURCE_KIND = "claude-agent-sdk"
"""``source.kind`` of user messages, ``source.provider`` of tool results."""

PROVIDER = "anthropic"
"""``source.provider`` of assistant messages."""

KIND = "claude_kind"
"""Label: ``session`` for a main transcript, ``subagent`` for a subpath's."""
PROJECT = "claude_project"
SESSION = "claude_session"
SUBPATH = "claude_subpath"

TITLE = "session/title"
MAX_TITLE = 1000
_STOPS = {"end_turn": "completed", "stop_sequence": "completed", "max_tokens": "max-tokens"}
_STOPS["refusal"] = "blocked"
_USAGE = {
    "input_tokens": "inputTokens",
    "output_tokens": "outputTokens",
    "cache_read_input_tokens": "cacheReadTokens",
    "cache_creation_input_tokens": "cacheWriteTokens",
}


def store_id(key: Mapping[str, Any]) -> str:
    """The store id of a transcript: a digest of its key (ids are unique per tenant, a Claude
    session id only per project, and a subagent's per session)."""
    names = [key["project_key"], key["session_id"], key.get("subpath")]
    digest = hashlib.sha256(json.dumps(names).encode()).hexdigest()[:32]
    return f"claude-{digest}"


def labels_of(key: Mapping[str, Any]) -> dict[str, str]:
    labels = {PROJECT: key["project_key"], SESSION: key["session_id"]}
    subpath = key.get("subpath")
    if subpath is None:
        return {KIND: "session", **labels}
    return {KIND: "subagent", **labels, SUBPATH: subpath}


def header_of(key: Mapping[str, Any]) -> dict[str, Any]:
    """The session header: the transcript's key, and for a subagent its parent's store id."""
    claude = {"projectKey": key["project_key"], "sessionId": key["session_id"]}
    parent = None
    if key.get("subpath") is not None:
        claude["subpath"] = key["subpath"]
        parent = store_id({"project_key": key["project_key"], "session_id": key["session_id"]})
    header = make_header(store_id(key), int(time.time() * 1000), parent_session=parent)
    return {**header, "claude": claude}


@dataclass
class Fold:
    """Where a transcript stands after its stored entries: what the next batch maps from."""

    main: bool
    turn: int = 0
    open: bool = False
    step: int = 0
    stepped: bool = False  # model output in the open turn
    answered: bool = False  # the last model output was text, with no call left unanswered
    message: str | None = None  # the API id of the last assistant message
    usage: dict[str, int] = field(default_factory=dict)  # its usage counted so far
    calls: dict[str, int] = field(default_factory=dict)  # open tool_use id -> tool/call seq
    summary: SessionSummaryEntry | None = None
    title: str | None = None
    uuids: set[str] = field(default_factory=set)
    plain: set[str] = field(default_factory=set)  # entries without uuid, serialised

    def copy(self) -> Fold:
        """A copy to plan a batch on (the stored entries' sets are shared, not copied)."""
        return dataclasses.replace(self, usage=dict(self.usage), calls=dict(self.calls))

    def remember(self, entries: list[Any]) -> None:
        """Note entries as stored (what idempotent retries are checked against)."""
        for entry in entries:
            uuid = entry.get("uuid")
            if isinstance(uuid, str) and uuid:
                self.uuids.add(uuid)
            else:
                self.plain.add(json.dumps(entry))


def fresh_entries(fold: Fold, entries: list[Any]) -> list[Any]:
    """The entries of a batch still to store: a ``uuid`` stored already (or earlier in the
    batch) is skipped, and a batch holding uuids whose every entry is stored is a retry of a
    batch that landed, so none of it is stored again."""
    fresh: list[Any] = []
    seen: set[str] = set()
    replay = False
    for entry in entries:
        uuid = entry.get("uuid")
        if isinstance(uuid, str) and uuid:
            if uuid in fold.uuids or uuid in seen:
                replay = True
                continue
            seen.add(uuid)
        fresh.append(entry)
    if replay and not seen and all(json.dumps(entry) in fold.plain for entry in fresh):
        return []
    return fresh


def entry_of(data: Any) -> Any:
    """The entry an entry event holds: its data, or the JSON text of an entry the store's JSON
    domain cannot hold as a value (an object without ``type``, which every entry has)."""
    if "type" in data:
        return thaw(data)
    return json.loads(data["json"])


def as_text(entries: list[Any]) -> frozenset[int]:
    """The indices of the entries that must be stored as JSON text: those holding a value the
    store refuses (an int past 2**53, NaN, -0.0, U+0000, ...) that ``json.dumps`` writes."""
    texts = set()
    for index, entry in enumerate(entries):
        try:
            snapshot_json(entry)
        except NotJSONError:
            try:
                json.dumps(entry)
            except (TypeError, ValueError) as exc:
                raise NotJSONError(f"entries[{index}] is not JSON: {exc}") from exc
            texts.add(index)
    return frozenset(texts)


def plan(
    fold: Fold,
    key: SessionKey,
    entries: list[Any],
    seq: int,
    nodes: list[int],
    texts: frozenset[int] = frozenset(),
) -> list[dict[str, Any]]:
    """The events that store ``entries`` on a log of ``seq`` events whose surface is ``nodes``
    (updated as planned); advances ``fold``. The entries at ``texts`` are kept as JSON text,
    in the log only."""
    events: list[dict[str, Any]] = []
    for index, entry in enumerate(entries):
        at = seq + len(events)
        if index in texts:
            events.append({"type": CLAUDE_ENTRY, "data": {"json": json.dumps(entry)}})
            continue
        events.append({"type": CLAUDE_ENTRY, "data": entry})
        if _compacted(entry):
            events.extend(_removal(nodes))
            continue
        mapped = _mapped(fold, entry, at)
        first = at + 1
        nodes.extend(first + i for i, e in enumerate(mapped) if "surface_op" in e)
        events.extend(mapped)
    summary = _fold_summary(fold.summary, key, cast("list[SessionStoreEntry]", entries))
    fold.summary = summary
    title = title_of(summary["data"])
    if title is not None and title != fold.title:
        fold.title = title
        events.append({"type": TITLE, "data": {"title": title}})
    if fold.main and _storable(summary["data"]):  # else the SDK folds the transcript itself
        events.append({"type": CLAUDE_SUMMARY, "data": summary["data"]})
    return events


def _storable(value: Any) -> bool:
    try:
        snapshot_json(value)
    except NotJSONError:
        return False
    return True


def compacts(entries: list[Any]) -> bool:
    """Whether a batch holds a compaction boundary."""
    return any(_compacted(entry) for entry in entries)


def _compacted(entry: Any) -> bool:
    """Claude Code's compaction boundary: the model sees nothing before it but its summary."""
    return bool(entry.get("type") == "system" and entry.get("subtype") == "compact_boundary")


def _removal(nodes: list[int]) -> list[dict[str, Any]]:
    """A ``surface/removed`` taking the whole surface off (none when it is empty); the
    compaction summary that follows the boundary is the next user message."""
    if not nodes:
        return []
    cited = sorted(nodes)
    replace = {"op": "replace", "start": nodes[0], "end": nodes[-1]}
    nodes.clear()
    removed = {"type": "surface/removed", "data": {"reason": "compact_boundary"}}
    return [{**removed, "surface_op": replace, "source_event_seqs": cited}]


def title_of(data: Mapping[str, Any]) -> str | None:
    """The title Claude gives a session: its custom or AI title, its summary, else its first
    prompt (a printable line of at most 1000 characters)."""
    first = data.get("first_prompt") if data.get("first_prompt_locked") else None
    for value in (
        data.get("custom_title"),
        data.get("ai_title"),
        data.get("summary_hint"),
        first or data.get("command_fallback"),
    ):
        if isinstance(value, str):
            text = "".join(c if c.isprintable() else " " for c in value).strip()
            if text:
                return text[:MAX_TITLE].rstrip()
    return None


def _mapped(fold: Fold, entry: Any, at: int) -> list[dict[str, Any]]:
    """The surface events (and turn boundaries) of the entry stored at seq ``at``."""
    message = entry.get("message")
    if not isinstance(message, dict):
        return []
    kind = entry.get("type")
    if kind == "user" and message.get("role") == "user":
        return _user(fold, entry, message, at)
    if kind == "assistant" and message.get("role") == "assistant":
        return _assistant(fold, entry, message, at)
    return []


def _id(entry: Any, at: int) -> str:
    uuid = entry.get("uuid")
    return uuid if isinstance(uuid, str) and uuid else f"claude-entry-{at}"


def _blocks(content: Any) -> list[Any] | None:
    """Claude content as core blocks: text and thinking mapped, the rest as they are."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return None
    blocks: list[Any] = []
    for block in content:
        if not (isinstance(block, dict) and isinstance(block.get("type"), str)):
            return None
        kind = block["type"]
        if kind == "text" and isinstance(block.get("text"), str):
            blocks.append({"type": "text", "text": block["text"]})
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            reasoning = {"type": "reasoning", "text": block["thinking"]}
            if "signature" in block:
                reasoning["signature"] = block["signature"]
            blocks.append(reasoning)
        else:
            blocks.append(block)
    return blocks


def _start(fold: Fold, events: list[dict[str, Any]]) -> None:
    """Open the next turn, ending the open one (completed when it ended on an answer)."""
    if fold.open:
        reason = "completed" if fold.stepped and fold.answered else "interrupted"
        events.append(_turn_end(fold.turn, reason))
    fold.turn, fold.open, fold.step, fold.stepped, fold.answered = (
        fold.turn + 1,
        True,
        0,
        False,
        False,
    )
    fold.message, fold.usage = None, {}
    fold.calls.clear()
    events.append({"type": "turn/start", "data": {"turn": fold.turn}})


def _turn_end(turn: int, reason: str) -> dict[str, Any]:
    return {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": reason}}}


def _user(fold: Fold, entry: Any, message: dict[str, Any], at: int) -> list[dict[str, Any]]:
    content = message.get("content")
    parts = content if isinstance(content, list) else [content]
    results = [b for b in parts if isinstance(b, dict) and b.get("type") == "tool_result"]
    rest = [b for b in parts if not (isinstance(b, dict) and b.get("type") == "tool_result")]
    blocks = _blocks(content if isinstance(content, str) else rest) if rest else []
    if blocks is None or any(not isinstance(r.get("tool_use_id"), str) for r in results):
        return []  # a shape the surface cannot hold: the entry stays in the log only
    events: list[dict[str, Any]] = []
    ident = _id(entry, at)
    if results:
        if not fold.open:
            _start(fold, events)
        step = max(fold.step, 1)
        for result in results:
            call_id = result["tool_use_id"]
            block: dict[str, Any] = {
                "type": "tool-result",
                "toolCallId": call_id,
                "content": _blocks(result.get("content", [])) or [],
            }
            if result.get("is_error") is True:
                block["isError"] = True
            source = {"kind": "tool", "callId": call_id, "provider": SOURCE_KIND}
            data = {
                "turn": fold.turn,
                "step": step,
                "message": {
                    "id": f"{ident}:{call_id}",
                    "role": "user",
                    "content": [block],
                    "source": source,
                },
            }
            cited = sorted({at, *([fold.calls[call_id]] if call_id in fold.calls else [])})
            fold.calls.pop(call_id, None)
            events.append(_surface("tool/result", data, cited))
        fold.answered = False
    if blocks:
        if not fold.open or fold.stepped:
            _start(fold, events)
        source = {"kind": SOURCE_KIND, "uuid": ident}
        data = {"id": ident, "role": "user", "content": blocks, "source": source}
        events.append(_surface("user/message", data, [at]))
    return events


def _assistant(fold: Fold, entry: Any, message: dict[str, Any], at: int) -> list[dict[str, Any]]:
    blocks = _blocks(message.get("content"))
    if blocks is None:
        return []
    events: list[dict[str, Any]] = []
    if not fold.open:
        _start(fold, events)
    api_id = message.get("id") if isinstance(message.get("id"), str) else None
    if not fold.stepped or api_id is None or api_id != fold.message:
        fold.step, fold.stepped, fold.message, fold.usage = fold.step + 1, True, api_id, {}
    model = message.get("model")
    source = {
        "kind": "model",
        "provider": PROVIDER,
        "model": model if isinstance(model, str) and model else "unknown",
    }
    ident = _id(entry, at)
    data: dict[str, Any] = {
        "turn": fold.turn,
        "step": fold.step,
        "message": {"id": ident, "role": "assistant", "content": blocks, "source": source},
    }
    usage = _usage_growth(fold, message.get("usage"))
    if usage is not None:
        data["usage"] = usage
    events.append(_surface("assistant/message", data, [at]))
    for index, block in enumerate(blocks):
        if block.get("type") != "tool_use" or not isinstance(block.get("id"), str):
            continue
        name = block.get("name") if isinstance(block.get("name"), str) else ""
        arguments = json.dumps(block.get("input", {}))
        blocks[index] = {"type": "tool-call", "id": block["id"], "name": name}
        blocks[index]["arguments"] = arguments
        fold.calls[block["id"]] = at + 1 + len(events)  # the seq of its tool/call
        call = {"turn": fold.turn, "step": fold.step, "callId": block["id"], "name": name}
        events.append({"type": "tool/call", "data": {**call, "arguments": arguments}})
    kinds = {block.get("type") for block in blocks}
    if "tool-call" in kinds:
        fold.answered = False
    elif "text" in kinds:
        fold.answered = not fold.calls
    reason = _STOPS.get(message.get("stop_reason") or "")
    if reason is not None and not fold.calls:
        events.append(_turn_end(fold.turn, reason))
        fold.open = False
    return events


def _usage_growth(fold: Fold, usage: Any) -> dict[str, int] | None:
    """The tokens this entry adds to its API message's usage (None: no usage given)."""
    if not isinstance(usage, dict):
        return None
    grown: dict[str, int] = {}
    for name, key in _USAGE.items():
        value = usage.get(name)
        if type(value) is not int:
            continue
        before = fold.usage.get(key, 0)
        grown[key] = max(0, value - before)
        fold.usage[key] = max(value, before)
    if not grown:
        return None
    grown.setdefault("inputTokens", 0)
    grown.setdefault("outputTokens", 0)
    return grown


def _surface(kind: str, data: dict[str, Any], cited: list[int]) -> dict[str, Any]:
    return {"type": kind, "data": data, "surface_op": "append", "source_event_seqs": cited}
