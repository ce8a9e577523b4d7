"""What both savers do with their store, written once.

Each operation is a generator that yields the store calls it needs (``Call``) and gets their
results back; ``run_sync`` runs one against a ``SessionStore``, ``run_async`` against an
``AsyncSessionStore`` (awaiting each call). So the two savers share every step, retry and
race rule, and differ only in how a call is made. What to write is planned by the pure
functions of ``_write``; what to answer by those of ``_read``.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from session_sql import (
    AsyncSessionStore,
    ConcurrencyError,
    InvalidArgumentError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStore,
)

from .._titles import title_of
from ._ids import (
    ID_PREFIX,
    MAX_ATTEMPTS,
    MOVED_TYPE,
    MOVING_TYPE,
    SETTLED_TYPE,
    Batch,
    base_id,
    base_of,
    gen_id,
    generation,
    labels,
    thread_from_labels,
    thread_of,
)
from ._ids import config as make_config
from ._index import Index
from ._read import get, matching
from ._write import needs, put_batch, rewritten, writes_batch

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    """One call of a store or session handle method, made by the driver."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Call:
    return Call(fn, args, kwargs)


Op = Generator[Call, Any, T]


class _Drive:
    """One run of an op: the call it yields next, told the last call's result or error."""

    __slots__ = ("error", "op", "result", "value")

    def __init__(self, op: Op[Any]) -> None:
        self.op = op
        self.result: Any = None
        self.error: BaseException | None = None
        self.value: Any = None

    def next_call(self) -> Call | None:
        """The next call to make, or None once the op has returned (its ``value``)."""
        try:
            if self.error is None:
                return self.op.send(self.result)
            return self.op.throw(self.error)
        except StopIteration as stop:
            self.value = stop.value
            return None

    def succeeded(self, result: Any) -> None:
        self.result, self.error = result, None

    def failed(self, exc: Exception) -> None:
        self.result, self.error = None, exc


def run_sync(op: Op[T]) -> T:
    """Run ``op``, making each call it yields (a sync store's)."""
    drive = _Drive(op)
    while (step := drive.next_call()) is not None:
        try:
            drive.succeeded(step.fn(*step.args, **step.kwargs))
        except Exception as exc:
            drive.failed(exc)
    return drive.value  # type: ignore[no-any-return]


async def run_async(op: Op[T]) -> T:
    """Run ``op``, awaiting each call it yields that returns an awaitable (an async store's;
    a handle's ``Index.fold`` is plain, and reads the log through the loop only if needed)."""
    drive = _Drive(op)
    while (step := drive.next_call()) is not None:
        try:
            result = step.fn(*step.args, **step.kwargs)
            drive.succeeded(await result if inspect.isawaitable(result) else result)
        except Exception as exc:
            drive.failed(exc)
    return drive.value  # type: ignore[no-any-return]


class Threads:
    """A saver's threads in its store, and the saver's calls as operations over them."""

    store: SessionStore | AsyncSessionStore
    serde: SerializerProtocol
    _threads: dict[str, Index]

    # -- a thread's generations ------------------------------------------------------------

    def _index(self, thread_id: str, *, create: bool, fresh: bool = True) -> Op[Index | None]:
        """The thread's current generation, refreshed unless ``fresh`` is False (None when it
        has none)."""
        index = self._threads.get(thread_id)
        if index is not None and not fresh and index.moved is None:
            return index  # a write: conditional on the head this index saw
        if index is not None:
            try:
                yield call(index.handle.refresh)
                index.fold()
                if index.moved is None:
                    return index
            except SessionNotFoundError:
                pass
            self._threads.pop(thread_id, None)
        for _ in range(MAX_ATTEMPTS):
            found = yield from self._resolve(thread_id, create=create)
            if found is None or found.moved is None:
                if found is not None:
                    self._threads[thread_id] = found
                return found
            yield from self._finish_move(found)
        raise ConcurrencyError(f"thread {thread_id!r}: could not settle its generations")

    def _resolve(self, thread_id: str, *, create: bool) -> Op[Index | None]:
        base = base_id(thread_id)
        for _ in range(MAX_ATTEMPTS):
            gens = yield from self._generations(base)
            if gens:
                try:
                    handle = yield call(self.store.open_session, gen_id(base, max(gens)))
                    index = Index(handle)
                    # the log past the surface is read here, where a deletion is a miss
                    yield call(index.fold)
                except SessionNotFoundError:
                    continue
                if index.pending_from is not None:  # a move in progress: settle it first
                    yield from self._settle(index, None)
                    continue
                for gen in sorted(gens)[:-1]:  # a settled move's leftover
                    with contextlib.suppress(SessionNotFoundError):
                        yield from self._drop_if_sealed(gen_id(base, gen))
                return index
            if not create:
                return None
            try:
                named = {"labels": labels(thread_id), "title": title_of(thread_id)}
                handle = yield call(self.store.create_session, base, **named)
            except SessionExistsError:
                continue
            index = Index(handle)
            index.fold()
            return index
        raise ConcurrencyError(f"thread {thread_id!r}: could not open its session")

    def _generations(self, base: str) -> Op[dict[int, str]]:
        """The thread's sessions by generation: normally one; two while a move settles.

        The first is looked up by id, then later ones are listed by the prefix ``<base>~``
        (no other thread's id starts with it: a thread id with ``~`` gets a digest id). In
        that order, since a move creates its generation before it deletes the one it
        replaces: a thread found empty had none left at the first look, and a move can no
        longer settle (``delete_thread`` relies on it).
        """
        gens = {}
        with contextlib.suppress(SessionNotFoundError):
            yield call(self.store.head_seq, base)
            gens[0] = base
        lister = self.store.list_sessions
        infos = yield call(lister, id_prefix=base + "~", limit=1000, order="created")
        for info in infos:
            gen = generation(info.id, base)
            if gen is not None:
                gens[gen] = info.id
        return gens

    def _drop_if_sealed(self, session_id: str) -> Op[None]:
        handle = yield call(self.store.open_session, session_id)
        if any(e.type in (MOVED_TYPE, SETTLED_TYPE) for e in handle.events[-1:]):
            yield call(self.store.delete_session, session_id)

    def _finish_move(self, index: Index) -> Op[None]:
        """Create the successor a sealed generation names (if nobody has) and settle it.

        The successor is created *pending* (its seed ends with ``langgraph/moving``): it
        becomes the thread only when ``_settle`` marks both generations in one transaction,
        which needs the sealed one still there. So a move whose old generation a
        ``delete_thread`` removed meanwhile can create nothing that stays.
        """
        if index.settled:  # the successor holds the thread: this one is a leftover
            with contextlib.suppress(SessionNotFoundError):
                yield call(self.store.delete_session, index.handle.id)
            return
        moved = index.moved
        seed = rewritten(self.serde, index, moved["op"], index.now())
        mark = {"from": index.handle.id}
        seed.append(
            {"type": MOVING_TYPE, "seq": len(seed), "time": index.now(), "data": mark}
            | {"ignorable": True}
        )
        try:
            create = self.store.create_session
            named = {"labels": moved.get("labels"), "title": moved.get("title")}
            handle = yield call(create, moved["to"], seed=seed, **named)
        except SessionExistsError:
            return  # somebody's: whoever resolves the thread next settles it
        successor = Index(handle)
        yield call(successor.fold)
        yield from self._settle(successor, index)

    def _settle(self, successor: Index, old: Index | None) -> Op[None]:
        """Settle the pending ``successor``: mark it and the generation it replaces (still
        sealed for it) in one transaction, then drop that one; or, when that one is gone or
        not sealed for it (a ``delete_thread`` won), drop the successor."""
        old_id = successor.pending_from
        assert old_id is not None
        if old is None:
            try:
                handle = yield call(self.store.open_session, old_id)
                old = Index(handle)
                yield call(old.fold)
            except SessionNotFoundError:
                old = None
        sealed = old is not None and old.moved is not None and not old.settled
        if sealed and old is not None and old.moved.get("to") == successor.handle.id:
            mark = [{"type": SETTLED_TYPE, "data": {"from": old_id}, "ignorable": True}]
            together = [(old.handle, mark), (successor.handle, mark)]
            try:
                yield call(self.store.append_together, together)
            except (ConcurrencyError, SessionNotFoundError):
                pass  # somebody settled it, or the old one is gone: see below
            else:
                with contextlib.suppress(SessionNotFoundError):
                    yield call(self.store.delete_session, old_id)
                return
        # Not settled by us. Only a settle appends past a seal, and it comes before the old
        # generation's deletion: so a successor still pending after the old one was seen
        # gone, unsealed or moved on is stale (a deletion won), and nothing can settle it.
        try:
            yield call(successor.handle.refresh)
            yield call(successor.fold)
        except SessionNotFoundError:
            return
        if successor.pending_from is not None:
            with contextlib.suppress(SessionNotFoundError):
                yield call(self.store.delete_session, successor.handle.id)

    def _append(self, thread_id: str, build: Callable[[Index], Batch]) -> Op[None]:
        """Append what ``build`` plans from the thread's index, replanning on a lost race."""
        fresh = False  # the first try trusts the cached log: the append is conditional on it
        for _ in range(MAX_ATTEMPTS):
            index = yield from self._index(thread_id, create=True, fresh=fresh)
            if index is None:
                return
            batch = build(index)
            if not batch:
                if not fresh:  # nothing to write, by the cache's account: make sure
                    fresh = True
                    continue
                return
            fresh = True
            try:
                yield call(index.handle.append_many, batch)
                index.fold()
                index.committed()
                return
            except (ConcurrencyError, SessionNotFoundError):
                continue
        raise ConcurrencyError(f"thread {thread_id!r}: {MAX_ATTEMPTS} writes lost a race")

    def _move(self, index: Index, thread_id: str, op: dict[str, Any]) -> Op[bool]:
        """Seal ``index``'s generation for ``op``, then finish the move (False: lost a race)."""
        base = base_of(index.handle.id)
        gen = generation(index.handle.id, base) or 0
        moved: dict[str, Any] = {"to": gen_id(base, gen + 1), "op": op}
        moved |= {"labels": labels(thread_id), "title": title_of(thread_id)}
        try:
            seal = [{"type": MOVED_TYPE, "data": moved, "ignorable": True}]
            yield call(index.handle.append_many, seal)
        except (ConcurrencyError, SessionNotFoundError):
            return False
        index.fold()
        self._threads.pop(thread_id, None)
        yield from self._finish_move(index)
        return True

    def _rewrite(self, thread_id: str, op: dict[str, Any]) -> Op[None]:
        for _ in range(MAX_ATTEMPTS):
            index = yield from self._index(thread_id, create=False)
            if index is None or not needs(self.serde, index, op):
                return
            if (yield from self._move(index, thread_id, op)):
                return
        raise ConcurrencyError(f"thread {thread_id!r}: {MAX_ATTEMPTS} rewrites lost a race")

    def _all_threads(self) -> Op[list[str]]:
        threads: list[str] = []
        after = None
        while True:
            lister = self.store.list_sessions
            page = yield call(lister, id_prefix=ID_PREFIX, limit=500, order="created", after=after)
            for info in page:
                thread_id = thread_from_labels(info.labels)
                if thread_id is not None and thread_id not in threads:
                    threads.append(thread_id)
            if len(page) < 500:
                return threads
            after = page[-1]

    # -- BaseCheckpointSaver's calls --------------------------------------------------------

    def _get_tuple_op(self, config: RunnableConfig) -> Op[CheckpointTuple | None]:
        index = yield from self._index(thread_of(config), create=False)
        return get(self.serde, index, config)

    def _list_op(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Op[list[CheckpointTuple]]:
        threads = [thread_of(config)] if config else (yield from self._all_threads())
        found: list[CheckpointTuple] = []
        for thread_id in threads:
            index = yield from self._index(thread_id, create=False)
            if index is None:
                continue
            for item in matching(self.serde, index, thread_id, config, filter, before):
                if limit is not None and len(found) >= limit:
                    break
                found.append(item)
        return found

    def _put_op(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Op[RunnableConfig]:
        thread_id = thread_of(config)
        yield from self._append(
            thread_id,
            lambda index: put_batch(self.serde, index, config, checkpoint, metadata, new_versions),
        )
        return make_config(
            thread_id, config["configurable"].get("checkpoint_ns", ""), checkpoint["id"]
        )

    def _put_writes_op(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Op[None]:
        yield from self._append(
            thread_of(config),
            lambda index: writes_batch(self.serde, index, config, writes, task_id, task_path),
        )

    def _delete_thread_op(self, thread_id: str) -> Op[None]:
        """Delete every generation, until a look finds none: a move that settles needs the
        generation it replaces, so once none is left nothing can come back."""
        self._threads.pop(thread_id, None)
        base = base_id(thread_id)
        for _ in range(MAX_ATTEMPTS):
            gens = yield from self._generations(base)
            if not gens:
                return
            for session_id in gens.values():
                with contextlib.suppress(SessionNotFoundError):
                    yield call(self.store.delete_session, session_id)
        raise ConcurrencyError(f"thread {thread_id!r}: {MAX_ATTEMPTS} deletions lost a race")

    def _delete_for_runs_op(self, run_ids: Sequence[str]) -> Op[None]:
        runs = sorted({str(r) for r in run_ids})
        if not runs:
            return
        for thread_id in (yield from self._all_threads()):
            yield from self._rewrite(thread_id, {"op": "delete_runs", "runs": runs})

    def _prune_op(self, thread_ids: Sequence[str], strategy: str) -> Op[None]:
        if strategy not in ("keep_latest", "delete"):
            raise InvalidArgumentError(
                f"strategy must be 'keep_latest' or 'delete', not {strategy!r}",
                argument="strategy",
            )
        for thread_id in thread_ids:
            if strategy == "delete":
                yield from self._delete_thread_op(str(thread_id))
            else:
                yield from self._rewrite(str(thread_id), {"op": "keep_latest"})

    def _copy_thread_op(self, source: str, target: str) -> Op[None]:
        index = yield from self._index(source, create=False)
        if index is None:
            return
        child = base_id(target)
        if (yield from self._generations(child)):
            raise SessionExistsError(
                f"thread {target!r} exists: copy_thread forks into a new thread",
                session_id=child,
            )
        yield call(self.store.fork_session, index.handle.id, child_id=child)
        yield call(self.store.update_session, child, labels=labels(target), title=title_of(target))
