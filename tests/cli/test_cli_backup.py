"""``export --all DIR`` and ``import DIR`` (with ``--skip-existing``), the import's byte
progress and its error lines, on both backends."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from session_sql import SessionNotFoundError, jsonl_file_name, open_store
from session_sql.cli._support import CountingReader

ERROR = "session-sql: error: "


def _exported(store, session_id: str) -> str:
    out = io.StringIO()
    store.export_jsonl(session_id, out)
    return out.getvalue()


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_export_all_into_a_new_directory_then_import_it(cli, demo, store, tmp_path):
    ids = sorted([demo.session_id, demo.fork_id])
    folder = tmp_path / "backup" / "today"  # missing, two levels deep
    out = cli("export", "--all", str(folder))
    assert out.code == 0, out.stderr
    assert _names(folder) == sorted(jsonl_file_name(i) for i in ids)
    assert out.stderr.splitlines()[-1] == f"exported 2 sessions to {folder}"
    before = {sid: _exported(store, sid) for sid in ids}

    again = cli("import", str(folder))  # everything is there already: each file fails
    assert again.code == 1
    assert len(again.error_lines) == 2
    assert all(
        line.endswith("already exists (pass --skip-existing to skip it)")
        for line in again.error_lines
    )

    for sid in ids:
        store.delete_session(sid)
    back = cli("import", str(folder), "--json")
    assert back.code == 0, back.stderr
    assert sorted(r["session_id"] for r in json.loads(back.stdout)) == ids
    assert {sid: _exported(store, sid) for sid in ids} == before


def test_export_all_with_dir_still_works_and_usage_errors(cli, demo, tmp_path):
    assert cli("export", "--all", "--dir", str(tmp_path / "a")).code == 0
    assert len(_names(tmp_path / "a")) == 2
    for args, message in [
        (["--all"], "--all needs a directory: export --all DIR"),
        (["--all", "x", "--dir", "y"], "give the directory once: export --all DIR"),
        (["--all", "x", "-o", "f"], "--all writes one file per session"),
        ([demo.session_id, "--skip-existing"], "--skip-existing needs a directory"),
    ]:
        out = cli("export", *args)
        assert out.code == 2, args
        assert out.error_lines[0].startswith(ERROR + message), args


def test_export_skip_existing_leaves_the_files_there(cli, demo, store, tmp_path):
    folder = tmp_path / "backup"
    folder.mkdir()
    kept = folder / jsonl_file_name(demo.session_id)
    kept.write_text("an earlier export\n", encoding="utf-8")

    out = cli("export", "--all", str(folder), "--skip-existing")
    assert out.code == 0, out.stderr
    assert kept.read_text(encoding="utf-8") == "an earlier export\n"
    assert (folder / jsonl_file_name(demo.fork_id)).read_text() == _exported(store, demo.fork_id)
    assert out.stderr.splitlines()[-1] == (
        f"exported 1 session to {folder} (1 skipped: their files were there)"
    )
    one = cli("export", demo.session_id[:6], "--dir", str(folder), "--skip-existing")
    assert (one.code, one.stderr) == (0, f"session-sql: skipped {demo.session_id}: {kept} exists\n")
    assert kept.read_text(encoding="utf-8") == "an earlier export\n"

    overwrite = cli("export", "--all", str(folder))  # without the option, files are replaced
    assert overwrite.code == 0
    assert kept.read_text(encoding="utf-8") == _exported(store, demo.session_id)


def test_import_skip_existing_imports_only_what_is_missing(cli, demo, store, tmp_path):
    folder = tmp_path / "backup"
    assert cli("export", "--all", str(folder)).code == 0
    (folder / "notes.txt").write_text("not a session\n")  # only *.jsonl files are read
    fork = _exported(store, demo.fork_id)
    store.delete_session(demo.fork_id)
    parent_before = _exported(store, demo.session_id)

    out = cli("import", str(folder), "--skip-existing", "--json")
    assert out.code == 0, out.stderr
    by_id = {r["session_id"]: r for r in json.loads(out.stdout)}
    assert by_id[demo.session_id]["skipped"] is True
    assert by_id[demo.fork_id]["skipped"] is False
    assert out.stderr == (
        f"session-sql: skipped {folder / jsonl_file_name(demo.session_id)}: "
        f"{demo.session_id} is already in the store\n"
    )
    assert _exported(store, demo.fork_id) == fork
    assert _exported(store, demo.session_id) == parent_before


def test_import_of_a_directory_without_jsonl_files(cli, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = cli("import", str(empty))
    assert out.code == 1
    assert out.error_lines == [
        f"session-sql: warning: no *.jsonl files in {empty}",
        ERROR + f"nothing to import: no JSONL files in {empty}",
    ]


def _bad_file(path: Path, session_id: str, lines: list[str]) -> Path:
    header = {"version": 0, "id": session_id, "createdAt": 1, "isSeeded": False}
    path.write_text("\n".join([json.dumps(header), *lines]) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("lines", "line_no", "reason"),
    [
        (['{"type": "turn/start",'], 3, "Expecting property name enclosed in double quotes"),
        (["not json"], 3, "Expecting value at column 1"),
        (['{"type": "turn/start", "seq": 0, "time": 1}'], 3, "missing envelope keys"),
    ],
    ids=["cut-line", "not-json", "not-an-event"],
)
def test_import_errors_name_one_line(cli, tmp_path, lines, line_no, reason):
    path = _bad_file(tmp_path / "bad.jsonl", "bad", ["", *lines])  # line 2 is blank
    out = cli("import", str(path))
    assert out.code == 1
    [line] = out.error_lines
    assert line.startswith(ERROR + f"{path}: line {line_no}")
    assert line.count(str(path)) == 1
    assert re.findall(r"\bline \d+", line) == [f"line {line_no}"]
    assert reason in line
    header = tmp_path / "header.jsonl"
    header.write_text("{oops\n")
    [first] = cli("import", str(header)).error_lines
    assert first == ERROR + (
        f"{header}: line 1 (the header) is not JSON: "
        "Expecting property name enclosed in double quotes at column 2"
    )


def test_counting_reader_reports_bytes_in_steps():
    data = b"".join(b"%05d\n" % i for i in range(1000))  # 6000 bytes
    seen: list[int] = []
    reader = CountingReader(io.BytesIO(data), seen.append, step=1000)
    assert b"".join(reader) == data
    assert sum(seen) == len(data)
    assert all(n >= 1000 for n in seen[:-1]) and len(seen) == 6


class _Progress:
    """Stands in for the rich progress bar and checks, at each step, what the store holds."""

    def __init__(self, url: str, schema: str, session_id: str) -> None:
        self.url, self.schema, self.session_id = url, schema, session_id
        self.completed: list[int] = []
        self.imported_at_first_step: bool | None = None

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, **kw: Any) -> int:
        self.total = kw["total"]
        return 0

    def update(self, task: int, **kw: Any) -> None:
        if "completed" in kw:
            self.completed.append(kw["completed"])

    def advance(self, task: int, size: int) -> None:
        self.completed.append((self.completed[-1] if self.completed else 0) + size)
        if self.imported_at_first_step is None:
            with open_store(self.url, schema=self.schema, create=False) as other:
                try:
                    other.head_seq(self.session_id)
                    self.imported_at_first_step = True
                except SessionNotFoundError:
                    self.imported_at_first_step = False


def test_the_import_progress_follows_the_bytes_read(cli, store, tmp_path, monkeypatch):
    big = store.create_session("big")
    big.append_many([{"type": "todo/write", "data": {"items": [{"text": "x" * 200}]}}] * 3000)
    path = tmp_path / "big.jsonl"
    store.export_jsonl("big", path)
    store.delete_session("big")
    size = path.stat().st_size
    progress = _Progress(cli.url, cli.schema, "big")
    # (The import command's module: ``session_sql.cli._transfer``.)
    transfer = sys.modules["session_sql.cli._transfer"]
    monkeypatch.setattr(transfer, "progress_bar", lambda **kw: progress)

    out = cli("import", str(path))
    assert out.code == 0, out.stderr
    assert progress.total == size
    steps = progress.completed
    assert len(steps) > 5 and steps == sorted(steps)  # many steps, forwards only
    assert steps[-1] == size
    # The first step came while the import was still reading: nothing was committed yet.
    assert progress.imported_at_first_step is False
    assert store.head_seq("big") == 2999


def test_import_restores_metadata_and_with_restore_tenants_each_tenant(cli, tmp_path):
    """export then import gives back user id, title, labels and times; --restore-tenants puts
    each file into the tenant it was exported from, and without it --tenant decides."""
    with open_store(cli.url, schema=cli.schema, tenant="acme") as acme:
        acme.create_session("s", user_id="u", title="acme's", labels={"app": "a"})
    with open_store(cli.url, schema=cli.schema) as default:
        default.create_session("d", title="default's")
    folders = {tenant: tmp_path / (tenant or "default") for tenant in ("acme", "")}
    before = {}
    for tenant, folder in folders.items():
        assert cli("export", "--all", str(folder), "--tenant", tenant).code == 0
        with open_store(cli.url, schema=cli.schema, tenant=tenant) as store:
            before[tenant] = store.list_sessions()
            for info in before[tenant]:
                store.delete_session(info.id)

    both = cli("import", "--restore-tenants", *map(str, folders.values()))
    assert both.code == 0, both.stderr
    assert "(tenant 'acme')" in both.stdout
    for tenant in folders:
        with open_store(cli.url, schema=cli.schema, tenant=tenant) as store:
            assert store.list_sessions() == before[tenant]
            store.delete_session(before[tenant][0].id)

    plain = cli("import", str(folders["acme"]), "--json")  # into the default tenant
    assert plain.code == 0, plain.stderr
    assert json.loads(plain.stdout) == [
        {"file": str(folders["acme"] / "s.jsonl"), "session_id": "s", "skipped": False}
    ]
    with open_store(cli.url, schema=cli.schema) as default:
        info = default.session_info("s")
        assert (info.tenant, info.user_id, info.title) == ("", "u", "acme's")
    with open_store(cli.url, schema=cli.schema, tenant="acme") as acme:
        assert acme.list_sessions() == []

    refused = cli("import", "--restore-tenants", "--tenant", "acme", str(folders["acme"]))
    assert refused.code == 2
    assert refused.error_lines == [ERROR + "give --tenant or --restore-tenants, not both"]
