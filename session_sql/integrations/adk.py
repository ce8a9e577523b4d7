"""Google ADK sessions in a session_sql store: ``SQLSessionService`` (SPEC §11.5).

Mapping (see docs/integrations.md):

- Scope. The service works in its store's tenant (the operator's boundary, chosen when the
  store is opened). An ADK session ``(app_name, user_id, id)`` is one session_sql session whose
  ``user_id`` is ADK's user id and whose labels are ``adk_kind=session``, ``adk_app`` and
  ``adk_session`` (ADK's id); its store id is derived from the triple, because ADK ids are
  unique per app and user while store ids are unique per tenant. Mapping apps to tenants
  instead would need a store (and a pool) per app and would turn a name in a request into a
  security boundary.
- Events. Each ADK event is one event of the session's log, on the surface in log order. An
  event that a core message holds (user text, model text and function calls, one function
  response) is a ``user/message``, ``assistant/message`` or ``tool/result`` whose message also
  carries the event itself under ``"adk"``; any other is an ``adk/event`` whose data is the
  event. Either way the event's JSON comes back exactly. Order is the log's seq (events that
  share a timestamp stay in the order they were appended). A model message's function calls
  each get a log-only ``tool/call`` beside it, and ``turn/start``/``turn/end`` go around each
  invocation (ended by its final response), so the CLI, ``stats`` and the SQL views read an
  ADK session as they read a native one. ``last_update_time`` is the last event's timestamp.
- State. Session state is the creation state (in the header) folded with the events' deltas.
  App and user state live in sessions of their own (labels ``adk_kind=app-state`` /
  ``user-state``) as ``adk/state`` events ``{delta, state, cause}``, appended in the same
  transaction as the event or the session creation that changes them. ``temp:`` keys are
  never stored.
- Staleness. A returned session remembers the log head it was read at, and its append is
  conditional on that head (not on the cached handle, which a ``get_session`` may move on):
  an append from an older copy, or one that loses a race with another writer, raises ADK's
  ``StaleSessionError``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import OrderedDict
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError as AdkNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session as AdkSession
from pydantic_core import to_jsonable_python

from session_sql import AsyncSessionStore, AsyncStoredSession, loopsafe, open_async_store, thaw
from session_sql.catalog import default_catalog
from session_sql.errors import ConcurrencyError, ConfigurationError, SessionExistsError
from session_sql.errors import SessionNotFoundError as StoreNotFoundError
from session_sql.events import SessionEvent
from session_sql.integrations import ADK_EVENT, ADK_STATE
from session_sql.integrations._adk_mapping import (
    APP,
    KIND,
    PROVIDER,  # noqa: F401 - importable from here, as it always was
    SESSION,
    Tracked,
    adk_header,
    boundaries,
    merged_state,
    message_of,
    split_state,
    store_id,
)
from session_sql.integrations._keyed_locks import KeyedLocks
from session_sql.integrations._opening import EntersReady
from session_sql.integrations._titles import title_of
from session_sql.metadata import HIDDEN_LABEL

__all__ = ["SQLSessionService"]

STATE_RETRIES = 50
"""How often an append retries when another process changed app or user state first."""

STALE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)
_LIST_PAGE = 500


class SQLSessionService(EntersReady, BaseSessionService):
    """ADK's ``BaseSessionService`` on a session_sql async store (see the module docstring).

    ``store`` is an ``AsyncSessionStore`` whose catalog knows the integrations' types (the
    default catalog does, through the entry point). Write handles of recently used sessions
    are cached (``cache_size``), so an append costs one transaction, not a reload.
    """

    def __init__(self, store: AsyncSessionStore, *, cache_size: int = 256) -> None:
        if not isinstance(store, AsyncSessionStore):
            raise ConfigurationError(
                f"SQLSessionService needs an AsyncSessionStore (open_async_store), got {store!r}"
            )
        self._store = store
        self._owned = False
        self._cache: OrderedDict[str, Tracked | AsyncStoredSession] = OrderedDict()
        self._cache_size = max(1, int(cache_size))
        self._locks = KeyedLocks()
        self._state_lock = loopsafe.Semaphore()
        self._opening = loopsafe.Semaphore()
        self._checked = False

    @classmethod
    def from_url(cls, url: str, **open_store_options: Any) -> SQLSessionService:
        """A service on a store it opens (on first use) and closes with ``close()``."""
        catalog = open_store_options.pop("catalog", None) or default_catalog()
        if ADK_STATE not in catalog:
            catalog = catalog.extend([ADK_STATE])
        if ADK_EVENT not in catalog:
            catalog = catalog.extend([ADK_EVENT], items=True)
        service = cls(open_async_store(url, catalog=catalog, **open_store_options))
        service._owned = True
        return service

    async def close(self) -> None:
        """Close the store if this service opened it (``from_url``)."""
        self._cache.clear()
        if self._owned:
            await self._store.close()

    async def _ready(self) -> AsyncSessionStore:
        if self._checked:
            return await self._store
        async with self._opening:  # concurrent first calls must not open the store twice
            store = await self._store
            if self._checked:
                return store
            catalog = store.catalog
            if ADK_STATE not in catalog or ADK_EVENT not in catalog.item_types:
                raise ConfigurationError(
                    f"the store's catalog lacks the ADK types ({ADK_EVENT} as an item type, "
                    f"{ADK_STATE}); open it with the default catalog or extend yours with "
                    "session_sql.integrations.CATALOG"
                )
            self._checked = True
        return store

    async def _create(
        self, key: str, header: dict[str, Any], user_id: str | None, labels: dict[str, str]
    ) -> AsyncStoredSession:
        """Create a session with its scope in the header and in its metadata."""
        store = await self._ready()
        return await store.create_session(key, header=header, user_id=user_id, labels=labels)

    # -- locks and the handle cache --------------------------------------------------------

    def _remember(self, key: str, value: Tracked | AsyncStoredSession) -> None:
        self._cache[key] = value
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    async def _tracked(self, key: str, *, refresh: bool = True) -> Tracked | None:
        """The ADK session stored as ``key``, brought up to date; None when there is none."""
        store = await self._ready()
        cached = self._cache.get(key)
        try:
            if isinstance(cached, Tracked):
                if refresh:
                    await cached.handle.refresh()
                tracked = cached
            else:
                handle = await store.open_session(key)  # its whole log: the service folds it
                tracked = Tracked(handle, dict(handle.header.get("adk", {}).get("state", {})))
        except StoreNotFoundError:
            self._cache.pop(key, None)
            return None
        tracked.fold()
        self._remember(key, tracked)
        return tracked

    async def _state_handle(self, key: str) -> AsyncStoredSession | None:
        """The cached handle on an app or user state session, up to date; None when absent."""
        store = await self._ready()
        cached = self._cache.get(key)
        try:
            if isinstance(cached, AsyncStoredSession):
                await cached.refresh()
                handle = cached
            else:
                handle = await store.open_session(key)
        except StoreNotFoundError:
            self._cache.pop(key, None)
            return None
        self._remember(key, handle)
        return handle

    @staticmethod
    def _state_of(handle: AsyncStoredSession | None) -> dict[str, Any]:
        if handle is None:
            return {}
        events = handle.events
        for i in range(len(events) - 1, -1, -1):
            if events[i].type == ADK_STATE:
                state: dict[str, Any] = thaw(events[i].data["state"])
                return state
        return {}

    async def _scoped_state(self, app_name: str, user_id: str) -> tuple[Any, Any]:
        """App and user state, both read at once (two connections)."""
        await self._ready()
        app, user = await asyncio.gather(
            self._state_handle(store_id("app", app_name)),
            self._state_handle(store_id("user", app_name, user_id)),
        )
        return self._state_of(app), self._state_of(user)

    async def _state_session(
        self, key: str, app_name: str, user_id: str | None
    ) -> AsyncStoredSession:
        """The handle on a state session, created (empty) on first use."""
        handle = await self._state_handle(key)
        if handle is not None:
            return handle
        store = await self._ready()
        kind = "app-state" if user_id is None else "user-state"
        identity = {"kind": kind, "app": app_name} | ({} if user_id is None else {"user": user_id})
        try:
            labels = {KIND: kind, APP: app_name, HIDDEN_LABEL: "true"}  # out of `ls`
            handle = await self._create(key, adk_header(key, identity), user_id, labels)
        except SessionExistsError:  # another writer created it first
            handle = await store.open_session(key)
        self._remember(key, handle)
        return handle

    async def _state_writes(
        self, app_name: str, user_id: str, app: Any, user: Any, cause: dict[str, Any]
    ) -> list[tuple[AsyncStoredSession, list[dict[str, Any]]]]:
        """The ``adk/state`` appends of an app and a user delta (none for empty deltas)."""
        writes: list[tuple[AsyncStoredSession, list[dict[str, Any]]]] = []
        for key, owner, delta in (
            (store_id("app", app_name), None, app),
            (store_id("user", app_name, user_id), user_id, user),
        ):
            if delta:
                handle = await self._state_session(key, app_name, owner)
                state = self._state_of(handle) | delta
                data = {"delta": delta, "state": state, "cause": cause}
                writes.append((handle, [{"type": ADK_STATE, "data": data}]))
        return writes

    async def _write(
        self,
        first: tuple[AsyncStoredSession, list[dict[str, Any]]],
        app_name: str,
        user_id: str,
        app: Any,
        user: Any,
        cause: dict[str, Any],
        head: int,
    ) -> list[SessionEvent]:
        """Append ``first`` with the app and user state changes in one transaction, only if
        ``first``'s session is still at ``head`` (what the caller's session object saw: a
        ``get_session`` meanwhile may have moved the shared handle past it).

        When another process changed app or user state first, refresh and retry; a lost race
        on ``first`` itself propagates (``ConcurrencyError``). Returns ``first``'s events.
        """
        store = await self._ready()
        heads = {first[0].id: head}
        if not (app or user):
            return (await store._append_together([first], heads=heads))[0]
        async with self._state_lock:
            for attempt in range(STATE_RETRIES):
                writes = await self._state_writes(app_name, user_id, app, user, cause)
                try:
                    done = await store._append_together([first, *writes], heads=heads)
                except ConcurrencyError as exc:
                    if exc.session_id == first[0].id or attempt == STATE_RETRIES - 1:
                        raise
                    continue
                return done[0]
        raise AssertionError("unreachable")  # pragma: no cover

    async def _create_with_state(
        self,
        key: str,
        header: dict[str, Any],
        labels: dict[str, str],
        app_name: str,
        user_id: str,
        app: Any,
        user: Any,
        cause: dict[str, Any],
    ) -> AsyncStoredSession:
        """Create the session and write the app and user state changes in one transaction.

        When another process changed app or user state first, refresh and retry; a session
        of this id created first propagates (``SessionExistsError``), with nothing written.
        """
        store = await self._ready()
        named: dict[str, Any] = {"user_id": user_id, "labels": labels}
        named["title"] = title_of(labels[SESSION])  # ADK's session id
        if not (app or user):
            return (await store._create_together(key, writes=[], header=header, **named))[0]
        async with self._state_lock:
            for attempt in range(STATE_RETRIES):
                writes = await self._state_writes(app_name, user_id, app, user, cause)
                try:
                    handle, _ = await store._create_together(
                        key, writes=writes, header=header, **named
                    )
                except ConcurrencyError:
                    if attempt == STATE_RETRIES - 1:
                        raise
                    continue
                return handle
        raise AssertionError("unreachable")  # pragma: no cover

    # -- BaseSessionService ---------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        """A new, empty session; ``app:``/``user:`` keys of ``state`` update the shared state.

        The session and the shared state are written in one transaction: a create that finds
        the id taken (``AlreadyExistsError``), even by a writer that got there meanwhile,
        changes nothing.
        """
        await self._ready()
        session_id = (session_id.strip() if session_id else None) or str(uuid.uuid4())
        key = store_id("session", app_name, user_id, session_id)
        if await self._tracked(key) is not None:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.")
        app, user, own = split_state(to_jsonable_python(state or {}))
        cause = {"session": session_id, "user": user_id}
        # The state sessions exist from the first session on, so that reads find them.
        async with self._state_lock:
            await self._state_session(store_id("app", app_name), app_name, None)
            await self._state_session(store_id("user", app_name, user_id), app_name, user_id)
        identity = {"app": app_name, "user": user_id, "session": session_id, "state": own}
        labels = {KIND: "session", APP: app_name, SESSION: session_id}
        header = adk_header(key, identity)
        try:
            handle = await self._create_with_state(
                key, header, labels, app_name, user_id, app, user, cause
            )
        except SessionExistsError as exc:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from exc
        tracked = Tracked(handle, dict(handle.header["adk"]["state"]))
        self._remember(key, tracked)
        app_state, user_state = await self._scoped_state(app_name, user_id)
        return self._session(tracked, app_name, user_id, session_id, app_state, user_state, [])

    def _session(
        self,
        tracked: Tracked,
        app_name: str,
        user_id: str,
        session_id: str,
        app_state: Any,
        user_state: Any,
        records: list[Any],
    ) -> AdkSession:
        session = AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=merged_state(thaw(tracked.state), app_state, user_state),
            events=[Event.model_validate(thaw(r)) for r in records],
            last_update_time=tracked.updated(),
        )
        session._storage_update_marker = str(tracked.head)
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSession | None:
        """The session with its events in log order (``config`` keeps a recent part)."""
        session_id = session_id.strip() if session_id else session_id
        key = store_id("session", app_name, user_id, session_id)
        await self._ready()  # opened once, before the reads below run side by side
        # The session and the shared state are read at once (three connections at most).
        tracked, (app_state, user_state) = await asyncio.gather(
            self._tracked(key), self._scoped_state(app_name, user_id)
        )
        if tracked is None:
            return None
        records = tracked.records
        if config is not None:
            if config.num_recent_events is not None:
                count = config.num_recent_events
                records = records[-count:] if count else []
            if config.after_timestamp is not None:
                older = [
                    i for i, r in enumerate(records) if r["timestamp"] < config.after_timestamp
                ]
                records = records[older[-1] + 1 :] if older else records
        return self._session(
            tracked, app_name, user_id, session_id, app_state, user_state, list(records)
        )

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (of one user, or of all), least recently updated first, each
        with its state (app and user state merged in, as ADK's own services give it) and
        without its events (``get_session`` has them).

        Paged in creation order, which no write changes (paging by update time would skip a
        session appended to between two pages). A session's state is a fold of its log, so
        listing reads each listed session (its whole log once per process while it stays in
        the cache, then only what other writers appended).
        """
        store = await self._ready()
        infos: list[Any] = []
        after = None
        while True:
            labels = {KIND: "session", APP: app_name}
            page = await store.list_sessions(
                limit=_LIST_PAGE, after=after, order="created", user_id=user_id, labels=labels
            )
            infos.extend(page)
            if len(page) < _LIST_PAGE:
                break
            after = page[-1]
        shared: dict[str, tuple[Any, Any]] = {}
        found: list[AdkSession] = []
        for info in infos:
            owner = info.user_id or ""
            tracked = await self._tracked(info.id)
            if tracked is None:  # deleted while listing
                continue
            if owner not in shared:
                shared[owner] = await self._scoped_state(app_name, owner)
            app_state, user_state = shared[owner]
            found.append(
                AdkSession(
                    id=info.labels[SESSION],
                    app_name=app_name,
                    user_id=owner,
                    state=merged_state(thaw(tracked.state), app_state, user_state),
                    last_update_time=tracked.updated(),
                )
            )
        found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=found)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its log (the store's ``delete_session``; nothing if absent).

        App and user state keep the changes it made, each citing it as its ``cause``.
        """
        store = await self._ready()
        session_id = session_id.strip() if session_id else session_id
        key = store_id("session", app_name, user_id, session_id)
        async with self._locks.hold(key):
            self._cache.pop(key, None)
            try:
                await store.delete_session(key)
            except StoreNotFoundError:
                return

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state (keys without ``user:``), shared by their sessions of the app."""
        handle = await self._state_handle(store_id("user", app_name, user_id))
        return self._state_of(handle)

    async def append_event(self, session: AdkSession, event: Event) -> Event:
        """Store ``event`` (not a partial one) and update the session and the shared state.

        Raises ``StaleSessionError`` when ``session`` is older than what is stored, or when
        another writer appended first; ``SessionNotFoundError`` when it does not exist.
        """
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        key = store_id("session", session.app_name, session.user_id, session.id)
        async with self._locks.hold(key):
            tracked = await self._tracked(key, refresh=False)
            if tracked is None:
                raise AdkNotFoundError(f"Session {session.id} not found.")
            try:
                head = await self._check_fresh(tracked, session)
                record = json.loads(event.model_dump_json(exclude_none=True))
                turn, step = tracked.numbers(record)
                mapped = message_of(record, turn, max(step, 1))
                item_type, data = mapped if mapped else (ADK_EVENT, record)
                item = {"type": item_type, "data": data, "surface_op": "append"}
                final = (
                    event.author != "user"
                    and event.content is not None
                    and event.is_final_response()
                )
                starts = turn != tracked.turn
                before, after = boundaries(
                    record,
                    final,
                    turn,
                    max(step, 1),
                    starts,
                    tracked.turn if tracked.open else None,
                )
                app, user, _ = split_state(record.get("actions", {}).get("state_delta") or {})
                cause = {"session": session.id, "user": session.user_id, "event": record["id"]}
                first = (tracked.handle, [*before, item, *after])
                done = await self._write(
                    first, session.app_name, session.user_id, app, user, cause, head
                )
            except StoreNotFoundError as exc:
                self._cache.pop(key, None)
                raise AdkNotFoundError(f"Session {session.id} not found.") from exc
            except ConcurrencyError as exc:
                raise StaleSessionError(STALE) from exc
            finally:
                tracked.fold()
            # What this object has seen: its own event, even if a read moved the handle on.
            session._storage_update_marker = str(done[-1].seq)
            session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    async def _check_fresh(self, tracked: Tracked, session: AdkSession) -> int:
        """The log head ``session`` was read at, the one the append must be conditional on;
        ``StaleSessionError`` when the copy is older than the stored log."""
        marker = session._storage_update_marker
        if marker is not None and marker == str(tracked.head):
            return tracked.head
        await tracked.handle.refresh()
        tracked.fold()
        if marker is not None:
            fresh = marker == str(tracked.head)
        else:  # a session built by hand: fresh when it ends where the log does
            last = tracked.records[-1]["id"] if tracked.records else None
            fresh = last == (session.events[-1].id if session.events else None)
        if not fresh:
            raise StaleSessionError(STALE)
        return tracked.head
