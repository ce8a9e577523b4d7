"""Channel values as stored: JSON kept as JSON (so SQL reads it), anything else through the
saver's ``serde``."""

from __future__ import annotations

import base64
import math
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from session_sql import thaw

MAX_INT = 2**63 - 1


def is_json(value: Any) -> bool:
    """Whether ``value`` is JSON that the store keeps as it is (exact types, no U+0000)."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if v is None or t is bool:
            continue
        if t is int:
            if -MAX_INT - 1 <= v <= MAX_INT:
                continue
            return False
        if t is float:
            if math.isfinite(v):
                continue
            return False
        if t is str:
            if "\x00" in v:
                return False
            continue
        if t is list:
            stack.extend(v)
            continue
        if t is dict:
            for k, item in v.items():
                if type(k) is not str or "\x00" in k:
                    return False
                stack.append(item)
            continue
        return False
    return True


def encode(serde: SerializerProtocol, value: Any) -> dict[str, Any]:
    """``{"json": value}`` when JSON, else ``{"serde": type, "b64": bytes}``."""
    if is_json(value):
        return {"json": value}
    kind, raw = serde.dumps_typed(value)
    return {"serde": kind, "b64": base64.b64encode(raw).decode("ascii")}


def whole(serde: SerializerProtocol, value: Any) -> dict[str, Any]:
    """A whole value; a list says its length (the base of the parts that extend it)."""
    encoded = encode(serde, value)
    if type(value) is list:
        encoded["len"] = len(value)
    return encoded


def decode(serde: SerializerProtocol, encoded: Any) -> Any:
    """The value ``encode`` stored."""
    if "json" in encoded:
        return thaw(encoded["json"])
    return serde.loads_typed(raw(encoded))


def raw(encoded: Any) -> tuple[str, bytes]:
    """What ``serde`` made of a value that is not JSON (``encoded`` is not ``{"json"}``)."""
    return encoded["serde"], base64.b64decode(encoded["b64"])
