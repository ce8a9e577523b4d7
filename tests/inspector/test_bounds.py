"""Numeric query parameters at and past the 64-bit limit, on SQLite and PostgreSQL: a huge
seq or count is an empty page (or the whole of what there is), a negative one is 400 naming
the parameter, never a 500."""

from __future__ import annotations

import pytest

from session_sql.inspector.api import MAX_PARAM

HUGE = ("9223372036854775807", "9223372036854775808", "18446744073709551616", "1" + "0" * 40)


@pytest.mark.parametrize("value", HUGE)
def test_a_huge_from_seq_is_an_empty_page(client, scene, value):
    sid = scene.session_id
    page = client.get(f"/sessions/{sid}", params={"from_seq": value})
    assert page.status_code == 200
    events = client.get(f"/api/sessions/{sid}/events", params={"from_seq": value})
    assert events.status_code == 200
    body = events.json()
    assert body["events"] == [] and body["next_from_seq"] is None
    assert body["head_seq"] == scene.store.head_seq(sid)


@pytest.mark.parametrize("value", HUGE)
def test_a_huge_limit_or_last_is_everything_there_is(client, scene, value):
    sid = scene.session_id
    head = scene.store.head_seq(sid)
    page = client.get(f"/sessions/{sid}", params={"limit": value, "from_seq": "0"})
    assert page.status_code == 200
    events = client.get(f"/api/sessions/{sid}/events", params={"limit": value}).json()
    assert [e["seq"] for e in events["events"]] == list(range(head + 1))
    listed = client.get("/api/sessions", params={"limit": value})
    assert listed.status_code == 200
    assert client.get("/", params={"limit": value}).status_code == 200
    messages = client.get(f"/api/sessions/{sid}/messages", params={"last": value})
    assert messages.status_code == 200
    assert len(messages.json()["messages"]) == len(scene.store.messages(sid))
    surface = client.get(f"/api/sessions/{sid}/surface", params={"last": value})
    assert surface.status_code == 200
    assert len(surface.json()["nodes"]) == len(scene.store.surface(sid))


@pytest.mark.parametrize("value", ["-1", "-9223372036854775809", "-" + "9" * 40, "1.5", "x"])
@pytest.mark.parametrize(
    ("suffix", "name"),
    [
        ("", "from_seq"),
        ("", "limit"),
        ("/events", "from_seq"),
        ("/events", "limit"),
        ("/messages", "last"),
        ("/surface", "last"),
    ],
)
def test_a_negative_or_non_integer_number_is_400_naming_it(client, scene, suffix, name, value):
    response = client.get(f"/api/sessions/{scene.session_id}{suffix}", params={name: value})
    if suffix == "":  # the JSON session takes no parameter: the page does
        response = client.get(f"/sessions/{scene.session_id}", params={name: value})
    assert response.status_code == 400, response.text
    assert name in response.text


def test_a_follow_from_below_minus_one_is_400(client, scene):
    for value in ("-2", "-9223372036854775809"):
        response = client.get(
            f"/api/sessions/{scene.session_id}/follow", params={"after_seq": value}
        )
        assert response.status_code == 400
        assert "after_seq" in response.json()["error"]


def test_the_store_clamps_huge_bounds_itself(scene):
    store, sid = scene.store, scene.session_id
    for huge in (MAX_PARAM, 2**63 - 1, 2**63, 2**64, 10**40):
        assert list(store.events(sid, from_seq=huge)) == []
        assert list(store.events(sid, from_seq=huge, to_seq=huge + 5)) == []
        assert len(list(store.events(sid, to_seq=huge))) == store.head_seq(sid) + 1
        assert store.messages(sid, last=huge) == store.messages(sid)
        assert len(store.surface_messages(sid, last=huge)) == len(store.surface(sid))
        assert len(store.list_sessions(limit=huge)) == len(store.list_sessions())
        assert list(store.follow(sid, after_seq=huge, timeout=0)) == []
