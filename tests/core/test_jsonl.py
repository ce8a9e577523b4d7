"""SPEC §1.4: JSONL interchange."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from session_sql import (
    CorruptSessionError,
    Session,
    SessionEvent,
    SessionFormatUnsupportedError,
    fold_surface,
)
from session_sql.errors import TornTailWarning
from session_sql.jsonl import JsonlReader, jsonl_file_name, read_jsonl, write_jsonl
from session_sql.jsonvalue import json_equal

from .builders import new_session, summarize, tool_turn


def a_session() -> Session:
    session = new_session("jsonl")
    tool_turn(session, 1)
    session.append(
        "todo/write",
        {"int": 2**53 - 1, "float": 1.0, "big": 1e16, "tiny": 5e-324, "text": "é😀\u2028"},
    )
    tool_turn(session, 2)
    summarize(session, 2, 5, [2, 5])
    session.append("vendor/x", {"kept": True}, surface_op="append", ignorable=True)
    return session


def write(path: Path, session: Session) -> Path:
    write_jsonl(path, session.header, session.events)
    return path


def test_export_then_import_is_lossless(tmp_path: Path) -> None:
    session = a_session()
    header, events = read_jsonl(write(tmp_path / "s.jsonl", session))
    assert header == session.header
    assert events == list(session.events)
    for read, original in zip(events, session.events, strict=True):
        assert json_equal(read.to_json(), original.to_json())  # 1.0 stays a float, 1 an int
    assert type(events[13].data["float"]) is float
    assert type(events[13].data["big"]) is float
    assert type(events[13].data["int"]) is int


def test_import_stores_the_events_exactly_without_a_marker(tmp_path: Path) -> None:
    session = a_session()
    _, events = read_jsonl(write(tmp_path / "s.jsonl", session))
    assert len(events) == session.seq
    assert events[-1].type == "vendor/x"
    assert events[-1].ignorable is True


def test_an_imported_log_replays_to_the_same_session(tmp_path: Path) -> None:
    session = a_session()
    header, events = read_jsonl(write(tmp_path / "s.jsonl", session))
    replayed = Session(seed=events, header=header)
    assert replayed.messages() == session.messages()
    assert replayed.surface.nodes == session.surface.nodes == fold_surface(events).nodes


def test_the_file_layout(tmp_path: Path) -> None:
    session = a_session()
    raw = write(tmp_path / "s.jsonl", session).read_bytes()
    text = raw.decode("utf-8")
    assert text.endswith("\n")
    lines = text.split("\n")[:-1]
    assert len(lines) == 1 + session.seq
    assert json.loads(lines[0]) == session.header
    assert [json.loads(line) for line in lines[1:]] == [e.to_json() for e in session.events]
    assert "é😀" in text  # UTF-8, not \u escapes
    assert "null" not in lines[1]  # absent optional keys are omitted, never null
    assert "\r" not in text


def test_write_accepts_a_text_stream_and_wire_dicts(tmp_path: Path) -> None:
    session = a_session()
    stream = io.StringIO()
    count = write_jsonl(stream, session.header, [e.to_json() for e in session.events])
    assert count == session.seq
    path = tmp_path / "s.jsonl"
    path.write_text(stream.getvalue(), encoding="utf-8")
    assert read_jsonl(path)[1] == list(session.events)


def test_an_empty_session_round_trips(tmp_path: Path) -> None:
    session = new_session("empty")
    header, events = read_jsonl(write(tmp_path / "s.jsonl", session))
    assert (header, events) == (session.header, [])


# -- torn tails and corruption -----------------------------------------------------------------


def lines_of(session: Session) -> list[str]:
    out = io.StringIO()
    write_jsonl(out, session.header, session.events)
    # Split on "\n" only: str.splitlines would also split at the U+2028 inside a value.
    return [line + "\n" for line in out.getvalue().split("\n")[:-1]]


@pytest.mark.parametrize(
    "tail",
    [
        '{"type":"todo/write","seq":',  # a writer died mid-line
        '{"type":"todo/wr',
        "{",
        "\xe9",  # not even complete UTF-8 once encoded and cut below
        "garbage",  # unparsable final line without its newline
    ],
    ids=["mid-object", "mid-string", "brace", "cut-utf8", "garbage"],
)
def test_a_torn_final_line_is_dropped_with_a_warning(tmp_path: Path, tail: str) -> None:
    session = a_session()
    path = tmp_path / "s.jsonl"
    data = "".join(lines_of(session)).encode() + tail.encode()
    if tail == "\xe9":
        data = data[:-1]  # half of a two-byte character
    path.write_bytes(data)
    with pytest.warns(TornTailWarning, match=f"line {session.seq + 2}"):
        header, events = read_jsonl(path)
    assert header == session.header
    assert events == list(session.events)


def test_a_complete_final_line_without_newline_is_kept(tmp_path: Path) -> None:
    session = a_session()
    path = tmp_path / "s.jsonl"
    path.write_text("".join(lines_of(session)).rstrip("\n"), encoding="utf-8")
    assert read_jsonl(path)[1] == list(session.events)


def test_the_reader_reports_a_dropped_tail(tmp_path: Path) -> None:
    session = a_session()
    path = tmp_path / "s.jsonl"
    path.write_text("".join(lines_of(session)) + '{"ty', encoding="utf-8")
    reader = JsonlReader(path)
    with pytest.warns(TornTailWarning):
        assert len(list(reader.events())) == session.seq
    assert reader.dropped_tail is True


@pytest.mark.parametrize("bad", ["garbage\n", '{"type":\n', "[1, 2\n", "{\xe9\n"])
def test_a_complete_bad_last_line_is_corruption_not_a_torn_tail(tmp_path: Path, bad: str) -> None:
    lines = lines_of(a_session())
    path = tmp_path / "s.jsonl"
    path.write_text("".join([*lines, bad]), encoding="utf-8")
    with pytest.raises(CorruptSessionError, match=f"line {len(lines) + 1}") as info:
        read_jsonl(path)
    assert info.value.line == len(lines) + 1


def test_blank_lines_are_skipped_anywhere(tmp_path: Path) -> None:
    session = a_session()
    lines = lines_of(session)
    lines.insert(3, "\n")
    lines.insert(6, "  \r\n")
    path = tmp_path / "s.jsonl"
    for tail in ("\n", "\n\n", "  "):
        path.write_text("".join(lines) + tail, encoding="utf-8")
        assert read_jsonl(path) == (session.header, list(session.events))


@pytest.mark.parametrize("bad", ["garbage\n", '{"type":\n', "[1, 2\n"])
def test_a_bad_line_followed_by_a_valid_line_is_corruption(tmp_path: Path, bad: str) -> None:
    lines = lines_of(a_session())
    lines.insert(5, bad)  # file line 6
    path = tmp_path / "s.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(CorruptSessionError, match="line 6") as info:
        read_jsonl(path)
    assert info.value.line == 6


def test_a_valid_json_line_that_is_no_event_is_corruption_even_last(tmp_path: Path) -> None:
    lines = lines_of(a_session())
    for position in (3, len(lines)):
        broken = [*lines]
        broken.insert(position, '{"type": "todo/write"}\n')
        path = tmp_path / f"s{position}.jsonl"
        path.write_text("".join(broken), encoding="utf-8")
        with pytest.raises(CorruptSessionError) as info:
            read_jsonl(path)
        assert info.value.line == position + 1


@pytest.mark.parametrize(
    "first_line",
    ["", "not json\n", "[1]\n", '{"version": 0, "id": "x"'],
    ids=["empty-file", "garbage", "not-an-object", "torn-header"],
)
def test_an_unreadable_header_is_corruption_on_line_1(tmp_path: Path, first_line: str) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(first_line, encoding="utf-8")
    with pytest.raises(CorruptSessionError) as info:
        read_jsonl(path)
    assert info.value.line == 1


def test_a_header_of_another_version_is_unsupported(tmp_path: Path) -> None:
    session = a_session()
    lines = lines_of(session)
    header: dict[str, Any] = json.loads(lines[0])
    header["version"] = 1
    lines[0] = json.dumps(header) + "\n"
    path = tmp_path / "s.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(SessionFormatUnsupportedError, match="newer"):
        read_jsonl(path)


def test_events_read_are_frozen(tmp_path: Path) -> None:
    _, events = read_jsonl(write(tmp_path / "s.jsonl", a_session()))
    assert all(isinstance(e, SessionEvent) for e in events)
    with pytest.raises(TypeError):
        events[2].data["id"] = "x"


# -- file names for exports ------------------------------------------------------------------

HOSTILE_IDS = ["a/b", "..", "../x", ".hidden", ".", "a\\b", "☃ snow", "Ab", "ab", "%2F", "/"]


def test_a_file_name_is_safe_and_gives_the_id_back(tmp_path: Path) -> None:
    names = {}
    for session_id in [*HOSTILE_IDS, "3f2a9c", "x" * 128]:
        name = jsonl_file_name(session_id)
        assert name.endswith(".jsonl") and not name.startswith(".")
        assert "/" not in name and "\\" not in name
        assert unquote(name.removesuffix(".jsonl")) == session_id
        assert (tmp_path / name).resolve().parent == tmp_path.resolve()
        (tmp_path / name).write_text(session_id, encoding="utf-8")
        names[name.casefold()] = session_id
    assert len(names) == len(HOSTILE_IDS) + 2  # distinct even on a case-insensitive disk
    assert jsonl_file_name("3f2a9c") == "3f2a9c.jsonl"  # generated ids are kept as they are


def test_a_file_name_too_long_for_a_disk_is_cut_and_made_unique(tmp_path: Path) -> None:
    long_ids = ["☃" * 128, "☃" * 127 + "x"]
    names = [jsonl_file_name(i) for i in long_ids]
    assert len(set(names)) == 2
    for name in names:
        assert len(name.encode()) <= 255 and "~" in name
        (tmp_path / name).write_text("ok", encoding="utf-8")


def test_a_fifo_target_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    """Renaming over a FIFO or a device (``/dev/null``) would replace it with a regular file."""
    import os
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    session = new_session()
    tool_turn(session)
    count = write_jsonl(fifo, session.header, session.events)
    reader.join(timeout=10)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert count == len(session.events)
    assert received and received[0].count("\n") == count + 1
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]  # no temporary file left


def test_import_session_sql_loads_neither_sqlalchemy_nor_psycopg() -> None:
    import subprocess
    import sys

    probe = (
        "import sys, session_sql\n"
        "s = session_sql.Session()\n"
        "print(sorted(m for m in ('sqlalchemy', 'psycopg', 'pydantic') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
