"""The inspector in a real browser: Debian's chromium, headless, driven by selenium, against
the app served by uvicorn, on SQLite and PostgreSQL.

Every page records the Content-Security-Policy violations it meets (a listener installed
before any of the page's scripts runs) and each hostile payload of the scene sets
``window.pwned`` if it ever runs: both must stay empty. Skipped only when chromium is missing
and SESSION_SQL_REQUIRE_POSTGRES is unset; under it (as in CI) a missing browser fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

import pytest

from session_sql import open_store
from session_sql.inspector import render_file
from session_sql.inspector.app import create_app
from tests.builders import say
from tests.inspector.conftest import (
    ATTRIBUTE,
    HOSTILE_ID,
    HOSTILE_TEXT,
    SCRIPT,
    append_turns,
    serve_in_thread,
    stop_serving,
)

CHROMIUM = ("/usr/bin/chromium", "chromium")
CHROMEDRIVER = ("/usr/bin/chromedriver", "chromedriver")
SHOTS = "SESSION_SQL_SCREENSHOTS"
"""A directory to keep the screenshots in (they go to the test's tmp_path otherwise)."""
WAIT = 30  # seconds: the longest a page may take to show what is awaited (a bound, not a timing)

WATCH = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__violations.push(e.violatedDirective + ' ' + e.blockedURI);
});
"""


def unavailable(message: str) -> NoReturn:
    """The browser is missing: skip, or fail under SESSION_SQL_REQUIRE_POSTGRES=1 (CI)."""
    if os.environ.get("SESSION_SQL_REQUIRE_POSTGRES") == "1":
        pytest.fail(
            f"SESSION_SQL_REQUIRE_POSTGRES=1 but {message} "
            "(apt-get install chromium chromium-driver)",
            pytrace=False,
        )
    pytest.skip(message)


def _found(names: tuple[str, ...]) -> str | None:
    for name in names:
        path = name if os.path.isabs(name) else shutil.which(name)
        if path and os.access(path, os.X_OK):
            return path
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium, driver_path = _found(CHROMIUM), _found(CHROMEDRIVER)
    if chromium is None or driver_path is None:
        unavailable("chromium or chromedriver is not installed")
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--window-size=1280,900"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(
        options=options, service=webdriver.ChromeService(executable_path=driver_path)
    )
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: Any, served: Any) -> Iterator[Any]:
    """The browser, against the served app; it leaves the page (closing its event stream)
    before the server stops."""
    yield browser
    browser.get("about:blank")


def visit(browser: Any, url: str) -> None:
    browser.get(url)
    assert browser.execute_script("return document.readyState") == "complete"


def assert_nothing_ran(browser: Any) -> None:
    """No payload ran, and the page met no CSP violation."""
    assert browser.execute_script("return typeof window.pwned") == "undefined"
    assert browser.execute_script("return window.__violations") == []
    console = [e["message"] for e in browser.get_log("browser")]
    assert not [m for m in console if "Content Security Policy" in m], console


def wait_for(browser: Any, script: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT).until(lambda d: d.execute_script(script))


def hover_everything(browser: Any, css: str) -> None:
    """Fire the pointer events on each element matching ``css`` (an attribute payload, were
    it an attribute, would run; a payload is text, so none does)."""
    browser.execute_script(
        """
        document.querySelectorAll(arguments[0]).forEach(function (element) {
          ['mouseover', 'mouseenter', 'click', 'focus'].forEach(function (name) {
            if (name === 'click' && element.closest('a')) { return; }  // (stay on the page)
            element.dispatchEvent(new MouseEvent(name, {bubbles: true}));
          });
        });
        """,
        css,
    )


def test_the_sessions_page_shows_hostile_text_as_text(page, served, scene):
    browser = page
    visit(browser, served.url + "/")
    text = browser.find_element("css selector", "table.sessions").text
    assert SCRIPT in text and HOSTILE_ID in text and ATTRIBUTE.strip() in text
    hover_everything(browser, "table.sessions td")
    assert_nothing_ran(browser)
    browser.find_element("link text", HOSTILE_ID).click()
    wait_for(browser, "return document.getElementById('log-rows') !== null")
    assert browser.current_url == served.url + "/sessions/" + quote(HOSTILE_ID, safe="")
    assert_nothing_ran(browser)


def test_the_session_page_shows_surface_and_log(page, served, scene):
    browser = page
    sid = scene.session_id
    visit(browser, f"{served.url}/sessions/{sid}")
    nodes = browser.execute_script("return document.querySelectorAll('#surface li.node').length")
    assert nodes == len(scene.store.surface(sid))
    rows = browser.execute_script("return document.querySelectorAll('#log-rows tr').length")
    assert rows == scene.store.head_seq(sid) + 1
    log = browser.find_element("id", "log").text
    assert HOSTILE_TEXT in log
    hover_everything(browser, "#log-rows .summary, .facts dd, h1, #surface .text")
    assert_nothing_ran(browser)


def test_a_replacement_link_jumps_to_what_it_shadows_and_back(page, served, scene):
    browser = page
    visit(browser, f"{served.url}/sessions/{scene.session_id}")
    link = browser.find_element("css selector", f"#e{scene.summary_seq} a.shadows")
    link.click()
    first = min(scene.shadowed)
    assert browser.execute_script("return location.hash") == f"#e{first}"
    target = browser.execute_script("return document.querySelector(':target').id")
    assert target == f"e{first}"
    in_view = """
        var r = document.querySelector(':target').getBoundingClientRect();
        return r.top >= 0 && r.top < window.innerHeight;
    """
    assert browser.execute_script(in_view)
    assert "shadowed" in browser.find_element("id", target).get_attribute("class").split()
    browser.find_element("css selector", f"#e{first} a.shadowed-by").click()
    assert browser.execute_script("return location.hash") == f"#e{scene.summary_seq}"
    assert browser.execute_script(in_view)
    assert_nothing_ran(browser)


def test_a_live_event_appears(page, served, scene):
    browser = page
    sid = scene.session_id
    handle = scene.store.open_session(sid)
    visit(browser, f"{served.url}/sessions/{sid}")
    wait_for(browser, "return document.getElementById('live').textContent.startsWith('following')")
    seq = say(handle, f"live {SCRIPT} {ATTRIBUTE}")
    wait_for(browser, f"return document.getElementById('e{seq}') !== null")
    row = browser.find_element("id", f"e{seq}")
    assert f"live {SCRIPT}" in row.text
    hover_everything(browser, f"#e{seq} td")
    assert_nothing_ran(browser)


def test_the_written_file_runs_nothing_in_a_browser(browser, scene, tmp_path: Path):
    out = tmp_path / "session.html"
    out.write_text(render_file(scene.store, scene.session_id), encoding="utf-8")
    visit(browser, out.as_uri())
    rows = browser.execute_script("return document.querySelectorAll('#log-rows tr').length")
    assert rows == scene.store.head_seq(scene.session_id) + 1
    styled = "return getComputedStyle(document.querySelector('tr.shadowed td')).backgroundColor"
    assert browser.execute_script(styled) != "rgba(0, 0, 0, 0)"  # its inline style is allowed
    hover_everything(browser, "#log-rows .summary, h1")
    assert_nothing_ran(browser)


# --------------------------------------------------------------------------------------------
# A session page at 1, 3 and 18,000 turns

LAYOUT = """
var problems = [], rows = document.querySelectorAll('#timeline table.turns tr');
var previous = null;
rows.forEach(function (row, r) {
  var box = row.getBoundingClientRect();
  if (previous && previous.bottom > box.top + 0.5) { problems.push('row ' + r + ' overlaps'); }
  previous = box;
  var cells = Array.prototype.slice.call(row.children);
  cells.forEach(function (cell, c) {
    var edge = cell.getBoundingClientRect(), range = document.createRange();
    range.selectNodeContents(cell);
    var text = range.getBoundingClientRect();
    if (text.width && (text.left < edge.left - 0.5 || text.right > edge.right + 0.5 ||
                       text.top < edge.top - 0.5 || text.bottom > edge.bottom + 0.5)) {
      problems.push('row ' + r + ' cell ' + c + ' spills: ' + cell.textContent);
    }
    var next = cells[c + 1];
    if (next && edge.right > next.getBoundingClientRect().left + 0.5) {
      problems.push('row ' + r + ' cell ' + c + ' overlaps the next: ' + cell.textContent);
    }
  });
});
return {rows: rows.length, problems: problems};
"""


def keep_screenshot(browser: Any, tmp_path: Path, name: str) -> Path:
    folder = Path(os.environ.get(SHOTS) or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    assert browser.save_screenshot(str(path))
    assert path.stat().st_size > 0
    return path


@pytest.mark.parametrize("turns", [1, 3, 18_000])
def test_a_session_page_reads_well_at_any_length(browser, backend, turns, tmp_path):
    """The turn table's columns and rows never overlap, the surface and the log start on
    the first screen, the legends are there, and a search finds the last question."""
    store = open_store(backend.url, schema=backend.schema)
    running = None
    try:
        append_turns(store.create_session("sized"), turns)
        running = serve_in_thread(create_app(store))
        visit(browser, f"{running.url}/sessions/sized")
        keep_screenshot(browser, tmp_path, f"session-{turns}-turns-{backend.name}.png")
        layout = browser.execute_script(LAYOUT)
        assert layout["rows"] == 1 + min(turns, 200)  # (the heading, and the turns listed)
        assert layout["problems"] == []
        for section in ("surface", "log"):
            top = f"return document.getElementById('{section}').getBoundingClientRect().top"
            assert browser.execute_script(top) < browser.execute_script("return innerHeight")
        legends = " ".join(e.text for e in browser.find_elements("css selector", ".legend"))
        assert "the tallest bar: turn" in legends and "input" in legends
        assert "shadowed" in legends and "replacement" in legends and "removal" in legends
        first = browser.find_element("css selector", "#surface .ordinal").text
        nodes = 2 * turns
        assert first == f"#{max(1, nodes - 299)}"
        box = browser.find_element("css selector", "form.search input[name=q]")
        box.send_keys(f"question {turns} about")
        browser.find_element("css selector", "form.search button").click()  # (waits for the page)
        wait_for(browser, "return document.getElementById('search') !== null")
        assert browser.find_element("css selector", "#search mark").text == (
            f"question {turns} about"
        )
        keep_screenshot(browser, tmp_path, f"search-{turns}-turns-{backend.name}.png")
        assert_nothing_ran(browser)
        browser.get("about:blank")
    finally:
        if running is not None:
            stop_serving(running)
        store.close()
