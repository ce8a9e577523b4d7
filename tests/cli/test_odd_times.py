"""Times the store accepts that no calendar date holds (any safe integer of epoch ms: an
event's ``time`` is the writer's clock), written by every path that takes them: seeds,
appends and batches, a header's ``createdAt``, an import's ``updatedAt``. Every reader
renders them as their milliseconds; no listing fails on one row. Both backends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from session_sql import open_store

FAR = 2**53 - 1  # the largest safe integer: year 285,428 or so
ODD_TIMES = (FAR, -FAR, 10**15, -1)


def odd_store(url: str, schema: str, tmp_path: Path) -> None:
    """A store holding odd times on every write path, and one plain session."""
    with open_store(url, schema=schema) as store:
        seed = [
            {"type": "todo/write", "seq": i, "time": t, "data": {"i": i}}
            for i, t in enumerate(ODD_TIMES)
        ]
        store.create_session("far", seed=seed)
        header = {"version": 0, "id": "created-far", "createdAt": FAR, "isSeeded": False}
        store.create_session("created-far", header=header)
        store.create_session("plain").append("todo/write", {"i": 0})
        lines = [
            {
                "version": 0,
                "id": "imported",
                "createdAt": 10**15,
                "isSeeded": False,
                "x-session-sql": {"tenant": "", "labels": {}, "updatedAt": FAR},
            },
            {"type": "todo/write", "seq": 0, "time": -FAR, "data": {}},
        ]
        path = tmp_path / "imported.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        store.import_jsonl(path)
    # The store's clock is the writer's: an append takes its time from it.
    with open_store(url, schema=schema, clock=lambda: -FAR) as store:
        far = store.open_session("far")
        far.append("todo/write", {"i": "appended"})
        far.append_many([{"type": "todo/write", "data": {"i": "batched"}}])


@pytest.fixture
def odd(cli: Any, tmp_path: Path) -> Any:
    odd_store(cli.url, cli.schema, tmp_path)
    return cli


def test_ls_lists_every_session_whatever_its_times(odd):
    for args in (("ls",), ("ls", "--sort", "created"), ("ls", "--reverse")):
        out = odd(*args)
        assert out.code == 0, out.stderr
        for sid in ("far", "created-far", "plain", "imported"):
            assert sid in out.stdout
        assert f"{FAR} ms" in out.stdout
    listed = json.loads(odd("ls", "--json").stdout)
    assert {s["id"]: s["created_at"] for s in listed}["created-far"] == FAR


def test_tail_show_and_view_render_odd_times(odd, tmp_path):
    tail = odd("tail", "far", "-n", "10")
    assert tail.code == 0, tail.stderr
    for t in (FAR, -FAR, 10**15):
        assert f"{t} ms" in tail.stdout
    assert "1969-12-31 23:59:59" in tail.stdout  # -1: a date before the epoch
    shown = odd("show", "far", "--events")
    assert shown.code == 0, shown.stderr
    page = tmp_path / "far.html"
    viewed = odd("view", "far", "-o", str(page))
    assert viewed.code == 0, viewed.stderr
    assert f"{FAR} ms" in page.read_text()
    assert odd("tail", "imported").code == 0
