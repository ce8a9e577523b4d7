"""The ``session-sql`` command line: a thin client of the public API.

Each command opens the store, calls the library and prints; the plumbing (exit codes, the
terminal/pipe/JSON output policy, progress bars) is in ``_support``, the human-readable
renderings in ``_render`` and ``_stats`` (the statistics themselves are
``SessionStore.stats``), and the demo session in ``demo``. ``docs/cli.md`` is generated from
this module's help texts by ``_docs``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from collections import deque
from collections.abc import Sequence
from enum import StrEnum
from importlib import metadata
from pathlib import Path
from typing import IO, Annotated, Any, cast

import typer
from rich.text import Text

from session_sql import (
    SCHEMA_VERSION,
    ConfigurationError,
    MigrationProgress,
    SessionEvent,
    SessionExistsError,
    SessionNotFoundError,
    SessionSQLError,
    SessionStore,
    VerifyReport,
    check_invariants,
    fold_surface,
)
from session_sql import migrate as migrate_store
from session_sql._store.schema import render_ddl
from session_sql.cli import bench as workloads
from session_sql.cli._render import (
    demo_report,
    event_line,
    format_time,
    message_lines,
    replacement_lines,
    surface_lines,
    verify_line,
)
from session_sql.cli._stats import headline, tables
from session_sql.cli._support import (
    PROG,
    CliError,
    CountingReader,
    CountingWriter,
    GuardedGroup,
    Out,
    State,
    cli_store,
    error_line,
    isatty,
    progress_bar,
    resolve_id,
    warn,
)
from session_sql.cli.demo import explore_queries, record_demo
from session_sql.jsonl import jsonl_file_name, published_file

__all__ = ["app", "main"]

DEFAULT_URL = "sqlite:///sessions.db"
DEFAULT_SCHEMA = "session_sql"
PROGRESS_MIN_BYTES = 1 << 20  # imports show a progress bar from this many bytes on
PROGRESS_MIN_EVENTS = 5000  # exports and verify --all from this many events/sessions on
COMPLETIONS = 50  # shell completion offers at most this many session ids


def _example(*lines: str) -> str:
    """An epilog that click prints verbatim (``\\b`` stops it from re-wrapping the lines)."""
    return "\b\nExample:\n" + "\n".join(f"  {line}" for line in lines)


app = typer.Typer(
    name=PROG,
    cls=GuardedGroup,
    help=(
        "Store, inspect and analyse event-sourced LLM-agent sessions in SQLite or PostgreSQL. "
        "Start with 'session-sql demo'."
    ),
    epilog=_example("session-sql demo && session-sql ls"),
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


# --------------------------------------------------------------------------------------------
# Shared options


UrlOption = Annotated[
    str,
    typer.Option(
        "--url",
        envvar="SESSION_SQL_URL",
        metavar="URL",
        help="Database URL: sqlite:///path/to/file.db or postgresql://user@host/dbname.",
    ),
]
SchemaOption = Annotated[
    str,
    typer.Option(
        "--schema",
        envvar="SESSION_SQL_SCHEMA",
        metavar="NAME",
        help="PostgreSQL schema holding the tables (ignored on SQLite).",
    ),
]
TenantOption = Annotated[
    str,
    typer.Option(
        "--tenant",
        envvar="SESSION_SQL_TENANT",
        metavar="NAME",
        help='Work only with this tenant\'s sessions (default: the default tenant, "").',
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]


def complete_session_id(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion for ID arguments: the ids that start with what is typed so far."""
    url = ctx.params.get("url") or os.environ.get("SESSION_SQL_URL") or DEFAULT_URL
    schema = ctx.params.get("schema") or os.environ.get("SESSION_SQL_SCHEMA") or DEFAULT_SCHEMA
    tenant = ctx.params.get("tenant") or os.environ.get("SESSION_SQL_TENANT") or ""
    try:
        with cli_store(url, schema, tenant=tenant) as store:
            infos = store.list_sessions(id_prefix=incomplete, limit=COMPLETIONS)
    except Exception:  # completing must never print an error into the user's command line
        return []
    return [info.id for info in infos]


ID_HELP = "The session id, or a unique prefix of it."
SessionArg = Annotated[
    str,
    typer.Argument(
        metavar="ID", help=ID_HELP, show_default=False, autocompletion=complete_session_id
    ),
]
OptionalSessionArg = Annotated[
    str | None,
    typer.Argument(
        metavar="ID",
        help=ID_HELP + " Or use --all.",
        show_default=False,
        autocompletion=complete_session_id,
    ),
]


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"{PROG} {metadata.version('session-sql')}\n")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="On errors, print the traceback too (or SESSION_SQL_DEBUG=1)."
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    if isinstance(ctx.obj, State) and debug:
        ctx.obj.debug = True
    if ctx.invoked_subcommand is None:
        sys.stdout.write(ctx.get_help() + "\n")
        raise typer.Exit()


# --------------------------------------------------------------------------------------------
# Commands


@app.command(
    epilog=_example(
        "session-sql demo", "session-sql demo --url postgresql://postgres@localhost/agents"
    )
)
def demo(
    url: UrlOption = DEFAULT_URL,
    schema: SchemaOption = DEFAULT_SCHEMA,
    tenant: TenantOption = "",
) -> None:
    """Record a realistic agent session and show it.

    The session has streamed replies, tool calls, a pruned tool result, a compaction summary,
    a fork at an earlier turn (where the user later says "forget that", and a surface/removed
    takes their message and the reply off the fork's surface), and a crash inside a turn that
    is then repaired. The command prints what the model sees now, the raw log in brief, what
    each replacement shadows, the verify results, and SQL queries to explore the tables. Run
    it again for a new session.
    """
    with cli_store(url, schema, tenant=tenant, create=True):
        pass  # fail early, before recording, when the URL or schema is unusable
    run = record_demo(url, schema=schema, tenant=tenant)
    out = Out()
    with cli_store(url, schema, tenant=tenant) as store:
        events = list(store.events(run.session_id))
        fork_events = list(store.events(run.fork_id))
        messages = store.messages(run.session_id)
        fold = fold_surface(events, catalog=store.catalog)
        reports = [store.verify(run.session_id), store.verify(run.fork_id)]
        where, database_file = store.display_url, store.database_file
        is_postgres = store.schema is not None
    if is_postgres:
        shell = f'psql "{where.replace("+psycopg", "")}"'
        search_path: str | None = schema
    else:
        shell, search_path = f"sqlite3 {database_file}", None
    out.lines(
        demo_report(
            run,
            events=events,
            fork_events=fork_events,
            messages=messages,
            fold=fold,
            reports=reports,
            where=where,
            shell=shell,
            search_path=search_path,
            queries=explore_queries(run.session_id),
        )
    )


@app.command(epilog=_example("session-sql init --url postgresql://postgres@localhost/agents"))
def init(
    url: UrlOption = DEFAULT_URL,
    schema: SchemaOption = DEFAULT_SCHEMA,
    tenant: TenantOption = "",
) -> None:
    """Create the tables, or check an existing store.

    An empty database (or a missing SQLite file) is initialised; an existing store is checked
    by the schema gate, which refuses a database written by another schema version.
    """
    with cli_store(url, schema, tenant=tenant, create=True) as store:
        where = store.display_url + (f" (schema {store.schema})" if store.schema else "")
    Out().line(f"store ready: {where}, schema version {SCHEMA_VERSION}")


@app.command(
    epilog=_example(
        "session-sql ls --limit 5 --user alice --label team=support",
        "session-sql ls --json | jq '.[0].id'",
    )
)
def ls(
    url: UrlOption = DEFAULT_URL,
    schema: SchemaOption = DEFAULT_SCHEMA,
    tenant: TenantOption = "",
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, metavar="N", help="At most this many.")
    ] = 20,
    after: Annotated[
        str | None,
        typer.Option("--after", metavar="ID", help="Page on: list sessions after this id."),
    ] = None,
    parent: Annotated[
        str | None, typer.Option("--parent", metavar="ID", help="Only forks of this session.")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", metavar="USER", help="Only this user's sessions.")
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            metavar="NAME=VALUE",
            help="Only sessions with this label (repeatable: every one must match).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List sessions, most recently updated first, with their title, user and event count."""
    labels = _label_pairs(label or [])
    with cli_store(url, schema, tenant=tenant) as store:
        infos = store.list_sessions(
            limit=limit, after=after, parent=parent, user_id=user, labels=labels or None
        )
    out = Out()
    if as_json:
        out.json([{**info.model_dump(), "event_count": info.event_count} for info in infos])
        return
    rows = [
        [
            info.id,
            info.title or "",
            info.user_id or "",
            str(info.event_count),
            format_time(info.created_at),
            format_time(info.updated_at),
            info.parent_session or "",
        ]
        for info in infos
    ]
    if not rows:
        out.line("no sessions" + (f" forked from {parent}" if parent else ""))
        return
    out.table(["ID", "TITLE", "USER", "EVENTS", "CREATED (UTC)", "UPDATED (UTC)", "PARENT"], rows)


def _label_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``--label NAME=VALUE`` options as a mapping; a malformed one is a usage error."""
    labels: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="'--label'")
        if name in labels and labels[name] != value:
            raise typer.BadParameter(
                f"label {name!r} given twice with different values", param_hint="'--label'"
            )
        labels[name] = value
    return labels


@app.command(epilog=_example('session-sql title 3f2a9c "Refund for order 1042"'))
def title(
    session: SessionArg,
    text: Annotated[
        str,
        typer.Argument(metavar="TITLE", help='The new title ("" clears it).', show_default=False),
    ],
    url: UrlOption = DEFAULT_URL,
    schema: SchemaOption = DEFAULT_SCHEMA,
    tenant: TenantOption = "",
) -> None:
    """Set a session's title (shown by 'session-sql ls').

    The title is metadata: the session's log and its updated time do not change.
    """
    with cli_store(url, schema, tenant=tenant) as store:
        session_id = resolve_id(store, session)
        info = store.update_session(session_id, title=text or None)
    Out().line(f"{info.id}: " + (f"title {info.title!r}" if info.title else "title cleared"))


@app.command(
    epilog=_example(
        "session-sql show 3f2a9c --surface",
        "session-sql show 3f2a9c --from 40 --to 60",
    )
)
def show(
    session_id: SessionArg,
    url: UrlOption = DEFAULT_URL,
    schema: SchemaOption = DEFAULT_SCHEMA,
    tenant: TenantOption = "",
    events: Annotated[
        bool, typer.Option("--events", help="Print the raw log instead of the messages.")
    ] = False,
    surface: Annotated[
        bool,
        typer.Option(
            "--surface", help="Print the surface nodes and what each replacement shadows."
        ),
    ] = False,
    from_seq: Annotated[
        int | None,
        typer.Option(
            "--from",
            min=0,
            metavar="SEQ",
            help="Print the raw log from this seq (implies --events).",
        ),
    ] = None,
    to_seq: Annotated[
        int | None,
        typer.Option(
            "--to", min=0, metavar="SEQ", help="Print the raw log up to, not including, this seq."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Show a session's messages, raw log, or surface.

    By default: the messages a model would be sent, in order. --events: the raw log (every
    event, shadowed ones included); --from and --to pick a range of it by seq. --surface: the
    surface nodes replayed from the log, and which events each replacement shadows.
    """
    ranged = from_seq is not None or to_seq is not None
    if surface and (events or ranged):
        raise CliError("--surface excludes --events, --from and --to", code=2)
    out = Out()
    with cli_store(url, schema, tenant=tenant) as store:
        session_id = resolve_id(store, session_id)
        if events or ranged:
            _show_events(store, out, session_id, from_seq or 0, to_seq, as_json)
            return
        if surface:
            log = list(store.events(session_id))
            table = store.surface(session_id)
            fold = fold_surface(log, catalog=store.catalog)
            if as_json:
                out.json(
                    {
                        "session_id": session_id,
                        "nodes": list(fold.nodes),
                        "replacements": [r._asdict() for r in fold.replacements],
                    }
                )
            else:
                out.lines(surface_lines(fold, log))
                if fold.replacements:
                    out.heading("Replacements")
                    out.lines(replacement_lines(fold, log))
            if tuple(table) != tuple(fold.nodes):
                raise CliError(
                    f"the stored surface of {session_id} differs from the replay of its log; "
                    f"run '{PROG} verify {session_id}'"
                )
            return
        messages = store.messages(session_id)
    if as_json:
        out.json(messages)
        return
    if not messages:
        out.line(f"no messages: the surface of {session_id} is empty")
    for i, message in enumerate(messages):
        lines = message_lines(message)
        out.line(Text.assemble((f"[{i}] ", "dim")) + lines[0])
        out.lines(lines[1:])


def _show_events(
    store: SessionStore,
    out: Out,
    session_id: str,
    from_seq: int,
    to_seq: int | None,
    as_json: bool,
) -> None:
    """``show --events``: the raw log in [from_seq, to_seq), and a note when that is empty."""
    stream = store.events(session_id, from_seq=from_seq, to_seq=to_seq)
    if as_json:
        out.json_array(e.to_wire() for e in stream)
        return
    printed = 0
    for event in stream:
        out.line(event_line(event, width=88, with_time=True))
        printed += 1
    if printed:
        return
    head = store.head_seq(session_id)
    wanted = f"seq {from_seq} on" if to_seq is None else f"seqs {from_seq} to {to_seq - 1}"
    if to_seq is not None and to_seq <= from_seq:
        out.line(f"no events: --to {to_seq} is not after --from {from_seq}")
    elif head < 0:
        out.line(f"no events: the log of {session_id} is empty")
    else:
        out.line(f"no events from {wanted}: the log of {session_id} holds seqs 0 to {head}")


@app.command(epilog=_example("session-sql tail 3f2a9c -n 20", "session-sql tail 3f2a9c -f --json"))
def tail(
    session_id: SessionArg,
    url: UrlOption = DEFAULT_URL,
    schema: SchemaOption = DEFAULT_SCHEMA,
    tenant: TenantOption = "",
    lines: Annotated[
        int,
        typer.Option(
            "--lines", "-n", min=0, metavar="N", help="How many of the last events to print."
        ),
    ] = 10,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing events as they are committed.")
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0,
            metavar="SECONDS",
            help="With -f: stop after this many idle seconds.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Print a session's last events, or follow it.

    With -f, keep printing events as other processes commit them (Ctrl-C to stop). --json
    prints one JSON event per line.
    """
    out = Out()

    def emit(event: SessionEvent) -> None:
        if as_json:
            out.json_line(event.to_wire())
        else:
            out.line(event_line(event, width=88, with_time=True))
        sys.stdout.flush()

    try:
        with cli_store(url, schema, tenant=tenant) as store:
            session_id = resolve_id(store, session_id)
            head = store.head_seq(session_id)
            recent = store.events(session_id, from_seq=max(0, head - lines + 1), to_seq=head + 1)
            for event in deque(recent, min(lines, head + 1)):  # (-n can be huge)
                emit(event)
            if head < 0 and not as_json:
                out.line(f"no events: the log of {session_id} is empty")
            if follow:
                for event in store.follow(session_id, after_seq=head, timeout=timeout):
                    emit(event)
    except KeyboardInterrupt:
        if not follow:
            raise
        # Ctrl-C is how -f is meant to stop, at any moment: a normal end, exit code 0.


@app.command(
    name="import",
    epilog=_example(
        "session-sql import session-1.jsonl session-2.jsonl",
        "session-sql import backup/ --skip-existing --json",
    ),
)
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
    url: UrlOption = DEFAULT_URL,
    schema: SchemaOption = DEFAULT_SCHEMA,
    tenant: TenantOption = "",
    as_json: JsonOption = False,
) -> None:
    """Import sessions from JSONL files.

    Each file is stored exactly as it is (export then import is lossless). A torn final line
    (the last, without its newline) is dropped with a warning; any other bad line fails that
    file, and the others still import. Blank lines are skipped. Prints each new session id;
    exits with 1 when any file failed. A file whose session the store already holds fails,
    unless --skip-existing (to resume an import, or to refresh a store from a backup).
    """
    files = _jsonl_files(paths)
    out = Out()
    imported: list[dict[str, Any]] = []
    failed = 0
    total = sum(f.stat().st_size for f in files)
    with (
        cli_store(url, schema, tenant=tenant, create=True) as store,
        progress_bar(in_bytes=True) as progress,
    ):
        task = progress.add_task("importing", total=total, visible=total >= PROGRESS_MIN_BYTES)

        def advance(size: int) -> None:
            progress.advance(task, size)

        done = 0
        for path in files:
            progress.update(task, description=f"importing {path.name}")
            try:
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
            imported.append({"file": str(path), "session_id": session_id, "skipped": False})
            if not as_json:
                out.line(f"{session_id}  ← {path}")
    if as_json:
        out.json(imported)
    if failed:
        raise typer.Exit(1)


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
    epilog=_example(
        "session-sql export 3f2a9c | gzip > 3f2a9c.jsonl.gz",
        "session-sql export --all backup/",
    )
)
def export(
    target: Annotated[
        str | None,
        typer.Argument(
            metavar="ID|DIR",
            help="The session id, or a unique prefix of it; with --all, the directory to write.",
            show_default=False,
            autocompletion=complete_session_id,
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
    url: UrlOption = DEFAULT_URL,
    schema: SchemaOption = DEFAULT_SCHEMA,
    tenant: TenantOption = "",
) -> None:
    """Export a session, or every session, as JSONL.

    The header line, then one event per line, to stdout or to a file, read from one snapshot
    of the session. A file is written under a unique temporary name, fsynced and renamed, so
    it holds a whole export or is left as it was: with --skip-existing, a file already there
    is a whole export (perhaps of an earlier state), and an interrupted --all can be resumed.

    In a directory the file is DIR/NAME.jsonl, NAME being the id with every character outside
    a-z 0-9 . _ - (and a leading dot) percent-encoded: an id such as 'a/b' or '..' never names
    a file outside DIR, and distinct ids never share a file. 'session-sql import DIR' reads
    them back.
    """
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
    with cli_store(url, schema, tenant=tenant) as store:
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
        for sid in (info.id for info in store.iter_sessions()):
            path = folder / jsonl_file_name(sid)
            if skip_existing and path.exists():
                skipped += 1
                continue
            written += _export_one(store, sid, path, strict=False)
    note = f" ({skipped} skipped: their files were there)" if skipped else ""
    sys.stderr.write(f"exported {written} sessions to {folder}{note}\n")


def _export_one(store: SessionStore, session_id: str, target: Path | None, *, strict: bool) -> int:
    """Export one session to ``target`` (stdout when None); ``strict``: a missing one fails.

    Returns 1 when it wrote the session, 0 when it was deleted meanwhile (not ``strict``).
    """
    with progress_bar() as progress:
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

        def advance(lines: int) -> None:
            progress.advance(task, lines)

        if target is None:
            writer = CountingWriter(sys.stdout, advance)
            store.export_jsonl(session_id, cast(IO[str], writer))
            return 1
        try:
            with published_file(target) as fh:
                count = store.export_jsonl(session_id, cast(IO[str], CountingWriter(fh, advance)))
        except SessionNotFoundError:
            if strict:
                raise
            warn(f"session {session_id!r} was deleted before its export")
            return 0
        except OSError as exc:
            raise CliError(f"cannot write {target}: {exc.strerror or exc}") from exc
    sys.stderr.write(f"exported {count} events of {session_id} to {target}\n")
    return 1


@app.command(
    epilog=_example(
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
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Draw no progress bar.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Copy every session of every tenant into a new store, and verify each copy.

    For a new schema version, another backend or a fresh database. Each session is copied in
    one transaction, with its tenant, metadata, times and fork lineage, then verified against
    the source (its replay, counters, digest and events). A store of an earlier schema version
    (which this build refuses to open) is read too; versions 1 and 2 had no tenants, so their
    sessions go to the default tenant. Nothing is ever written to the source.

    An interrupted migrate is resumed by running it again: the sessions already copied are
    checked and skipped, the rest copied. A destination that holds anything else is refused
    before anything is written. Prints one summary line (the report with --json); a session
    that cannot be copied is an error line, and the exit code is then 1. Stop the writers of
    the source first: a session written after it was copied makes a rerun refuse it.
    """
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
            )
        except ConfigurationError as exc:
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


@app.command(epilog=_example("session-sql verify 3f2a9c", "session-sql verify --all --invariants"))
def verify(
    session_id: OptionalSessionArg = None,
    all_sessions: Annotated[bool, typer.Option("--all", help="Verify every session.")] = False,
    invariants: Annotated[
        bool,
        typer.Option(
            "--invariants", help="Also check the turn/step/tool-call invariants of each log."
        ),
    ] = False,
    url: UrlOption = DEFAULT_URL,
    schema: SchemaOption = DEFAULT_SCHEMA,
    tenant: TenantOption = "",
    as_json: JsonOption = False,
) -> None:
    """Check stored sessions against a replay of their logs.

    Replays each log and compares the fold with the surface table and the session row. Exits
    with 1 when any session fails.
    """
    if (session_id is None) == (not all_sessions):
        raise CliError("give a session id or --all (not both)", code=2)
    out = Out()
    reports: list[VerifyReport] = []
    with cli_store(url, schema, tenant=tenant) as store:
        ids = (
            [resolve_id(store, session_id)]
            if session_id is not None
            else [info.id for info in store.iter_sessions()]
        )
        with progress_bar() as progress:
            task = progress.add_task("verifying", total=len(ids), visible=len(ids) > 1)
            for sid in ids:
                reports.append(_verify_one(store, sid, invariants, strict=session_id is not None))
                progress.advance(task)
                if not as_json:
                    out.line(verify_line(reports[-1]))
    failed = sum(1 for r in reports if not r.ok)
    if as_json:
        out.json([r.model_dump() for r in reports])
    elif len(reports) != 1 or failed:
        out.line(f"{len(reports) - failed} ok, {failed} failed")
    if failed:
        raise typer.Exit(1)


def _verify_one(
    store: SessionStore, session_id: str, invariants: bool, *, strict: bool
) -> VerifyReport:
    try:
        report = store.verify(session_id)
    except SessionNotFoundError:
        if strict:
            raise
        return VerifyReport(
            session_id=session_id, ok=False, events=0, problems=("deleted while verifying",)
        )
    except SessionSQLError as exc:
        return VerifyReport(session_id=session_id, ok=False, events=0, problems=(str(exc),))
    if invariants and report.ok:
        found = check_invariants(store.events(session_id))
        if found:
            problems = tuple(f"invariant {v.code} at seq {v.seq}: {v.message}" for v in found)
            report = report.model_copy(update={"ok": False, "problems": problems})
    return report


@app.command(epilog=_example("session-sql repair 3f2a9c"))
def repair(
    session_id: SessionArg,
    url: UrlOption = DEFAULT_URL,
    schema: SchemaOption = DEFAULT_SCHEMA,
    tenant: TenantOption = "",
    as_json: JsonOption = False,
) -> None:
    """Close a turn that a crashed process left open.

    Appends an error result for each unanswered tool call, then step/end and turn/end with
    reason "interrupted". Does nothing when no turn is open.
    """
    with cli_store(url, schema, tenant=tenant) as store:
        session_id = resolve_id(store, session_id)
        appended = store.repair(session_id)
    out = Out()
    if as_json:
        out.json([e.to_json() for e in appended])
    elif not appended:
        out.line(f"nothing to repair: {session_id} has no open turn")
    else:
        out.line(f"appended {len(appended)} events to {session_id}:")
        out.lines([event_line(e, width=88) for e in appended])


@app.command(
    epilog=_example(
        "session-sql delete 3f2a9c",
        "session-sql delete --yes 7b1e04c2a9d84f6e8b3c5d7e9f1a2b3c",
    )
)
def delete(
    session_ids: Annotated[
        list[str],
        typer.Argument(
            metavar="ID",
            help="The sessions to delete, by id or unique prefix (full ids with --yes).",
            show_default=False,
            autocompletion=complete_session_id,
        ),
    ],
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Do not ask; every ID must then be a full id."),
    ] = False,
    url: UrlOption = DEFAULT_URL,
    schema: SchemaOption = DEFAULT_SCHEMA,
    tenant: TenantOption = "",
    as_json: JsonOption = False,
) -> None:
    """Delete whole sessions: their rows, every event and the surface.

    An operator's action (retention, a mistaken import), not an edit of a session's history:
    to take messages off what a model sees, append a surface/removed event instead, and the
    log keeps them. Lists what it will delete and asks first (reading the answer from stdin);
    --yes skips the question, and then a prefix is refused, so that a script never deletes a
    session it did not name. Forks keep their own copies of the events they inherited; other
    sessions are not touched. Nothing is deleted unless every ID names a session.
    """
    out = Out()
    with cli_store(url, schema, tenant=tenant) as store:
        targets: dict[str, int] = {}
        for given in session_ids:
            session_id = resolve_id(store, given)
            if yes and session_id != given:
                raise CliError(
                    f"{given!r} is a prefix of {session_id}: with --yes, give the full id", code=2
                )
            targets[session_id] = store.head_seq(session_id) + 1
        if not yes:
            for session_id, count in targets.items():
                forks = len(store.list_sessions(parent=session_id, limit=1000))
                kept = f"; its {forks} fork(s) keep their copies" if forks else ""
                sys.stderr.write(f"  {session_id}  {count} events{kept}\n")
            question = (
                f"Delete these {len(targets)} sessions?" if len(targets) > 1 else "Delete it?"
            )
            try:
                confirmed = typer.confirm(question, default=False, err=True)
            except typer.Abort:  # stdin ended (or Ctrl-C) before an answer
                confirmed = False
            if not isatty(sys.stdin):
                sys.stderr.write("\n")  # the answer was not echoed: end the prompt's line
            if not confirmed:
                raise CliError("nothing deleted")
        for session_id in targets:
            store.delete_session(session_id)
    if as_json:
        out.json([{"session_id": sid, "events": n} for sid, n in targets.items()])
        return
    for session_id, count in targets.items():
        out.line(f"deleted {session_id} ({count} events)")


@app.command(epilog=_example("session-sql stats", "session-sql stats 3f2a9c --json"))
def stats(
    session_id: Annotated[
        str | None,
        typer.Argument(
            metavar="ID",
            help="Only this session, by id or unique prefix (default: the whole store).",
            show_default=False,
            autocompletion=complete_session_id,
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    schema: SchemaOption = DEFAULT_SCHEMA,
    tenant: TenantOption = "",
    as_json: JsonOption = False,
) -> None:
    """Summarise the store with SQL.

    Events by type, tool calls and errors by tool, tokens by model, and replacements, computed
    by SQL over the tables. A fork's inherited events count once, in its parent.
    """
    with cli_store(url, schema, tenant=tenant) as store:
        if session_id is not None:
            session_id = resolve_id(store, session_id)
        result = store.stats(session_id)
    out = Out()
    if as_json:
        out.json(result.model_dump())
        return
    out.line(Text(headline(result), style="bold"))
    for title, headers, rows in tables(result):
        out.heading(title)
        out.table(headers, rows)
    out.line(f"events cited by replacements: {result.shadowed_events}")


class Dialect(StrEnum):
    sqlite = "sqlite"
    postgresql = "postgresql"


@app.command(
    name="schema",
    epilog=_example("session-sql schema --dialect postgresql --schema agents > schema.sql"),
)
def schema_(
    dialect: Annotated[
        Dialect, typer.Option("--dialect", metavar="sqlite|postgresql", help="SQL dialect.")
    ] = Dialect.sqlite,
    schema: SchemaOption = DEFAULT_SCHEMA,
) -> None:
    """Print the SQL schema (DDL).

    The tables, indexes, the surface_messages view and the meta rows of the schema gate, as
    this version creates them.
    """
    if dialect is Dialect.sqlite:
        sys.stdout.write(render_ddl("sqlite", schema))
    else:
        sys.stdout.write(render_ddl("postgresql", schema))


@app.command(
    epilog=_example(
        "session-sql bench --quick",
        "session-sql bench --url postgresql://postgres@127.0.0.1/test --only W1,W11 --json",
    )
)
def bench(
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            metavar="URL",
            help=(
                "postgresql://... to bench throwaway schemas there; sqlite:///path to put the"
                " temp SQLite files in a temporary directory beside path (path itself is never"
                " opened); default: temp SQLite files in the system temp directory."
            ),
        ),
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (under a minute).")] = False,
    only: Annotated[
        str | None,
        typer.Option(
            "--only",
            metavar="W1,W7,...",
            help=(
                "Run only these workloads (comma-separated, W1 to W11; W4, W5, W9 and W10"
                " share one setup and run together)."
            ),
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Measure session_sql against the raw driver doing the same rows, in the same run.

    Each workload runs through the store and through a stdlib sqlite3 / raw psycopg baseline
    that writes the same event rows and session-row update with the same durability settings,
    without validation or surface upkeep. Figures are medians over repetitions; the ratio is
    session_sql / raw (for reads: raw time / session_sql time). The baseline runs the store's
    own statements (compiled once from its tables) and the engine's SQLite pragmas. It never
    touches your sessions.db: SQLite runs use temporary files (beside the file a sqlite:///
    --url names), PostgreSQL schemas that are dropped after. W8 (storage) measures on a fresh
    file or schema of its own.
    """

    def progress(name: str) -> None:
        sys.stderr.write(f"{PROG}: bench: {name} ...\n")

    selected = None
    if only is not None:
        selected = frozenset(name.strip().upper() for name in only.split(",") if name.strip())
        unknown = sorted(selected - {f"W{i}" for i in range(1, 12)})
        if unknown or not selected:
            named = ", ".join(unknown) or "(none given)"
            raise CliError(f"--only: unknown workloads {named}; give W1 to W11", code=2)
    report = workloads.run(url, quick=quick, progress=progress, only=selected)
    out = Out()
    if as_json:
        out.json(report)
        return
    rows = []
    for w in report["workloads"]:
        rate = w["events_per_s"]
        low, high = w["min_max_events_per_s"]
        rows.append(
            [
                w["name"],
                f"{rate:,.0f}" if rate else "-",
                f"{1e6 / rate:,.1f}" if rate else "-",
                f"{w['raw_events_per_s']:,.0f}" if w["raw_events_per_s"] else "-",
                f"{w['ratio']:.2f}",
                f"{low:,.0f}-{high:,.0f}" if rate and w["reps"] > 1 else "-",
                ", ".join(f"{k}={v}" for k, v in w["extra"].items()),
            ]
        )
    out.line(Text(f"backend: {report['backend']}", style="bold"))
    headers = ["workload", "events/s", "µs/event", "raw events/s", "ratio", "min-max", "notes"]
    out.table(headers, rows)


# --------------------------------------------------------------------------------------------
# Entry points


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    command = typer.main.get_command(app)
    return int(command.main(args=argv, prog_name=PROG, standalone_mode=False))
