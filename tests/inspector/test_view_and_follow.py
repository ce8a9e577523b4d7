"""``session-sql view`` writes one self-contained page; ``/follow`` streams events committed
after the client connected (Server-Sent Events through a real uvicorn server)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest

from session_sql.cli import main
from session_sql.jsoncodec import dumps_compact
from tests.builders import say
from tests.inspector.conftest import HOSTILE_ID, HOSTILE_TEXT, PAYLOADS, SCRIPT
from tests.inspector.test_pages import Parsed, assert_inert

EXTERNAL = re.compile(r"""(src|href|action)\s*=\s*["']?\s*(https?:)?//""", re.IGNORECASE)


def view(backend, *args: str) -> int:
    return main(["view", *args, "--url", backend.url, "--schema", backend.schema])


def test_view_writes_one_self_contained_page(backend, scene, tmp_path, capsys):
    out = tmp_path / "session.html"
    assert view(backend, scene.session_id[:8], "-o", str(out)) == 0  # a prefix names it
    assert str(out) in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    assert not EXTERNAL.search(page)
    assert "http://" not in page and "https://" not in page
    parsed = assert_inert(page, scripts=())
    assert HOSTILE_TEXT in "".join(parsed.text)
    for payload in PAYLOADS:
        assert payload not in page
    rows = [a["id"] for t, a in parsed.tags if t == "tr" and a.get("id", "").startswith("e")]
    assert len(rows) == scene.store.head_seq(scene.session_id) + 1


def test_view_last_writes_the_last_events(backend, scene, tmp_path, capsys):
    out = tmp_path / "tail.html"
    assert view(backend, scene.session_id, "-o", str(out), "--last", "2") == 0
    head = scene.store.head_seq(scene.session_id)
    assert f"(the last 2 of {head + 1} events" in capsys.readouterr().out
    parsed = Parsed(out.read_text(encoding="utf-8"))
    rows = [a["id"] for t, a in parsed.tags if t == "tr" and a.get("id", "").startswith("e")]
    head = scene.store.head_seq(scene.session_id)
    assert rows == [f"e{head - 1}", f"e{head}"]


def test_view_of_a_hostile_id(backend, scene, tmp_path):
    out = tmp_path / "hostile.html"
    assert view(backend, HOSTILE_ID, "-o", str(out)) == 0
    page = out.read_text(encoding="utf-8")
    assert HOSTILE_ID not in page and SCRIPT not in page
    assert HOSTILE_ID in "".join(assert_inert(page, scripts=()).text)


def test_view_of_a_missing_session_writes_nothing(backend, scene, tmp_path, capsys):
    out = tmp_path / "missing.html"
    assert view(backend, "no-such-session", "-o", str(out)) == 1
    assert not out.exists()
    assert "no-such-session" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# Server-Sent Events


def sse(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """The messages of an event stream, as ``{field: value}`` (comments dropped)."""
    message: dict[str, str] = {}
    for line in lines:
        if not line:
            if message:
                yield message
            message = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            message[name] = value.removeprefix(" ")


def test_follow_delivers_an_event_appended_after_connecting(served, scene):
    sid = scene.session_id
    handle = scene.store.open_session(sid)
    timeout = httpx.Timeout(60.0)
    url = f"{served.url}/api/sessions/{sid}/follow"
    with httpx.stream("GET", url, timeout=timeout) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        messages = sse(response.iter_lines())
        ready = next(messages)
        assert ready["event"] == "ready"
        head = json.loads(ready["data"])["after_seq"]
        assert head == scene.store.head_seq(sid)
        seq = say(handle, f"live {SCRIPT}")
        got = next(messages)
    assert got["event"] == "event" and int(got["id"]) == seq
    event = json.loads(got["data"])
    assert event["seq"] == seq and event["data"]["content"][0]["text"] == f"live {SCRIPT}"
    stored = next(scene.store.events(sid, from_seq=seq))
    assert got["data"] == dumps_compact(stored.to_wire())  # byte for byte


def test_follow_resumes_after_last_event_id(served, scene):
    sid = scene.session_id
    url = f"{served.url}/api/sessions/{sid}/follow"
    with httpx.stream("GET", url, headers={"Last-Event-ID": "3"}, timeout=60.0) as response:
        messages = sse(response.iter_lines())
        assert json.loads(next(messages)["data"])["after_seq"] == 3
        assert [int(next(messages)["id"]) for _ in range(3)] == [4, 5, 6]


def test_follow_of_a_missing_session_is_404_before_the_stream(served):
    response = httpx.get(f"{served.url}/api/sessions/nope/follow", timeout=60.0)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize("after", ["x", "-2"])
def test_follow_refuses_a_bad_after_seq(served, scene, after):
    url = f"{served.url}/api/sessions/{scene.session_id}/follow"
    response = httpx.get(url, params={"after_seq": after}, timeout=60.0)
    assert response.status_code == 400


def test_one_follower_too_many_is_503(scene):
    from session_sql.inspector.app import create_app
    from tests.inspector.conftest import serve_in_thread, stop_serving

    running = serve_in_thread(create_app(scene.store, follow_wait=0.5, max_followers=1))
    try:
        url = f"{running.url}/api/sessions/{scene.session_id}/follow"
        with httpx.stream("GET", url, timeout=60.0) as first:
            messages = sse(first.iter_lines())  # (kept: closing it would close the stream)
            assert next(messages)["event"] == "ready"
            second = httpx.get(url, timeout=60.0)
            assert second.status_code == 503
            assert "follow streams" in second.json()["error"]
    finally:
        stop_serving(running)


def test_follow_streams_past_the_bound_are_refused_and_the_rest_served(scene):
    """20 follow requests at once on the default bound (16): each admitted stream gets the
    event appended after all connected, and the rest are refused up front with a 503 and a
    message, never a 200 stream that is cut; closed streams make room again."""
    import threading
    import time

    from session_sql.inspector.app import create_app
    from tests.inspector.conftest import serve_in_thread, stop_serving

    count, bound = 20, 16
    running = serve_in_thread(create_app(scene.store, follow_wait=0.5))
    sid = scene.session_id
    url = f"{running.url}/api/sessions/{sid}/follow"
    answered = threading.Semaphore(0)
    appended = threading.Event()
    outcomes: list[tuple[int, str]] = []
    start = threading.Barrier(count)

    def request() -> None:
        start.wait(60)
        with httpx.stream("GET", url, timeout=60.0) as response:
            if response.status_code != 200:
                response.read()
                outcomes.append((response.status_code, response.json()["error"]))
                answered.release()
                return
            messages = sse(response.iter_lines())
            assert next(messages)["event"] == "ready"
            answered.release()
            appended.wait(60)
            got = next((m for m in messages if m.get("event") == "event"), {})
            outcomes.append((200, got.get("id", "cut")))

    threads = [threading.Thread(target=request, daemon=True) for _ in range(count)]
    try:
        for thread in threads:
            thread.start()
        for _ in range(count):
            assert answered.acquire(timeout=60), "a request got no answer"
        seq = say(scene.store.open_session(sid), "to every stream")
        appended.set()
        for thread in threads:
            thread.join(60)
        assert sorted(outcomes) == sorted(
            [(200, str(seq))] * bound
            + [(503, f"{bound} follow streams are open already")] * (count - bound)
        )
        deadline = time.monotonic() + 30  # until the server notices the closed streams
        while True:
            with httpx.stream("GET", url, timeout=60.0) as again:
                if again.status_code == 200:
                    assert next(sse(again.iter_lines()))["event"] == "ready"
                    break
            assert time.monotonic() < deadline, "closed streams never made room"
            time.sleep(0.05)
    finally:
        appended.set()
        stop_serving(running)


def test_a_follow_stream_ends_with_deleted_when_its_session_is_deleted(served, scene):
    sid = scene.session_id
    url = f"{served.url}/api/sessions/{sid}/follow"
    with httpx.stream("GET", url, timeout=60.0) as response:
        messages = sse(response.iter_lines())
        assert next(messages)["event"] == "ready"
        scene.store.delete_session(sid)
        say(scene.store.create_session(sid), "a new session under the same id")
        rest = list(messages)  # the stream ends
    assert [m["event"] for m in rest] == ["deleted"]
    assert json.loads(rest[0]["data"]) == {"session_id": sid}
