"""A big batch is built with the cyclic collector paused, and the collector is restored."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from session_sql import InvalidEventError, Session
from session_sql import pending as pending_module
from session_sql._gc import PAUSE_MIN_EVENTS, gc_paused

from .builders import new_session, user_message


@pytest.fixture(autouse=True)
def _collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if was:  # as it was before the test, whatever the test did
        gc.enable()
    else:
        gc.disable()


def _todos(n: int) -> list[dict[str, Any]]:
    return [{"type": "todo/write", "data": {"n": n, "items": [{"i": i}]}} for i in range(n)]


def _watch(monkeypatch: pytest.MonkeyPatch, s: Session) -> tuple[list[bool], list[bool]]:
    """Whether the collector was enabled at each data rule check and at each validator."""
    building: list[bool] = []
    validating: list[bool] = []
    check_data = pending_module.check_data

    def checked(event: Any) -> None:
        building.append(gc.isenabled())
        check_data(event)

    monkeypatch.setattr(pending_module, "check_data", checked)
    s.add_validator(lambda _s, _e: validating.append(gc.isenabled()))
    return building, validating


def test_a_big_batch_is_built_with_the_collector_paused(monkeypatch):
    s = new_session()
    building, validating = _watch(monkeypatch, s)
    s.append_many(_todos(PAUSE_MIN_EVENTS))
    assert building == [False] * PAUSE_MIN_EVENTS
    assert validating == [True] * PAUSE_MIN_EVENTS  # user code runs with the collector as it was
    assert gc.isenabled()


def test_a_big_batch_without_user_code_is_persisted_and_committed_paused(monkeypatch):
    """No validator or observer: the collector stays paused from the building of the events
    to their commit (the persisting included), and is enabled again after."""
    s = new_session()
    persisting: list[bool] = []
    applying: list[bool] = []
    apply = pending_module.PendingAppend._apply

    def applied(self: Any) -> None:
        applying.append(gc.isenabled())
        apply(self)

    monkeypatch.setattr(s, "_persist", lambda _pending: persisting.append(gc.isenabled()))
    monkeypatch.setattr(pending_module.PendingAppend, "_apply", applied)
    s.append_many(_todos(PAUSE_MIN_EVENTS))
    assert (persisting, applying) == ([False], [False])
    assert gc.isenabled()


def test_with_an_observer_only_the_building_is_paused(monkeypatch):
    s = new_session()
    persisting: list[bool] = []
    observing: list[bool] = []
    monkeypatch.setattr(s, "_persist", lambda _pending: persisting.append(gc.isenabled()))
    s.subscribe(lambda _s, _e: observing.append(gc.isenabled()))
    s.append_many(_todos(PAUSE_MIN_EVENTS))
    assert persisting == [True]
    assert observing == [True] * PAUSE_MIN_EVENTS


def test_a_small_batch_leaves_the_collector_alone(monkeypatch):
    s = new_session()
    building, _ = _watch(monkeypatch, s)
    s.append_many(_todos(PAUSE_MIN_EVENTS - 1))
    s.append("user/message", user_message("hi"), surface_op="append")
    assert building == [True] * PAUSE_MIN_EVENTS


def test_a_refused_big_batch_restores_the_collector():
    s = new_session()
    batch = _todos(PAUSE_MIN_EVENTS)
    batch[-1] = {"type": "x/unknown", "data": {}}  # not in the catalog, not ignorable
    with pytest.raises(InvalidEventError):
        s.append_many(batch)
    assert gc.isenabled()
    assert s.seq == 0


def test_a_collector_disabled_by_the_caller_stays_disabled():
    gc.disable()
    new_session().append_many(_todos(PAUSE_MIN_EVENTS))
    assert not gc.isenabled()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_nested_and_concurrent_pauses_restore_the_collector_once_the_last_ends():
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()

    inside, release = threading.Barrier(3), threading.Event()

    def hold() -> None:
        with gc_paused():
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    with gc_paused():
        pass
    assert not gc.isenabled()  # the two threads still hold their pauses
    release.set()
    for t in threads:
        t.join()
    assert gc.isenabled()
