"""A cut export is refused, never imported as a shorter session: an export states its number
of events in its header (``x-session-sql-events``), and an import of a file holding fewer is
``CorruptSessionError`` that writes nothing — cut at a line boundary or inside a line."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from session_sql import CorruptSessionError, InvalidHeaderError
from session_sql.errors import TornTailWarning
from session_sql.jsonl import JsonlReader

from .store_builders import exported, refused, wires

EVENTS_KEY = "x-session-sql-events"


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "cut.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_an_export_states_its_number_of_events(store, tmp_path):
    lines = exported(store, tmp_path)
    assert json.loads(lines[0])[EVENTS_KEY] == len(lines) - 1
    with JsonlReader(tmp_path / "s1.jsonl") as reader:  # a count of lines, not a header key
        assert reader.declared_events == len(lines) - 1 and EVENTS_KEY not in reader.header


@pytest.mark.parametrize("keep", [0, 1, -1])
def test_an_export_cut_at_a_line_boundary_is_refused(store, tmp_path, keep):
    lines = exported(store, tmp_path)
    path = write(tmp_path, lines[: keep + 1 if keep >= 0 else keep])
    with refused(store, CorruptSessionError, match="truncated") as info:
        store.import_jsonl(path)
    assert f"says {len(lines) - 1} events follow" in str(info.value)
    assert info.value.session_id == "s1"


@pytest.mark.parametrize("cut", [1, 10, -2])
def test_an_export_cut_inside_a_line_is_refused_not_shortened(store, tmp_path, cut):
    text = "".join(exported(store, tmp_path))
    middle = text.rindex("\n", 0, len(text) - 1) + 1 + (cut if cut > 0 else 0)
    path = write(tmp_path, [text[: middle if cut > 0 else len(text) + cut]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", TornTailWarning)  # refused, not dropped with a warning
        with refused(store, CorruptSessionError, match="truncated.*torn") as info:
            store.import_jsonl(path)
    assert info.value.line == text.count("\n")


def test_a_file_holding_more_events_than_it_states_imports_whole(store, tmp_path):
    """A build that does not know the key keeps it in the stored header: its later export of
    the grown session carries the old count (a log only grows, so a count is never too high)."""
    lines = exported(store, tmp_path)
    header = json.loads(lines[0])
    header[EVENTS_KEY] = 2
    path = write(tmp_path, [json.dumps(header) + "\n", *lines[1:]])
    assert store.import_jsonl(path) == "s1"
    assert wires(store.events("s1")) == [json.loads(line) for line in lines[1:]]
    assert EVENTS_KEY not in store.load_session("s1").header


@pytest.mark.parametrize("count", [-1, 1.5, "3", True, None])
def test_a_count_that_is_not_a_count_is_refused(store, tmp_path, count):
    lines = exported(store, tmp_path)
    header = json.loads(lines[0])
    header[EVENTS_KEY] = count
    path = write(tmp_path, [json.dumps(header) + "\n", *lines[1:]])
    if count is None:  # JSON null: no count stated
        assert store.import_jsonl(path) == "s1"
        return
    with refused(store, InvalidHeaderError, match=EVENTS_KEY):
        store.import_jsonl(path)
