"""``SQLSessionService``: Google ADK's ``BaseSessionService`` on both backends."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

pytest.importorskip("google.adk")

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session
from google.genai import types

from session_sql import ConfigurationError, jsonl_file_name, open_async_store, open_store
from session_sql.catalog import DEFAULT_CATALOG
from session_sql.integrations import ADK_EVENT, ADK_STATE
from session_sql.integrations.adk import SQLSessionService, store_id

from ..loops import in_loops

T = TypeVar("T")


def run(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return asyncio.run(fn(*args))


@pytest.fixture
def service(backend) -> Iterator[SQLSessionService]:
    """A service on a fresh store; every test body runs in its own ``asyncio.run``."""
    svc = SQLSessionService.from_url(backend.url, schema=backend.schema)
    yield svc
    asyncio.run(svc.close())


def said(text: str, *, author: str = "user", invocation: str = "i1", **delta: Any) -> Event:
    return Event(
        author=author,
        invocation_id=invocation,
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta),
    )


def replied(text: str, *, invocation: str = "i1", **delta: Any) -> Event:
    return Event(
        author="agent",
        invocation_id=invocation,
        content=types.Content(role="model", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta),
    )


def dumped(events: list[Event]) -> list[Any]:
    return [e.model_dump(mode="json", exclude_none=True) for e in events]


# -- create, get, list, delete ----------------------------------------------------------------


def test_create_then_get_an_empty_session(service) -> None:
    async def body() -> None:
        made = await service.create_session(app_name="app", user_id="u", state={"k": 1})
        assert made.id and made.app_name == "app" and made.user_id == "u"
        assert made.state == {"k": 1} and made.events == []
        assert made.last_update_time > 0
        got = await service.get_session(app_name="app", user_id="u", session_id=made.id)
        assert got is not None
        assert (got.id, got.state, got.events) == (made.id, {"k": 1}, [])
        named = await service.create_session(app_name="app", user_id="u", session_id="  s1 ")
        assert named.id == "s1"

    run(body)


def test_ids_are_unique_per_app_and_user(service) -> None:
    async def body() -> None:
        await service.create_session(app_name="app", user_id="u", session_id="s")
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name="app", user_id="u", session_id="s")
        # the same id for another user or app is another session
        other_user = await service.create_session(
            app_name="app", user_id="v", session_id="s", state={"who": "v"}
        )
        other_app = await service.create_session(
            app_name="app2", user_id="u", session_id="s", state={"who": "app2"}
        )
        assert other_user.state == {"who": "v"} and other_app.state == {"who": "app2"}
        mine = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert mine is not None and mine.state == {}

    run(body)


def test_get_a_missing_session_is_none(service) -> None:
    async def body() -> None:
        await service.create_session(app_name="app", user_id="u", session_id="s")
        for app, user, sid in [("app", "u", "x"), ("app", "v", "s"), ("other", "u", "s")]:
            assert await service.get_session(app_name=app, user_id=user, session_id=sid) is None

    run(body)


def test_list_sessions_by_app_and_user_oldest_update_first(service) -> None:
    async def body() -> None:
        assert (await service.list_sessions(app_name="app")).sessions == []
        for user, sid in [("u", "a"), ("u", "b"), ("v", "c")]:
            await service.create_session(app_name="app", user_id=user, session_id=sid)
        await service.create_session(app_name="other", user_id="u", session_id="d")
        a = await service.get_session(app_name="app", user_id="u", session_id="a")
        assert a is not None
        await service.append_event(a, said("touch a"))  # now the most recently updated
        listed = (await service.list_sessions(app_name="app", user_id="u")).sessions
        assert [s.id for s in listed] == ["b", "a"]
        assert all(s.events == [] and s.app_name == "app" for s in listed)
        everyone = (await service.list_sessions(app_name="app")).sessions
        assert sorted((s.user_id, s.id) for s in everyone) == [("u", "a"), ("u", "b"), ("v", "c")]
        assert everyone[-1].id == "a"
        stamps = [s.last_update_time for s in everyone]
        assert stamps == sorted(stamps)
        assert (await service.list_sessions(app_name="app", user_id="nobody")).sessions == []

    run(body)


def test_list_sessions_pages_through_many(service, monkeypatch) -> None:
    from session_sql.integrations import adk

    monkeypatch.setattr(adk, "_LIST_PAGE", 3)

    async def body() -> None:
        for i in range(7):
            await service.create_session(app_name="app", user_id="u", session_id=f"s{i}")
        listed = (await service.list_sessions(app_name="app")).sessions
        assert sorted(s.id for s in listed) == [f"s{i}" for i in range(7)]

    run(body)


def test_list_sessions_sees_every_session_while_another_writer_appends(
    service, monkeypatch
) -> None:
    """Paging in creation order: an append between two pages moves no session past the cursor."""
    from session_sql.integrations import adk

    monkeypatch.setattr(adk, "_LIST_PAGE", 3)

    async def body() -> None:
        made = [
            await service.create_session(app_name="app", user_id="u", session_id=f"s{i}")
            for i in range(7)
        ]
        store = await service._ready()
        listing = store.list_sessions
        seen: list[str] = []

        async def writer_between_pages(**kwargs: Any) -> Any:
            page = await listing(**kwargs)
            seen.extend(info.labels["adk_session"] for info in page)
            if len(seen) == len(page):  # after the first page: append to one not listed yet
                await asyncio.sleep(0.005)  # a later updated_at than any creation
                target = next(s for s in made if s.id not in seen)
                await service.append_event(target, said("meanwhile"))
            return page

        monkeypatch.setattr(store, "list_sessions", writer_between_pages)
        listed = (await service.list_sessions(app_name="app")).sessions
        assert sorted(s.id for s in listed) == [f"s{i}" for i in range(7)]

    run(body)


def test_delete_session(service) -> None:
    async def body() -> None:
        s = await service.create_session(
            app_name="app", user_id="u", session_id="s", state={"user:name": "Ann"}
        )
        await service.create_session(app_name="app", user_id="u", session_id="keep")
        await service.append_event(s, said("hi"))
        await service.delete_session(app_name="app", user_id="u", session_id="s")
        assert await service.get_session(app_name="app", user_id="u", session_id="s") is None
        listed = (await service.list_sessions(app_name="app")).sessions
        assert [x.id for x in listed] == ["keep"]
        # deleting what is not there is no error, as with ADK's own services
        await service.delete_session(app_name="app", user_id="u", session_id="s")
        await service.delete_session(app_name="app", user_id="u", session_id="never")
        with pytest.raises(SessionNotFoundError):
            await service.append_event(s, said("to the deleted one"))
        # user state outlives the session; the id can be used again
        assert await service.get_user_state(app_name="app", user_id="u") == {"name": "Ann"}
        again = await service.create_session(app_name="app", user_id="u", session_id="s")
        assert again.events == []
        with pytest.raises(StaleSessionError):  # a copy of the deleted one, not of this one
            await service.append_event(s, said("to the deleted one"))

    run(body)


# -- events ----------------------------------------------------------------------------------


def test_events_round_trip_exactly_in_log_order(service) -> None:
    async def body() -> None:
        s = await service.create_session(app_name="app", user_id="u", session_id="s")
        sent = [
            said("first"),
            replied("second"),
            Event(
                author="agent",
                invocation_id="i1",
                content=types.Content(
                    role="model",
                    parts=[
                        types.Part(text="let me look", thought=True),
                        types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\0\1")),
                    ],
                ),
                timestamp=1.0,  # a client clock far behind: the log's order still rules
            ),
            said("fourth", invocation="i2"),
        ]
        for event in sent:
            await service.append_event(s, event)
        got = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert got is not None
        assert dumped(got.events) == dumped(sent)
        assert dumped(s.events) == dumped(sent)

    run(body)


def test_partial_events_are_not_stored(service) -> None:
    async def body() -> None:
        s = await service.create_session(app_name="app", user_id="u", session_id="s")
        chunk = replied("stream chunk", k=1)
        chunk.partial = True
        assert await service.append_event(s, chunk) is chunk
        got = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert got is not None and got.events == [] and got.state == {}

    run(body)


def test_get_session_config_keeps_the_recent_part(service) -> None:
    async def body() -> None:
        s = await service.create_session(app_name="app", user_id="u", session_id="s")
        times = [10.0, 20.0, 30.0, 40.0]
        for i, t in enumerate(times):
            event = said(f"e{i}")
            event.timestamp = t
            await service.append_event(s, event)

        async def texts(config: GetSessionConfig) -> list[str]:
            got = await service.get_session(
                app_name="app", user_id="u", session_id="s", config=config
            )
            assert got is not None
            return [e.content.parts[0].text for e in got.events]  # type: ignore[union-attr,index]

        assert await texts(GetSessionConfig(num_recent_events=0)) == []
        assert await texts(GetSessionConfig(num_recent_events=2)) == ["e2", "e3"]
        assert await texts(GetSessionConfig(num_recent_events=9)) == ["e0", "e1", "e2", "e3"]
        assert await texts(GetSessionConfig(after_timestamp=20.0)) == ["e1", "e2", "e3"]
        assert await texts(GetSessionConfig(after_timestamp=99.0)) == []
        both = GetSessionConfig(num_recent_events=3, after_timestamp=30.0)
        assert await texts(both) == ["e2", "e3"]

    run(body)


def test_the_same_config_answers_as_adks_in_memory_service(service) -> None:
    """The reference semantics, side by side (timestamps out of order included)."""

    async def body() -> None:
        memory = InMemorySessionService()
        stamps = [5.0, 3.0, 8.0, 8.0, 2.0, 9.0]
        sessions = []
        for svc in (service, memory):
            s = await svc.create_session(app_name="app", user_id="u", session_id="s")
            for i, t in enumerate(stamps):
                event = said(f"e{i}")
                event.timestamp = t
                event.id = f"id{i}"
                await svc.append_event(s, event)
            sessions.append(svc)
        for recent in (None, 0, 1, 4, 10):
            for after in (None, 1.0, 3.0, 8.0, 8.5, 10.0):
                config = GetSessionConfig(num_recent_events=recent, after_timestamp=after)
                mine, reference = [
                    await svc.get_session(
                        app_name="app", user_id="u", session_id="s", config=config
                    )
                    for svc in sessions
                ]
                assert mine is not None and reference is not None
                assert [e.id for e in mine.events] == [e.id for e in reference.events], config

    run(body)


def test_unicode_and_large_events(service) -> None:
    async def body() -> None:
        text = "héllo wörld — 你好, мир 🌍🚀 " * 3
        big = "x" * 1_500_000
        s = await service.create_session(
            app_name="äpp ✓", user_id="üser 🙂", session_id="séssion 会话", state={"ключ": text}
        )
        await service.append_event(s, said(text, **{"user:名前": text}))
        await service.append_event(s, replied(big))
        got = await service.get_session(
            app_name="äpp ✓", user_id="üser 🙂", session_id="séssion 会话"
        )
        assert got is not None
        assert got.events[0].content.parts[0].text == text  # type: ignore[union-attr,index]
        assert got.events[1].content.parts[0].text == big  # type: ignore[union-attr,index]
        assert got.state == {"ключ": text, "user:名前": text}
        listed = (await service.list_sessions(app_name="äpp ✓", user_id="üser 🙂")).sessions
        assert [x.id for x in listed] == ["séssion 会话"]

    run(body)


# -- state -----------------------------------------------------------------------------------


def test_session_state_folds_the_event_deltas(service) -> None:
    async def body() -> None:
        s = await service.create_session(
            app_name="app", user_id="u", session_id="s", state={"a": 1, "b": {"x": [1, 2]}}
        )
        await service.append_event(s, said("one", a=2, c="new"))
        await service.append_event(s, replied("two", b=None))
        assert s.state == {"a": 2, "b": None, "c": "new"}
        got = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert got is not None and got.state == {"a": 2, "b": None, "c": "new"}
        # the creation state holds however few events are asked for
        few = await service.get_session(
            app_name="app",
            user_id="u",
            session_id="s",
            config=GetSessionConfig(num_recent_events=0),
        )
        assert few is not None and few.state == got.state

    run(body)


def test_temp_state_is_applied_in_memory_and_never_stored(service, backend) -> None:
    async def body() -> None:
        s = await service.create_session(
            app_name="app", user_id="u", session_id="s", state={"temp:t0": 1, "k": 0}
        )
        assert "temp:t0" not in s.state
        event = said("hi", **{"temp:scratch": "secret-value", "k": 1})
        await service.append_event(s, event)
        assert s.state["temp:scratch"] == "secret-value"  # this invocation still sees it
        assert event.actions.state_delta == {"k": 1}
        got = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert got is not None and got.state == {"k": 1}
        assert got.events[0].actions.state_delta == {"k": 1}

    run(body)
    with open_store(backend.url, schema=backend.schema) as store:
        for info in store.list_sessions():
            for e in store.events(info.id):
                assert "secret-value" not in json.dumps(e.to_json())
                assert "temp:" not in json.dumps(e.to_json())


def test_app_and_user_state_are_shared_across_sessions(service) -> None:
    async def body() -> None:
        a = await service.create_session(
            app_name="app", user_id="u", session_id="a", state={"app:theme": "dark", "own": 1}
        )
        await service.append_event(a, said("set", **{"user:lang": "fr", "app:version": 2}))
        b = await service.create_session(app_name="app", user_id="u", session_id="b")
        assert b.state == {"app:theme": "dark", "app:version": 2, "user:lang": "fr"}
        v = await service.create_session(app_name="app", user_id="v", session_id="c")
        assert v.state == {"app:theme": "dark", "app:version": 2}  # another user
        other = await service.create_session(app_name="other", user_id="u", session_id="d")
        assert other.state == {}  # another app
        await service.append_event(b, said("change", **{"user:lang": "de"}))
        again = await service.get_session(app_name="app", user_id="u", session_id="a")
        assert again is not None
        assert again.state == {
            "own": 1,
            "app:theme": "dark",
            "app:version": 2,
            "user:lang": "de",
        }
        assert await service.get_user_state(app_name="app", user_id="u") == {"lang": "de"}
        assert await service.get_user_state(app_name="app", user_id="v") == {}
        assert await service.get_user_state(app_name="nope", user_id="u") == {}

    run(body)


def test_a_create_that_loses_the_race_changes_no_shared_state(service, backend) -> None:
    """Two services create one session id: the loser raises and its app/user keys are not
    written (the session and the shared state are one transaction)."""

    async def body() -> None:
        other = SQLSessionService.from_url(backend.url, schema=backend.schema)
        try:
            tracked = service._tracked

            async def winner_meanwhile(key: str, **kwargs: Any) -> Any:
                found = await tracked(key, **kwargs)
                if found is None:  # past this service's existence check: the other wins
                    await other.create_session(
                        app_name="app",
                        user_id="u",
                        session_id="s",
                        state={"app:k": "winner", "user:k": "winner", "own": "winner"},
                    )
                return found

            service._tracked = winner_meanwhile  # type: ignore[method-assign]
            with pytest.raises(AlreadyExistsError):
                await service.create_session(
                    app_name="app",
                    user_id="u",
                    session_id="s",
                    state={"app:k": "loser", "user:k": "loser", "own": "loser"},
                )
            del service._tracked
            got = await service.get_session(app_name="app", user_id="u", session_id="s")
            assert got is not None
            assert got.state == {"app:k": "winner", "user:k": "winner", "own": "winner"}
        finally:
            await other.close()

    run(body)
    with open_store(backend.url, schema=backend.schema) as store:
        for sid in (store_id("app", "app"), store_id("user", "app", "u")):
            assert [e.data["delta"] for e in store.events(sid)] == [{"k": "winner"}]


def test_an_app_restored_from_a_jsonl_backup_lists_and_reads_its_sessions(
    service, backend, tmp_path
) -> None:
    """export then import into a fresh store: the service there sees what it saw before (the
    sessions are found by their user id and labels, which the export carries)."""

    async def seen(svc: SQLSessionService) -> Any:
        listed = await svc.list_sessions(app_name="app")
        full = [
            await svc.get_session(app_name="app", user_id=s.user_id, session_id=s.id)
            for s in listed.sessions
        ]
        return (
            [s.model_dump(mode="json") for s in listed.sessions],
            [s.model_dump(mode="json") for s in full if s is not None],
            await svc.get_user_state(app_name="app", user_id="u"),
        )

    async def fill() -> Any:
        a = await service.create_session(
            app_name="app", user_id="u", session_id="a", state={"app:theme": "dark", "own": 1}
        )
        await service.append_event(a, said("hello", **{"user:lang": "fr"}))
        await service.append_event(a, replied("bonjour"))
        await service.create_session(app_name="app", user_id="v", session_id="b")
        return await seen(service)

    before = run(fill)
    backup = tmp_path / "backup"
    backup.mkdir()
    with open_store(backend.url, schema=backend.schema) as store:
        for info in store.iter_sessions():
            store.export_jsonl(info.id, backup / jsonl_file_name(info.id))
    fresh = f"sqlite:///{tmp_path / 'restored.db'}"
    with open_store(fresh) as restored:
        for path in sorted(backup.glob("*.jsonl")):
            restored.import_jsonl(path)
    again = SQLSessionService.from_url(fresh)
    try:
        after = run(seen, again)
    finally:
        run(again.close)
    assert len(before[0]) == 2
    assert after == before


def test_shared_state_and_event_commit_together(service, backend) -> None:
    """A lost race writes neither the event nor the state change."""

    async def body() -> None:
        s = await service.create_session(app_name="app", user_id="u", session_id="s")
        stale = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert stale is not None
        await service.append_event(s, said("first"))
        with pytest.raises(StaleSessionError):
            await service.append_event(stale, said("late", **{"app:x": 1, "user:y": 2}))
        got = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert got is not None and len(got.events) == 1
        assert "app:x" not in got.state and "user:y" not in got.state
        assert await service.get_user_state(app_name="app", user_id="u") == {}

    run(body)
    with open_store(backend.url, schema=backend.schema) as store:
        state_ids = [store_id("app", "app"), store_id("user", "app", "u")]
        for sid in state_ids:
            try:
                assert [e.type for e in store.events(sid)] == []
            except Exception as exc:  # never created: nothing was written at all
                assert type(exc).__name__ == "SessionNotFoundError"


# -- staleness -------------------------------------------------------------------------------


def test_a_stale_copy_is_refused_until_reloaded(service) -> None:
    async def body() -> None:
        s = await service.create_session(app_name="app", user_id="u", session_id="s")
        copy = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert copy is not None
        await service.append_event(s, said("one"))
        await service.append_event(s, said("two"))  # the same object keeps going
        with pytest.raises(StaleSessionError):
            await service.append_event(copy, said("from the old copy"))
        fresh = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert fresh is not None
        await service.append_event(fresh, said("three"))
        got = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert got is not None
        assert [e.content.parts[0].text for e in got.events] == ["one", "two", "three"]  # type: ignore[union-attr,index]

    run(body)


def test_another_service_on_the_same_store_makes_a_copy_stale(service, backend) -> None:
    async def body() -> None:
        other = SQLSessionService.from_url(backend.url, schema=backend.schema)
        try:
            mine = await service.create_session(app_name="app", user_id="u", session_id="s")
            theirs = await other.get_session(app_name="app", user_id="u", session_id="s")
            assert theirs is not None
            await other.append_event(theirs, said("theirs", **{"app:n": 1}))
            with pytest.raises(StaleSessionError):
                await service.append_event(mine, said("mine"))
            reloaded = await service.get_session(app_name="app", user_id="u", session_id="s")
            assert reloaded is not None and reloaded.state == {"app:n": 1}
            # app state changed by the other service does not make this session stale
            await other.append_event(
                await other.create_session(app_name="app", user_id="w"), said("x", **{"app:n": 2})
            )
            await service.append_event(reloaded, said("mine", **{"app:n": 3}))
            assert reloaded.state["app:n"] == 3
            check = await other.get_session(app_name="app", user_id="u", session_id="s")
            assert check is not None and check.state["app:n"] == 3
        finally:
            await other.close()

    run(body)


def test_a_stale_copy_is_refused_while_a_read_refreshes_the_session(service, backend) -> None:
    """A ``get_session`` between the freshness check and the append moves the shared handle to
    the stored head; the append stays conditional on the head the caller's copy saw."""

    async def body() -> None:
        other = SQLSessionService.from_url(backend.url, schema=backend.schema)
        try:
            mine = await service.create_session(app_name="app", user_id="u", session_id="s")
            theirs = await other.get_session(app_name="app", user_id="u", session_id="s")
            assert theirs is not None
            await other.append_event(theirs, said("theirs"))
            check = service._check_fresh

            async def read_meanwhile(tracked: Any, session: Session) -> Any:
                checked = await check(tracked, session)
                await service.get_session(app_name="app", user_id="u", session_id="s")
                return checked

            service._check_fresh = read_meanwhile  # type: ignore[method-assign]
            for text in ("stale", "stale again"):
                with pytest.raises(StaleSessionError):
                    await service.append_event(mine, said(text, **{"app:x": 1}))
            del service._check_fresh
            got = await service.get_session(app_name="app", user_id="u", session_id="s")
            assert got is not None
            assert [e.content.parts[0].text for e in got.events] == ["theirs"]  # type: ignore[union-attr,index]
            assert "app:x" not in got.state
            await service.append_event(got, said("reloaded"))
        finally:
            await other.close()

    run(body)


def test_a_session_built_by_hand_is_checked_against_the_log(service) -> None:
    async def body() -> None:
        await service.create_session(app_name="app", user_id="u", session_id="s")
        by_hand = Session(id="s", app_name="app", user_id="u")
        first = said("one")
        await service.append_event(by_hand, first)  # ends where the (empty) log ended
        late = Session(id="s", app_name="app", user_id="u")  # knows nothing of "one"
        with pytest.raises(StaleSessionError):
            await service.append_event(late, said("two"))
        caught_up = Session(id="s", app_name="app", user_id="u", events=[first])
        await service.append_event(caught_up, said("two"))
        missing = Session(id="nope", app_name="app", user_id="u")
        with pytest.raises(SessionNotFoundError):
            await service.append_event(missing, said("x"))

    run(body)


def test_concurrent_appends_to_one_session_in_one_process_serialise(service) -> None:
    async def body() -> None:
        s = await service.create_session(app_name="app", user_id="u", session_id="s")
        results = await asyncio.gather(
            *(service.append_event(s, said(f"m{i}", **{"app:n": i})) for i in range(5)),
            return_exceptions=True,
        )
        assert not [r for r in results if isinstance(r, BaseException)]
        got = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert got is not None and len(got.events) == 5

    run(body)


def test_writers_of_shared_state_in_two_services_both_succeed(service, backend) -> None:
    """Another service changing user state first makes this one retry, not fail."""

    async def body() -> None:
        other = SQLSessionService.from_url(backend.url, schema=backend.schema)
        try:
            a = await service.create_session(app_name="app", user_id="u", session_id="a")
            b = await other.create_session(app_name="app", user_id="u", session_id="b")

            async def writes(svc: SQLSessionService, session: Session, name: str) -> None:
                for i in range(5):
                    await svc.append_event(session, said(f"{name}{i}", **{f"user:{name}": i}))

            await asyncio.gather(writes(service, a, "a"), writes(other, b, "b"))
            assert await service.get_user_state(app_name="app", user_id="u") == {"a": 4, "b": 4}
            for svc, sid in ((service, "a"), (other, "b")):
                got = await svc.get_session(app_name="app", user_id="u", session_id=sid)
                assert got is not None and len(got.events) == 5
        finally:
            await other.close()

    run(body)


def test_concurrent_first_calls_open_the_store_once(backend) -> None:
    async def body() -> None:
        async with SQLSessionService.from_url(backend.url, schema=backend.schema) as setup:
            await setup.create_session(app_name="app", user_id="u", session_id="s")
        fresh = SQLSessionService.from_url(backend.url, schema=backend.schema)
        try:
            got = await asyncio.gather(
                *(fresh.get_session(app_name="app", user_id="u", session_id="s") for _ in range(4))
            )
            assert all(g is not None for g in got)
            await fresh.append_event(got[-1], said("hi", **{"app:k": 1}))  # type: ignore[arg-type]
        finally:
            await fresh.close()

    run(body)


def test_a_service_sees_its_stores_tenant_only(backend) -> None:
    async def body() -> None:
        services = [
            SQLSessionService.from_url(backend.url, schema=backend.schema, tenant=t)
            for t in ("acme", "globex")
        ]
        try:
            acme, globex = services
            s = await acme.create_session(
                app_name="app", user_id="u", session_id="s", state={"app:who": "acme"}
            )
            await acme.append_event(s, said("hi", **{"user:k": 1}))
            assert await globex.get_session(app_name="app", user_id="u", session_id="s") is None
            assert (await globex.list_sessions(app_name="app")).sessions == []
            assert await globex.get_user_state(app_name="app", user_id="u") == {}
            # the same ids in the other tenant are other sessions with their own state
            other = await globex.create_session(app_name="app", user_id="u", session_id="s")
            assert other.state == {}
            assert [x.id for x in (await acme.list_sessions(app_name="app")).sessions] == ["s"]
        finally:
            for svc in services:
                await svc.close()

    run(body)


# -- what SQL sees ---------------------------------------------------------------------------


def test_events_are_core_messages_where_they_fit(service, backend) -> None:
    async def body() -> None:
        s = await service.create_session(app_name="app", user_id="u", session_id="s")
        call = types.FunctionCall(id="c1", name="lookup", args={"q": "x"})
        answer = types.FunctionResponse(id="c1", name="lookup", response={"result": 42})
        for event in [
            said("question"),
            Event(
                author="agent",
                invocation_id="i1",
                content=types.Content(role="model", parts=[types.Part(function_call=call)]),
                usage_metadata=types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=7, candidates_token_count=3
                ),
                model_version="fake-1",
            ),
            Event(
                author="agent",
                invocation_id="i1",
                content=types.Content(role="user", parts=[types.Part(function_response=answer)]),
            ),
            Event(author="agent", invocation_id="i1", actions=EventActions(state_delta={"k": 1})),
        ]:
            await service.append_event(s, event)

    run(body)
    with open_store(backend.url, schema=backend.schema) as store:
        key = store_id("session", "app", "u", "s")
        types_ = [e.type for e in store.events(key)]
        assert types_ == [
            "turn/start",  # the invocation's first event starts a turn
            "user/message",
            "assistant/message",
            "tool/call",  # beside the model message, for the analytics
            "tool/result",
            ADK_EVENT,  # no final response yet: the turn stays open
        ]
        assert store.verify(key).ok
        messages = store.messages(key)
        assert messages[0]["content"] == [{"type": "text", "text": "question"}]
        assert messages[1]["content"] == [
            {"type": "tool-call", "id": "c1", "name": "lookup", "arguments": '{"q": "x"}'}
        ]
        assert messages[1]["source"]["model"] == "fake-1"
        assert messages[2]["content"][0]["toolCallId"] == "c1"
        assert messages[3]["actions"]["state_delta"] == {"k": 1}  # the event itself
        assembled = list(store.events(key))[2]
        assert assembled.data["usage"] == {"inputTokens": 7, "outputTokens": 3}
        assert assembled.data["turn"] == 1 and assembled.data["step"] == 1
        info = next(i for i in store.list_sessions() if i.id == key)
        assert info.user_id == "u"
        assert info.labels == {"adk_kind": "session", "adk_app": "app", "adk_session": "s"}
        assert store.load_session(key).header["adk"] == {
            "app": "app",
            "user": "u",
            "session": "s",
            "state": {},
        }


def test_shared_state_sessions_hold_each_change_with_its_cause(service, backend) -> None:
    async def body() -> None:
        s = await service.create_session(
            app_name="app", user_id="u", session_id="s", state={"app:v": 1}
        )
        event = said("x", **{"app:v": 2, "user:w": 3})
        await service.append_event(s, event)
        return event.id

    event_id = run(body)
    with open_store(backend.url, schema=backend.schema) as store:
        app_log = list(store.events(store_id("app", "app")))
        assert [e.type for e in app_log] == [ADK_STATE, ADK_STATE]
        assert app_log[-1].data == {
            "delta": {"v": 2},
            "state": {"v": 2},
            "cause": {"session": "s", "user": "u", "event": event_id},
        }
        assert app_log[0].data["cause"] == {"session": "s", "user": "u"}
        user_log = list(store.events(store_id("user", "app", "u")))
        assert user_log[-1].data["state"] == {"w": 3}


# -- configuration ---------------------------------------------------------------------------


def test_the_store_must_be_async_and_know_the_types(backend) -> None:
    with (
        open_store(backend.url, schema=backend.schema) as sync_store,
        pytest.raises(ConfigurationError, match="AsyncSessionStore"),
    ):
        SQLSessionService(sync_store)  # type: ignore[arg-type]

    async def body() -> None:
        bare = open_async_store(backend.url, schema=backend.schema, catalog=DEFAULT_CATALOG)
        svc = SQLSessionService(bare)
        try:
            with pytest.raises(ConfigurationError, match="ADK types"):
                await svc.create_session(app_name="app", user_id="u")
        finally:
            await bare.close()

    run(body)


# -- another process -------------------------------------------------------------------------

READER = """
import asyncio, json, sys
from session_sql.integrations.adk import SQLSessionService

async def main():
    async with SQLSessionService.from_url(sys.argv[1], schema=sys.argv[2]) as svc:
        got = await svc.get_session(app_name="app", user_id="u", session_id="s")
        listed = await svc.list_sessions(app_name="app")
        user = await svc.get_user_state(app_name="app", user_id="u")
        print(json.dumps({
            "events": [e.model_dump(mode="json", exclude_none=True) for e in got.events],
            "state": got.state,
            "listed": [s.id for s in listed.sessions],
            "user": user,
        }))

asyncio.run(main())
"""


def test_a_store_reopened_in_another_process_sees_the_same(service, backend) -> None:
    async def body() -> Session:
        s = await service.create_session(
            app_name="app", user_id="u", session_id="s", state={"app:a": 1, "k": "v"}
        )
        await service.append_event(s, said("héllo 🌍", **{"user:lang": "fr"}))
        await service.append_event(s, replied("hi", k="w"))
        got = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert got is not None
        return got

    mine = run(body)
    out = subprocess.run(
        [sys.executable, "-c", READER, backend.url, backend.schema],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    seen = json.loads(out.stdout)
    assert seen["events"] == dumped(mine.events)
    assert seen["state"] == mine.state == {"k": "w", "app:a": 1, "user:lang": "fr"}
    assert seen["listed"] == ["s"]
    assert seen["user"] == {"lang": "fr"}


def test_threads_each_on_a_loop_of_their_own_share_one_service(backend) -> None:
    """Five threads, each with a new event loop, create sessions and append to them and to
    one shared session through one service (its first calls opening the store): every event
    lands exactly once, shared state is whole, and no loop hangs."""
    service = SQLSessionService.from_url(backend.url, schema=backend.schema)
    asyncio.run(service.create_session(app_name="app", user_id="u", session_id="shared"))

    async def work(i: int) -> None:
        own = await service.create_session(
            app_name="app", user_id="u", session_id=f"s{i}", state={f"user:k{i}": i}
        )
        for j in range(3):
            await service.append_event(own, said(f"{i}.{j}", invocation=f"i{i}"))
            while True:
                shared = await service.get_session(app_name="app", user_id="u", session_id="shared")
                assert shared is not None
                try:
                    await service.append_event(shared, said(f"shared {i}.{j}"))
                    break
                except StaleSessionError:  # another thread appended between the two calls
                    continue

    in_loops(5, work)

    async def after() -> None:
        try:
            shared = await service.get_session(app_name="app", user_id="u", session_id="shared")
            assert shared is not None
            texts = sorted(e.content.parts[0].text for e in shared.events)
            assert texts == sorted(f"shared {i}.{j}" for i in range(5) for j in range(3))
            assert {k: v for k, v in shared.state.items() if k.startswith("user:")} == {
                f"user:k{i}": i for i in range(5)
            }
            for i in range(5):
                own = await service.get_session(app_name="app", user_id="u", session_id=f"s{i}")
                assert own is not None
                assert [e.content.parts[0].text for e in own.events] == [
                    f"{i}.{j}" for j in range(3)
                ]
        finally:
            await service.close()

    asyncio.run(after())
