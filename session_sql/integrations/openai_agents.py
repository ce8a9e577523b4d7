"""The OpenAI Agents SDK's ``Session`` protocol over a session_sql store (SPEC §11.5).

Every history item becomes one surface event, so the item order is the surface order and the
protocol's reads are tail reads of the surface. Where a core message says what an item says,
the event is that core message and keeps the item itself (``_openai_agents_mapping``):

* a user message whose content is text (a string, or ``input_text`` parts only) is a
  ``user/message`` whose message keeps the item's other keys in ``source``;
* an assistant message is an ``assistant/message`` with text blocks, a ``function_call`` one
  with a ``tool-call`` block followed by a log-only ``tool/call``, a ``function_call_output`` a
  ``tool/result``; each keeps the exact item in ``source.item``;
* every other item (reasoning, hosted tool calls, items of types that do not exist yet) is an
  ``openai-agents/item`` event whose data, and message, is the item itself.

A run's batches also get ``turn/start``/``turn/end`` around them and the run's token usage
(from the ``wrapper`` the SDK passes to sessions that take one), so the CLI, ``stats`` and the
SQL views read a run as they read a native session. Every item comes back exactly.

``pop_item`` and ``clear_session`` append a ``surface/removed`` whose provenance names what it
takes off; nothing is ever deleted. Compaction by the SDK's ``OpenAIResponsesCompactionSession``
becomes a replace of the compacted range, with provenance, through the backend hooks that
wrapper looks for (``_get_compaction_snapshot``, ``_atomic_replace_items``).

Needs the extra: ``pip install 'session-sql[openai-agents]'``.
"""

from __future__ import annotations

import asyncio
import random
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from session_sql.integrations._opening import EntersReady
from session_sql.integrations._requires import requires

with requires("openai_agents", "the OpenAI Agents SDK", "openai-agents"):
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )

try:  # a private dataclass of the SDK: without it, compaction falls back to clear-and-add
    from agents.memory.session import _CompactionSnapshot
except ImportError:  # pragma: no cover - depends on the SDK version
    _CompactionSnapshot = None  # type: ignore[assignment, misc]

from session_sql import (
    AsyncSessionStore,
    AsyncStoredSession,
    ConcurrencyError,
    InvalidArgumentError,
    Replace,
    SessionExistsError,
    SessionNotFoundError,
    SessionStore,
    SurfaceMessage,
    loopsafe,
    open_async_store,
)
from session_sql.integrations import OPENAI_AGENTS_ITEM
from session_sql.integrations._openai_agents_mapping import (
    SOURCE_KIND,
    Position,
    Usage,
    batch_of,
    item_event,
    item_of,
    kind_of,
    position_after,
)
from session_sql.integrations._titles import title_of
from session_sql.pending import building_paused

__all__ = ["ITEM_TYPE", "SOURCE_KIND", "SessionSQLSession"]

ITEM_TYPE = OPENAI_AGENTS_ITEM
"""The catalog type of an item stored as is (an item type: its message is the item)."""

MAX_ATTEMPTS = 200
"""Retries of one write against other writers: each ConcurrencyError means one of them won."""

Batch = list[dict[str, Any]]


class SessionSQLSession(EntersReady):
    """Conversation history of one OpenAI Agents SDK session, kept in a session_sql store.

    ``store`` is an ``AsyncSessionStore`` (``open_async_store``): the protocol is async and a
    ``SessionStore`` would block the event loop, so it is refused. The session is created on
    the first ``add_items``; reads of a session that does not exist yet give no items.
    Several processes may write one session: a write that loses a race reloads and retries, so
    both land, in one of their interleavings.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: AsyncSessionStore,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        if isinstance(store, SessionStore):
            raise InvalidArgumentError(
                "store must be an AsyncSessionStore (open_async_store): the Session protocol is "
                "async, and a SessionStore would block the event loop",
                argument="store",
            )
        if not isinstance(store, AsyncSessionStore):
            raise InvalidArgumentError(
                f"store must be an AsyncSessionStore, not {type(store).__name__}",
                argument="store",
            )
        self.session_id = session_id
        self.session_settings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)
        )
        self._store = store
        self._owned = False
        self._checked = False
        self._handle: AsyncStoredSession | None = None
        self._title: str | None = None  # a new session's title: its first user message
        # Where the log stands turn-wise (valid while the handle's seq is its seq), what the
        # batch being written leads to, and the last run's usage already recorded.
        self._at: Position | None = None
        self._next: Position | None = None
        self._seen: tuple[Any, int, int] | None = None
        self._lock = loopsafe.Semaphore()  # writes from any loop (thread), one at a time

    @classmethod
    def from_url(
        cls,
        session_id: str,
        url: str,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **open_store_options: Any,
    ) -> SessionSQLSession:
        """A session on a store of its own, opened on first use and closed by ``close()``.

        ``open_store_options`` are ``open_async_store``'s; a ``catalog`` given there gains the
        integration's item type.
        """
        catalog = open_store_options.get("catalog")
        if catalog is not None and ITEM_TYPE not in catalog.item_types:
            open_store_options["catalog"] = catalog.extend([ITEM_TYPE], items=True)
        session = cls(
            session_id,
            open_async_store(url, **open_store_options),
            session_settings=session_settings,
        )
        session._owned = True
        return session

    @property
    def store(self) -> AsyncSessionStore:
        return self._store

    async def close(self) -> None:
        """Close the store if ``from_url`` opened it (a store passed in stays open)."""
        if self._owned:
            await self._store.close()

    def __repr__(self) -> str:
        return f"SessionSQLSession({self.session_id!r}, {self._store!r})"

    # -- the Session protocol ---------------------------------------------------------------

    async def get_items(
        self, limit: int | None = None, *, wrapper: Any = None
    ) -> list[TResponseInputItem]:
        """The latest ``limit`` items (all when None), oldest first; costs O(limit).

        ``limit=None`` falls back to ``session_settings.limit``; ``0`` gives none, a negative
        limit raises ``InvalidArgumentError``.
        """
        count = _limit(resolve_session_limit(limit, self.session_settings))
        if count == 0:
            return []
        store = await self._ready()
        try:  # built by the store's reader, from plain values (``SessionStore._surface_items``)
            items: list[Any] = await store._surface_items(self.session_id, count, item_of)
        except SessionNotFoundError:
            return []
        return items

    async def add_items(self, items: list[TResponseInputItem], *, wrapper: Any = None) -> None:
        """Append ``items`` in order, atomically (one transaction); creates the session.

        ``wrapper`` is the run's context, which the SDK passes to sessions that take it: the
        tokens its usage gained since the last batch go on this batch's first assistant
        message.
        """
        listed = _listed(items)
        if not listed:
            return
        usage, seen = self._usage_of(wrapper, listed)
        self._title = _first_user_text(listed)

        def build(handle: AsyncStoredSession) -> Batch | None:
            at = self._at if self._at is not None else Position(handle.seq)
            batch, self._next = batch_of(listed, at, usage)
            return batch

        await self._write(build, create=True, positioned=True, size=len(listed))
        if seen is not None:
            self._seen = seen

    def _usage_of(
        self, wrapper: Any, items: list[Any]
    ) -> tuple[Usage | None, tuple[Any, int, int] | None]:
        """The tokens the run behind ``wrapper`` used since its last batch with model output,
        and what to remember once this batch is written (None: nothing to record)."""
        total = getattr(wrapper, "usage", None)
        tokens_in = getattr(total, "input_tokens", None)
        tokens_out = getattr(total, "output_tokens", None)
        if type(tokens_in) is not int or type(tokens_out) is not int:
            return None, None
        if not any(kind_of(item) in ("assistant", "call") for item in items):
            return None, None  # kept for the batch that holds the model's output
        before_in = before_out = 0
        if self._seen is not None and self._seen[0]() is wrapper:
            before_in, before_out = self._seen[1], self._seen[2]
        if (tokens_in, tokens_out) == (before_in, before_out):
            return None, None
        usage = Usage(max(tokens_in - before_in, 0), max(tokens_out - before_out, 0))
        return usage, (weakref.ref(wrapper), tokens_in, tokens_out)

    async def pop_item(self, *, wrapper: Any = None) -> TResponseInputItem | None:
        """Take the latest item off the history and return it (None when there is none).

        Surface entries this integration did not write (another writer's core messages) are
        not items: ``get_items`` skips them and ``pop_item`` leaves them.
        """
        popped: list[Any] = []

        def removal(handle: AsyncStoredSession) -> Batch | None:
            popped.clear()
            tail = handle.surface_messages(last=1)
            if tail and item_of(tail[0]) is None:  # another writer's entry: look further
                tail = handle.surface_messages()
            for node in reversed(tail):
                item = item_of(node)
                if item is not None:
                    popped.append(item)
                    return [_removed(node.seq, node.seq, [node.seq], "pop_item")]
            return None

        await self._write(removal, create=False)
        return popped[0] if popped else None

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Take every item off the history (one ``surface/removed``; the log keeps them)."""

        def removal(handle: AsyncStoredSession) -> Batch | None:
            nodes = handle.surface.nodes
            if not nodes:
                return None
            return [_removed(nodes[0], nodes[-1], list(nodes), "clear_session")]

        await self._write(removal, create=False)

    # -- compaction (hooks of the SDK's OpenAIResponsesCompactionSession) ---------------------

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[Any], bool] | None = None
    ) -> Any:
        """The latest ``limit`` items and a ``replace_suffix`` that swaps a suffix of them
        for the compacted output in one replace (None where that cannot be offered)."""
        if _CompactionSnapshot is None or prune_prefix is not None or limit <= 0:
            return None
        nodes = await self._tail(limit + 1)
        complete = len(nodes) <= limit
        nodes = nodes[-limit:]
        items = [item_of(node) for node in nodes]
        if any(item is None for item in items):
            return None  # a node this integration did not write: keep the SDK's fallback
        seqs = [node.seq for node in nodes]

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            expected = seqs[start:]
            if not expected:
                return False
            replacement = [item_event(item) for item in _listed(output)]
            stale: list[bool] = []

            def swap(handle: AsyncStoredSession) -> Batch | None:
                nodes = handle.surface.nodes
                stale[:] = [tuple(nodes[-len(expected) :]) != tuple(expected)]
                return None if stale[0] else _replacing(expected, replacement, "compaction")

            await self._write(swap, create=False)
            return bool(stale) and not stale[0]

        return _CompactionSnapshot(items, complete, replace_suffix)

    async def _atomic_replace_items(self, output_items: list[TResponseInputItem]) -> bool:
        """Replace the whole history by ``output_items`` in one transaction."""
        replacement = [item_event(item) for item in _listed(output_items)]

        def swap(handle: AsyncStoredSession) -> Batch | None:
            nodes = list(handle.surface.nodes)
            if not nodes:
                return [{**event, "surface_op": "append"} for event in replacement]
            return _replacing(nodes, replacement, "compaction")

        await self._write(swap, create=True)
        return True

    # -- plumbing -----------------------------------------------------------------------------

    async def _ready(self) -> AsyncSessionStore:
        store = await self._store  # opens a store from from_url; an open store: no-op
        if not self._checked:
            if ITEM_TYPE not in store.catalog.item_types:
                raise InvalidArgumentError(
                    f"the store's catalog does not know {ITEM_TYPE!r} as an item type; open it "
                    f"with catalog=<your catalog>.extend([{ITEM_TYPE!r}], items=True)",
                    argument="store",
                )
            self._checked = True
        return store

    async def _tail(self, count: int | None) -> list[SurfaceMessage]:
        store = await self._ready()
        try:
            return await store.surface_messages(self.session_id, last=count)
        except SessionNotFoundError:
            return []

    async def _writer(self, create: bool) -> AsyncStoredSession | None:
        if self._handle is not None:
            return self._handle
        store = await self._ready()
        try:
            self._handle = await store.open_session(self.session_id, read_log=False)
        except SessionNotFoundError:
            if not create:
                return None
            try:
                self._handle = await store.create_session(self.session_id, title=self._title)
            except SessionExistsError:  # another writer created it first
                self._handle = await store.open_session(self.session_id, read_log=False)
        return self._handle

    async def _write(
        self,
        build: Callable[[AsyncStoredSession], Batch | None],
        *,
        create: bool,
        positioned: bool = False,
        size: int = 0,
    ) -> None:
        """Append ``build(handle)`` atomically; on losing a race, reload and build again.

        ``positioned``: ``build`` reads ``self._at`` (where the log stands turn-wise, read back
        from the log when another writer moved it) and leaves the position after it in
        ``self._next``. Other batches leave the turn as it was. ``size``: the items ``build``
        maps; a big batch is mapped and appended with the cyclic collector paused (its events
        are all kept: ``building_paused``), attempt by attempt.
        """
        async with self._lock:
            for attempt in range(MAX_ATTEMPTS):
                handle = await self._writer(create)
                if handle is None:
                    return
                try:
                    if positioned and (self._at is None or self._at.seq != handle.seq):
                        self._at = await self._position(handle.seq)
                    before = handle.seq
                    with building_paused(size):
                        batch = build(handle)
                        if not batch:
                            return
                        await handle.append_many(batch)
                        del batch  # freed before the collector is back: it would scan them
                    at = self._at
                    if positioned and self._next is not None:
                        self._at = self._next
                    elif at is not None and at.seq == before:
                        self._at = Position(handle.seq, at.turn, at.open, at.step)
                    return
                except ConcurrencyError:
                    await handle.refresh()
                except SessionNotFoundError:  # deleted under us: start over
                    self._handle = None
                    self._at = None
                if attempt >= 3:  # a crowd of writers: step aside a little
                    await asyncio.sleep(random.uniform(0, 0.002 * attempt))
            raise ConcurrencyError(
                f"session {self.session_id!r}: {MAX_ATTEMPTS} writes in a row lost a race "
                "with other writers",
                session_id=self.session_id,
            )

    async def _position(self, count: int) -> Position:
        """Where a log of ``count`` events stands turn-wise: read back from its end until a
        turn boundary (a few events, unless the session has none)."""
        store = await self._ready()
        end, size = count, 64
        while end > 0:
            start = max(0, end - size)
            events = [
                event
                async for event in await store.events(self.session_id, from_seq=start, to_seq=end)
            ]
            found = position_after(events, count)
            if found is not None:
                return found
            end, size = start, size * 4
        return Position(count)


def _limit(limit: Any) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidArgumentError(
            f"limit must be an int or None, not {type(limit).__name__} {limit!r}",
            argument="limit",
        )
    if limit < 0:
        raise InvalidArgumentError(f"limit must be >= 0, got {limit}", argument="limit")
    return limit


def _first_user_text(items: list[Any]) -> str | None:
    """The text of the first user message among ``items``, as a title (None: none)."""
    for item in items:
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, list):
            texts = [p.get("text") for p in content if isinstance(p, dict)]
            content = " ".join(t for t in texts if isinstance(t, str))
        return title_of(content)
    return None


def _listed(items: Sequence[Any]) -> list[Any]:
    if isinstance(items, str | bytes | dict) or not isinstance(items, Sequence):
        raise InvalidArgumentError(
            f"items must be a list of items, not {type(items).__name__}", argument="items"
        )
    return list(items)


def _removed(start: int, end: int, sources: list[int], reason: str) -> dict[str, Any]:
    return {
        "type": "surface/removed",
        "data": {"reason": reason},
        "surface_op": Replace(start, end),
        "source_event_seqs": sources,
    }


def _replacing(shadowed: Sequence[int], replacement: Batch, reason: str) -> Batch:
    """``replacement`` in place of the surface run ``shadowed``: its first event replaces the
    run (citing every seq of it), the rest follow it; no replacement is a removal."""
    if not replacement:
        return [_removed(shadowed[0], shadowed[-1], list(shadowed), reason)]
    first = {
        **replacement[0],
        "surface_op": Replace(shadowed[0], shadowed[-1]),
        "source_event_seqs": list(shadowed),
    }
    return [first] + [{**event, "surface_op": "append"} for event in replacement[1:]]
