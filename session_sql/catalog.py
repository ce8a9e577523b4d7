"""The event vocabulary: core types, the default catalog and its extension (SPEC §2)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from importlib.metadata import entry_points
from typing import Any

from session_sql.events import check_type_name

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "session_sql.event_types"

NODE_TYPES = frozenset({"user/message", "assistant/message", "tool/result"})
"""The types whose events can be surface nodes (and project to messages)."""

REMOVED = "surface/removed"
"""Takes a range off the surface without putting itself there (SPEC §11.2)."""

SURFACE_TYPES = NODE_TYPES | {REMOVED}
"""The surface-eligible types: only these may carry ``surfaceOp``/``sourceEventSeqs``."""

CORE_TYPES = (
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "user/message",
    "assistant/chunk",
    "assistant/message",
    "assistant/attempt",
    "tool/call",
    "tool/result",
    "request/header",
    "request/context",
    "session/end-seed",
    "surface/removed",
)

PLUGIN_TYPES = (
    "agent-preset/selected",
    "agent/inbox/spliced",
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/prune",
    "compaction/start",
    "compaction/summary",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "llm/retry",
    "llm/retry-started",
    "model/selection",
    "permission/preset",
    "plan/mode",
    "sandbox/mode",
    "schedule/change",
    "session/title",
    "subagent/descriptor",
    "team/member",
    "team/task",
    "todo/write",
    "tool-workflow/run-start",
    "tool-workflow/run-end",
    "tool/ptc-dispatch",
    "tool/ptc-dispatch-start",
)
"""Common agent-plugin types: log-only, their data is opaque JSON."""


class Catalog:
    """An immutable set of known event type names."""

    __slots__ = ("_types",)

    def __init__(self, types: Iterable[str] = ()) -> None:
        self._types = frozenset(check_type_name(t) for t in types)

    def extend(self, types: Iterable[str]) -> Catalog:
        """A new catalog with ``types`` added (this one is unchanged)."""
        added = [types] if isinstance(types, str) else list(types)
        return Catalog(self._types.union(check_type_name(t) for t in added))

    def with_entry_points(self) -> Catalog:
        """This catalog plus every type contributed through ``session_sql.event_types``.

        An entry point loads to an iterable of type names, or to a callable returning one.
        """
        found: list[str] = []
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            loaded: Any = ep.load()
            names = loaded() if callable(loaded) else loaded
            found.extend(_names_from(ep.name, names))
        return self.extend(found) if found else self

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._types))

    def __len__(self) -> int:
        return len(self._types)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Catalog) and other._types == self._types

    def __hash__(self) -> int:
        return hash(self._types)

    def __repr__(self) -> str:
        return f"Catalog({len(self._types)} types)"


def _names_from(source: str, names: Any) -> list[str]:
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(
            f"entry point {source!r} in {ENTRY_POINT_GROUP} must give an iterable of type names"
        )
    return [str(n) for n in names]


DEFAULT_CATALOG = Catalog(CORE_TYPES + PLUGIN_TYPES)

_discovered: Catalog | None = None


def default_catalog() -> Catalog:
    """``DEFAULT_CATALOG`` plus installed entry-point types (discovered once per process)."""
    global _discovered
    if _discovered is None:
        _discovered = DEFAULT_CATALOG.with_entry_points()
    return _discovered


def reset_discovery() -> None:
    """Forget discovered entry points (after installing a plugin in a running process)."""
    global _discovered
    _discovered = None
