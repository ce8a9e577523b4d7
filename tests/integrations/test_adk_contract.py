"""The session-service contract of Google ADK, restated for the installed ``google-adk``.

ADK holds every ``BaseSessionService`` to one set of behaviours: the tests of
google/adk-python's ``tests/unittests/sessions/test_session_service.py`` that take its
``session_service`` fixture (each backend registered in ``_conformance.py``). Each test here
states one of them, by the same name, and runs it on ``SQLSessionService`` (SQLite and
PostgreSQL) and, as the reference that keeps the statement honest, on ADK's own
``InMemorySessionService``. One deliberate difference is tested as such: events that share a
timestamp stay in log order (ADK's database services order them by id).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.session import Session
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

from session_sql.integrations.adk import SQLSessionService

Body = Callable[[BaseSessionService], Awaitable[None]]
APP = "my_app"


class Contract:
    """Runs a test body on one service, each body in its own event loop."""

    def __init__(self, service: BaseSessionService, ours: bool) -> None:
        self.service = service
        self.ours = ours

    def __call__(self, body: Body) -> None:
        asyncio.run(body(self.service))


@pytest.fixture(params=["session_sql", "adk_in_memory"])
def contract(request: pytest.FixtureRequest, backend: Any) -> Iterator[Contract]:
    if request.param == "adk_in_memory":
        yield Contract(InMemorySessionService(), ours=False)
        return
    service = SQLSessionService.from_url(backend.url, schema=backend.schema)
    yield Contract(service, ours=True)
    asyncio.run(service.close())


@pytest.fixture
def ours(backend: Any) -> Iterator[Contract]:
    """``SQLSessionService`` alone: for what ADK's in-memory service has nothing to compare
    with (it keeps no copies that can go stale)."""
    service = SQLSessionService.from_url(backend.url, schema=backend.schema)
    yield Contract(service, ours=True)
    asyncio.run(service.close())


def delta(**state: Any) -> EventActions:
    return EventActions(state_delta=state)


def test_get_empty_session(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        assert await svc.get_session(app_name=APP, user_id="u", session_id="123") is None

    contract(body)


def test_create_get_session(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        session = await svc.create_session(app_name=APP, user_id="u", state={"key": "value"})
        assert (session.app_name, session.user_id, session.state) == (APP, "u", {"key": "value"})
        assert session.id and session.last_update_time <= time.time()
        got = await svc.get_session(app_name=APP, user_id="u", session_id=session.id)
        assert got == session
        await svc.delete_session(app_name=APP, user_id="u", session_id=session.id)
        assert await svc.get_session(app_name=APP, user_id="u", session_id=session.id) is None

    contract(body)


def test_create_and_list_sessions(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        ids = [f"session{i}" for i in range(5)]
        for sid in ids:
            await svc.create_session(
                app_name=APP, user_id="u", session_id=sid, state={"key": "value" + sid}
            )
        listed = (await svc.list_sessions(app_name=APP, user_id="u")).sessions
        assert {s.id for s in listed} == set(ids)
        assert all(s.state == {"key": "value" + s.id} for s in listed)
        assert all(s.events == [] for s in listed)

    contract(body)


def test_list_sessions_ordered_by_last_update_time(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        for sid in ("a", "b", "c"):
            await svc.create_session(app_name=APP, user_id="u", session_id=sid)
        a = await svc.get_session(app_name=APP, user_id="u", session_id="a")
        assert a is not None
        await asyncio.sleep(0.01)
        await svc.append_event(a, Event(invocation_id="i", author="user"))
        listed = (await svc.list_sessions(app_name=APP, user_id="u")).sessions
        assert [s.id for s in listed] == ["b", "c", "a"]

    contract(body)


def test_list_sessions_all_users(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        for user, sid in (("u1", "s1a"), ("u1", "s1b"), ("u2", "s2a")):
            await svc.create_session(app_name=APP, user_id=user, session_id=sid, state={"key": sid})
        for user, expected in (("u1", {"s1a", "s1b"}), ("u2", {"s2a"}), (None, None)):
            listed = (await svc.list_sessions(app_name=APP, user_id=user)).sessions
            assert {s.id for s in listed} == (expected or {"s1a", "s1b", "s2a"})
            assert all(s.state == {"key": s.id} for s in listed)

    contract(body)


def test_list_sessions_merges_app_and_user_state(contract: Contract) -> None:
    """Listed sessions carry merged state but never their events (ADK's in-memory service's
    ``list_sessions``, which every service's listing follows)."""

    async def body(svc: BaseSessionService) -> None:
        state = {"app:a": "av", "user:u": "uv", "sk": "sv", "temp:t": "tv"}
        s = await svc.create_session(app_name=APP, user_id="u1", session_id="s1", state=state)
        await svc.append_event(s, Event(invocation_id="i1", author="user", actions=delta(sk2=2)))
        (listed,) = (await svc.list_sessions(app_name=APP, user_id="u1")).sessions
        assert listed.events == []
        assert listed.state == {"app:a": "av", "user:u": "uv", "sk": "sv", "sk2": 2}
        assert (await svc.list_sessions(app_name="other")).sessions == []
        assert (await svc.list_sessions(app_name=APP, user_id="nobody")).sessions == []

    contract(body)


def test_app_state_is_shared_by_all_users_of_app(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        s1 = await svc.create_session(
            app_name=APP, user_id="u1", session_id="s1", state={"app:k1": "v1"}
        )
        await svc.append_event(
            s1, Event(invocation_id="i", author="user", actions=delta(**{"app:k2": "v2"}))
        )
        s2 = await svc.create_session(app_name=APP, user_id="u2", session_id="s2")
        assert s2.state == {"app:k1": "v1", "app:k2": "v2"}
        again = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert again is not None and again.state == {"app:k1": "v1", "app:k2": "v2"}

    contract(body)


def test_user_state_is_shared_only_by_user_sessions(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        s1 = await svc.create_session(
            app_name=APP, user_id="u1", session_id="s1", state={"user:k1": "v1"}
        )
        await svc.append_event(
            s1, Event(invocation_id="i", author="user", actions=delta(**{"user:k2": "v2"}))
        )
        s1b = await svc.create_session(app_name=APP, user_id="u1", session_id="s1b")
        assert s1b.state == {"user:k1": "v1", "user:k2": "v2"}
        s2 = await svc.create_session(app_name=APP, user_id="u2", session_id="s2")
        assert s2.state == {}

    contract(body)


def test_session_state_is_not_shared(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        s1 = await svc.create_session(
            app_name=APP, user_id="u1", session_id="s1", state={"sk1": "v1"}
        )
        await svc.append_event(s1, Event(invocation_id="i", author="user", actions=delta(sk2="v2")))
        got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert got is not None and got.state == {"sk1": "v1", "sk2": "v2"}
        s1b = await svc.create_session(app_name=APP, user_id="u1", session_id="s1b")
        assert s1b.state == {}

    contract(body)


@pytest.mark.parametrize(
    ("initial", "change", "expected"),
    [
        ({"profile": {"name": "ada", "role": "admin"}}, {"profile": {"name": "bob"}}, None),
        ({"flag": True}, {"flag": None}, None),
        ({"flag": False}, {"new_flag": True}, {"flag": False, "new_flag": True}),
        ({"app:cfg": {"name": "ada", "role": "x"}}, {"app:cfg": {"name": "bob"}}, None),
        ({"user:pref": "dark_mode"}, {"user:pref": None}, None),
    ],
    ids=["dict-replaces", "none-is-stored", "bool-survives", "app-dict", "user-none"],
)
def test_state_deltas_replace_values_and_keep_types(
    contract: Contract, initial: dict[str, Any], change: dict[str, Any], expected: Any
) -> None:
    """ADK's ``test_dict_valued_state_delta_replaces_stored_value``,
    ``test_none_valued_state_delta_is_stored_not_dropped``,
    ``test_boolean_state_survives_unrelated_state_delta``,
    ``test_app_state_dict_valued_delta_replaces_stored_value`` and
    ``test_user_state_none_valued_delta_is_stored_not_dropped``."""
    want = expected if expected is not None else {**initial, **change}

    async def body(svc: BaseSessionService) -> None:
        s = await svc.create_session(app_name=APP, user_id="u1", session_id="s1", state=initial)
        await svc.append_event(s, Event(invocation_id="i", author="user", actions=delta(**change)))
        assert s.state == want
        reloaded = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert reloaded is not None and reloaded.state == want
        # a new session of the same user sees the shared keys as they now are
        other = await svc.create_session(app_name=APP, user_id="u1", session_id="s2")
        shared = {k: v for k, v in want.items() if k.startswith(("app:", "user:"))}
        assert other.state == shared

    contract(body)


def test_temp_state_is_not_persisted_in_state_or_events(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        s = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
        event = Event(
            invocation_id="i", author="user", actions=delta(**{"temp:k1": "v1", "sk": "v2"})
        )
        await svc.append_event(s, event)
        assert s.state.get("temp:k1") == "v1" and s.state.get("sk") == "v2"
        assert "temp:k1" not in event.actions.state_delta
        got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert got is not None and got.state == {"sk": "v2"}
        assert "temp:k1" not in got.events[0].actions.state_delta

    contract(body)


def test_temp_state_visible_across_sequential_events(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        s = await svc.create_session(app_name=APP, user_id="u1", session_id="s_seq")
        event = Event(invocation_id="i", author="agent1", actions=delta(**{"temp:out": "r"}))
        await svc.append_event(s, event)
        assert s.state.get("temp:out") == "r"
        assert "temp:out" not in event.actions.state_delta

    contract(body)


def test_get_session_respects_user_id(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        s1 = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
        await svc.append_event(s1, Event(invocation_id="i", author="user"))
        await svc.create_session(app_name=APP, user_id="u2", session_id="s1")
        got = await svc.get_session(app_name=APP, user_id="u2", session_id="s1")
        assert got is not None and got.user_id == "u2" and got.events == []

    contract(body)


def test_create_session_with_existing_id_raises_error(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        await svc.create_session(app_name=APP, user_id="u", session_id="existing")
        with pytest.raises(AlreadyExistsError):
            await svc.create_session(app_name=APP, user_id="u", session_id="existing")

    contract(body)


def test_padded_session_id_reads_and_deletes(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        await svc.create_session(app_name=APP, user_id="u", session_id="  s1  ")
        got = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
        assert got is not None and got.id == "s1"
        padded = await svc.get_session(app_name=APP, user_id="u", session_id=" s1 ")
        assert padded is not None and padded.id == "s1"
        await svc.delete_session(app_name=APP, user_id="u", session_id=" s1 ")
        assert await svc.get_session(app_name=APP, user_id="u", session_id="s1") is None

    contract(body)


def test_append_event_bytes(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        s = await svc.create_session(app_name=APP, user_id="u")
        content = types.Content(
            role="user", parts=[types.Part.from_bytes(data=b"image", mime_type="image/png")]
        )
        grounding = types.GroundingMetadata(
            search_entry_point=types.SearchEntryPoint(sdk_blob=b"blob")
        )
        event = Event(
            invocation_id="i", author="user", content=content, grounding_metadata=grounding
        )
        await svc.append_event(s, event)
        got = await svc.get_session(app_name=APP, user_id="u", session_id=s.id)
        assert got is not None and len(got.events) == 1
        assert got.events[0].content == content
        assert got.events[0].grounding_metadata == grounding

    contract(body)


def test_append_event_complete(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        s = await svc.create_session(app_name=APP, user_id="u")
        event = Event(
            invocation_id="invocation",
            author="user",
            content=types.Content(role="user", parts=[types.Part(text="test_text")]),
            turn_complete=True,
            partial=False,
            actions=EventActions(
                artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True
            ),
            long_running_tool_ids={"tool1"},
            error_code="error_code",
            error_message="error_message",
            interrupted=True,
            grounding_metadata=types.GroundingMetadata(web_search_queries=["query1"]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=1, candidates_token_count=1, total_token_count=2
            ),
            citation_metadata=types.CitationMetadata(),
            custom_metadata={"custom_key": "custom_value"},
            timestamp=1700000000.123,  # older than the session: it still sets last_update_time
            input_transcription=types.Transcription(text="in", finished=True),
            output_transcription=types.Transcription(text="out", finished=True),
        )
        await svc.append_event(s, event)
        assert s.last_update_time == 1700000000.123
        assert await svc.get_session(app_name=APP, user_id="u", session_id=s.id) == s

    contract(body)


def test_append_event_with_requested_tool_confirmations(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        s = await svc.create_session(app_name=APP, user_id="u")
        confirmation = ToolConfirmation(hint="hint", confirmed=False, payload={"id": "album_1"})
        actions = EventActions(requested_tool_confirmations={"call_1": confirmation})
        await svc.append_event(s, Event(invocation_id="i", author="user", actions=actions))
        got = await svc.get_session(app_name=APP, user_id="u", session_id=s.id)
        assert got is not None
        kept = got.events[0].actions.requested_tool_confirmations["call_1"]
        assert (kept.hint, kept.payload, kept.confirmed) == ("hint", {"id": "album_1"}, False)

    contract(body)


def test_session_last_update_time_updates_on_event(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        s = await svc.create_session(app_name=APP, user_id="u")
        created = s.last_update_time
        stamp = created + 10  # ADK sets it from the event's timestamp, not the clock
        await svc.append_event(s, Event(invocation_id="i", author="user", timestamp=stamp))
        assert s.last_update_time == pytest.approx(stamp, abs=1e-6)
        got = await svc.get_session(app_name=APP, user_id="u", session_id=s.id)
        assert got is not None and got.last_update_time == pytest.approx(stamp, abs=1e-6)
        (listed,) = (await svc.list_sessions(app_name=APP, user_id="u")).sessions
        assert listed.last_update_time == pytest.approx(stamp, abs=1e-6)

    contract(body)


def test_append_event_to_unknown_or_deleted_session_raises_session_not_found(
    contract: Contract,
) -> None:
    async def body(svc: BaseSessionService) -> None:
        never = Session(app_name=APP, user_id="u", id="never_created")
        with pytest.raises(SessionNotFoundError):
            await svc.append_event(never, Event(invocation_id="i", author="user"))
        s = await svc.create_session(app_name=APP, user_id="u")
        await svc.delete_session(app_name=APP, user_id="u", session_id=s.id)
        with pytest.raises(SessionNotFoundError):
            await svc.append_event(s, Event(invocation_id="i", author="user"))

    contract(body)


def test_append_event_to_stale_session(ours: Contract) -> None:
    """ADK's database services refuse a stale copy (``StaleSessionError``, "modified in
    storage"); its in-memory service has no copies to be stale."""

    async def body(svc: BaseSessionService) -> None:
        now = time.time()
        original = await svc.create_session(app_name=APP, user_id="u")
        await svc.append_event(
            original,
            Event(invocation_id="inv1", author="user", timestamp=now + 1, actions=delta(sk1="v1")),
        )
        updated = await svc.get_session(app_name=APP, user_id="u", session_id=original.id)
        assert updated is not None
        await svc.append_event(
            updated,
            Event(invocation_id="inv2", author="user", timestamp=now + 2, actions=delta(sk2="v2")),
        )
        assert original.last_update_time < updated.last_update_time
        with pytest.raises(StaleSessionError, match="modified in storage"):
            await svc.append_event(
                original,
                Event(
                    invocation_id="inv3", author="user", timestamp=now + 3, actions=delta(sk3="v3")
                ),
            )
        final = await svc.get_session(app_name=APP, user_id="u", session_id=original.id)
        assert final is not None
        assert [e.invocation_id for e in final.events] == ["inv1", "inv2"]
        assert final.state == {"sk1": "v1", "sk2": "v2"}

    ours(body)


def test_append_event_concurrent_stale_sessions_reject_stale_writer(ours: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        s = await svc.create_session(app_name=APP, user_id="u")
        for i in range(4):
            latest = await svc.get_session(app_name=APP, user_id="u", session_id=s.id)
            assert latest is not None
            copies = [latest.model_copy(deep=True) for _ in range(2)]
            results = await asyncio.gather(
                *(
                    svc.append_event(
                        copy,
                        Event(
                            invocation_id=f"inv{i}-{n}",
                            author="user",
                            timestamp=latest.last_update_time + 10 + n,
                            actions=delta(**{f"sk{i}-{n}": n}),
                        ),
                    )
                    for n, copy in enumerate(copies)
                ),
                return_exceptions=True,
            )
            errors = [r for r in results if isinstance(r, Exception)]
            assert len(errors) == 1 and isinstance(errors[0], StaleSessionError)
        final = await svc.get_session(app_name=APP, user_id="u", session_id=s.id)
        assert final is not None and len(final.events) == 4 and len(final.state) == 4

    ours(body)


def test_get_session_with_config(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        base = int(time.time())
        s = await svc.create_session(app_name=APP, user_id="u")
        for i in range(1, 6):
            await svc.append_event(s, Event(author="user", timestamp=base + i))

        async def got(**config: Any) -> list[float]:
            found = await svc.get_session(
                app_name=APP, user_id="u", session_id=s.id, config=GetSessionConfig(**config)
            )
            assert found is not None
            return [e.timestamp - base for e in found.events]

        assert await got() == [1, 2, 3, 4, 5]
        assert await got(num_recent_events=0) == []
        assert await got(num_recent_events=3) == [3, 4, 5]
        assert await got(after_timestamp=base + 4) == [4, 5]
        assert await got(after_timestamp=base + 50) == []
        assert await got(after_timestamp=base + 4, num_recent_events=3) == [4, 5]

    contract(body)


def test_partial_events_are_not_persisted(contract: Contract) -> None:
    async def body(svc: BaseSessionService) -> None:
        s = await svc.create_session(app_name=APP, user_id="u")
        await svc.append_event(s, Event(author="user", partial=True))
        assert s.events == []
        got = await svc.get_session(app_name=APP, user_id="u", session_id=s.id)
        assert got is not None and got.events == []

    contract(body)


def test_get_user_state(contract: Contract) -> None:
    """ADK's ``test_get_user_state_*``: empty before any, written through append_event,
    the latest write, never another user's or another app's."""

    async def body(svc: BaseSessionService) -> None:
        assert not await svc.get_user_state(app_name=APP, user_id="u1")
        s = await svc.create_session(app_name=APP, user_id="u1")
        change = delta(**{"user:profile": {"name": "Alice"}, "session_key": 1})
        await svc.append_event(s, Event(author="system", actions=change))
        assert await svc.get_user_state(app_name=APP, user_id="u1") == {
            "profile": {"name": "Alice"}
        }
        await svc.append_event(s, Event(author="system", actions=delta(**{"user:counter": 2})))
        assert (await svc.get_user_state(app_name=APP, user_id="u1"))["counter"] == 2
        assert not await svc.get_user_state(app_name=APP, user_id="u2")
        assert not await svc.get_user_state(app_name="other_app", user_id="u1")

    contract(body)


@pytest.fixture
def eastern_time() -> Iterator[None]:
    """Local time in a zone that repeats an hour each autumn (POSIX only)."""
    if not hasattr(time, "tzset"):
        yield
        return
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_get_session_keeps_exact_epoch_across_a_repeated_local_hour(
    contract: Contract, eastern_time: None
) -> None:
    async def body(svc: BaseSessionService) -> None:
        epochs = [1730613600.0, 1730615400.0]  # 01:00 and 01:30 EST, the second time round
        s = await svc.create_session(app_name=APP, user_id="u")
        for epoch in epochs:
            await svc.append_event(s, Event(author="user", timestamp=epoch))
        got = await svc.get_session(app_name=APP, user_id="u", session_id=s.id)
        assert got is not None and [e.timestamp for e in got.events] == epochs

    contract(body)


def test_events_sharing_a_timestamp_stay_in_log_order(contract: Contract) -> None:
    """The deliberate difference: ADK's database services order events of one timestamp by
    id (``test_get_session_orders_tied_timestamps_by_id``); the log's seq is a total order,
    so they come back in the order they were appended, as the in-memory service gives them."""

    async def body(svc: BaseSessionService) -> None:
        s = await svc.create_session(app_name=APP, user_id="u")
        for event_id in ["event_z", "event_a", "event_m"]:
            await svc.append_event(s, Event(author="user", id=event_id, timestamp=100.0))
        got = await svc.get_session(app_name=APP, user_id="u", session_id=s.id)
        assert got is not None
        assert [e.id for e in got.events] == ["event_z", "event_a", "event_m"]
        recent = await svc.get_session(
            app_name=APP, user_id="u", session_id=s.id, config=GetSessionConfig(num_recent_events=1)
        )
        assert recent is not None and [e.id for e in recent.events] == ["event_m"]

    contract(body)
