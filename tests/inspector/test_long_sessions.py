"""The inspector on long sessions, on SQLite and PostgreSQL: the turns as a bounded table, the
chart's legend, the surface's ordinal positions and its pages, the text search (page and
API), and ``view --last`` bounding the file."""

from __future__ import annotations

import html
import re

import pytest

from session_sql import open_store
from session_sql.cli import main
from session_sql.inspector.app import create_app
from tests.builders import say
from tests.inspector.conftest import (
    HOSTILE_TEXT,
    PAYLOADS,
    SCRIPT,
    append_turns,
    turn_items,
)
from tests.inspector.test_pages import Parsed, assert_inert

LISTED = 200
"""The turns a page lists (``timeline.LISTED``)."""


def classes(attrs: dict[str, str]) -> list[str]:
    return attrs.get("class", "").split()


def texts_of(page: str, cls: str) -> list[str]:
    """The text of each element whose class list holds ``cls`` (a flat element's text)."""
    found = re.findall(rf'<[a-z]+ class="(?:[^"]* )?{cls}(?: [^"]*)?"[^>]*>(.*?)</', page)
    return [re.sub(r"<[^>]+>", "", text) for text in found]


# --------------------------------------------------------------------------------------------
# Turns and tokens


def test_the_chart_legend_names_the_tallest_bar_as_input_plus_output(client, scene):
    session = scene.store.create_session("usage")
    session.append_many(turn_items(1, (1000, 50)) + turn_items(2, (300, 900)))
    text = "".join(Parsed(client.get("/sessions/usage").text).text)
    assert "the tallest bar: turn 2, 300 input + 900 output = 1,200 tokens" in text
    assert "one bar per turn" in text


def test_a_long_session_lists_its_last_turns_in_a_table(client, scene):
    session = scene.store.create_session("long")
    append_turns(session, 600)
    page = client.get("/sessions/long").text
    parsed = Parsed(page)
    rows = [a for t, a in parsed.tags if t == "tr" and "turn" in classes(a)]
    assert len(rows) == LISTED
    assert not [a for t, a in parsed.tags if t == "ol" and "turns" in classes(a)]
    table = [a for t, a in parsed.tags if t == "table" and "turns" in classes(a)]
    assert len(table) == 1
    text = "".join(parsed.text)
    assert "Turns (600)" in text and f"the list holds the last {LISTED}" in text
    bars = [a for t, a in parsed.tags if t == "rect" and "in" in classes(a)]
    assert len(bars) == 300  # 600 turns, two to a bar
    assert "one bar per 2 turns" in text


# --------------------------------------------------------------------------------------------
# The surface


def test_surface_positions_are_ordinals_beside_their_seqs(client, scene):
    sid = scene.session_id
    stored = scene.store.surface_messages(sid)
    positions = [n.pos for n in stored]
    assert positions != list(range(len(stored)))  # (a compaction left gaps in the positions)
    page = client.get(f"/sessions/{sid}").text
    assert texts_of(page, "ordinal") == [f"#{i}" for i in range(1, len(stored) + 1)]
    assert texts_of(page, "node-seq") == [str(n.seq) for n in stored]
    parsed = Parsed(page)
    nodes = [a["id"] for t, a in parsed.tags if t == "li" and "node" in classes(a)]
    assert nodes == [f"s{i}" for i in range(1, len(stored) + 1)]


def test_the_surface_is_paged_like_the_log(client, scene):
    session = scene.store.create_session("paged")
    for i in range(12):
        say(session, f"line {i}")
    page = client.get("/sessions/paged", params={"surface_limit": "5"}).text
    assert texts_of(page, "ordinal") == [f"#{i}" for i in range(8, 13)]
    parsed = Parsed(page)
    earlier = {a["href"] for t, a in parsed.tags if t == "a" and a.get("rel") == "prev"}
    assert earlier == {"/sessions/paged?surface_from=3&surface_limit=5#surface"}
    middle = client.get("/sessions/paged?surface_from=3&surface_limit=5").text
    assert texts_of(middle, "ordinal") == [f"#{i}" for i in range(3, 8)]
    assert "nodes #3–#7 of 12" in "".join(Parsed(middle).text)
    later = {a["href"] for t, a in Parsed(middle).tags if t == "a" and a.get("rel") == "next"}
    assert later == {"/sessions/paged?surface_from=8&surface_limit=5#surface"}
    past = client.get("/sessions/paged?surface_from=99999999999999999999").text
    assert texts_of(past, "ordinal") == []  # past the end: an empty page, not an error


def test_the_log_and_the_surface_keep_each_others_page(client, scene):
    session = scene.store.create_session("both")
    for i in range(12):
        say(session, f"line {i}")
    params = {"from_seq": "0", "limit": "3", "surface_from": "1", "surface_limit": "5"}
    parsed = Parsed(client.get("/sessions/both", params=params).text)
    nexts = {a["href"] for t, a in parsed.tags if t == "a" and a.get("rel") == "next"}
    assert nexts == {
        "/sessions/both?from_seq=3&limit=3&surface_from=1&surface_limit=5",  # the log's
        "/sessions/both?from_seq=0&limit=3&surface_from=6&surface_limit=5#surface",
    }


def test_the_surface_api_pages_by_place_too(client, scene):
    session = scene.store.create_session("api-paged")
    for i in range(12):
        say(session, f"line {i}")
    url = "/api/sessions/api-paged/surface"
    body = client.get(url, params={"from": "3", "limit": "5"}).json()
    assert [n["ordinal"] for n in body["nodes"]] == [3, 4, 5, 6, 7]
    assert [n["seq"] for n in body["nodes"]] == list(scene.store.surface("api-paged")[2:7])
    assert [n["message"] for n in body["nodes"]] == scene.store.messages("api-paged")[2:7]
    assert (body["length"], body["next_from"]) == (12, 8)
    tail = client.get(url, params={"from": "11", "limit": "5"}).json()
    assert [n["ordinal"] for n in tail["nodes"]] == [11, 12] and tail["next_from"] is None
    assert client.get(url, params={"from": "0"}).status_code == 400
    assert len(client.get(url).json()["nodes"]) == 12  # (without from: as before)


def test_bad_surface_parameters_are_refused(client, scene):
    for params in ({"surface_from": "0"}, {"surface_limit": "0"}, {"surface_from": "x"}):
        response = client.get(f"/sessions/{scene.session_id}", params=params)
        assert response.status_code == 400
        assert next(iter(params)) in response.text


# --------------------------------------------------------------------------------------------
# Search


def search(client, sid: str, **params: str):
    return client.get(f"/api/sessions/{sid}/search", params=params)


def test_search_finds_messages_by_their_text_ignoring_case(client, scene):
    sid = scene.session_id
    body = search(client, sid, q="ECHO <SCRIPT>").json()
    assert body["q"] == "ECHO <SCRIPT>" and body["next_after_seq"] is None
    [hit] = body["matches"]
    assert hit["seq"] == scene.seqs["hostile_reply"] and hit["type"] == "assistant/message"
    assert hit["on_surface"] is True
    start, end = hit["match"]
    assert hit["snippet"][start:end] == f"echo {SCRIPT}"[: len("ECHO <SCRIPT>")]
    shadowed = search(client, sid, q="question 1").json()["matches"]
    assert [(m["seq"], m["on_surface"]) for m in shadowed] == [(scene.seqs["user"], False)]
    hostile = search(client, sid, q=SCRIPT).json()["matches"]
    assert [m["seq"] for m in hostile] == [scene.seqs["hostile"], scene.seqs["hostile_reply"]]


def test_search_matches_the_text_never_the_json_around_it(client, scene):
    session = scene.store.create_session("json")
    say(session, 'she said "hi" \\ then 100% done_ok, Ünïcode')
    say(session, "1000 and 1_0")
    for q, expected in (
        ("source", 0),  # a key of every message
        ("role", 0),
        ('"hi" \\', 1),  # escaped in the stored JSON
        ("0% d", 1),
        ("%", 1),  # (LIKE wildcards are text)
        ("_", 2),
        ("1_0", 1),
        ("üNÏCODE", 1),
        ("10", 2),
    ):
        assert len(search(client, "json", q=q).json()["matches"]) == expected, q


def test_search_pages_on_and_is_bounded(client, scene, monkeypatch):
    session = scene.store.create_session("many")
    seqs = [say(session, f"needle {i}") for i in range(7)]
    say(session, "hay")
    seen: list[int] = []
    after = "-1"
    while True:
        body = search(client, "many", q="needle", limit="3", after_seq=after).json()
        assert len(body["matches"]) <= 3
        seen += [m["seq"] for m in body["matches"]]
        if body["next_after_seq"] is None:
            break
        after = str(body["next_after_seq"])
    assert seen == seqs
    from session_sql.inspector import search as search_module

    monkeypatch.setattr(search_module, "SCAN_ROWS", 2)  # (5000 rows a request in a real store)
    first = search(client, "many", q="needle").json()
    assert [m["seq"] for m in first["matches"]] == seqs[:2]
    assert first["next_after_seq"] == seqs[1]
    big = search(client, "many", q="needle", limit="100000")
    assert big.status_code == 200


def test_search_narrows_by_every_word_of_the_query(client, scene, monkeypatch):
    from session_sql.inspector import search as search_module

    session = scene.store.create_session("words")
    for word in ("zero", "one", "two", "three", "four"):
        say(session, f"common {word}")
    monkeypatch.setattr(search_module, "SCAN_ROWS", 2)  # (every message says "common")
    body = search(client, "words", q="four COMMON").json()
    assert body["matches"] == []  # (the words must be next to each other, in that order)
    body = search(client, "words", q="COMMON four").json()
    assert [m["snippet"] for m in body["matches"]] == ["common four"]


@pytest.mark.parametrize(
    ("params", "word"),
    [
        ({}, "q"),
        ({"q": "  "}, "q"),
        ({"q": "x" * 201}, "q"),
        ({"q": "a", "after_seq": "-2"}, "after_seq"),
        ({"q": "a", "limit": "0"}, "limit"),
        ({"q": "a", "limit": "x"}, "limit"),
    ],
)
def test_bad_search_parameters_are_400_naming_them(client, scene, params, word):
    response = search(client, scene.session_id, **params)
    assert response.status_code == 400
    assert word in response.json()["error"]


def test_search_sees_the_stores_tenant_only(backend, scene):
    from starlette.testclient import TestClient

    other = open_store(backend.url, schema=backend.schema, tenant="other")
    try:
        with TestClient(create_app(other), base_url="http://127.0.0.1") as client:
            response = search(client, scene.session_id, q="question")
            assert response.status_code == 404
            assert client.get(f"/sessions/{scene.session_id}?q=question").status_code == 404
    finally:
        other.close()


def test_the_search_box_shows_matches_as_text(client, scene):
    sid = scene.session_id
    page = client.get(f"/sessions/{sid}", params={"q": SCRIPT}).text
    parsed = assert_inert(page)
    for payload in PAYLOADS:
        assert payload not in page
    inputs = [a for t, a in parsed.tags if t == "input" and a.get("name") == "q"]
    assert [a["value"] for a in inputs] == [SCRIPT]
    assert f"2 messages hold “{SCRIPT}”" in "".join(parsed.text)
    marks = texts_of(page.replace("<mark>", '<mark class="hit">'), "hit")
    assert marks == [html.escape(SCRIPT, quote=True)] * 2
    links = [a["href"] for t, a in parsed.tags if t == "a" and a["href"].startswith("#e")]
    assert f"#e{scene.seqs['hostile']}" in links and HOSTILE_TEXT in "".join(parsed.text)
    empty = Parsed(client.get(f"/sessions/{sid}", params={"q": ""}).text)
    assert not [a for t, a in empty.tags if a.get("id") == "search"]


# --------------------------------------------------------------------------------------------
# view


def view(backend, *args: str) -> int:
    return main(["view", *args, "--url", backend.url, "--schema", backend.schema])


def test_view_last_bounds_the_surface_too(backend, scene, tmp_path, capsys):
    session = scene.store.create_session("ten")
    for i in range(10):
        say(session, f"line {i}")
    out = tmp_path / "ten.html"
    assert view(backend, "ten", "-o", str(out), "--last", "3") == 0
    assert "(the last 3 of 10 surface nodes" in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    assert texts_of(page, "ordinal") == ["#8", "#9", "#10"]
    assert "the 7 before are not in this file" in "".join(Parsed(page).text)


def test_view_of_a_long_session_stays_small_by_default(backend, scene, tmp_path, capsys):
    session = scene.store.create_session("long")
    append_turns(session, 3000)
    out = tmp_path / "long.html"
    assert view(backend, "long", "-o", str(out)) == 0
    printed = capsys.readouterr().out
    assert "(the last 1,000 of 15,000 events" in printed
    assert "(the last 1,000 of 6,000 surface nodes" in printed
    page = out.read_text(encoding="utf-8")
    parsed = Parsed(page)
    rows = [a for t, a in parsed.tags if t == "tr" and a.get("id", "").startswith("e")]
    nodes = [a for t, a in parsed.tags if t == "li" and "node" in classes(a)]
    assert len(rows) == 1000 and len(nodes) == 1000
    assert len(page.encode()) < 3_000_000
