"""pydantic-ai-harness's ``StepStore`` over a session_sql store (SPEC §13.3).

Pass a ``SessionSQLStepStore`` to the harness's ``StepPersistence`` capability; ``continue_run``
and ``fork_run`` read from it as from the harness's own stores. Mapping (see
docs/integrations.md):

- A run is a session, ``pydantic-ai:<run id>`` (a digest for an id longer than 100
  characters or not printable), labelled ``pydantic_ai=run`` and with its run id, conversation,
  parent run and agent name, which ``list_runs`` filters on; its title is its first user
  message.
- The run record, each step event, each snapshot and each tool-effect record is an event of
  the log (``pydantic-ai/run``, ``pydantic-ai/step``, ``pydantic-ai/snapshot``,
  ``pydantic-ai/tool-effect``) whose data is the record as the harness's JSON stores write it.
- Model messages are on the surface: each message a snapshot holds is stored once, when a
  snapshot first holds it, as the core events that say it (a user prompt a ``user/message``, a
  model response an ``assistant/message`` with its text, reasoning and tool calls, plus a
  log-only ``tool/call`` per call, a tool return or retry a ``tool/result``), the first of
  which keeps the message's JSON under ``"pydantic_ai"``; a message no core event says (only
  a system prompt) is a ``pydantic-ai/message`` item. A snapshot names its history by the
  seqs of the events that keep its messages, so a history of n messages costs n small ints.
- ``run_started`` opens a turn (``turn/start``), ``run_completed``/``run_failed`` end it, so
  ``stats``, the ``turns`` and ``tool_calls`` views and the inspector read a run like a native
  session.

Retried writes are dropped as the harness's stores drop them: a step event or a snapshot whose
``idempotency_key`` the run already holds is not stored again. A store keeps each run it used
in memory (its log, read once, then what other writers append: one short read per call).

Needs the extra: ``pip install 'session-sql[pydantic-ai]'``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar

from session_sql.integrations._requires import requires

with requires("pydantic_ai", "pydantic-ai-harness", "pydantic-ai"):
    from pydantic_ai.messages import ModelMessagesTypeAdapter
    from pydantic_ai_harness.step_persistence import (
        ContinuableSnapshot,
        RunRecord,
        StepEvent,
        ToolEffectRecord,
    )

from session_sql import (
    AsyncSessionStore,
    AsyncStoredSession,
    ConcurrencyError,
    ConfigurationError,
    InvalidArgumentError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStore,
    loopsafe,
)
from session_sql.catalog import default_catalog
from session_sql.integrations import (
    CATALOG,
    PYDANTIC_AI_EFFECT,
    PYDANTIC_AI_MESSAGE,
    PYDANTIC_AI_RUN,
    PYDANTIC_AI_SNAPSHOT,
    PYDANTIC_AI_STEP,
)
from session_sql.integrations._opening import open_with_types
from session_sql.integrations._pydantic_ai_mapping import (
    LABEL_CONVERSATION,
    LABEL_PARENT,
    LABEL_RECORD_AT,
    LABEL_RUN,
    LOG_ONLY,
    Batch,
    Run,
    label_value,
    message_text,
    run_labels,
    session_id,
)

__all__ = ["SessionSQLStepStore"]

KIND_LABEL = {"pydantic_ai": "run"}
"""The label every run's session carries."""
MAX_ATTEMPTS = 200
"""Retries of one write against other writers: each ConcurrencyError means one of them won."""


@dataclass
class _Cached:
    """One run as this store knows it: the folded log, a write handle, a lock."""

    run: Run = field(default_factory=Run)
    handle: AsyncStoredSession | None = None
    lock: loopsafe.Semaphore = field(default_factory=loopsafe.Semaphore)


class SessionSQLStepStore:
    """pydantic-ai-harness's ``StepStore`` protocol, each run a session of ``store``.

    ``store`` is an ``AsyncSessionStore`` (``open_async_store``): the protocol is async and a
    ``SessionStore`` would block the event loop, so it is refused. ``max_cached_runs`` bounds
    how many runs' folded logs stay in memory (the least recently used go first).
    """

    def __init__(self, store: AsyncSessionStore, *, max_cached_runs: int = 1024) -> None:
        if isinstance(store, SessionStore) or not isinstance(store, AsyncSessionStore):
            raise InvalidArgumentError(
                "store must be an AsyncSessionStore (open_async_store): the StepStore protocol "
                f"is async, and a {type(store).__name__} would block the event loop",
                argument="store",
            )
        if isinstance(max_cached_runs, bool) or not isinstance(max_cached_runs, int):
            raise InvalidArgumentError("max_cached_runs must be an int", argument="max_cached_runs")
        if max_cached_runs < 1:
            raise InvalidArgumentError("max_cached_runs must be >= 1", argument="max_cached_runs")
        self._store = store
        self._max_cached = max_cached_runs
        self._runs: OrderedDict[str, _Cached] = OrderedDict()
        self._checked = False

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls, url: str, **open_store_options: Any
    ) -> AsyncIterator[SessionSQLStepStore]:
        """A step store on a store of its own (``open_async_store``'s options), closed on
        exit; a ``catalog`` given there gains the integration's types."""
        catalog = open_store_options.pop("catalog", None) or default_catalog()
        items = [PYDANTIC_AI_MESSAGE]
        async with open_with_types(url, catalog, open_store_options, LOG_ONLY, items) as store:
            yield cls(store)

    @property
    def store(self) -> AsyncSessionStore:
        return self._store

    def __repr__(self) -> str:
        return f"SessionSQLStepStore({self._store!r})"

    # -- runs ---------------------------------------------------------------------------------

    async def register_run(self, record: RunRecord) -> None:
        """Store a run's record; a run id already registered raises ``SessionExistsError``
        (a ``ValueError``: ``run_id`` is single-shot)."""
        data = _record_dict(record)

        def build(run: Run) -> Batch:
            if run.record is not None:
                raise SessionExistsError(
                    f"run {record.run_id!r} is already registered (run_id is single-shot)",
                    session_id=session_id(record.run_id),
                )
            return [{"type": PYDANTIC_AI_RUN, "data": data}]

        [event] = await self._write(record.run_id, build, labels=run_labels(data))
        if event.seq > 0:  # the run had events before its record: say where the record is
            labels = {**KIND_LABEL, **run_labels(data), LABEL_RECORD_AT: str(event.seq)}
            await self._store.update_session(session_id(record.run_id), labels=labels)

    async def get_run(self, *, run_id: str) -> RunRecord | None:
        run = await self._read(run_id)
        return None if run is None or run.record is None else _run_of(run.record)

    async def list_runs(
        self, *, parent_run_id: str | None = None, conversation_id: str | None = None
    ) -> list[RunRecord]:
        """The registered runs matching both filters, by ``started_at`` ascending."""
        store = await self._ready()
        labels = dict(KIND_LABEL)
        for label, value in ((LABEL_PARENT, parent_run_id), (LABEL_CONVERSATION, conversation_id)):
            if label_value(value) is not None:
                labels[label] = str(value)
        records: list[RunRecord] = []
        after = None
        while True:
            page = await store.list_sessions(
                limit=1000, after=after, order="created", labels=labels
            )
            for info in page:
                at = int(info.labels.get(LABEL_RECORD_AT, "0"))
                events = await store.events(info.id, from_seq=at, to_seq=at + 1)
                async for event in events:
                    if event.type == PYDANTIC_AI_RUN:
                        records.append(_run_of(event.data))
            if len(page) < 1000:
                break
            after = page[-1]
        matching = [
            r
            for r in records
            if (parent_run_id is None or r.parent_run_id == parent_run_id)
            and (conversation_id is None or r.conversation_id == conversation_id)
        ]
        return sorted(matching, key=lambda r: r.started_at)

    # -- step events --------------------------------------------------------------------------

    async def append_event(self, event: StepEvent) -> None:
        """Append a step event (dropped when its ``idempotency_key`` is already stored);
        ``run_started`` opens a turn, ``run_completed`` and ``run_failed`` end it."""
        data = _record_dict(event)
        key = event.idempotency_key

        def build(run: Run) -> Batch | None:
            if key is not None and key in run.step_keys:
                return None
            batch: Batch = []
            if event.kind == "run_started":
                if run.at.turn:
                    batch.append(_turn_end(run.at.turn, "interrupted"))
                batch.append({"type": "turn/start", "data": {"turn": run.at.turns + 1}})
            batch.append({"type": PYDANTIC_AI_STEP, "data": data})
            if event.kind in ("run_completed", "run_failed") and run.at.turn:
                reason = "completed" if event.kind == "run_completed" else "error"
                batch.append(_turn_end(run.at.turn, reason))
            return batch

        await self._write(event.run_id, build)

    async def list_events(self, *, run_id: str) -> list[StepEvent]:
        run = await self._read(run_id)
        return [] if run is None else [_event_of(data) for data in run.steps]

    # -- snapshots ----------------------------------------------------------------------------

    async def save_snapshot(self, snapshot: ContinuableSnapshot) -> None:
        """Store a snapshot: the messages the run does not hold yet go on the surface, the
        snapshot names its history by their seqs (dropped when its ``idempotency_key`` is
        already stored)."""
        messages = ModelMessagesTypeAdapter.dump_python(snapshot.messages, mode="json")
        texts = [message_text(m) for m in messages]
        key = snapshot.idempotency_key

        untitled: list[bool] = []

        def build(run: Run) -> Batch | None:
            untitled[:] = [run.prompt is None]
            if key is not None and key in run.snapshot_keys:
                return None
            batch, seqs = run.snapshot_batch(messages, texts)
            batch.append({"type": PYDANTIC_AI_SNAPSHOT, "data": _snapshot_dict(snapshot, seqs)})
            return batch

        await self._write(snapshot.run_id, build)
        prompt = self._cached(snapshot.run_id).run.prompt
        if untitled and untitled[0] and prompt:  # the run's first user message: its title
            await self._store.update_session(session_id(snapshot.run_id), title=prompt)

    async def latest_snapshot(
        self, *, run_id: str, include_interrupted: bool = False
    ) -> ContinuableSnapshot | None:
        run = await self._read(run_id)
        data = None if run is None else run.latest(include_interrupted)
        return None if run is None or data is None else _snapshot_of(run, data)

    async def list_snapshots(
        self, *, run_id: str, include_interrupted: bool = False
    ) -> list[ContinuableSnapshot]:
        """Every snapshot of the run in write order (``interrupted`` ones only with
        ``include_interrupted``), as the harness's own stores offer it (not in the protocol:
        its ``conversation_search`` capability reads it)."""
        run = await self._read(run_id)
        if run is None:
            return []
        return [
            _snapshot_of(run, data)
            for data in run.snapshots
            if include_interrupted or data.get("state") == "complete"
        ]

    # -- tool effects -------------------------------------------------------------------------

    async def record_tool_effect(self, record: ToolEffectRecord) -> None:
        """Record a tool call's effect status (the latest record per tool call holds)."""
        data = _record_dict(record)
        await self._write(record.run_id, lambda run: [{"type": PYDANTIC_AI_EFFECT, "data": data}])

    async def get_tool_effect(self, *, run_id: str, tool_call_id: str) -> ToolEffectRecord | None:
        run = await self._read(run_id)
        data = None if run is None else run.effects.get(tool_call_id)
        return None if data is None else _effect_of(data)

    async def list_unresolved_tool_effects(self, *, run_id: str) -> list[ToolEffectRecord]:
        run = await self._read(run_id)
        if run is None:
            return []
        return [_effect_of(d) for d in run.effects.values() if d.get("status") == "started"]

    # -- plumbing -----------------------------------------------------------------------------

    async def _ready(self) -> AsyncSessionStore:
        store = await self._store  # an open store: no-op
        if not self._checked:
            catalog = store.catalog
            if any(t not in catalog for t in CATALOG if t.startswith("pydantic-ai/")) or (
                PYDANTIC_AI_MESSAGE not in catalog.item_types
            ):
                raise ConfigurationError(
                    "the store's catalog lacks the pydantic-ai types; open it with the default "
                    "catalog or extend yours with session_sql.integrations.CATALOG"
                )
            self._checked = True
        return store

    def _cached(self, run_id: str) -> _Cached:
        cached = self._runs.get(run_id)
        if cached is None:
            cached = self._runs[run_id] = _Cached()
            while len(self._runs) > self._max_cached:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(run_id)
        return cached

    async def _catch_up(self, cached: _Cached, sid: str, to_seq: int | None = None) -> None:
        store = await self._ready()
        cached.run.fold(
            [e async for e in await store.events(sid, from_seq=cached.run.at.seq, to_seq=to_seq)]
        )

    async def _read(self, run_id: str) -> Run | None:
        """The run brought up to date with its log (one short read), None when it has none."""
        store = await self._ready()
        sid = session_id(run_id)
        cached = self._cached(run_id)
        async with cached.lock:
            try:
                count = await store.head_seq(sid) + 1
                if count < cached.run.at.seq:  # deleted and created again
                    cached.run, cached.handle = Run(), None
                if count > cached.run.at.seq:
                    await self._catch_up(cached, sid)
            except SessionNotFoundError:
                cached.run, cached.handle = Run(), None
                return None
            return cached.run

    async def _write(
        self,
        run_id: str,
        build: Callable[[Run], Batch | None],
        *,
        labels: Mapping[str, str] | None = None,
    ) -> list[Any]:
        """Append ``build(run)`` in one transaction, the run up to date; creates the run's
        session. On losing a race with another writer: catch up and build again."""
        await self._ready()
        sid = session_id(run_id)
        cached = self._cached(run_id)
        async with cached.lock:
            for _ in range(MAX_ATTEMPTS):
                try:
                    handle = cached.handle
                    if handle is None:
                        handle = cached.handle = await self._writer(sid, run_id, labels)
                    if cached.run.at.seq > handle.seq:  # a read saw other writers' events
                        cached.run.fold(await handle.refresh())
                    if cached.run.at.seq > handle.seq:  # deleted and created again
                        cached.run = Run()
                    if cached.run.at.seq < handle.seq:
                        await self._catch_up(cached, sid, handle.seq)
                    batch = build(cached.run)
                    if not batch:
                        return []
                    committed = await handle.append_many(batch)
                    cached.run.fold(committed)
                    return list(committed)
                except ConcurrencyError:
                    if cached.handle is not None:  # what it missed, folded when it follows on
                        cached.run.fold(await cached.handle.refresh())
                except SessionNotFoundError:  # deleted under us: start over
                    cached.run, cached.handle = Run(), None
            raise ConcurrencyError(
                f"run {run_id!r}: {MAX_ATTEMPTS} writes in a row lost a race with other writers",
                session_id=sid,
            )

    async def _writer(
        self, sid: str, run_id: str, labels: Mapping[str, str] | None
    ) -> AsyncStoredSession:
        store = await self._ready()
        try:
            return await store.open_session(sid, read_log=False)
        except SessionNotFoundError:
            pass
        created = {**KIND_LABEL, LABEL_RUN: run_id} if label_value(run_id) else dict(KIND_LABEL)
        try:
            return await store.create_session(sid, labels={**created, **(labels or {})})
        except SessionExistsError:  # another writer created it first
            return await store.open_session(sid, read_log=False)


def _turn_end(turn: int, reason: str) -> dict[str, Any]:
    return {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": reason}}}


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


# The records as the harness's JSON stores write them (FileStepStore), key for key: a run
# record, a step event and a tool-effect record are their fields in order, times as ISO text.

_TIMES = frozenset({"started_at", "ended_at", "timestamp"})
_R = TypeVar("_R", RunRecord, StepEvent, ToolEffectRecord)


def _record_dict(record: RunRecord | StepEvent | ToolEffectRecord) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif f.name == "metadata":
            value = dict(value)
        data[f.name] = value
    return data


def _record_of(cls: type[_R], data: Mapping[str, Any], *required: str) -> _R:
    """The record ``data`` holds; a ``required`` key it lacks raises ``KeyError``."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        value: Any = data[f.name] if f.name in required else data.get(f.name)
        if f.name in _TIMES and (value is not None or f.name in required):
            value = datetime.fromisoformat(value)
        elif f.name == "metadata":
            value = _strings(value)
        values[f.name] = value
    return cls(**values)


def _run_of(data: Mapping[str, Any]) -> RunRecord:
    return _record_of(RunRecord, data, "run_id", "started_at")


def _event_of(data: Mapping[str, Any]) -> StepEvent:
    return _record_of(StepEvent, data, "run_id", "kind", "step_index", "timestamp")


def _snapshot_dict(snapshot: ContinuableSnapshot, seqs: list[int]) -> dict[str, Any]:
    return {
        "run_id": snapshot.run_id,
        "step_index": snapshot.step_index,
        "conversation_id": snapshot.conversation_id,
        "parent_run_id": snapshot.parent_run_id,
        "agent_name": snapshot.agent_name,
        "timestamp": snapshot.timestamp.isoformat(),
        "state": snapshot.state,
        "message_seqs": seqs,
        "idempotency_key": snapshot.idempotency_key,
    }


def _snapshot_of(run: Run, data: Mapping[str, Any]) -> ContinuableSnapshot:
    return ContinuableSnapshot(
        run_id=data["run_id"],
        step_index=data["step_index"],
        messages=ModelMessagesTypeAdapter.validate_json(run.history_json(data)),
        conversation_id=data.get("conversation_id"),
        parent_run_id=data.get("parent_run_id"),
        agent_name=data.get("agent_name"),
        timestamp=datetime.fromisoformat(data["timestamp"]),
        state=data["state"],
        idempotency_key=data.get("idempotency_key"),
    )


def _effect_of(data: Mapping[str, Any]) -> ToolEffectRecord:
    return _record_of(
        ToolEffectRecord, data, "tool_call_id", "tool_name", "run_id", "status", "started_at"
    )
