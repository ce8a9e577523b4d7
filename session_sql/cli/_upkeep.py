"""Commands that check, repair, remove and measure: ``verify``, ``repair``, ``delete``,
``stats``, ``schema``, ``bench``."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from session_sql import SessionNotFoundError, SessionSQLError, check_invariants
from session_sql.cli._root import (
    DEFAULT_SCHEMA,
    JsonOption,
    OptionalSessionArg,
    SchemaOption,
    SessionArg,
    StoreOptions,
    app,
    example,
    id_argument,
    store_options,
)
from session_sql.cli._stats import headline, skipped_line, tables
from session_sql.cli._support import (
    PROG,
    CliError,
    Out,
    counted,
    isatty,
    progress_bar,
    resolve_id,
)

if TYPE_CHECKING:
    from session_sql import SessionStore, VerifyReport

# rich, the renderers, the store's names, session_sql.schema and the benchmark are imported
# inside the commands that use them (docs/performance.md, "CLI startup").


@app.command(epilog=example("session-sql verify 3f2a9c", "session-sql verify --all --invariants"))
@store_options()
def verify(
    session_id: OptionalSessionArg = None,
    all_sessions: Annotated[bool, typer.Option("--all", help="Verify every session.")] = False,
    invariants: Annotated[
        bool,
        typer.Option(
            "--invariants", help="Also check the turn/step/tool-call invariants of each log."
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", "-q", help="Print only the sessions that fail, then the summary line."
        ),
    ] = False,
    *,
    db: StoreOptions,
    as_json: JsonOption = False,
) -> None:
    """Check stored sessions against a replay of their logs.

    Replays each log and compares the fold with the surface table and the session row. Exits
    with 1 when any session fails. With --quiet only the failures are printed (with --json:
    only their reports), then the summary line.
    """
    if session_id is None and not all_sessions:
        raise CliError("give a session id, or --all to verify every session", code=2)
    if session_id is not None and all_sessions:
        raise CliError("give a session id or --all, not both", code=2)
    from session_sql.cli._render import verify_line

    out = Out()
    reports: list[VerifyReport] = []
    with db.open() as store:
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
                if not as_json and not (quiet and reports[-1].ok):
                    out.line(verify_line(reports[-1]))
    failed = sum(1 for r in reports if not r.ok)
    if as_json:
        out.json([r.model_dump() for r in reports if not (quiet and r.ok)])
    elif len(reports) != 1 or failed or quiet:
        out.line(f"{len(reports) - failed:,} ok, {failed:,} failed")
    if failed:
        raise typer.Exit(1)


def _verify_one(
    store: SessionStore, session_id: str, invariants: bool, *, strict: bool
) -> VerifyReport:
    from session_sql import VerifyReport

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


@app.command(epilog=example("session-sql repair 3f2a9c"))
@store_options()
def repair(
    session_id: SessionArg,
    *,
    db: StoreOptions,
    as_json: JsonOption = False,
) -> None:
    """Close a turn that a crashed process left open.

    Appends an error result for each unanswered tool call, then step/end and turn/end with
    reason "interrupted". Does nothing when no turn is open.
    """
    from session_sql.cli._render import event_line

    with db.open() as store:
        session_id = resolve_id(store, session_id)
        appended = store.repair(session_id)
    out = Out()
    if as_json:
        out.json([e.to_json() for e in appended])
    elif not appended:
        out.line(f"nothing to repair: {session_id} has no open turn")
    else:
        out.line(f"appended {counted(len(appended), 'event')} to {session_id}:")
        out.lines([event_line(e, width=88) for e in appended])


@app.command(
    epilog=example(
        "session-sql delete 3f2a9c",
        "session-sql delete --yes 7b1e04c2a9d84f6e8b3c5d7e9f1a2b3c",
    )
)
@store_options()
def delete(
    session_ids: Annotated[
        list[str],
        id_argument("The sessions to delete, by id or unique prefix (full ids with --yes)."),
    ],
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Do not ask; every ID must then be a full id."),
    ] = False,
    *,
    db: StoreOptions,
    as_json: JsonOption = False,
) -> None:
    """Delete whole sessions: their rows, every event and the surface.

    An operator's action (retention, a mistaken import), not an edit of a session's history:
    to take messages off what a model sees, append a surface/removed event instead, and the
    log keeps them. Lists what it will delete and asks first (reading the answer from stdin);
    --yes skips the question, and then a prefix is refused, so that a script never deletes a
    session it did not name. Forks keep their own copies of the events they inherited; other
    sessions are not touched. Nothing is deleted unless every ID names a session. On SQLite
    the freed pages go back to the file system, as after a prune.
    """
    out = Out()
    with db.open() as store:
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
                events = f"{count:,} event" + ("" if count == 1 else "s")
                sys.stderr.write(f"  {session_id}  {events}{kept}\n")
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
        out.line(f"deleted {session_id} ({count:,} event{'' if count == 1 else 's'})")


@app.command(epilog=example("session-sql vacuum", "session-sql vacuum --full"))
@store_options(tenant=False)
def vacuum(
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Rewrite the file (SQLite: VACUUM, under the write lock) or the tables "
            "(PostgreSQL: VACUUM FULL, which locks them against readers and writers).",
        ),
    ] = False,
    *,
    db: StoreOptions,
    as_json: JsonOption = False,
) -> None:
    """Give the store's free space back, and print its size before and after.

    SQLite: the incremental vacuum a prune runs after its deletes, in short steps that let
    writers in; a file made without incremental vacuum needs --full once (it rewrites the file
    and needs free disk space of its size; writers wait). PostgreSQL: VACUUM (ANALYZE) of the
    store's tables, online: the space of deleted rows is reused by new rows and the planner's
    statistics are fresh; --full gives it back to the file system with VACUUM FULL, which
    locks the tables while it rewrites them. Covers every tenant (the tables are shared); on
    PostgreSQL the tables' owner runs it.
    """
    from dataclasses import asdict

    with db.open() as store:
        report = store.vacuum(full=full)
    out = Out()
    if as_json:
        out.json(asdict(report))
        return
    freed = report.bytes_before - report.bytes_after
    back = f" ({freed:,} bytes given back)" if freed > 0 else ""
    out.line(
        f"{report.action}: {report.bytes_before:,} bytes before, {report.bytes_after:,} after{back}"
    )
    for note in report.notes:
        sys.stderr.write(f"{PROG}: {note}\n")


@app.command(epilog=example("session-sql stats", "session-sql stats 3f2a9c --json"))
@store_options()
def stats(
    session_id: Annotated[
        str | None,
        id_argument("Only this session, by id or unique prefix (default: the whole store)."),
    ] = None,
    *,
    db: StoreOptions,
    as_json: JsonOption = False,
) -> None:
    """Summarise the store with SQL.

    Events by type, tool calls and errors by tool, tokens by model, and replacements, computed
    by SQL over the tables. A fork's inherited events count once, in its parent.
    """
    from rich.text import Text

    with db.open() as store:
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
    if skipped := skipped_line(result):
        out.line(skipped)


class Dialect(StrEnum):
    """``session-sql schema --dialect``: the names ``render_ddl`` takes."""

    sqlite = "sqlite"
    postgresql = "postgresql"


@app.command(
    name="schema",
    epilog=example("session-sql schema --dialect postgresql --schema agents > schema.sql"),
)
def schema_(
    dialect: Annotated[
        Dialect, typer.Option("--dialect", metavar="sqlite|postgresql", help="SQL dialect.")
    ] = Dialect.sqlite,
    schema: SchemaOption = DEFAULT_SCHEMA,
) -> None:
    """Print the SQL schema (DDL).

    The tables, indexes, the surface_messages view and the meta rows of the schema gate, as
    this version creates them: the text of session_sql.schema.render_ddl(DIALECT, SCHEMA).
    """
    from session_sql.schema import render_ddl

    # The option's values are render_ddl's dialect names.
    sys.stdout.write(render_ddl(dialect.value, schema))


@app.command(
    epilog=example(
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
                "Run only these workloads (comma-separated, W1 to W13; W4, W5, W9 and W10"
                " share one setup and run together). W12, the store grown to 10M events"
                " (a long run), runs only when named; W13 needs --citus-url."
            ),
        ),
    ] = None,
    citus_url: Annotated[
        str | None,
        typer.Option(
            "--citus-url",
            metavar="URL",
            envvar="SESSION_SQL_BENCH_CITUS_URL",
            help=(
                "postgresql://... of a Citus coordinator: W13 times one session's operations"
                " on a distributed store there (a throwaway schema) beside a plain store on"
                " --url (PostgreSQL), and reports Citus time over plain time."
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
    file or schema of its own. W13 (with --citus-url) reports a distributed store on a Citus
    coordinator against a plain store on --url: Citus time over plain time, per operation.
    """

    def progress(name: str) -> None:
        sys.stderr.write(f"{PROG}: bench: {name} ...\n")

    selected = None
    if only is not None:
        selected = frozenset(name.strip().upper() for name in only.split(",") if name.strip())
        unknown = sorted(selected - {f"W{i}" for i in range(1, 14)})
        if unknown or not selected:
            named = ", ".join(unknown) or "(none given)"
            raise CliError(f"--only: unknown workloads {named}; give W1 to W13", code=2)
    from rich.text import Text

    from session_sql.cli import bench as workloads

    report = workloads.run(url, quick=quick, progress=progress, only=selected, citus_url=citus_url)
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
