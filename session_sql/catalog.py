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
    """An immutable set of known event type names.

    Most added types are log-only. **Item types** (``extend(..., items=True)``) are
    surface-eligible instead: an event of one must carry a ``surfaceOp`` (append, or a replace
    with provenance, as a message event), and the message it projects to is its ``data`` as
    is. They let an application keep records that no core message shape holds losslessly (an
    agent framework's history items) on the surface, where tail reads and the SQL view see them.
    """

    __slots__ = ("_items", "_types")

    def __init__(self, types: Iterable[str] = (), *, items: Iterable[str] = ()) -> None:
        item_types = frozenset(check_type_name(t) for t in _listed(items))
        clash = sorted(item_types.intersection(CORE_TYPES))
        if clash:
            raise ValueError(f"core types cannot be item types: {clash}")
        self._items = item_types
        self._types = frozenset(check_type_name(t) for t in _listed(types)) | item_types

    def extend(self, types: Iterable[str], *, items: bool = False) -> Catalog:
        """A new catalog with ``types`` added (this one is unchanged).

        ``items=True`` adds them as item types. A name keeps the kind it has: adding a known
        log-only type as an item type (or the reverse) raises ``ValueError``.
        """
        added = frozenset(check_type_name(t) for t in _listed(types))
        turned = sorted(added & (self._types - self._items) if items else added & self._items)
        if turned:
            kind = "log-only" if items else "item"
            raise ValueError(f"{turned} are already {kind} types of this catalog")
        if items:
            return Catalog(self._types, items=self._items | added)
        return Catalog(self._types | added, items=self._items)

    @property
    def item_types(self) -> frozenset[str]:
        """The item types: surface-eligible, each event's message is its data."""
        return self._items

    def with_entry_points(self) -> Catalog:
        """This catalog plus every type contributed through ``session_sql.event_types``.

        An entry point loads to an iterable of type names, to a ``Catalog`` (whose item types
        stay item types), or to a callable returning either.
        """
        found = self
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            loaded: Any = ep.load()
            names = loaded() if callable(loaded) and not isinstance(loaded, Catalog) else loaded
            if isinstance(names, Catalog):
                found = found.extend(names._types - names._items).extend(names._items, items=True)
            else:
                found = found.extend(_names_from(ep.name, names))
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._types))

    def __len__(self) -> int:
        return len(self._types)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Catalog)
            and other._types == self._types
            and other._items == self._items
        )

    def __hash__(self) -> int:
        return hash((self._types, self._items))

    def __repr__(self) -> str:
        items = f", {len(self._items)} item types" if self._items else ""
        return f"Catalog({len(self._types)} types{items})"


def _listed(types: Iterable[str]) -> list[str]:
    """A lone name counts as one type, not as its characters."""
    return [types] if isinstance(types, str) else list(types)


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
