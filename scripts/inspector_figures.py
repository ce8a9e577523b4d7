"""The inspector's figures on a long session, for docs/inspector.md.

Builds a session of N plain turns (a question, a step, an answer with token usage: 5 events
and 2 surface nodes a turn) in a store, serves the inspector over it on a free loopback
port, and measures the session page: its HTML bytes, the time to serve it, and in headless
chromium the time to first contentful paint and to the load event (medians of --runs
loads); then the bytes of the file ``session-sql view`` writes by default:

    python scripts/inspector_figures.py --turns 18000
    python scripts/inspector_figures.py --url postgresql://postgres@localhost/test \\
        --schema figures --turns 18000

The schema (PostgreSQL) or the temporary SQLite file is the script's own; on PostgreSQL the
schema is dropped at the end. Needs the ``serve`` extra, selenium, and Debian's chromium
with chromium-driver.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import threading
import time
from typing import Any

import uvicorn
from selenium import webdriver
from sqlalchemy import create_engine, text

from session_sql import SessionStore, open_store
from session_sql.inspector import render_file
from session_sql.inspector.app import create_app

TIMING = """
var paint = performance.getEntriesByName('first-contentful-paint');
var nav = performance.getEntriesByType('navigation')[0];
return [paint.length ? paint[0].startTime : null, nav.responseEnd, nav.loadEventEnd];
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def turn(n: int) -> list[dict[str, Any]]:
    answer = {
        "id": f"a{n}",
        "role": "assistant",
        "content": [{"type": "text", "text": f"answer {n}: totals round half-even"}],
        "source": {"kind": "model", "provider": "prov", "model": "mod"},
    }
    question = {
        "id": f"u{n}",
        "role": "user",
        "content": [{"type": "text", "text": f"question {n} about rounding"}],
        "source": {"kind": "user"},
    }
    usage = {"inputTokens": 10_000 + n % 600, "outputTokens": 500 + n % 70}
    return [
        {"type": "turn/start", "data": {"turn": n}},
        {"type": "user/message", "data": question, "surface_op": "append"},
        {"type": "step/start", "data": {"turn": n, "step": 1}},
        {
            "type": "assistant/message",
            "data": {"turn": n, "step": 1, "message": answer, "usage": usage},
            "surface_op": "append",
        },
        {"type": "turn/end", "data": {"turn": n, "reason": {"kind": "completed"}}},
    ]


def build(store: SessionStore, turns: int) -> str:
    session = store.create_session(title=f"{turns:,} turns")
    items: list[dict[str, Any]] = []
    for n in range(1, turns + 1):
        items += turn(n)
        if len(items) >= 5000:
            session.append_many(items)
            items = []
    if items:
        session.append_many(items)
    return session.id


def measure(store: SessionStore, session_id: str, runs: int, chromium: str, driver: str) -> None:
    app = create_app(store)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--window-size=1280,900"):
        options.add_argument(argument)
    browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))
    url = f"http://127.0.0.1:{port}/sessions/{session_id}"
    try:
        browser.get(url)  # (a first load warms the store's caches and the browser)
        paints, served, loads = [], [], []
        for _ in range(runs):
            browser.get("about:blank")
            browser.get(url)
            deadline = time.monotonic() + 10
            paint, response, load = browser.execute_script(TIMING)
            while paint is None and time.monotonic() < deadline:  # (reported after the load)
                time.sleep(0.05)
                paint, response, load = browser.execute_script(TIMING)
            paints.append(paint)
            served.append(response)
            loads.append(load)
        size = browser.execute_script(
            "return performance.getEntriesByType('navigation')[0].decodedBodySize"
        )
        browser.get("about:blank")
    finally:
        browser.quit()
        app.stopping.set()
        server.should_exit = True
        thread.join(timeout=30)
    print(f"session page: {size:,} bytes of HTML")
    print(f"  served (response end): median {statistics.median(served):.0f} ms")
    print(f"  first contentful paint: median {statistics.median(paints):.0f} ms")
    print(f"  load event: median {statistics.median(loads):.0f} ms  ({runs} loads)")
    started = time.perf_counter()
    page = render_file(store, session_id)
    took = time.perf_counter() - started
    print(f"view file (default --last): {len(page.encode()):,} bytes in {took:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL URL (default: a temporary SQLite file)")
    parser.add_argument("--schema", default="inspector_figures")
    parser.add_argument("--turns", type=int, default=18_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{tmp}/sessions.db"
        options = {"schema": args.schema} if args.url else {}
        store = open_store(url, **options)
        try:
            started = time.perf_counter()
            session_id = build(store, args.turns)
            took = time.perf_counter() - started
            events = store.head_seq(session_id) + 1
            print(f"built {args.turns:,} turns ({events:,} events) in {took:.1f} s")
            measure(store, session_id, args.runs, args.chromium, args.chromedriver)
        finally:
            store.close()
            if args.url:
                engine = create_engine(args.url)
                with engine.begin() as conn:
                    conn.execute(text(f'DROP SCHEMA IF EXISTS "{args.schema}" CASCADE'))
                engine.dispose()


if __name__ == "__main__":
    main()
