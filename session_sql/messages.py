"""Message and content-block shapes (SPEC §3) and the projection of events to messages (§6)."""

from __future__ import annotations

from typing import Any, NamedTuple

from session_sql.errors import InvalidEventError
from session_sql.events import SessionEvent


def _nonempty_str(value: Any) -> bool:
    return type(value) is str and value != ""


def _bad(where: str, why: str, seq: int | None) -> InvalidEventError:
    return InvalidEventError(f"{where}: {why}", seq=seq)


def check_blocks(blocks: Any, where: str, seq: int | None) -> None:
    """Check a content list; nested ``tool-result`` content is walked with a stack."""
    _check_content(blocks, where, "", seq)


def _place(where: str, suffix: str, path: tuple[int, ...], index: int | None = None) -> str:
    """Where a content list (or its block ``index``) is: ``data.content[0].content[1]``.

    Spelled out only for an error: every stored message is checked on every read.
    """
    place = where + suffix + "".join(f"[{i}].content" for i in path)
    return place if index is None else f"{place}[{index}]"


def _check_content(blocks: Any, where: str, suffix: str, seq: int | None) -> None:
    """``check_blocks`` of the content list at ``where + suffix``."""
    stack: list[tuple[Any, tuple[int, ...]]] = [(blocks, ())]
    while stack:
        content, path = stack.pop()
        if not isinstance(content, tuple | list):
            raise _bad(_place(where, suffix, path), "content must be a list of blocks", seq)
        for i, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if type(kind) is not str or not kind:
                raise _bad(
                    _place(where, suffix, path, i),
                    "a block must be an object with a non-empty str 'type'",
                    seq,
                )
            if kind in ("text", "reasoning"):
                if type(block.get("text")) is not str:
                    raise _bad(
                        _place(where, suffix, path, i), f"a {kind} block needs a str 'text'", seq
                    )
            elif kind == "tool-call":
                if not (_nonempty_str(block.get("id")) and _nonempty_str(block.get("name"))):
                    raise _bad(
                        _place(where, suffix, path, i),
                        "a tool-call block needs non-empty str 'id' and 'name'",
                        seq,
                    )
                if "arguments" not in block:
                    raise _bad(
                        _place(where, suffix, path, i), "a tool-call block needs 'arguments'", seq
                    )
            elif kind == "tool-result":
                if not _nonempty_str(block.get("toolCallId")):
                    raise _bad(
                        _place(where, suffix, path, i),
                        "a tool-result block needs a non-empty str 'toolCallId'",
                        seq,
                    )
                if "isError" in block and type(block["isError"]) is not bool:
                    raise _bad(
                        _place(where, suffix, path, i),
                        "a tool-result block's 'isError' must be a bool",
                        seq,
                    )
                stack.append((block.get("content"), (*path, i)))
            # image, file and unknown block types pass through untouched


def check_message(msg: Any, role: str, where: str, seq: int | None) -> None:
    """``{id, role, content: [block...], source: {kind, ...}}`` with the expected role."""
    if not isinstance(msg, dict):
        raise _bad(where, "a message must be an object", seq)
    if not _nonempty_str(msg.get("id")):
        raise _bad(where, "a message needs a non-empty str 'id'", seq)
    if msg.get("role") != role:
        raise _bad(where, f"role must be {role!r}, got {msg.get('role')!r}", seq)
    source = msg.get("source")
    if not isinstance(source, dict) or not _nonempty_str(source.get("kind")):
        raise _bad(where, "a message needs a 'source' object with a non-empty str 'kind'", seq)
    _check_content(msg.get("content"), where, ".content", seq)


def result_block(data: Any) -> Any:
    """The single ``tool-result`` block of a ``tool/result`` event's data, or None."""
    msg = data.get("message") if isinstance(data, dict) else None
    content = msg.get("content") if isinstance(msg, dict) else None
    if isinstance(content, tuple | list) and len(content) == 1 and isinstance(content[0], dict):
        block = content[0]
        if block.get("type") == "tool-result":
            return block
    return None


def project_data(
    type_: str,
    data: Any,
    seq: int | None = None,
    *,
    checked: bool = True,
    items: frozenset[str] = frozenset(),
) -> Any:
    """The message an event of ``type_`` with ``data`` contributes as a surface node, or None.

    ``checked=False`` is for data nobody has validated yet (a stored row read on its own): its
    message is shape-checked first, and ``InvalidEventError`` (or ``KeyError``/``TypeError``
    for a missing or non-object ``message``) says why it is malformed. An event of one of the
    catalog's item types (``items``) projects to its data as is.
    """
    if type_ in items:
        return data
    if type_ == "user/message":
        if not checked:
            check_message(data, "user", "data", seq)
        return data
    if type_ == "assistant/message":
        message = data["message"]
        if not checked:
            check_message(message, "assistant", "data.message", seq)
        return message if message["content"] else None
    if type_ == "tool/result":
        message = data["message"]
        if not checked:
            check_message(message, "user", "data.message", seq)
        return message
    return None


def project(event: SessionEvent, items: frozenset[str] = frozenset()) -> Any:
    """The message a surface node contributes, or None (§6; a ``surface/removed`` gives none).

    ``items`` are the catalog's item types, whose events project to their data.
    """
    return project_data(event.type, event.data, items=items)


class SurfaceMessage(NamedTuple):
    """One surface node: its stored position, its event's seq and type, and its message.

    ``message`` is None for a node that projects to none (an assistant/message with empty
    content, which only carried usage).
    """

    pos: int
    seq: int
    type: str
    message: Any
