"""The Claude Agent SDK's ``SessionStore`` over a session_sql store (SPEC §13.2).

A transcript (``project_key``, ``session_id``, and ``subpath`` for a subagent's) is one session
of the store's tenant, labelled ``claude_kind`` (``session`` or ``subagent``),
``claude_project``, ``claude_session`` and ``claude_subpath``; a subagent's session names its
main transcript's as ``parentSession``. Each entry is a ``claude-agent-sdk/entry`` event holding
it verbatim, so ``load`` gives back every entry byte for byte; user and assistant entries are
also on the surface as core messages, with turns, tool calls and token usage
(``_claude_mapping``), so ``messages()``, ``stats``, the views and the inspector read a Claude
session like a native one. A batch is one transaction.

Entries carrying a ``uuid`` are stored once: the SDK retries a batch whose outcome it did not
see. ``list_session_summaries`` gives the SDK's fold kept in the same transaction as the
entries, stamped with the session's last write, the clock ``list_sessions`` reports.

Needs the extra: ``pip install 'session-sql[claude-agent-sdk]'``.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, cast

from session_sql.integrations._requires import requires

with requires("claude_agent_sdk", "the Claude Agent SDK", "claude-agent-sdk"):
    from claude_agent_sdk import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStore,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )

from session_sql import (
    AsyncSessionStore,
    AsyncStoredSession,
    ConcurrencyError,
    ConfigurationError,
    InvalidArgumentError,
    NotJSONError,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    thaw,
)
from session_sql.integrations import CLAUDE_ENTRY, CLAUDE_SUMMARY
from session_sql.integrations._claude_mapping import (
    KIND,
    PROJECT,
    SESSION,
    SUBPATH,
    Fold,
    as_text,
    compacts,
    entry_of,
    fresh_entries,
    header_of,
    labels_of,
    plan,
    store_id,
)
from session_sql.integrations._keyed_locks import KeyedLocks
from session_sql.integrations._opening import open_with_types

__all__ = ["SessionSQLSessionStore"]

MAX_ATTEMPTS = 100
"""Retries of one batch against other writers: each ConcurrencyError means one of them won."""

_PAGE = 500
_READERS = 8  # sessions read at once by list_session_summaries


@dataclass
class _Tracked:
    """A write handle on a transcript's session and the fold of its stored entries."""

    handle: AsyncStoredSession
    fold: Fold
    folded: int = 0  # events of the handle's log folded so far

    def catch_up(self) -> None:
        """Fold the entries other writers stored since the last fold."""
        events = self.handle.events[self.folded :]
        stored = [e.data for e in events if e.type == CLAUDE_ENTRY]
        self.folded += len(events)
        if stored:
            entries = [entry_of(data) for data in stored]
            texts = frozenset(i for i, data in enumerate(stored) if "type" not in data)
            key = {"project_key": "", "session_id": ""}  # the fold's id is not read back
            plan(self.fold, cast("SessionKey", key), entries, 0, [], texts)
            self.fold.remember(entries)
            # The replay numbers events from 0: the open calls' tool/call seqs are the log's.
            open_calls = self.fold.calls
            for event in events:
                if event.type == "tool/call" and event.data.get("callId") in open_calls:
                    open_calls[event.data["callId"]] = event.seq


class SessionSQLSessionStore(SessionStore):
    """The SDK's ``SessionStore`` protocol, with every optional method, on an async store.

    ``store`` is an ``AsyncSessionStore`` (``open_async_store``) whose catalog knows the
    integrations' types (the default catalog does). Write handles of recently used
    transcripts are cached (``cache_size``), so an append costs one transaction.
    """

    def __init__(self, store: AsyncSessionStore, *, cache_size: int = 256) -> None:
        if not isinstance(store, AsyncSessionStore):
            raise InvalidArgumentError(
                f"store must be an AsyncSessionStore (open_async_store), not {store!r}",
                argument="store",
            )
        self._store = store
        self._cache: OrderedDict[str, _Tracked] = OrderedDict()
        self._cache_size = max(1, int(cache_size))
        self._locks = KeyedLocks()
        self._checked = False

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls, url: str, **open_store_options: Any
    ) -> AsyncIterator[SessionSQLSessionStore]:
        """A store on ``url`` (``open_async_store``'s options), closed on exit; a ``catalog``
        given there gains the integration's types."""
        catalog = open_store_options.pop("catalog", None)
        types = (CLAUDE_ENTRY, CLAUDE_SUMMARY)
        async with open_with_types(url, catalog, open_store_options, types) as store:
            yield cls(store)

    @property
    def store(self) -> AsyncSessionStore:
        return self._store

    @staticmethod
    def session_id_of(key: SessionKey) -> str:
        """The id of the store's session that holds the transcript of ``key`` (for
        ``messages``, ``stats``, ``export_jsonl``, the CLI, ...)."""
        _check_key(key, subpath=True)
        return store_id(key)

    def __repr__(self) -> str:
        return f"SessionSQLSessionStore({self._store!r})"

    async def _ready(self) -> AsyncSessionStore:
        store = await self._store
        if not self._checked:
            if CLAUDE_ENTRY not in store.catalog or CLAUDE_SUMMARY not in store.catalog:
                raise ConfigurationError(
                    f"the store's catalog lacks {CLAUDE_ENTRY} and {CLAUDE_SUMMARY}; open it "
                    "with the default catalog or extend yours with "
                    "session_sql.integrations.CATALOG"
                )
            self._checked = True
        return store

    async def _tracked(self, key: SessionKey, sid: str, batch: list[Any]) -> _Tracked:
        """The transcript's handle and fold, its session created on first use (once
        ``batch`` is known to be JSON: a refused first batch leaves no session behind)."""
        cached = self._cache.get(sid)
        if cached is not None:
            self._cache.move_to_end(sid)
            return cached
        store = await self._ready()
        try:
            handle = await store.open_session(sid)
        except SessionNotFoundError:
            as_text(batch)  # refuses what JSON cannot write before the session exists
            try:
                handle = await store.create_session(
                    sid, header=header_of(key), labels=labels_of(key)
                )
            except SessionExistsError:  # another writer created it first
                handle = await store.open_session(sid)
        tracked = _Tracked(handle, Fold(main=key.get("subpath") is None))
        tracked.catch_up()
        self._cache[sid] = tracked
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return tracked

    # -- the SessionStore protocol --------------------------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Store a batch in one transaction, after the transcript's stored entries; entries
        whose ``uuid`` is stored already are skipped (a retried batch lands once)."""
        _check_key(key, subpath=True)
        batch = _checked_entries(entries)
        if not batch:
            return
        sid = store_id(key)
        textual = False  # whether a refusal showed entries to keep as JSON text
        async with self._locks.hold(sid):
            for attempt in range(MAX_ATTEMPTS):
                tracked = await self._tracked(key, sid, batch)
                fresh = fresh_entries(tracked.fold, batch)
                if not fresh:
                    return
                fold = tracked.fold.copy()
                # The surface, which only a compaction boundary reads (to take it off).
                nodes = list(tracked.handle.surface.nodes) if compacts(fresh) else []
                texts = as_text(fresh) if textual else frozenset()
                events = plan(fold, key, fresh, tracked.handle.seq, nodes, texts)
                try:
                    await tracked.handle.append_many(events)
                except NotJSONError:  # nothing written: keep the entries it refuses as text
                    if textual:
                        raise
                    textual = True
                    continue
                except ConcurrencyError:
                    if attempt == MAX_ATTEMPTS - 1:
                        raise
                    try:
                        await tracked.handle.refresh()
                    except SessionNotFoundError:  # deleted meanwhile: start it again
                        self._cache.pop(sid, None)
                        continue
                    tracked.catch_up()
                    continue
                except SessionNotFoundError:  # deleted meanwhile: start it again
                    self._cache.pop(sid, None)
                    continue
                fold.remember(fresh)
                tracked.fold, tracked.folded = fold, tracked.handle.seq
                return
        raise ConcurrencyError(
            f"session {sid!r}: other writers kept moving it for {MAX_ATTEMPTS} attempts",
            session_id=sid,
        )

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """Every stored entry, in order, each as appended; None when none was."""
        _check_key(key, subpath=True)
        store = await self._ready()
        try:
            events = await store.events(store_id(key))
        except SessionNotFoundError:
            return None
        entries = [entry_of(event.data) async for event in events if event.type == CLAUDE_ENTRY]
        return entries or None

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The project's main transcripts, each with the time of its last write (epoch ms)."""
        infos = await self._infos({KIND: "session", PROJECT: _text(project_key)})
        return [{"session_id": i.labels[SESSION], "mtime": i.updated_at} for i in infos]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The SDK's summary of each main transcript of the project, stamped with its last
        write (a session whose last write was not this store's has none: the SDK reads it)."""
        store = await self._ready()
        infos = await self._infos({KIND: "session", PROJECT: _text(project_key)})
        gate = asyncio.Semaphore(_READERS)

        async def summary(info: SessionInfo) -> SessionSummaryEntry | None:
            async with gate:
                try:
                    events = await store.events(info.id, from_seq=info.head_seq)
                    last = [event async for event in events]
                except SessionNotFoundError:  # deleted meanwhile
                    return None
            if not last or last[-1].type != CLAUDE_SUMMARY:
                return None
            data = thaw(last[-1].data)
            return {"session_id": info.labels[SESSION], "mtime": info.updated_at, "data": data}

        found = await asyncio.gather(*(summary(info) for info in infos))
        return [entry for entry in found if entry is not None]

    async def delete(self, key: SessionKey) -> None:
        """Delete the transcript; a main transcript's subagent transcripts with it."""
        _check_key(key, subpath=True)
        store = await self._ready()
        sids = [store_id(key)]
        if key.get("subpath") is None:
            subagents = await self._infos(_subagent_labels(key), empty=True)
            sids.extend(info.id for info in subagents)
        for sid in sids:
            async with self._locks.hold(sid):
                self._cache.pop(sid, None)
                with suppress(SessionNotFoundError):
                    await store.delete_session(sid)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths of the session's subagent transcripts, oldest first."""
        _check_key(key, subpath=False)
        infos = await self._infos(_subagent_labels(key))
        return [info.labels[SUBPATH] for info in infos]

    async def _infos(self, labels: dict[str, str], *, empty: bool = False) -> list[SessionInfo]:
        """The sessions of the tenant carrying ``labels``, oldest-created first; those with no
        event (a first batch that never landed) only when ``empty``."""
        store = await self._ready()
        infos: list[SessionInfo] = []
        after: SessionInfo | None = None
        while True:
            page = await store.list_sessions(
                limit=_PAGE, after=after, order="created", labels=labels
            )
            infos.extend(info for info in page if empty or info.head_seq >= 0)
            if len(page) < _PAGE:
                return infos
            after = page[-1]


def _text(value: Any, name: str = "project_key") -> str:
    if type(value) is not str or not value:
        raise InvalidArgumentError(f"{name} must be a non-empty str, not {value!r}", argument=name)
    return value


def _check_key(key: Any, *, subpath: bool) -> None:
    if not isinstance(key, dict):
        raise InvalidArgumentError(f"key must be a dict, not {key!r}", argument="key")
    _text(key.get("project_key"), "key['project_key']")
    _text(key.get("session_id"), "key['session_id']")
    if subpath and key.get("subpath") is not None:
        _text(key["subpath"], "key['subpath']")


def _checked_entries(entries: Any) -> list[Any]:
    if not isinstance(entries, list):
        raise InvalidArgumentError(f"entries must be a list, not {entries!r}", argument="entries")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or type(entry.get("type")) is not str:
            raise InvalidArgumentError(
                f"entries[{i}] must be a dict with a str 'type', not {entry!r}",
                argument="entries",
            )
    return entries


def _subagent_labels(key: Any) -> dict[str, str]:
    return {KIND: "subagent", PROJECT: key["project_key"], SESSION: key["session_id"]}
