"""The inspector's fixtures: a store on each backend holding a session full of hostile text, the
app over it through Starlette's TestClient, and the app served by uvicorn on a free port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from session_sql import Replace, Session, SessionStore, open_store
from session_sql.inspector.app import create_app
from tests.builders import (
    assistant_data,
    assistant_message,
    begin_step,
    begin_turn,
    end_turn,
    say,
    tool_turn,
    user_message,
)

# Each payload sets a global of the page when it runs; the browser tests check none does.
SCRIPT = "<script>window.pwned='script'</script>"
ATTRIBUTE = '" onmouseover="window.pwned=\'attribute\'" x="'
URL = "javascript:window.pwned='url'"
IMAGE = "<img src=x onerror=\"window.pwned='image'\">"
HOSTILE_ID = "evil<script>window.pwned='id'</script>"
HOSTILE_TEXT = f"{SCRIPT} {IMAGE} {ATTRIBUTE} {URL}"
PAYLOADS = (SCRIPT, ATTRIBUTE, URL, IMAGE, HOSTILE_ID)


@dataclass
class Scene:
    """The sessions the inspector tests look at."""

    store: SessionStore
    session_id: str
    fork_id: str
    seqs: dict[str, int]
    summary_seq: int
    shadowed: tuple[int, ...]


def build_scene(store: SessionStore) -> Scene:
    """A session with a tool turn, a compaction summary shadowing it, hostile text in its
    data, title, labels and user id, and a fork; and a session whose id is hostile."""
    session = store.create_session(
        "inspected-1",
        user_id=ATTRIBUTE.strip(),
        title=SCRIPT,
        labels={"link": URL, "tag": IMAGE},
    )
    seqs = tool_turn(session, 1)
    begin_turn(session, 2)
    seqs["hostile"] = say(session, HOSTILE_TEXT)
    begin_step(session, 2, 1)
    echo = assistant_data(
        assistant_message(f"echo {SCRIPT}", id="a-echo"),
        turn=2,
        step=1,
        usage={"inputTokens": 1200, "outputTokens": 80},
    )
    seqs["hostile_reply"] = session.append("assistant/message", echo, surface_op="append").seq
    end_turn(session, 2)
    shadowed = (seqs["user"], seqs["reply"], seqs["tool/result"], seqs["final"])
    summary = say(
        session,
        "summary of turn 1",
        surface_op=Replace(seqs["user"], seqs["final"]),
        sources=list(shadowed),
    )
    fork = store.fork_session(session.id, boundary=seqs["turn/end"] + 1)
    fork_id = fork.id
    hostile = store.create_session(HOSTILE_ID, title=ATTRIBUTE)
    say(hostile, URL)
    return Scene(store, session.id, fork_id, seqs, summary, shadowed)


@pytest.fixture
def scene(backend) -> Iterator[Scene]:
    store = open_store(backend.url, schema=backend.schema)
    try:
        yield build_scene(store)
    finally:
        store.close()


@pytest.fixture
def client(scene: Scene) -> Iterator[Any]:
    from starlette.testclient import TestClient

    with TestClient(create_app(scene.store), base_url="http://127.0.0.1") as test_client:
        yield test_client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    """The inspector running in uvicorn on a thread of the test process."""

    url: str
    server: Any
    thread: threading.Thread


def serve_in_thread(app: Any) -> Served:
    import uvicorn

    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="inspector", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return Served(f"http://127.0.0.1:{port}", server, thread)


def stop_serving(served: Served) -> None:
    served.server.config.app.stopping.set()  # as serve's exit handler does
    served.server.should_exit = True
    served.thread.join(timeout=30)


@pytest.fixture
def served(scene: Scene) -> Iterator[Served]:
    running = serve_in_thread(create_app(scene.store, follow_wait=0.5))
    try:
        yield running
    finally:
        stop_serving(running)


def turn_items(turn: int, usage: tuple[int, int]) -> list[dict[str, Any]]:
    """One plain turn as ``append_many`` items: a question, a step, an answer with usage."""
    answer = assistant_message(f"answer {turn}: totals round half-even", id=f"a{turn}")
    return [
        {"type": "turn/start", "data": {"turn": turn}},
        {
            "type": "user/message",
            "data": user_message(f"question {turn} about rounding", id=f"u{turn}"),
            "surface_op": "append",
        },
        {"type": "step/start", "data": {"turn": turn, "step": 1}},
        {
            "type": "assistant/message",
            "data": assistant_data(
                answer,
                turn=turn,
                step=1,
                usage={"inputTokens": usage[0], "outputTokens": usage[1]},
            ),
            "surface_op": "append",
        },
        {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}},
    ]


def append_turns(session: Session, count: int, *, batch: int = 5000) -> None:
    """``count`` plain turns (5 events, 2 surface nodes each), appended in batches: an
    18,000-turn session takes seconds. Turn n uses 10,000 + n % 600 input tokens and
    500 + n % 70 output tokens."""
    items: list[dict[str, Any]] = []
    for turn in range(1, count + 1):
        items += turn_items(turn, (10_000 + turn % 600, 500 + turn % 70))
        if len(items) >= batch:
            session.append_many(items)
            items = []
    if items:
        session.append_many(items)
