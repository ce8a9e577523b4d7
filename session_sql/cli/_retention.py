"""``prune``: retention as an operator (or a scheduled job) runs it, over ``SessionStore.prune``."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from session_sql.cli._browse import _label_pairs
from session_sql.cli._root import (
    JsonOption,
    LabelOption,
    StoreOptions,
    UserOption,
    app,
    example,
    store_options,
)
from session_sql.cli._support import (
    CliError,
    Out,
    counted,
    format_time,
    progress_bar,
)

if TYPE_CHECKING:
    from session_sql import PrunedSession, PruneReport, SessionStore

# The store's names and rich are imported inside the command (docs/performance.md, "CLI
# startup").

_UNITS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_AGE = re.compile(r"(\d{1,9})([smhdw])")


def parse_age(text: str) -> int:
    """``30d``, ``12h``, ``90m``, ``45s`` or ``2w`` as milliseconds; a usage error otherwise."""
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise typer.BadParameter(
            f"{text!r} is not an age such as 30d, 12h, 90m, 45s or 2w",
            param_hint="'--older-than'",
        )
    return int(match.group(1)) * _UNITS[match.group(2)]


@app.command(
    epilog=example(
        "session-sql prune --older-than 30d --archive archive/ --json",
        "session-sql prune --user alice --dry-run",
    )
)
@store_options()
def prune(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="AGE",
            help="Sessions last written to more than AGE ago (30d, 12h, 90m, 45s, 2w).",
            show_default=False,
        ),
    ] = None,
    user: UserOption = None,
    label: LabelOption = None,
    archive: Annotated[
        Path | None,
        typer.Option(
            "--archive",
            metavar="DIR",
            help="First write each session to DIR as JSONL, DIR created if missing "
            "('session-sql import DIR' restores).",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be deleted; change nothing.")
    ] = False,
    *,
    db: StoreOptions,
    as_json: JsonOption = False,
) -> None:
    """Delete whole sessions by age, user or label: retention and erasure.

    Deletes every session of --tenant that matches all the selectors given (at least one),
    oldest first, in short transactions, so writers keep going meanwhile; a session written
    to after it was selected is kept. With --archive DIR each session is first written to
    DIR/NAME~TAG.jsonl and synced to disk, so nothing is deleted that is not archived: NAME
    as 'export --all' names the file, TAG 16 hex digits that differ for every session (an
    id created again, the same id in another tenant), so an archive is never overwritten by
    another session's. Interrupted, run it again: it finishes the same work, rewriting the
    same files (no second copy) and taking over what the killed run left. Forks keep
    their own copies of what they inherited. --user USER alone erases everything of that
    user in the tenant; --json prints a report to file (ids, event counts, bytes, archive
    files, start and end times). Nothing to do costs one index lookup, so it can run on a
    schedule.
    """
    if older_than is None and user is None and not label:
        raise CliError("give --older-than, --user or --label (what to prune)", code=2)
    before = None if older_than is None else time.time_ns() // 1_000_000 - parse_age(older_than)
    labels = _label_pairs(label or [])
    if archive is not None and not dry_run and not archive.exists():
        try:  # as 'export -d' does; a dry run writes nothing, not even the directory
            archive.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CliError(f"--archive {archive}: cannot create it: {exc.strerror or exc}") from exc
    out = Out()
    with db.open() as store, progress_bar() as progress:
        task = progress.add_task("checking" if dry_run else "pruning", total=None)

        def advance(session: PrunedSession) -> None:
            progress.advance(task)

        report = _prune(store, before, user, labels, archive, dry_run, advance)
    if as_json:
        out.json(report_json(report))
        return
    _print(out, report)


def _prune(
    store: SessionStore,
    before: int | None,
    user: str | None,
    labels: dict[str, str],
    archive: Path | None,
    dry_run: bool,
    progress: Callable[[PrunedSession], None],
) -> PruneReport:
    """``store.prune``, its refusal of the archive directory said in the option's name."""
    from session_sql import InvalidArgumentError

    try:
        return store.prune(
            updated_before=before,
            user_id=user,
            labels=labels or None,
            archive_dir=archive,
            dry_run=dry_run,
            progress=progress,
        )
    except InvalidArgumentError as exc:
        if exc.argument != "archive_dir":
            raise
        raise CliError(str(exc).replace("archive_dir", "--archive", 1)) from exc


def report_json(report: PruneReport) -> dict[str, Any]:
    """The report as JSON, with its totals."""
    return {
        **report.model_dump(),
        "deleted": 0 if report.dry_run else len(report.sessions),
        "events": report.events,
        "bytes": report.bytes,
    }


def _print(out: Out, report: PruneReport) -> None:
    verb = "would delete" if report.dry_run else "deleted"
    if report.sessions:
        rows = [
            [
                s.id,
                s.user_id or "",
                format_time(s.updated_at),
                f"{s.events:,}",
                f"{s.bytes:,}",
                *([s.archive or ""] if report.archive_dir and not report.dry_run else []),
            ]
            for s in report.sessions
        ]
        headers = ["ID", "USER", "UPDATED (UTC)", "EVENTS", "BYTES"]
        if report.archive_dir and not report.dry_run:
            headers.append("ARCHIVE")
        out.table(headers, rows)
    done = counted(len(report.sessions), "session")
    out.line(f"{verb} {done} ({counted(report.events, 'event')}, {report.bytes:,} bytes)")
    if report.kept:
        out.line(f"kept {len(report.kept):,} written to meanwhile: {', '.join(report.kept)}")
