"""One meaning of title: the latest ``session/title`` event sets the session's title column
(what ``list_sessions``, ``session_info`` and ``session-sql ls`` show), as
``create_session(title=)`` and ``update_session(title=)`` do; whichever came last wins. On both
backends, through the sync and the async API (the ``store`` fixture)."""

from __future__ import annotations

import pytest

from session_sql import InvalidArgumentError, InvalidEventError

TITLE = "session/title"


def _title(store, session_id: str) -> str | None:
    [info] = [i for i in store.list_sessions() if i.id == session_id]
    assert store.session_info(session_id).title == info.title
    return info.title


def test_the_latest_title_event_sets_the_title(store):
    handle = store.create_session("s")
    assert _title(store, "s") is None
    handle.append(TITLE, {"title": "first"})
    assert _title(store, "s") == "first"
    handle.append("todo/write", {"items": []})  # other events leave it alone
    assert _title(store, "s") == "first"
    handle.append_many(
        [
            {"type": TITLE, "data": {"title": "second"}},
            {"type": TITLE, "data": {"title": "third"}},
            {"type": "todo/write", "data": {"items": []}},
        ]
    )
    assert _title(store, "s") == "third"  # the latest of one append
    # Reopened handles and other processes see it too: it is the row's column.
    store.open_session("s").append(TITLE, {"title": "fourth"})
    assert _title(store, "s") == "fourth"


def test_update_session_and_title_events_take_turns(store):
    handle = store.create_session("s", title="given")
    assert _title(store, "s") == "given"
    handle.append(TITLE, {"title": "from the agent"})
    assert _title(store, "s") == "from the agent"
    store.update_session("s", title="renamed")
    assert _title(store, "s") == "renamed"
    handle = store.open_session("s")
    handle.append("todo/write", {"items": []})
    assert _title(store, "s") == "renamed"  # no title event: the user's title stays
    handle.append(TITLE, {"title": "newer"})
    assert _title(store, "s") == "newer"


@pytest.mark.parametrize(
    "data",
    [{"title": ""}, {"title": None}, {"title": 7}, {"title": "x" * 1001}, {"title": "a\nb"}, {}],
    ids=["empty", "null", "number", "too-long", "newline", "none"],
)
def test_a_title_event_without_a_valid_title_is_logged_and_leaves_the_title(store, data):
    handle = store.create_session("s", title="kept")
    event = handle.append(TITLE, data)
    assert _title(store, "s") == "kept"
    assert list(store.events("s"))[-1] == event  # the event itself is kept as it was


def test_a_seed_names_a_new_session_unless_a_title_is_given(store):
    seed = [
        {"type": TITLE, "seq": 0, "time": 1, "data": {"title": "a"}},
        {"type": TITLE, "seq": 1, "time": 2, "data": {"title": "b"}},
    ]
    store.create_session("seeded", seed=seed)
    assert _title(store, "seeded") == "b"
    store.create_session("given", seed=seed, title="explicit")
    assert _title(store, "given") == "explicit"
    store.fork_session("seeded", child_id="fork")
    assert _title(store, "fork") == "b"


def test_a_refused_append_changes_no_title(store):
    handle = store.create_session("s", title="kept")
    with pytest.raises(InvalidArgumentError):
        store.update_session("s", title="x" * 1001)
    with pytest.raises(InvalidEventError):  # the batch is refused whole
        handle.append_many(
            [{"type": TITLE, "data": {"title": "lost"}}, {"type": "no/such-type", "data": {}}]
        )
    assert _title(store, "s") == "kept"
    assert store.head_seq("s") == -1
