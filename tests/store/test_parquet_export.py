"""``export_parquet``: files per table with the public id and tenant, OpenTelemetry GenAI
column names, atomic files, and a cursor that feeds a lake without gaps or duplicates."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from session_sql import InvalidArgumentError, open_store
from tests.builders import assistant_data, assistant_message

from .store_builders import say, tool_turn

pq = pytest.importorskip("pyarrow.parquet")

SYNC_ONLY = {
    "test_exports_while_writers_append_hold_every_event_once": (
        "its writer threads append through the sync store while the export reads"
    ),
}

TABLES = ("sessions", "events", "messages", "tool_calls", "turns")


def read(paths: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        rows += pq.read_table(path).to_pylist()
    return rows


def exported(directory: Path, table: str) -> list[dict[str, Any]]:
    return read(sorted(str(p) for p in (directory / table).glob("*.parquet")))


def test_one_file_per_table_with_the_public_id_and_tenant_on_every_row(store, tmp_path):
    handle = store.create_session("s1")
    tool_turn(handle)
    store.create_session("s2")
    result = store.export_parquet(tmp_path)
    assert sorted(result.files) == sorted(TABLES)
    for table in TABLES:
        path = Path(result.files[table])
        assert path.parent == tmp_path / table and path.suffix == ".parquet"
        rows = read([str(path)])
        assert len(rows) == result.rows[table]
        assert all(r["tenant"] == store.tenant for r in rows), table
        assert all(r["gen_ai.conversation.id"] in {"s1", "s2"} for r in rows), table
    events = read([result.files["events"]])
    assert [(e["gen_ai.conversation.id"], e["seq"]) for e in events] == [
        ("s1", e.seq) for e in store.events("s1")
    ]
    assert {r["gen_ai.conversation.id"] for r in read([result.files["sessions"]])} == {"s1", "s2"}
    replies = [m for m in read([result.files["messages"]]) if m["type"] == "assistant/message"]
    assert replies and all(m["gen_ai.request.model"] == "mod" for m in replies)
    [call] = read([result.files["tool_calls"]])
    assert (call["gen_ai.tool.name"], call["gen_ai.tool.call.id"]) == ("shell", "c1")
    assert call["result_seq"] is not None and call["is_error"] is False
    [turn] = read([result.files["turns"]])
    assert turn["turn"] == 1 and turn["end_seq"] is not None


def test_token_counts_are_the_written_integers_or_empty(store, tmp_path):
    handle = store.create_session("s1")
    say(handle, "hi")
    for text, usage in (
        ("a", {"inputTokens": 12, "outputTokens": 3}),
        ("b", {"inputTokens": 1.5, "outputTokens": "3"}),
    ):
        data = assistant_data(assistant_message(text, id=text), usage=usage)
        handle.append("assistant/message", data, surface_op="append")
    result = store.export_parquet(tmp_path)
    replies = [m for m in read([result.files["messages"]]) if m["type"] == "assistant/message"]
    tokens = [(m["gen_ai.usage.input_tokens"], m["gen_ai.usage.output_tokens"]) for m in replies]
    assert tokens == [(12, 3), (None, None)]
    assert [m["text"] for m in replies] == ["a", "b"]


def test_an_export_since_a_cursor_holds_only_what_came_after(store, tmp_path):
    first = store.create_session("s1")
    say(first, "one")
    done = store.export_parquet(tmp_path)
    say(first, "two")
    second = store.create_session("s2")
    say(second, "three")
    more = store.export_parquet(tmp_path, since=done.cursor)
    assert more.files["events"] != done.files["events"]
    events = read([more.files["events"]])
    assert [(e["gen_ai.conversation.id"], e["seq"]) for e in events] == [
        ("s1", 1),
        ("s2", 0),
    ]
    # Only new or appended sessions get a row; an export with nothing new writes empty files.
    assert sorted(r["gen_ai.conversation.id"] for r in read([more.files["sessions"]])) == [
        "s1",
        "s2",
    ]
    idle = store.export_parquet(tmp_path, since=more.cursor)
    assert all(count == 0 for count in idle.rows.values())
    assert all(pq.read_table(path).num_rows == 0 for path in idle.files.values())


def test_a_recreated_session_is_exported_again_whole(store, tmp_path):
    say(store.create_session("s1"), "old")
    done = store.export_parquet(tmp_path)
    store.delete_session("s1")
    handle = store.create_session("s1")
    say(handle, "new")
    say(handle, "newer")
    events = read([store.export_parquet(tmp_path, since=done.cursor).files["events"]])
    assert [e["seq"] for e in events] == [0, 1]


def test_a_bad_cursor_is_refused_and_writes_nothing(store, tmp_path):
    store.create_session("s1")
    for bad in ("", "nonsense", "pq1.!!!", "pq1." + "A" * 40):
        with pytest.raises(InvalidArgumentError, match="cursor"):
            store.export_parquet(tmp_path / "lake", since=bad)
    assert not (tmp_path / "lake").exists()


def test_a_cursor_of_another_tenant_is_refused(backend, tmp_path):
    with (
        open_store(backend.url, schema=backend.schema, tenant="a") as a,
        open_store(backend.url, schema=backend.schema, tenant="b") as b,
    ):
        cursor = a.export_parquet(tmp_path / "a").cursor
        with pytest.raises(InvalidArgumentError, match="tenant"):
            b.export_parquet(tmp_path / "b", since=cursor)


def test_an_export_sees_only_its_tenant(backend, tmp_path):
    with (
        open_store(backend.url, schema=backend.schema, tenant="a") as a,
        open_store(backend.url, schema=backend.schema, tenant="b") as b,
    ):
        say(a.create_session("same"), "for a")
        say(b.create_session("same"), "for b")
        say(b.create_session("other"), "for b")
        rows = read([a.export_parquet(tmp_path).files["events"]])
    assert {(r["tenant"], r["gen_ai.conversation.id"]) for r in rows} == {("a", "same")}


def test_exports_while_writers_append_hold_every_event_once(store, backend, tmp_path):
    ids = [f"w{i}" for i in range(4)]
    for sid in ids:
        store.create_session(sid)
    stop = threading.Event()
    errors: list[BaseException] = []

    def write(sid: str) -> None:
        try:
            with open_store(backend.url, schema=backend.schema, tenant=store.tenant) as own:
                handle = own.open_session(sid)
                n = 0
                while not stop.is_set() or n < 30:
                    say(handle, f"m{n}")
                    n += 1
                # A session created while exports run is picked up whole.
                say(own.create_session(f"late-{sid}"), "late")
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(sid,)) for sid in ids]
    for thread in writers:
        thread.start()
    cursor = None
    files: list[str] = []
    busy = 0  # exports that found new events: they ran while the writers appended
    try:
        for _ in range(500):
            result = store.export_parquet(tmp_path, since=cursor)
            cursor = result.cursor
            files.append(result.files["events"])
            busy += result.rows["events"] > 0
            if busy >= 5:
                break
    finally:
        stop.set()
        for thread in writers:
            thread.join()
    assert not errors and busy >= 5
    files.append(store.export_parquet(tmp_path, since=cursor).files["events"])
    seen = [(r["gen_ai.conversation.id"], r["seq"]) for r in read(files)]
    assert len(seen) == len(set(seen))
    everything = {(info.id, e.seq) for info in store.iter_sessions() for e in store.events(info.id)}
    assert set(seen) == everything
    assert {sid for sid, _ in seen} == {*ids, *(f"late-{s}" for s in ids)}


KILLER = """
import os, signal, sys
from session_sql import open_store
from session_sql._store import parquet

def killed(self):
    os.kill(os.getpid(), signal.SIGKILL)

parquet.BATCH_ROWS = 5
setattr(parquet._TableFile, sys.argv[3], killed)
with open_store(sys.argv[1], schema=sys.argv[2]) as store:
    store.export_parquet(sys.argv[4])
"""


@pytest.mark.parametrize("where", ["flush", "publish"])
def test_a_killed_export_leaves_no_file_a_reader_would_take(backend, tmp_path, where):
    with open_store(backend.url, schema=backend.schema) as store:
        handle = store.create_session("s1")
        for n in range(20):
            say(handle, f"m{n}")
        out = tmp_path / "lake"
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        child = subprocess.run(
            [sys.executable, "-c", KILLER, backend.url, backend.schema, where, str(out)],
            env=env,
            capture_output=True,
            check=False,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr
        assert list(out.glob("*/*.parquet")) == []  # a temporary file is hidden, not *.parquet
        # Run again, the export is whole; the leftovers are never taken for data.
        result = store.export_parquet(out)
        assert [len(list((out / t).glob("*.parquet"))) for t in TABLES] == [1] * len(TABLES)
        assert result.rows["events"] == 20
        assert len(exported(out, "events")) == 20


def test_the_async_export_never_writes_on_the_event_loop(backend, tmp_path, monkeypatch):
    """SPEC §11.3: no call blocks the loop on I/O. PostgreSQL's async store reads on the
    loop; the files' row groups, fsyncs and renames go to a worker thread."""
    import asyncio

    from session_sql import open_async_store

    threads: list[int] = []
    write_batch = pq.ParquetWriter.write_batch
    fsync = os.fsync

    def recorded_write(self: Any, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return write_batch(self, *args, **kwargs)

    def recorded_fsync(fd: int) -> None:
        threads.append(threading.get_ident())
        fsync(fd)

    monkeypatch.setattr(pq.ParquetWriter, "write_batch", recorded_write)
    monkeypatch.setattr(os, "fsync", recorded_fsync)

    async def main() -> Any:
        async with open_async_store(backend.url, schema=backend.schema) as store:
            handle = await store.create_session("s1")
            await handle.append("todo/write", {"n": 1})
            threads.clear()  # only the export's
            loop_thread = threading.get_ident()
            return loop_thread, await store.export_parquet(tmp_path)

    loop_thread, result = asyncio.run(main())
    assert result.rows["events"] == 1
    assert threads and loop_thread not in threads
