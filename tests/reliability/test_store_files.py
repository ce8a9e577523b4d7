"""Files and servers a store cannot use are clear errors: a WAL store on a read-only medium,
an export onto a full disk, the mode of an exported file, a database or role that is missing.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

import session_sql.jsonl
from session_sql import (
    PermanentStoreError,
    TransientStoreError,
    open_async_store,
    open_store,
)
from session_sql.cli import app

from .conftest import shared_temp_dir

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


def _say(store: Any, session_id: str) -> None:
    handle = store.create_session(session_id)
    handle.append("session/title", {"title": "files"})


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env={"SESSION_SQL_DEBUG": ""})
    return result.exit_code, result.stdout, result.stderr


# --------------------------------------------------------------------------------------------
# A WAL store on a read-only medium


@pytest.fixture
def read_only_store() -> Iterator[Path]:
    """A WAL store with one session, in a directory and a file nobody may write (0555, 0444).

    Outside pytest's temp directory, which is the owner's alone (``shared_temp_dir``): the
    reader runs as another user, since root passes permission bits by.
    """
    top = shared_temp_dir("session_sql_ro_")
    folder = top / "medium"
    folder.mkdir()
    path = folder / "sessions.db"
    with open_store(f"sqlite:///{path}") as store:
        _say(store, "s")
    assert path.read_bytes()[18:20] == b"\x02\x02"  # WAL mode
    assert sorted(p.name for p in folder.iterdir()) == ["sessions.db"]  # no -wal, no -shm
    path.chmod(0o444)
    folder.chmod(0o555)
    yield path
    folder.chmod(0o755)
    shutil.rmtree(top)


def _requirements(
    name: str, extras: frozenset[str] = frozenset()
) -> Iterator[tuple[str, set[str]]]:
    """The distributions ``name`` (with ``extras``) installs with it, and their extras."""
    for line in metadata.requires(name) or ():
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is None or any(marker.evaluate({"extra": e}) for e in {"", *extras}):
            yield requirement.name, set(requirement.extras)


def _copy_distribution(name: str, site: Path) -> None:
    """Copy the installed files of ``name`` under ``site`` (a site-packages of its own)."""
    dist = metadata.distribution(name)
    for file in dist.files or ():
        if ".." in file.parts or file.name.endswith(".pth") or "__editable__" in file.name:
            continue  # scripts beside the interpreter, and an editable install's hooks
        source = Path(str(dist.locate_file(file)))
        if source.is_file():
            target = site / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


@pytest.fixture(scope="module")
def reader_site() -> Iterator[Path]:
    """session_sql and what it imports, copied where any user can read them.

    The reader runs as another user, who may not read the checkout or its virtualenv (a home
    directory of mode 0700, a private temp directory): it imports this copy instead, and only
    it (``python -S``: no site-packages of the interpreter's).
    """
    top = shared_temp_dir("session_sql_site_")
    site = top / "site"
    shutil.copytree(
        REPO / "session_sql", site / "session_sql", ignore=shutil.ignore_patterns("__pycache__")
    )
    _copy_distribution("session-sql", site)  # its metadata: the entry points of the catalog
    seen: set[str] = set()
    pending = [(r, e) for r, e in _requirements("session-sql")]
    while pending:
        name, extras = pending.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        _copy_distribution(name, site)
        pending.extend(_requirements(name, frozenset(extras)))
    for folder, dirs, files in os.walk(top):
        for entry in (*dirs, *files):
            path = Path(folder, entry)
            path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
    yield site
    shutil.rmtree(top)


def _as_reader(site: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """Run ``python command...`` as a user without write access to the medium, on the copy
    of the package in ``site`` (``reader_site``)."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root, and setpriv is missing to drop the privileges")
        prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    env = {**os.environ, "PYTHONPATH": str(site), "SESSION_SQL_DEBUG": ""}
    # The interpreter itself, not a virtualenv's link to it (which may sit in the checkout).
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    return subprocess.run(
        [*prefix, python, "-S", *command],
        capture_output=True,
        text=True,
        cwd="/",
        env=env,
        timeout=120,
        check=False,
    )


_OPEN = """
import json, sys
from session_sql import StoreError, open_async_store, open_store
try:
    with open_store(sys.argv[1], create=False) as store:
        print(json.dumps({"ids": [i.id for i in store.list_sessions()]}))
except StoreError as exc:
    print(json.dumps({"error": str(exc), "kind": type(exc).__name__}))
"""


@pytest.mark.parametrize("query", ["", "?mode=ro"])
def test_a_wal_store_on_a_read_only_medium_names_the_cause_and_the_remedy(
    read_only_store, reader_site, query
):
    done = _as_reader(reader_site, "-c", _OPEN, f"sqlite:///{read_only_store}{query}")
    assert done.returncode == 0, done.stderr
    error = json.loads(done.stdout)["error"]
    assert json.loads(done.stdout)["kind"] == "PermanentStoreError"
    assert "WAL" in error and "not writable" in error and "-shm" in error
    assert f"sqlite:///{read_only_store}?immutable=1" in error
    assert "only safe while nobody writes it" in error
    assert sorted(p.name for p in read_only_store.parent.iterdir()) == ["sessions.db"]


def test_a_wal_store_on_a_read_only_medium_in_uri_form_names_the_remedy(
    read_only_store, reader_site
):
    """SQLite's ``file:`` URI form gets the same explanation, its remedy in the same form
    (its other parameters kept), and that remedy reads the store."""
    done = _as_reader(
        reader_site, "-c", _OPEN, f"sqlite:///file:{read_only_store}?mode=ro&uri=true"
    )
    assert done.returncode == 0, done.stderr
    refused = json.loads(done.stdout)
    assert refused["kind"] == "PermanentStoreError", refused
    error = refused["error"]
    assert "WAL" in error and "not writable" in error and "-shm" in error
    remedy = f"sqlite:///file:{read_only_store}?mode=ro&immutable=1&uri=true"
    assert remedy in error
    assert "only safe while nobody writes it" in error
    read = _as_reader(reader_site, "-c", _OPEN, remedy)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout) == {"ids": ["s"]}
    assert sorted(p.name for p in read_only_store.parent.iterdir()) == ["sessions.db"]


def test_a_wal_store_on_a_read_only_medium_reads_with_immutable(read_only_store, reader_site):
    done = _as_reader(reader_site, "-c", _OPEN, f"sqlite:///{read_only_store}?immutable=1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"ids": ["s"]}
    assert sorted(p.name for p in read_only_store.parent.iterdir()) == ["sessions.db"]


def test_the_cli_reads_a_wal_store_on_a_read_only_medium(read_only_store, reader_site):
    url = f"sqlite:///{read_only_store}"
    refused = _as_reader(reader_site, "-m", "session_sql.cli", "ls", "--url", f"{url}?mode=ro")
    assert refused.returncode == 1
    lines = refused.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert f"{url}?immutable=1" in lines[0]
    listed = _as_reader(reader_site, "-m", "session_sql.cli", "ls", "--url", f"{url}?immutable=1")
    assert listed.returncode == 0, listed.stderr
    assert "s" in listed.stdout.split()
    shown = _as_reader(
        reader_site, "-m", "session_sql.cli", "show", "s", "--url", f"{url}?immutable=1"
    )
    assert shown.returncode == 0, shown.stderr


def test_sqlite_uri_parameters_apply_to_a_plain_url(tmp_path):
    """``?mode=ro`` on ``sqlite:///path`` opens the file read-only (pysqlite would ignore it)."""
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}") as store:
        _say(store, "s")
    with open_store(f"sqlite:///{path}?mode=ro", create=False) as store:
        assert [i.id for i in store.list_sessions()] == ["s"]
        with pytest.raises(PermanentStoreError, match="read-only"):
            _say(store, "t")


# --------------------------------------------------------------------------------------------
# Exports: a full disk, the file's mode


def _full_disk(*_args: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_an_export_onto_a_full_disk_is_a_store_error_and_leaves_no_file(
    backend, tmp_path, monkeypatch
):
    with open_store(backend.url, schema=backend.schema) as store:
        _say(store, "s")
        target = tmp_path / "out" / "s.jsonl"
        target.parent.mkdir()
        monkeypatch.setattr(session_sql.jsonl.os, "fsync", _full_disk)
        with pytest.raises(PermanentStoreError) as raised:
            store.export_jsonl("s", target)
        assert str(target) in str(raised.value) and "ENOSPC" in str(raised.value)
        assert list(target.parent.iterdir()) == []  # no target, no temporary file
        monkeypatch.undo()
        if Path("/dev/full").exists():
            with pytest.raises(PermanentStoreError, match="ENOSPC"):
                store.export_jsonl("s", "/dev/full")  # a real full device, written in place


def test_the_cli_export_onto_a_full_disk_is_one_error_line(backend, tmp_path, monkeypatch):
    with open_store(backend.url, schema=backend.schema) as store:
        _say(store, "s")
    where = ["--url", backend.url, "--schema", backend.schema]
    target = tmp_path / "out" / "s.jsonl"
    target.parent.mkdir()
    monkeypatch.setattr(session_sql.jsonl.os, "fsync", _full_disk)
    code, _, stderr = _cli("export", "s", "-o", str(target), *where)
    monkeypatch.undo()
    assert code == 1
    assert stderr.count("\n") == 1 and "Traceback" not in stderr
    assert "ENOSPC" in stderr and str(target) in stderr
    assert list(target.parent.iterdir()) == []
    if Path("/dev/full").exists():
        code, _, stderr = _cli("export", "s", "-o", "/dev/full", *where)
        assert code == 1 and stderr.count("\n") == 1 and "ENOSPC" in stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_the_cli_export_to_a_full_stdout_is_one_error_line(backend):
    with open_store(backend.url, schema=backend.schema) as store:
        _say(store, "s")
    where = ["--url", backend.url, "--schema", backend.schema]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "session_sql.cli", "export", "s", *where],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "SESSION_SQL_DEBUG": ""},
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "cannot write to stdout" in done.stderr and "No space left" in done.stderr


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def test_an_exported_file_honours_the_umask(backend, tmp_path, umask):
    with open_store(backend.url, schema=backend.schema) as store:
        _say(store, "s")
        store.export_jsonl("s", tmp_path / "lib.jsonl")
    code, _, stderr = _cli(
        "export", "--all", str(tmp_path / "all"), "--url", backend.url, "--schema", backend.schema
    )
    assert code == 0, stderr
    expected = 0o666 & ~umask
    for path in (tmp_path / "lib.jsonl", *(tmp_path / "all").iterdir()):
        assert path.stat().st_mode & 0o777 == expected, path


# --------------------------------------------------------------------------------------------
# PostgreSQL: a database or a role that does not exist


@pytest.fixture
def server_url(postgres_admin: Any) -> Any:
    return make_url(postgres_admin.url.render_as_string(hide_password=False))


@pytest.mark.postgresql
def test_a_missing_postgresql_database_is_named_as_missing(server_url):
    name = f"missing_{uuid.uuid4().hex}"
    url = server_url.set(database=name).render_as_string(hide_password=False)
    with pytest.raises(PermanentStoreError) as raised:
        open_store(url, create=False)
    message = str(raised.value)
    assert f"database {name!r} does not exist" in message
    assert "CREATE DATABASE" in message and "cannot reach" not in message
    code, _, stderr = _cli("ls", "--url", url)
    assert code == 1 and stderr.count("\n") == 1
    assert "does not exist" in stderr and "cannot reach" not in stderr


@pytest.mark.postgresql
def test_the_async_store_names_a_missing_postgresql_database(server_url):
    url = server_url.set(database=f"missing_{uuid.uuid4().hex}")

    async def opening() -> None:
        await open_async_store(url.render_as_string(hide_password=False), create=False)

    with pytest.raises(PermanentStoreError, match="does not exist"):
        asyncio.run(opening())


@pytest.mark.postgresql
def test_a_missing_postgresql_role_is_not_an_unreachable_server(server_url):
    role = f"missing_{uuid.uuid4().hex}"
    url = server_url.set(username=role, password=None).render_as_string(hide_password=False)
    with pytest.raises(PermanentStoreError) as raised:
        open_store(url, create=False)
    message = str(raised.value)
    assert "cannot reach" not in message and "refused the connection" in message
    assert repr(role) in message and "CREATE ROLE" in message
    code, _, stderr = _cli("ls", "--url", url)
    assert code == 1 and stderr.count("\n") == 1 and "cannot reach" not in stderr


@pytest.mark.postgresql
def test_a_postgresql_server_that_is_not_there_is_still_unreachable(server_url):
    url = server_url.set(host="127.0.0.1", port=1).render_as_string(hide_password=False)
    with pytest.raises(TransientStoreError, match="cannot reach"):
        open_store(url, create=False)
