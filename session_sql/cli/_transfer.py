"""Commands that move sessions in and out of a store: ``import``, ``export``, ``migrate``."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, cast

import typer

from session_sql import (
    ConfigurationError,
    SessionExistsError,
    SessionNotFoundError,
    SessionSQLError,
)
from session_sql.cli._root import (
    DEFAULT_SCHEMA,
    PROGRESS_MIN_BYTES,
    PROGRESS_MIN_EVENTS,
    JsonOption,
    StoreOptions,
    app,
    example,
    id_argument,
    store_options,
)
from session_sql.cli._support import (
    PROG,
    CliError,
    CountingReader,
    CountingWriter,
    Out,
    cli_store,
    counted,
    error_line,
    progress_bar,
    resolve_id,
    warn,
)
from session_sql.jsonl import JsonlReader, jsonl_file_name, published_file

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from session_sql import MigrationProgress, SessionStore

# The store's names (and session_sql.metadata, which loads the store) are imported inside
# the commands that use them (docs/performance.md, "CLI startup").


@app.command(
    name="import",
    epilog=example(
        "session-sql import session-1.jsonl session-2.jsonl",
        "session-sql import --restore-tenants backup-acme/ backup-globex/ --skip-existing --json",
    ),
)
@store_options()
def import_(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE|DIR",
            help="JSONL files (a header line, then one event per line), or directories: "
            "every *.jsonl file directly in them.",
            exists=True,
            readable=True,
            show_default=False,
        ),
    ],
    skip_existing: Annotated[
        bool,
        typer.Option(
            "--skip-existing",
            help="Skip a file whose session id the store already holds, instead of failing it.",
        ),
    ] = False,
    restore_tenants: Annotated[
        bool,
        typer.Option(
            "--restore-tenants",
            help="Import each file into the tenant it was exported from (recorded in its "
            "header), not into --tenant. Only for files you trust: the file names the tenant.",
        ),
    ] = False,
    *,
    db: StoreOptions,
    as_json: JsonOption = False,
) -> None:
    """Import sessions from JSONL files.

    Each file is stored exactly as it is: its header and every event, and the user id, title,
    labels and last-write time an export records in the header, so export then import gives
    back the same session. It goes into --tenant's sessions (with --restore-tenants: into the
    tenant the file was exported from). A torn final line (the last, without its newline) is
    dropped with a warning; any other bad line fails that file, and the others still import.
    Blank lines are skipped. Prints each new session id; exits with 1 when any file failed. A
    file whose session the store already holds fails, unless --skip-existing (to resume an
    import, or to refresh a store from a backup).
    """
    if restore_tenants and db.tenant:
        raise CliError("give --tenant or --restore-tenants, not both", code=2)
    files = _jsonl_files(paths)
    out = Out()
    imported: list[dict[str, Any]] = []
    failed = 0
    total = sum(f.stat().st_size for f in files)
    with ExitStack() as stores, progress_bar(in_bytes=True) as progress:
        opened: dict[str, SessionStore] = {}

        def store_for(path: Path) -> SessionStore:
            """The store of ``tenant``, or (--restore-tenants) of the tenant ``path`` names."""
            wanted = _exported_tenant(path) if restore_tenants else db.tenant
            if wanted not in opened:
                opened[wanted] = stores.enter_context(
                    cli_store(db.url, db.schema, tenant=wanted, create=True)
                )
            return opened[wanted]

        if not restore_tenants:
            store_for(files[0])  # a bad --url or --tenant fails before any file is read
        task = progress.add_task("importing", total=total, visible=total >= PROGRESS_MIN_BYTES)

        def advance(size: int) -> None:
            progress.advance(task, size)

        done = 0
        for path in files:
            progress.update(task, description=f"importing {path.name}")
            try:
                store = store_for(path)
                with warnings.catch_warnings(record=True) as caught, path.open("rb") as fh:
                    warnings.simplefilter("always")
                    # The bar follows the bytes as the store reads them, not file by file.
                    session_id = store.import_jsonl(cast(IO[bytes], CountingReader(fh, advance)))
            except SessionExistsError as exc:
                if not skip_existing:
                    failed += 1
                    error_line(f"{path}: {exc} (pass --skip-existing to skip it)")
                    continue
                skipped = str(exc.session_id)
                sys.stderr.write(f"{PROG}: skipped {path}: {skipped} is already in the store\n")
                imported.append({"file": str(path), "session_id": skipped, "skipped": True})
                continue
            except SessionSQLError as exc:
                failed += 1
                message = str(exc)  # a bad line's error names the file already
                error_line(message if message.startswith(f"{path}:") else f"{path}: {message}")
                continue
            except OSError as exc:
                failed += 1
                error_line(f"cannot read {path}: {exc.strerror or exc}")
                continue
            finally:
                done += path.stat().st_size
                progress.update(task, completed=done)
            for warning in caught:
                warn(str(warning.message))
            record: dict[str, Any] = {"file": str(path), "session_id": session_id, "skipped": False}
            if restore_tenants:
                record["tenant"] = store.tenant
            imported.append(record)
            if not as_json:
                into = f"  (tenant {store.tenant!r})" if restore_tenants else ""
                out.line(f"{session_id}  ← {path}{into}")
    if as_json:
        out.json(imported)
    if failed:
        raise typer.Exit(1)


def _exported_tenant(path: Path) -> str:
    """The tenant a JSONL file's header records (``""`` when it records none)."""
    from session_sql.metadata import split_export_header

    with JsonlReader(path) as reader:
        _, exported = split_export_header(reader.header)
    return "" if exported is None else exported.tenant


def _jsonl_files(paths: Sequence[Path]) -> list[Path]:
    """The files to import: each file given, and the ``*.jsonl`` files of each directory."""
    files: list[Path] = []
    for path in paths:
        if not path.is_dir():
            files.append(path)
            continue
        found = sorted(p for p in path.glob("*.jsonl") if p.is_file())
        if not found:
            warn(f"no *.jsonl files in {path}")
        files.extend(found)
    if not files:
        raise CliError("nothing to import: no JSONL files in " + ", ".join(map(str, paths)))
    return files


@app.command(
    epilog=example(
        "session-sql export 3f2a9c | gzip > 3f2a9c.jsonl.gz",
        "session-sql export --all backup/",
    )
)
@store_options()
def export(
    target: Annotated[
        str | None,
        id_argument(
            "The session id, or a unique prefix of it; with --all, the directory to write.",
            metavar="ID|DIR",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", dir_okay=False, metavar="FILE", help="Write here instead of stdout."
        ),
    ] = None,
    folder: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            "-d",
            file_okay=False,
            metavar="DIR",
            help="Write into DIR (created if missing), as DIR/NAME.jsonl (see above).",
        ),
    ] = None,
    all_sessions: Annotated[
        bool,
        typer.Option("--all", help="Export every session, one file each: export --all DIR."),
    ] = False,
    skip_existing: Annotated[
        bool,
        typer.Option(
            "--skip-existing",
            help="Into a directory: leave a session whose file is already there.",
        ),
    ] = False,
    file_format: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="jsonl|parquet",
            help="parquet: every session as Parquet files under DIR, one per table "
            "(export --format parquet DIR); prints the cursor for --since.",
        ),
    ] = "jsonl",
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="CURSOR",
            help="With --format parquet: only what was written after the export that printed "
            "CURSOR (empty: everything).",
            show_default=False,
        ),
    ] = None,
    *,
    db: StoreOptions,
) -> None:
    """Export a session, or every session, as JSONL (or as Parquet files for analysts).

    The header line, then one event per line, to stdout or to a file, read from one snapshot
    of the session. The header line also records the session's tenant, user id, title, labels
    and last-write time, which 'session-sql import' restores. A file is written under a unique
    temporary name, fsynced and renamed, so it holds a whole export or is left as it was: with
    --skip-existing, a file already there is a whole export (perhaps of an earlier state), and
    an interrupted --all can be resumed.

    In a directory the file is DIR/NAME.jsonl, NAME being the id with every character outside
    a-z 0-9 . _ - (and a leading dot) percent-encoded: an id such as 'a/b' or '..' never names
    a file outside DIR, and distinct ids never share a file. 'session-sql import DIR' reads
    them back.

    With --format parquet, DIR gets DIR/TABLE/NAME.parquet for the tables sessions, events,
    messages, tool_calls and turns, read from one snapshot of the store, each with the tenant
    and the session id (gen_ai.conversation.id) on every row; the cursor printed on stdout,
    given to the next export's --since, makes it write only what came after, so a data lake
    is fed without gaps or duplicates. Needs the parquet extra: pip install
    'session-sql[parquet]'.
    """
    if file_format not in ("jsonl", "parquet"):
        raise CliError(f"--format must be jsonl or parquet, not {file_format!r}", code=2)
    if file_format == "parquet":
        _export_parquet(target, folder, output, skip_existing, since, db)
        return
    if since is not None:
        raise CliError("--since needs --format parquet", code=2)
    if all_sessions:
        if target is not None and folder is not None:
            raise CliError("give the directory once: export --all DIR", code=2)
        folder = Path(target) if target is not None else folder
        if folder is None:
            raise CliError("--all needs a directory: export --all DIR", code=2)
        if output is not None:
            raise CliError("--all writes one file per session: give a directory, not --output", 2)
    elif target is None:
        raise CliError("give a session id, or --all DIR", code=2)
    if output is not None and folder is not None:
        raise CliError("give --output or --dir, not both", code=2)
    if skip_existing and folder is None:
        raise CliError("--skip-existing needs a directory (--all DIR or --dir DIR)", code=2)
    if folder is not None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CliError(f"cannot create {folder}: {exc.strerror or exc}") from exc
    with db.open() as store:
        if not all_sessions:
            assert target is not None
            session_id = resolve_id(store, target)
            path = output if folder is None else folder / jsonl_file_name(session_id)
            if path is not None and skip_existing and path.exists():
                sys.stderr.write(f"{PROG}: skipped {session_id}: {path} exists\n")
                return
            _export_one(store, session_id, path, strict=True)
            return
        assert folder is not None
        written = skipped = 0
        total = store.count_sessions()
        with progress_bar() as progress:
            task = progress.add_task("exporting sessions", total=total, visible=total > 1)
            for sid in (info.id for info in store.iter_sessions()):
                path = folder / jsonl_file_name(sid)
                progress.advance(task)
                if skip_existing and path.exists():
                    skipped += 1
                    continue
                written += _export_one(store, sid, path, strict=False, bar=progress)
    note = f" ({skipped} skipped: their files were there)" if skipped else ""
    sys.stderr.write(f"exported {counted(written, 'session')} to {folder}{note}\n")


def _export_parquet(
    target: str | None,
    folder: Path | None,
    output: Path | None,
    skip_existing: bool,
    since: str | None,
    db: StoreOptions,
) -> None:
    """``export --format parquet DIR``: the files, a summary on stderr, the cursor on stdout."""
    if output is not None or skip_existing:
        raise CliError("--format parquet writes a directory: give DIR, not --output", code=2)
    if target is not None and folder is not None:
        raise CliError("give the directory once: export --format parquet DIR", code=2)
    directory = Path(target) if target is not None else folder
    if directory is None:
        raise CliError("--format parquet needs a directory: export --format parquet DIR", 2)
    with db.open() as store:
        try:
            result = store.export_parquet(directory, since=since or None)
        except ConfigurationError as exc:
            raise CliError(str(exc)) from exc
    counts = ", ".join(f"{n:,} {table}" for table, n in result.rows.items())
    sys.stderr.write(f"exported {counts} to {directory}\n")
    sys.stdout.write(result.cursor + "\n")  # whole, never wrapped: scripts capture it


def _export_one(
    store: SessionStore,
    session_id: str,
    target: Path | None,
    *,
    strict: bool,
    bar: Progress | None = None,
) -> int:
    """Export one session to ``target`` (stdout when None); ``strict``: a missing one fails.
    ``bar``: the progress display of an ``--all`` export (rich draws one at a time).

    Returns 1 when it wrote the session, 0 when it was deleted meanwhile (not ``strict``).
    """
    with contextlib.nullcontext(bar) if bar is not None else progress_bar() as progress:
        try:
            total = store.head_seq(session_id) + 2  # the header line, then every event
        except SessionNotFoundError:
            if strict:
                raise
            warn(f"session {session_id!r} was deleted before its export")
            return 0
        task = progress.add_task(
            f"exporting {session_id}", total=total, visible=total >= PROGRESS_MIN_EVENTS
        )
        try:
            count = _export_to(store, session_id, target, strict, progress, task)
        finally:
            if bar is not None:
                progress.remove_task(task)
    if count is None:
        return 0
    if target is not None:
        sys.stderr.write(f"exported {counted(count, 'event')} of {session_id} to {target}\n")
    return 1


def _export_to(
    store: SessionStore,
    session_id: str,
    target: Path | None,
    strict: bool,
    progress: Progress,
    task: TaskID,
) -> int | None:
    """The export itself: the number of events, or None when the session was deleted."""

    def advance(lines: int) -> None:
        progress.advance(task, lines)

    if target is None:
        writer = CountingWriter(sys.stdout, advance)
        try:
            count = store.export_jsonl(session_id, cast(IO[str], writer))
            sys.stdout.flush()
        except BrokenPipeError:
            raise  # the reader went away: handled like every command's output
        except OSError as exc:
            raise CliError(f"cannot write to stdout: {exc.strerror or exc}") from exc
        return count
    try:
        with published_file(target) as fh:
            return store.export_jsonl(session_id, cast(IO[str], CountingWriter(fh, advance)))
    except SessionNotFoundError:
        if strict:
            raise
        warn(f"session {session_id!r} was deleted before its export")
        return None
    except OSError as exc:
        raise CliError(f"cannot write {target}: {exc.strerror or exc}") from exc


@app.command(
    epilog=example(
        "session-sql migrate --from sqlite:///sessions.db --to sqlite:///sessions-v3.db",
        "session-sql migrate --from postgresql://postgres@localhost/agents "
        "--to postgresql://postgres@localhost/agents --to-schema session_sql_v3",
    )
)
def migrate(
    from_url: Annotated[
        str,
        typer.Option(
            "--from",
            envvar="SESSION_SQL_URL",
            metavar="URL",
            help="The store to copy from (only read): of this version or of any earlier "
            "schema version.",
            show_default=False,
        ),
    ],
    to_url: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="URL",
            help="The store to copy into: an empty database (or file, or schema), or the "
            "destination of an interrupted migrate from the same store.",
            show_default=False,
        ),
    ],
    from_schema: Annotated[
        str,
        typer.Option(
            "--from-schema",
            envvar="SESSION_SQL_SCHEMA",
            metavar="NAME",
            help="PostgreSQL schema of the source (ignored on SQLite).",
        ),
    ] = DEFAULT_SCHEMA,
    to_schema: Annotated[
        str,
        typer.Option(
            "--to-schema",
            metavar="NAME",
            help="PostgreSQL schema of the destination (ignored on SQLite).",
        ),
    ] = DEFAULT_SCHEMA,
    distributed: Annotated[
        bool | None,
        typer.Option(
            "--distributed/--plain",
            help="Create the destination distributed over a Citus cluster (the default where "
            "the citus extension is installed), or as plain tables even there.",
            show_default=False,
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Draw no progress bar.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Copy every session of every tenant into a new store, and verify each copy.

    For a new schema version, another backend or a fresh database. Each session is copied in
    one transaction, with its tenant, metadata, times and fork lineage, then verified against
    the source (its replay, counters, digest and events). A store of an earlier schema version
    (which this build refuses to open) is read too; versions 1 and 2 had no tenants, so their
    sessions go to the default tenant. Nothing is ever written to the source. The destination
    is created like 'init' creates a store: distributed where the citus extension is
    installed, unless --plain.

    An interrupted migrate is resumed by running it again: the sessions already copied are
    checked and skipped, the rest copied. A destination that holds anything else is refused
    before anything is written. Prints one summary line (the report with --json); a session
    that cannot be copied is an error line, and the exit code is then 1. Stop the writers of
    the source first: a session written after it was copied makes a rerun refuse it.
    """
    from session_sql import migrate as migrate_store

    with progress_bar() as bar:
        sessions = bar.add_task("sessions", total=None, visible=not quiet)
        events = bar.add_task("events", total=None, visible=not quiet)

        def show(step: MigrationProgress) -> None:
            bar.update(sessions, completed=step.sessions_done, total=step.sessions_total)
            bar.update(events, completed=step.events_done, total=step.events_total)

        try:
            report = migrate_store(
                from_url,
                to_url,
                from_schema=from_schema,
                to_schema=to_schema,
                progress=None if quiet else show,
                distributed=distributed,
            )
        except ConfigurationError as exc:
            if exc.option == "distributed":
                raise CliError(str(exc), code=2) from exc
            raise CliError(f"invalid --from, --to or schema: {exc}", code=2) from exc
    for failure in report.failures:
        tenant = f" of tenant {failure.tenant!r}" if failure.tenant else ""
        error_line(f"session {failure.session_id!r}{tenant} was not copied: {failure.error}")
    out = Out()
    if as_json:
        out.json(dataclasses.asdict(report) | {"ok": report.ok})
    else:
        out.line(report.summary())
    if not report.ok:
        raise typer.Exit(1)
