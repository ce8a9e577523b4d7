"""Members of the async API that are the sync API's own, forwarded rather than written again.

Each is declared by naming the sync member it forwards (``seq = reader(StoredSession.seq)``),
so that mypy types it as the sync one (signature, return type) and the docstring is the sync
one's: a table of names, not bodies that could drift from what they forward.

* ``reader``: an ``AsyncStoredSession`` property read from its sync handle (``_sync``).
* ``method``: an ``AsyncStoredSession`` method called on its sync handle (no I/O).
* ``offloaded``: an ``AsyncSessionStore`` coroutine that runs the sync store's method whole in
  the store's runner (worker threads or the loop's greenlet).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, cast, overload

if TYPE_CHECKING:
    from session_sql._store.store import SessionStore
    from session_sql._store.writer import StoredSession

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class Reader(Generic[T]):
    """How mypy sees a forwarded reader: ``T`` on an instance. At run time it is a
    ``property``."""

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Reader[T]: ...
    @overload
    def __get__(self, obj: object, owner: type[Any] | None = None) -> T: ...
    def __get__(self, obj: object, owner: type[Any] | None = None) -> T | Reader[T]:
        raise NotImplementedError  # pragma: no cover - replaced by a property


def reader(member: Callable[[StoredSession], T]) -> Reader[T]:
    """The sync handle's property ``member`` (``StoredSession.seq``), or an attribute through
    a getter (``lambda s: s.first_live_seq``), as a read-only property of the async handle."""
    fget = getattr(member, "fget", None)
    if fget is not None:  # a property: read through in C (one Python call, the property's)
        forwarded = property(operator.attrgetter(f"_sync.{fget.__name__}"), doc=fget.__doc__)
    else:
        forwarded = property(lambda self: member(self._sync))
    return cast(Reader[T], forwarded)


def method(
    fn: Callable[Concatenate[StoredSession, P], R],
) -> Callable[Concatenate[Any, P], R]:
    """The sync handle's method ``fn`` as a method of the async handle (same signature)."""
    name = fn.__name__

    def forwarded(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return cast(R, getattr(self._sync, name)(*args, **kwargs))

    functools.update_wrapper(forwarded, fn)
    return forwarded


def offloaded(
    fn: Callable[Concatenate[SessionStore, P], R],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """The sync store's method ``fn`` as a coroutine of the async store (same signature and
    docstring): run whole by the runner, so it keeps its one transaction."""
    name = fn.__name__

    async def forwarded(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        call = getattr(self._store, name)
        if kwargs:
            call = functools.partial(call, **kwargs)
        return cast(R, await self._runner.call(call, *args))

    functools.update_wrapper(forwarded, fn)
    return forwarded
