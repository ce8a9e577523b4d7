"""JSONL interchange through the store: export → import is lossless (SPEC §1.4, §8.5)."""

from __future__ import annotations

import gc
import io
import json
import re
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete

from session_sql import (
    CorruptSessionError,
    InvalidArgumentError,
    InvalidEventError,
    Replace,
    SessionExistsError,
    SessionFormatUnsupportedError,
    SessionNotFoundError,
    SessionStore,
)
from session_sql._store import reader
from session_sql.errors import TornTailWarning

from .store_builders import (
    answer,
    dump_tables,
    execute,
    exported,
    key_of,
    refused,
    say,
    session_row,
    summarize,
    surface_table,
    tables,
    tool_turn,
    tool_turn_log,
    user_message,
    wire,
    wires,
)

SYNC_ONLY = {
    "test_an_export_is_one_snapshot_while_the_session_is_deleted": (
        "deletes through the store from inside the export's read, which runs on the event loop"
    ),
}


def rich_session(store: SessionStore, session_id: str = "s1") -> None:
    """A session with replaces, a pruned tool result, an unknown ignorable event and floats."""
    handle = store.create_session(session_id)
    seqs = tool_turn(handle)
    result = seqs["tool/result"]
    answer(handle, "c1", "[pruned]", surface_op=Replace(result, result), sources=[result])
    a = say(handle, "a")
    b = say(handle, "b")
    summarize(handle, a, b, sources=[a, b])
    handle.append("x/from-a-plugin", {"f": 1e16, "one": 1.0}, ignorable=True)
    handle.append("todo/write", {"items": [{"text": "naïve ☃ 🎉", "big": 2**53 - 1}]})


def same_session(a: SessionStore, b: SessionStore, session_id: str) -> None:
    assert wires(a.events(session_id)) == wires(b.events(session_id))
    assert a.surface(session_id) == b.surface(session_id)
    assert a.messages(session_id) == b.messages(session_id)
    assert a.load_session(session_id).header == b.load_session(session_id).header
    assert surface_table(a, session_id) == surface_table(b, session_id)
    row_a, row_b = session_row(a, session_id), session_row(b, session_id)
    for column in ("head_seq", "surface_next_pos", "replace_generation", "inherited_event_count"):
        assert getattr(row_a, column) == getattr(row_b, column), column
    assert b.verify(session_id).ok


def test_export_then_import_is_lossless(store, other_store, tmp_path, tenant):
    rich_session(store)
    path = tmp_path / "s1.jsonl"
    count = store.export_jsonl("s1", path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert count == len(lines) - 1 == store.open_session("s1").seq
    assert json.loads(lines[0])["id"] == "s1"
    assert other_store.import_jsonl(path) == "s1"
    same_session(store, other_store, "s1")
    again = tmp_path / "again.jsonl"
    other_store.export_jsonl("s1", again)
    # Byte for byte, but for the tenant the header records: other_store is the default one's.
    recorded = f'"x-session-sql":{{"tenant":{json.dumps(tenant)},'
    assert recorded in lines[0]
    original = path.read_bytes().replace(recorded.encode(), b'"x-session-sql":{"tenant":"",', 1)
    assert again.read_bytes() == original


def test_a_fork_round_trips_with_its_inherited_prefix(store, other_store, tmp_path):
    store.create_session("p", seed=tool_turn_log())
    store.fork_session("p", boundary=6, child_id="c")  # inside the open step: closers
    store.export_jsonl("c", tmp_path / "c.jsonl")
    other_store.import_jsonl(tmp_path / "c.jsonl")
    same_session(store, other_store, "c")
    assert session_row(other_store, "c").parent_session == "p"
    assert other_store.load_session("c").inherited_event_count == 7


def test_a_fork_with_live_events_round_trips_its_inherited_prefix(store, other_store, tmp_path):
    store.create_session("p", seed=tool_turn_log())
    child = store.fork_session("p", child_id="c")
    cut = child.inherited_event_count
    say(child, "live")
    with refused(store, InvalidEventError, child, match="inherited-marker rule"):
        child.append("session/end-seed", {"inherited": True})
    child.append("session/end-seed", {})
    grandchild = store.fork_session("c", child_id="g")
    say(grandchild, "deeper")
    for session_id in ("c", "g"):
        store.export_jsonl(session_id, tmp_path / f"{session_id}.jsonl")
        other_store.import_jsonl(tmp_path / f"{session_id}.jsonl")
        same_session(store, other_store, session_id)
    assert session_row(other_store, "c").inherited_event_count == cut
    assert session_row(other_store, "g").inherited_event_count == grandchild.inherited_event_count


def test_an_inherited_marker_in_an_unseeded_file_is_corruption(store, tmp_path):
    header = {"version": 0, "id": "s", "createdAt": 5, "isSeeded": False}
    events = [*tool_turn_log(), wire("session/end-seed", 13, {"inherited": True})]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in [header, *events]), encoding="utf-8")
    with refused(store, CorruptSessionError, match="line 15: .*inherited-marker rule") as info:
        store.import_jsonl(path)
    assert info.value.line == 15


def test_import_adds_no_marker(store, tmp_path):
    path = tmp_path / "s.jsonl"
    header = {"version": 0, "id": "s", "createdAt": 5, "isSeeded": False}
    events = tool_turn_log()
    path.write_text("".join(json.dumps(x) + "\n" for x in [header, *events]), encoding="utf-8")
    store.import_jsonl(path)
    assert wires(store.events("s")) == events
    assert store.verify("s").ok
    assert store.open_session("s", resume=True).events[-1].type == "session/end-seed"


def test_export_to_a_text_stream(store):
    rich_session(store)
    out = io.StringIO()
    assert store.export_jsonl("s1", out) == store.open_session("s1").seq
    header, *events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert header["id"] == "s1"
    assert events == json.loads(json.dumps(wires(store.events("s1"))))


@pytest.mark.parametrize("kind", ["half-a-line", "missing-brace", "garbage-line"])
def test_a_torn_tail_is_dropped_with_a_warning(store, tmp_path, kind):
    """A file that does not state its length (a log a writer was appending to, not an
    export, which does: tests/store/test_store_jsonl_truncated.py)."""
    lines = exported(store, tmp_path)
    header = json.loads(lines[0])
    del header["x-session-sql-events"]
    lines[0] = json.dumps(header) + "\n"
    last = lines[-1]
    lines[-1] = {
        "half-a-line": last[: len(last) // 2],
        "missing-brace": last[:-2],
        "garbage-line": "{not json",
    }[kind]
    path = tmp_path / "torn.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.warns(TornTailWarning, match=f"line {len(lines)}"):
        assert store.import_jsonl(path) == "s1"
    assert wires(store.events("s1")) == [json.loads(line) for line in lines[1:-1]]
    assert store.verify("s1").ok


@pytest.mark.parametrize("bad", ["{not json\n", '{"type":\n', "[1, 2\n"])
def test_a_complete_bad_last_line_is_corruption_not_a_torn_tail(store, tmp_path, bad):
    lines = [*exported(store, tmp_path), bad]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    with refused(store, CorruptSessionError, match=f"line {len(lines)}") as info:
        store.import_jsonl(path)
    assert info.value.line == len(lines)


def test_blank_lines_are_skipped_on_import(store, tmp_path):
    lines = exported(store, tmp_path)
    events = [json.loads(line) for line in lines[1:]]
    padded = [*lines[:3], "\n", *lines[3:6], " \r\n", *lines[6:], "\n", "\n"]
    path = tmp_path / "blank.jsonl"
    path.write_text("".join(padded), encoding="utf-8")
    assert store.import_jsonl(path) == "s1"
    assert wires(store.events("s1")) == events
    assert store.verify("s1").ok


def test_a_bad_middle_line_is_corruption_naming_the_line(store, tmp_path):
    lines = exported(store, tmp_path)
    lines[5] = lines[5][:20] + "\n"
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    with refused(store, CorruptSessionError, match="line 6") as info:
        store.import_jsonl(path)
    assert info.value.line == 6


def test_an_invalid_event_line_is_corruption_naming_the_line(store, tmp_path):
    lines = exported(store, tmp_path)
    event = json.loads(lines[3])
    event["seq"] = 99
    lines[3] = json.dumps(event) + "\n"
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    with refused(store, CorruptSessionError, match="line 4") as info:
        store.import_jsonl(path)
    assert info.value.line == 4


def test_import_refusals(store, tmp_path):
    lines = exported(store, tmp_path)
    path = tmp_path / "s1.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    store.import_jsonl(path)
    with refused(store, SessionExistsError):
        store.import_jsonl(path)
    unknown = json.loads(lines[-1])
    unknown.update(type="x/unknown", seq=len(lines) - 1, data={})
    header = json.loads(lines[0])
    header["id"] = "s2"
    lines[0] = json.dumps(header) + "\n"
    path.write_text("".join([*lines, json.dumps(unknown) + "\n"]), encoding="utf-8")
    before = dump_tables(store)
    with pytest.raises(SessionFormatUnsupportedError, match="x/unknown"):
        store.import_jsonl(path)
    assert dump_tables(store) == before
    header["version"] = 1
    path.write_text(json.dumps(header) + "\n", encoding="utf-8")
    with refused(store, SessionFormatUnsupportedError, match="newer"):
        store.import_jsonl(path)


# -- exports under concurrency ----------------------------------------------------------------


def _long_session(store: SessionStore, session_id: str = "s1", events: int = 400) -> str:
    """A session of ``events`` small events; returns its export."""
    handle = store.create_session(session_id)
    handle.append_many({"type": "todo/write", "data": {"n": n}} for n in range(events))
    out = io.StringIO()
    store.export_jsonl(session_id, out)
    return out.getvalue()


def test_concurrent_exports_to_one_path_publish_a_whole_export(store, tmp_path):
    expected = _long_session(store)
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "s1.jsonl"
    errors: list[BaseException] = []

    def export(barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            store.export_jsonl("s1", target)
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    for _ in range(5):
        barrier = threading.Barrier(4)
        threads = [threading.Thread(target=export, args=(barrier,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert target.read_text(encoding="utf-8") == expected
    assert [p.name for p in folder.iterdir()] == ["s1.jsonl"]  # no temporary file left


@pytest.mark.parametrize("to", ["stream", "path"])
def test_an_export_is_one_snapshot_while_the_session_is_deleted(store, tmp_path, monkeypatch, to):
    expected = _long_session(store, events=10)
    monkeypatch.setattr(reader, "STREAM_BATCH", 3)  # several pages
    real = reader.event_from_row
    read = 0

    def delete_after_the_first_page(session_id: str, row: Any) -> Any:
        nonlocal read
        read += 1
        if read == 4:  # the first row of the second page
            store.delete_session("s1")
        return real(session_id, row)

    monkeypatch.setattr(reader, "event_from_row", delete_after_the_first_page)
    out = io.StringIO()
    path = tmp_path / "s1.jsonl"
    count = store.export_jsonl("s1", out if to == "stream" else path)
    assert read > 4 and store.list_sessions() == []  # the delete committed mid-export
    assert count == 10
    assert (out.getvalue() if to == "stream" else path.read_text(encoding="utf-8")) == expected


def test_a_failed_export_publishes_nothing(store, tmp_path):
    _long_session(store, events=10)
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "s1.jsonl"
    path.write_text("an older export\n", encoding="utf-8")
    e = tables(store).events
    # A hand edit: one event row removed underneath the store.
    execute(store, delete(e).where(e.c.session_key == key_of(store, "s1"), e.c.seq == 5))
    with pytest.raises(CorruptSessionError, match="seq 5 is missing") as info:
        store.export_jsonl("s1", path)
    assert info.value.seq == 5
    with pytest.raises(SessionNotFoundError):
        store.export_jsonl("nope", folder / "nope.jsonl")
    assert path.read_text(encoding="utf-8") == "an older export\n"
    assert [p.name for p in folder.iterdir()] == ["s1.jsonl"]


# -- imports stream in batches, in one transaction ---------------------------------------------


def _jsonl_file(path: Path, session_id: str, events: int, *, bad_line: int | None = None) -> Path:
    """A JSONL file of ``events`` events, half of them on the surface (``bad_line`` garbled)."""
    header = {"version": 0, "id": session_id, "createdAt": 5, "isSeeded": False}
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(json.dumps(header) + "\n")
        for seq in range(events):
            if seq % 2:
                event = wire("todo/write", seq, {"items": [{"text": "x" * 200, "n": seq}]})
            else:
                event = wire("user/message", seq, user_message("y" * 200), surface_op="append")
            line = json.dumps(event) + "\n"
            fh.write("{garbled\n" if seq + 2 == bad_line else line)
    return path


def test_a_prune_of_an_event_in_an_earlier_batch_round_trips(store, other_store, tmp_path):
    handle = store.create_session("s1")
    result = tool_turn(handle)["tool/result"]
    handle.append_many({"type": "todo/write", "data": {"n": n}} for n in range(2100))
    answer(handle, "c1", "[pruned]", surface_op=Replace(result, result), sources=[result])
    store.export_jsonl("s1", tmp_path / "s1.jsonl")
    other_store.import_jsonl(tmp_path / "s1.jsonl")
    same_session(store, other_store, "s1")


def test_a_bad_line_after_several_batches_leaves_nothing_written(store, tmp_path):
    store.create_session("other")
    path = _jsonl_file(tmp_path / "bad.jsonl", "big", 3500, bad_line=3400)
    with refused(store, CorruptSessionError, match="line 3400") as info:
        store.import_jsonl(path)
    assert info.value.line == 3400
    with pytest.raises(SessionNotFoundError):
        store.events("big")


def test_import_memory_does_not_grow_with_the_file(store, tmp_path):
    peaks = []
    for events in (1_000, 10_000):
        path = _jsonl_file(tmp_path / f"m{events}.jsonl", f"m{events}", events)
        gc.collect()
        tracemalloc.start()
        try:
            store.import_jsonl(path)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert len(store.surface(f"m{events}")) == events // 2
    # Held whole, ten times the events take about ten times the memory; streamed, the peak
    # is the batch plus the surface's positions (ints).
    assert peaks[1] < 3 * peaks[0], peaks


def test_import_prunes_a_tool_result_written_in_an_earlier_batch(store, tmp_path, monkeypatch):
    """The replacement rule looks the pruned result up in the import's own transaction."""
    from session_sql._store import importer

    monkeypatch.setattr(importer, "IMPORT_BATCH", 4)
    source = store.create_session("src")
    seqs = tool_turn(source)
    result = seqs["tool/result"]
    for i in range(10):  # push the result out of the pending batch
        say(source, f"filler {i}")
    answer(source, "c1", "[pruned]", surface_op=Replace(result, result), sources=[result])
    path = tmp_path / "src.jsonl"
    store.export_jsonl("src", path)
    text = path.read_text().replace('"id":"src"', '"id":"copy"', 1)
    path.write_text(text)
    assert store.import_jsonl(path) == "copy"
    assert wires(store.events("copy")) == wires(store.events("src"))
    assert store.surface("copy") == store.surface("src")
    assert store.verify("copy").ok


def test_import_reads_a_binary_file_object_and_leaves_it_open(store, other_store, tmp_path):
    rich_session(store)
    path = tmp_path / "s1.jsonl"
    store.export_jsonl("s1", path)
    with path.open("rb") as fh:
        assert other_store.import_jsonl(fh) == "s1"
        assert not fh.closed
        assert fh.read() == b""  # read to the end
    same_session(store, other_store, "s1")


def test_import_names_one_line_of_a_bad_file_object(store, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"version": 0, "id": "s9", "createdAt": 1, "isSeeded": false}\n{"type": \n',
        encoding="utf-8",
    )
    with path.open("rb") as fh, pytest.raises(CorruptSessionError) as bad:
        store.import_jsonl(fh)
    assert str(bad.value).startswith(f"{path}: line 2 is not a valid event line: ")
    assert re.findall(r"line \d+", str(bad.value)) == ["line 2"]  # one line number only
    assert "column 11" in str(bad.value)
    assert bad.value.line == 2
    with pytest.raises(SessionNotFoundError):
        store.head_seq("s9")


def test_import_refuses_a_text_file_object(store, tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"version": 0, "id": "s8", "createdAt": 1, "isSeeded": false}\n')
    with path.open(encoding="utf-8") as fh, pytest.raises(InvalidArgumentError) as refused_arg:
        store.import_jsonl(fh)  # type: ignore[arg-type]
    assert "binary mode" in str(refused_arg.value)
    assert store.list_sessions() == []
