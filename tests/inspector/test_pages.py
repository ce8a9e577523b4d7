"""The inspector's pages over HTTP, on SQLite and PostgreSQL: what they show (surface beside
log, replacement ↔ shadowed links, tool pairs, turns, forks, paging), and that stored text,
however hostile, comes back as text and never as markup, attribute or URL."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import quote

from session_sql.inspector import render_file
from tests.inspector.conftest import (
    ATTRIBUTE,
    HOSTILE_ID,
    HOSTILE_TEXT,
    IMAGE,
    PAYLOADS,
    SCRIPT,
    URL,
)


class Parsed(HTMLParser):
    """A page's tags and attributes, and its text as a browser decodes it."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.script_text: list[str] = []
        self._in_script = False
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        (self.script_text if self._in_script else self.text).append(data)

    def by_id(self, element_id: str) -> dict[str, str]:
        return next(attrs for _, attrs in self.tags if attrs.get("id") == element_id)

    def hrefs(self) -> list[str]:
        return [attrs["href"] for tag, attrs in self.tags if tag == "a" and "href" in attrs]


def assert_inert(page: str, *, scripts: tuple[str, ...] = ("/static/inspector.js",)) -> Parsed:
    """No handler attribute, no script but the app's own, no javascript: URL, no img."""
    parsed = Parsed(page)
    for tag, attrs in parsed.tags:
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        for name in ("href", "src", "action"):
            assert not attrs.get(name, "").strip().lower().startswith("javascript:"), attrs
        assert tag != "img", attrs
        if tag == "script":
            assert attrs.get("src") in scripts, attrs
    assert "".join(parsed.script_text).strip() == ""  # no inline script at all
    return parsed


def test_the_sessions_page_lists_title_user_labels_and_sizes(client, scene):
    page = client.get("/").text
    parsed = assert_inert(page)
    text = "".join(parsed.text)
    for payload in (SCRIPT, ATTRIBUTE.strip(), URL, IMAGE, HOSTILE_ID):
        assert payload in text  # shown, as text
    for payload in PAYLOADS:
        assert payload not in page  # never as markup
    hrefs = parsed.hrefs()
    assert f"/sessions/{scene.session_id}" in hrefs
    assert "/sessions/" + quote(HOSTILE_ID, safe="") in hrefs
    events = str(scene.store.head_seq(scene.session_id) + 1)
    assert events in text


def test_the_sessions_page_pages_on(client, scene):
    page = client.get("/", params={"limit": "1"}).text
    parsed = Parsed(page)
    nexts = [a for t, a in parsed.tags if t == "a" and a.get("rel") == "next"]
    assert len(nexts) == 1
    first = scene.store.list_sessions(limit=1)[0]
    assert f"after={quote(first.id, safe='')}" in nexts[0]["href"].replace("+", "%20")
    second = client.get(nexts[0]["href"]).text
    assert scene.store.list_sessions(limit=2)[1].id in "".join(Parsed(second).text)


def test_the_session_page_shows_the_surface_beside_the_log(client, scene):
    sid = scene.session_id
    page = client.get(f"/sessions/{sid}").text
    parsed = assert_inert(page)
    nodes = [a for t, a in parsed.tags if t == "li" and "node" in a.get("class", "").split()]
    assert len(nodes) == len(scene.store.surface(sid))
    rows = [a for t, a in parsed.tags if t == "tr" and a.get("id", "").startswith("e")]
    assert [r["id"] for r in rows] == [f"e{s}" for s in range(scene.store.head_seq(sid) + 1)]
    text = "".join(parsed.text)
    assert HOSTILE_TEXT in text and f"echo {SCRIPT}" in text
    for payload in PAYLOADS:
        assert payload not in page


def test_a_replacement_links_to_what_it_shadows_and_back(client, scene):
    page = client.get(f"/sessions/{scene.session_id}").text
    parsed = Parsed(page)
    summary = parsed.by_id(f"e{scene.summary_seq}")
    assert "replacement" in summary["class"].split()
    links = [a for t, a in parsed.tags if t == "a" and a.get("class") == "shadows"]
    # The runs of shadowed seqs, each linked to its first event.
    targets = {int(a["href"].removeprefix("#e")) for a in links}
    assert set(scene.shadowed) >= targets and min(scene.shadowed) in targets
    for seq in scene.shadowed:
        row = parsed.by_id(f"e{seq}")
        assert "shadowed" in row["class"].split(), seq
    backs = [a["href"] for t, a in parsed.tags if t == "a" and a.get("class") == "shadowed-by"]
    assert backs == [f"#e{scene.summary_seq}"] * len(scene.shadowed)


def test_tool_calls_and_results_link_each_other(client, scene):
    parsed = Parsed(client.get(f"/sessions/{scene.session_id}").text)
    pairs = [a["href"] for t, a in parsed.tags if t == "a" and a.get("class") == "pair"]
    assert f"#e{scene.seqs['tool/result']}" in pairs  # from the call
    assert f"#e{scene.seqs['tool/call']}" in pairs  # from the result


def test_turns_and_token_usage_are_drawn(client, scene):
    page = client.get(f"/sessions/{scene.session_id}").text
    parsed = Parsed(page)
    turns = [a for t, a in parsed.tags if t == "tr" and "turn" in a.get("class", "").split()]
    assert len(turns) == 2
    assert "completed" in turns[0]["class"]
    assert any(t == "svg" and a.get("class") == "chart" for t, a in parsed.tags)


def test_fork_parent_and_children_are_linked(client, scene):
    parent = Parsed(client.get(f"/sessions/{scene.session_id}").text)
    children = [a["href"] for t, a in parent.tags if t == "a" and a.get("class") == "child"]
    assert children == [f"/sessions/{scene.fork_id}"]
    fork = Parsed(client.get(f"/sessions/{scene.fork_id}").text)
    parents = [a["href"] for t, a in fork.tags if t == "a" and a.get("class") == "parent"]
    assert parents == [f"/sessions/{scene.session_id}"]


def test_the_log_is_paged_with_earlier_and_later_links(client, scene):
    sid = scene.session_id
    head = scene.store.head_seq(sid)
    parsed = Parsed(client.get(f"/sessions/{sid}", params={"limit": "3"}).text)
    rows = [a["id"] for t, a in parsed.tags if t == "tr" and a.get("id", "").startswith("e")]
    assert rows == [f"e{s}" for s in range(head - 2, head + 1)]
    earlier = [a["href"] for t, a in parsed.tags if t == "a" and a.get("rel") == "prev"]
    assert set(earlier) == {f"/sessions/{sid}?from_seq={head - 5}&limit=3"}  # (above and below)
    body = parsed.by_id("log-rows")
    assert body is not None
    assert next(a for t, a in parsed.tags if t == "body")["data-live"] == "1"
    first = Parsed(client.get(f"/sessions/{sid}", params={"from_seq": "0", "limit": "3"}).text)
    assert next(a for t, a in first.tags if t == "body")["data-live"] == "0"
    later = [a["href"] for t, a in first.tags if t == "a" and a.get("rel") == "next"]
    assert set(later) == {f"/sessions/{sid}?from_seq=3&limit=3"}


def test_a_link_out_of_the_page_goes_to_a_page_holding_its_target(client, scene):
    sid = scene.session_id
    # A page holding only the summary: its links to the shadowed events lead to other pages.
    parsed = Parsed(
        client.get(
            f"/sessions/{sid}", params={"from_seq": str(scene.summary_seq), "limit": "1"}
        ).text
    )
    links = [a["href"] for t, a in parsed.tags if t == "a" and a.get("class") == "shadows"]
    first = min(scene.shadowed)
    assert links[0] == f"/sessions/{sid}?from_seq={max(0, first - 10)}&limit=1#e{first}"


def test_a_session_with_a_hostile_id_has_a_page(client, scene):
    response = client.get("/sessions/" + quote(HOSTILE_ID, safe=""))
    assert response.status_code == 200
    parsed = assert_inert(response.text)
    assert HOSTILE_ID in "".join(parsed.text)
    assert HOSTILE_ID not in response.text


def test_a_missing_session_page_is_404_and_escaped(client):
    response = client.get("/sessions/" + quote(SCRIPT, safe=""))
    assert response.status_code == 404
    assert SCRIPT not in response.text
    assert_inert(response.text, scripts=())


def test_the_file_page_holds_no_script_and_no_network(scene):
    page = render_file(scene.store, scene.session_id)
    parsed = assert_inert(page, scripts=())
    assert not [a for t, a in parsed.tags if t in ("script", "link", "img", "iframe")]
    for href in parsed.hrefs():
        assert href.startswith("#e"), href
    csp = next(
        a["content"] for t, a in parsed.tags if a.get("http-equiv") == "Content-Security-Policy"
    )
    assert "default-src 'none'" in csp
    assert HOSTILE_TEXT in "".join(parsed.text)


def test_a_long_log_draws_the_turns_near_the_page(client, scene, monkeypatch):
    from session_sql.inspector import api

    monkeypatch.setattr(api, "TURN_SPAN", 6)  # (10,000 events in a real store)
    sid = scene.session_id
    page = client.get(f"/sessions/{sid}").text
    parsed = Parsed(page)
    turns = [a for t, a in parsed.tags if t == "tr" and "turn" in a.get("class", "").split()]
    assert len(turns) == 1  # turn 2 starts in the last 6 events; turn 1 does not
    head = scene.store.head_seq(sid)
    assert f"the turns that start from seq {head + 1 - 6} to the end" in "".join(parsed.text)


def test_a_tool_pair_across_pages_links_to_the_other_page(client, scene):
    sid = scene.session_id
    result = scene.seqs["tool/result"]
    parsed = Parsed(
        client.get(f"/sessions/{sid}", params={"from_seq": str(result), "limit": "1"}).text
    )
    pairs = [a["href"] for t, a in parsed.tags if t == "a" and a.get("class") == "pair"]
    call = scene.seqs["tool/call"]
    assert pairs == [f"/sessions/{sid}?from_seq={max(0, call - 10)}&limit=1#e{call}"]


def test_the_filter_form_round_trips_its_labels(client, scene):
    params = [("label", f"link={URL}"), ("label", ""), ("user", "")]
    parsed = Parsed(client.get("/", params=params).text)
    values = [a.get("value") for t, a in parsed.tags if t == "input" and a.get("name") == "label"]
    assert values == [f"link={URL}", None]  # the filter given, and an empty one to add
    rows = [a["href"] for t, a in parsed.tags if t == "a" and a["href"].startswith("/sessions/")]
    assert f"/sessions/{scene.session_id}" in rows
    assert "/sessions/" + quote(HOSTILE_ID, safe="") not in rows  # (it has no such label)
