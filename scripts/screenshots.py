"""Screenshots of the inspector for docs/inspector.md, taken in headless chromium.

Records the demo session (``session-sql demo``) into a temporary SQLite store, serves the
inspector over it on a free loopback port, and saves the sessions page and the demo
session's page:

    python scripts/screenshots.py            # writes docs/images/inspector-*.png

Needs the ``serve`` extra, selenium, and Debian's chromium with chromium-driver.
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from selenium import webdriver

from session_sql import open_store
from session_sql.cli.demo import record_demo
from session_sql.inspector.app import create_app

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/sessions.db"
        run = record_demo(url)
        store = open_store(url, create=False)
        # Metadata, as an application would set it (the demo records none).
        store.update_session(
            run.session_id,
            title="Billing tests fail after the rounding refactor",
            labels={"team": "billing", "env": "ci"},
        )
        store.update_session(run.fork_id, title="Billing tests: the fork that forgets")
        app = create_app(store)
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        options = webdriver.ChromeOptions()
        options.binary_location = args.chromium
        for argument in ("--headless=new", "--no-sandbox", "--window-size=1400,1300"):
            options.add_argument(argument)
        driver = webdriver.Chrome(
            options=options, service=webdriver.ChromeService(executable_path=args.chromedriver)
        )
        try:
            base = f"http://127.0.0.1:{port}"
            driver.get(base + "/")
            driver.save_screenshot(str(args.out / "inspector-sessions.png"))
            driver.get(f"{base}/sessions/{run.session_id}")
            driver.execute_script(  # the summary in view, with the surface beside it
                f"document.getElementById('e{run.summary_seq}').scrollIntoView({{block: 'center'}})"
            )
            time.sleep(0.5)  # (the live status line settles)
            driver.save_screenshot(str(args.out / "inspector-session.png"))
            driver.get("about:blank")
        finally:
            driver.quit()
            app.stopping.set()
            server.should_exit = True
            thread.join(timeout=30)
            store.close()
    for name in ("inspector-sessions.png", "inspector-session.png"):
        print(args.out / name)


if __name__ == "__main__":
    main()
