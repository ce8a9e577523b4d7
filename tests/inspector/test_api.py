"""The inspector's JSON API over HTTP (SPEC §12.5), on SQLite and PostgreSQL: the same data
as the store's own calls, byte for byte; paging and filters as ``list_sessions``; read-only;
scoped to the store's tenant."""

from __future__ import annotations

import json

import pytest

from session_sql import open_store
from session_sql.inspector.app import create_app
from session_sql.jsoncodec import dumps_compact
from tests.inspector.conftest import ATTRIBUTE, HOSTILE_ID, URL


def test_sessions_lists_the_tenants_sessions_newest_first(client, scene):
    body = client.get("/api/sessions").json()
    expected = [info.id for info in scene.store.list_sessions()]
    assert [s["id"] for s in body["sessions"]] == expected
    assert body["next_after"] is None
    first = body["sessions"][expected.index(scene.session_id)]
    assert first["event_count"] == scene.store.head_seq(scene.session_id) + 1
    assert first["labels"] == {
        "link": URL,
        "tag": scene.store.session_info(scene.session_id).labels["tag"],
    }


def test_sessions_page_on_with_next_after(client, scene):
    everything = [info.id for info in scene.store.list_sessions()]
    seen: list[str] = []
    after = None
    while True:
        params = {"limit": "1", **({"after": after} if after else {})}
        body = client.get("/api/sessions", params=params).json()
        seen += [s["id"] for s in body["sessions"]]
        after = body["next_after"]
        if after is None:
            break
    assert seen == everything


def test_sessions_filters_as_list_sessions(client, scene):
    by_user = client.get("/api/sessions", params={"user": ATTRIBUTE.strip()}).json()
    assert {s["id"] for s in by_user["sessions"]} == {scene.session_id, scene.fork_id}
    by_label = client.get("/api/sessions", params=[("label", f"link={URL}")]).json()
    assert {s["id"] for s in by_label["sessions"]} == {scene.session_id, scene.fork_id}
    forks = client.get("/api/sessions", params={"parent": scene.session_id}).json()
    assert [s["id"] for s in forks["sessions"]] == [scene.fork_id]
    prefix = client.get("/api/sessions", params={"id_prefix": "evil<"}).json()
    assert [s["id"] for s in prefix["sessions"]] == [HOSTILE_ID]


@pytest.mark.parametrize(
    ("params", "word"),
    [
        ({"limit": "x"}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"label": "novalue"}, "label"),
        ({"order": "sideways"}, "order"),
    ],
)
def test_a_bad_parameter_is_400_naming_it(client, params, word):
    response = client.get("/api/sessions", params=params)
    assert response.status_code == 400
    assert word in response.json()["error"]


def test_one_session_with_its_forks(client, scene):
    body = client.get(f"/api/sessions/{scene.session_id}").json()
    assert body["id"] == scene.session_id
    assert body["head_seq"] == scene.store.head_seq(scene.session_id)
    assert body["surface_length"] == len(scene.store.surface(scene.session_id))
    assert [c["id"] for c in body["children"]] == [scene.fork_id]
    fork = client.get(f"/api/sessions/{scene.fork_id}").json()
    assert fork["parent_session"] == scene.session_id


def test_a_missing_session_is_404_everywhere(client):
    for suffix in ("", "/events", "/messages", "/surface", "/follow"):
        response = client.get(f"/api/sessions/no-such-session{suffix}")
        assert response.status_code == 404, suffix
        assert "no-such-session" in response.json()["error"]


def test_events_are_the_stored_events_byte_for_byte(client, scene):
    sid = scene.session_id
    response = client.get(f"/api/sessions/{sid}/events", params={"from_seq": "2", "limit": "5"})
    stored = [dumps_compact(e.to_wire()) for e in scene.store.events(sid, from_seq=2, to_seq=7)]
    text = response.text
    assert text.index('"events":[') > 0
    assert ",".join(stored) in text  # the texts as the store gives them: key order and all
    body = response.json()
    assert [e["seq"] for e in body["events"]] == [2, 3, 4, 5, 6]
    assert body["next_from_seq"] == 7
    last = client.get(f"/api/sessions/{sid}/events", params={"from_seq": "7", "limit": "5000"})
    assert last.json()["next_from_seq"] is None
    assert last.json()["events"][-1]["seq"] == scene.store.head_seq(sid)


def test_events_paths_take_a_hostile_id(client, scene):
    response = client.get("/api/sessions/" + HOSTILE_ID.replace("/", "%2F") + "/events")
    assert response.status_code == 200
    assert response.json()["session_id"] == HOSTILE_ID


def test_messages_and_surface_as_the_store_gives_them(client, scene):
    sid = scene.session_id
    messages = client.get(f"/api/sessions/{sid}/messages").json()["messages"]
    assert json.dumps(messages) == json.dumps(scene.store.messages(sid))
    last = client.get(f"/api/sessions/{sid}/messages", params={"last": "1"}).json()["messages"]
    assert json.dumps(last) == json.dumps(scene.store.messages(sid, last=1))
    nodes = client.get(f"/api/sessions/{sid}/surface", params={"last": "2"}).json()["nodes"]
    expected = scene.store.surface_messages(sid, last=2)
    assert [(n["pos"], n["seq"], n["type"]) for n in nodes] == [
        (n.pos, n.seq, n.type) for n in expected
    ]
    assert client.get(f"/api/sessions/{sid}/surface", params={"last": "-1"}).status_code == 400


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_only_reads_are_served(client, scene, method):
    before = [(i.id, i.head_seq, i.title) for i in scene.store.list_sessions()]
    for path in ("/", f"/api/sessions/{scene.session_id}", "/api/sessions"):
        response = client.request(method, path)
        assert response.status_code == 405
        assert response.headers["allow"] == "GET, HEAD"
    assert [(i.id, i.head_seq, i.title) for i in scene.store.list_sessions()] == before


def test_every_response_carries_the_security_headers(client, scene):
    for path in ("/", f"/sessions/{scene.session_id}", "/api/sessions", "/nowhere"):
        headers = client.get(path).headers
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert headers["x-content-type-options"] == "nosniff"


def test_the_app_sees_its_stores_tenant_only(backend, scene):
    from starlette.testclient import TestClient

    other = open_store(backend.url, schema=backend.schema, tenant="other")
    try:
        mine = other.create_session("theirs")
        mine.append("todo/write", {"items": []})
        with TestClient(create_app(other), base_url="http://127.0.0.1") as client:
            listed = client.get("/api/sessions").json()["sessions"]
            assert [s["id"] for s in listed] == ["theirs"]
            assert client.get(f"/api/sessions/{scene.session_id}").status_code == 404
            assert client.get(f"/sessions/{scene.session_id}").status_code == 404
    finally:
        other.close()
