"""``BaseCheckpointSaver``'s methods, sync and async, written once over the operations of
``_ops``: each saver says only how it runs an operation (``_sync`` and ``_async``)."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, ClassVar, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from session_sql import AsyncSessionStore, InvalidArgumentError, SessionStore

from ._ids import next_version
from ._ops import Op, Threads

T = TypeVar("T")


class Saver(Threads, BaseCheckpointSaver[str]):
    """What both savers share; a subclass runs operations its way."""

    # the store class a saver takes, in words, and the saver that takes the other one
    _takes: ClassVar[tuple[type[SessionStore | AsyncSessionStore], str, str]]

    def __init__(self, store: Any, *, serde: SerializerProtocol | None = None) -> None:
        kind, name, other = self._takes
        if not isinstance(store, kind):
            raise InvalidArgumentError(
                f"store must be {name}, not {type(store).__name__} ({other})", argument="store"
            )
        super().__init__(serde=serde)
        self.store = store
        self._threads = {}

    def _sync(self, op: Op[T]) -> T:  # pragma: no cover - every saver defines it
        raise NotImplementedError

    async def _async(self, op: Op[T]) -> T:  # pragma: no cover - every saver defines it
        raise NotImplementedError

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        return next_version(current)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self._get_tuple_op(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._async(self._get_tuple_op(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._sync(self._list_op(config, filter, before, limit))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found: builtins.list[CheckpointTuple] = await self._async(
            self._list_op(config, filter, before, limit)
        )
        for item in found:
            yield item

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(self._put_op(config, checkpoint, metadata, new_versions))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._async(self._put_op(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._sync(self._put_writes_op(config, writes, task_id, task_path))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._async(self._put_writes_op(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self._delete_thread_op(str(thread_id)))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._async(self._delete_thread_op(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync(self._delete_for_runs_op(run_ids))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._async(self._delete_for_runs_op(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._sync(self._copy_thread_op(str(source_thread_id), str(target_thread_id)))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._async(self._copy_thread_op(str(source_thread_id), str(target_thread_id)))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._sync(self._prune_op(thread_ids, strategy))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._async(self._prune_op(thread_ids, strategy))
