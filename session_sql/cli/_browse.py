"""Commands that create and read sessions: ``demo``, ``init``, ``ls``, ``title``, ``show``,
``tail``."""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from session_sql import SessionEvent, SessionNotFoundError, fold_surface
from session_sql.cli._root import (
    JsonOption,
    LabelOption,
    SessionArg,
    StoreOptions,
    UserOption,
    app,
    example,
    store_options,
)
from session_sql.cli._support import (
    PROG,
    CliError,
    Out,
    format_time,
    resolve_id,
    when_ms,
)

if TYPE_CHECKING:
    from session_sql.quick import StoreReads

# The renderers (rich), the store and the demo are imported inside the commands that use
# them: --help and --version load none of them (docs/performance.md, "CLI startup").


@app.command(
    epilog=example(
        "session-sql demo", "session-sql demo --url postgresql://postgres@localhost/agents"
    )
)
@store_options()
def demo(*, db: StoreOptions) -> None:
    """Record a realistic agent session and show it.

    The session has streamed replies, tool calls, a pruned tool result, a compaction summary,
    a fork at an earlier turn (where the user later says "forget that", and a surface/removed
    takes their message and the reply off the fork's surface), and a crash inside a turn that
    is then repaired. The command prints what the model sees now, the raw log in brief, what
    each replacement shadows, the verify results, and SQL queries to explore the tables. Run
    it again for a new session.
    """
    from session_sql.cli._render import demo_report
    from session_sql.cli.demo import explore_queries, record_demo

    with db.open(create=True):
        pass  # fail early, before recording, when the URL or schema is unusable
    run = record_demo(db.url, schema=db.schema, tenant=db.tenant)
    out = Out()
    with db.open() as store:
        events = list(store.events(run.session_id))
        fork_events = list(store.events(run.fork_id))
        messages = store.messages(run.session_id)
        fold = fold_surface(events, catalog=store.catalog)
        reports = [store.verify(run.session_id), store.verify(run.fork_id)]
        where, database_file = store.display_url, store.database_file
        is_postgres = store.schema is not None
    if is_postgres:
        shell = f'psql "{where.replace("+psycopg", "")}"'
        search_path: str | None = db.schema
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


@app.command(epilog=example("session-sql init --url postgresql://postgres@localhost/agents"))
@store_options()
def init(
    *,
    db: StoreOptions,
    distributed: Annotated[
        bool | None,
        typer.Option(
            "--distributed/--plain",
            help="Distribute the tables over a Citus cluster (the default where the citus "
            "extension is installed), or keep them plain tables even there.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Create the tables, or check an existing store.

    An empty database (or a missing SQLite file) is initialised; an existing store is checked
    by the schema gate, which refuses a database written by another schema version. A
    distributed store that lacks this build's append function gets it.
    """
    from session_sql import SCHEMA_VERSION

    with db.open(create=True, distributed=distributed) as store:
        where = store.display_url + (f" (schema {store.schema})" if store.schema else "")
        layout = ", distributed" if store.distributed else ""
    Out().line(f"store ready: {where}, schema version {SCHEMA_VERSION}{layout}")


class SortOrder(StrEnum):
    """``ls --sort``: the orders ``list_sessions`` pages by."""

    updated = "updated"
    created = "created"


@app.command(
    epilog=example(
        "session-sql ls --limit 5 --user alice --label team=support",
        "session-sql ls --since 7d --sort created --json | jq '.[0].id'",
    )
)
@store_options()
def ls(
    *,
    db: StoreOptions,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, metavar="N", help="At most this many.")
    ] = 20,
    after: Annotated[
        str | None,
        typer.Option(
            "--after",
            metavar="ID",
            help="Page on: list the sessions after this one (an id or a unique prefix).",
        ),
    ] = None,
    parent: Annotated[
        str | None,
        typer.Option(
            "--parent",
            metavar="ID",
            help="Only forks of this session (an id or a unique prefix).",
        ),
    ] = None,
    user: UserOption = None,
    label: LabelOption = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="WHEN",
            help="Only sessions created at or after WHEN: a UTC date or time (2026-12-01, "
            "2026-12-01T09:30) or a time ago (90m, 12h, 7d, 2w).",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until", metavar="WHEN", help="Only sessions created before WHEN (as --since)."
        ),
    ] = None,
    sort: Annotated[
        SortOrder,
        typer.Option(
            "--sort",
            metavar="updated|created",
            help="updated: most recently updated first; created: oldest first, in the order "
            "they were created (which no write changes).",
        ),
    ] = SortOrder.updated,
    reverse: Annotated[
        bool,
        typer.Option(
            "--reverse", "-r", help="The opposite order: oldest-updated or newest-created first."
        ),
    ] = False,
    hidden: Annotated[
        bool,
        typer.Option(
            "--hidden",
            help="Also list hidden sessions (labelled session_sql.hidden=true: a framework's "
            "bookkeeping, such as the ADK service's app and user state).",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List sessions, most recently updated first, with their title, user and event count.

    On a terminal, a last line counts the sessions listed and how many match in all (of N)
    and, when there are more, names the --after that lists the next page.
    """
    labels = _label_pairs(label or [])
    created_after = None if since is None else when_ms(since, "--since")
    created_before = None if until is None else when_ms(until, "--until")
    filters: dict[str, Any] = {
        "parent": parent,
        "user_id": user,
        "labels": labels or None,
        "created_after": created_after,
        "created_before": created_before,
        "include_hidden": hidden,
    }
    out = Out()
    with db.reader() as store:
        if after is not None:
            after = _option_id(store, "--after", after)
        if parent is not None:
            filters["parent"] = parent = _parent_id(store, parent)
        # One more than shown, in the same query: whether a next page exists.
        found = store.list_sessions(
            limit=limit + 1, after=after, order=sort.value, reverse=reverse, **filters
        )
        # The total, for the terminal's last line only (a pipe and --json get none).
        total = store.count_sessions(**filters) if out.tty and not as_json and found else 0
    infos, more = found[:limit], len(found) > limit
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
    if out.tty:  # a pipe gets the bare table, for cut and awk
        shown = f"{len(rows)} of {total}" if total != len(rows) else str(total)
        count = f"{shown} session{'s' if total != 1 else ''}"
        out.line(f"{count}; the next page: --after {infos[-1].id}" if more else count)


def _option_id(store: StoreReads, option: str, given: str) -> str:
    """The session an id option names, by id or unique prefix as ID arguments are."""
    try:
        return resolve_id(store, given)
    except (CliError, SessionNotFoundError) as exc:
        raise CliError(f"{option}: {exc}") from exc


def _parent_id(store: StoreReads, given: str) -> str:
    """``--parent``: as ``_option_id``, but a deleted parent's full id still names its forks
    (they keep it as their parent, and ``ls`` shows it in the PARENT column)."""
    try:
        return _option_id(store, "--parent", given)
    except CliError:
        if store.list_sessions(parent=given, limit=1):
            return given
        raise


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


@app.command(epilog=example('session-sql title 3f2a9c "Refund for order 1042"'))
@store_options()
def title(
    session: SessionArg,
    text: Annotated[
        str,
        typer.Argument(metavar="TITLE", help='The new title ("" clears it).', show_default=False),
    ],
    *,
    db: StoreOptions,
) -> None:
    """Set a session's title (shown by 'session-sql ls').

    The title is metadata: the session's log and its updated time do not change. An agent
    sets it too, by appending a session/title event; the latest of the two wins.
    """
    with db.open() as store:
        session_id = resolve_id(store, session)
        info = store.update_session(session_id, title=text or None)
    Out().line(f"{info.id}: " + (f"title {info.title!r}" if info.title else "title cleared"))


@app.command(
    epilog=example(
        "session-sql show 3f2a9c --surface",
        "session-sql show 3f2a9c --from 40 --to 60",
    )
)
@store_options()
def show(
    session_id: SessionArg,
    *,
    db: StoreOptions,
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
    last: Annotated[
        int | None,
        typer.Option(
            "--last",
            min=0,
            metavar="N",
            help="Print only the last N messages (numbered from the end: [-N] to [-1]).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Show a session's messages, raw log, or surface.

    By default: the messages a model would be sent, in order; --last N only the final N,
    read from the end of the surface (quick on a long session). --events: the raw log (every
    event, shadowed ones included); --from and --to pick a range of it by seq. --surface: the
    surface nodes replayed from the log, and which events each replacement shadows.
    """
    from rich.text import Text

    from session_sql.cli._render import message_lines, replacement_lines, surface_lines

    ranged = from_seq is not None or to_seq is not None
    if surface and (events or ranged):
        raise CliError("--surface excludes --events, --from and --to", code=2)
    if last is not None and (surface or events or ranged):
        raise CliError("--last is for messages: it excludes --surface, --events, --from, --to", 2)
    out = Out()
    with db.reader() as store:
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
        messages = store.messages(session_id, last=last)
    if as_json:
        out.json(messages)
        return
    if not messages and last != 0:
        out.line(f"no messages: the surface of {session_id} is empty")
    first = 0 if last is None else -len(messages)
    for i, message in enumerate(messages, start=first):
        lines = message_lines(message)
        out.line(Text.assemble((f"[{i}] ", "dim")) + lines[0])
        out.lines(lines[1:])


def _show_events(
    store: StoreReads,
    out: Out,
    session_id: str,
    from_seq: int,
    to_seq: int | None,
    as_json: bool,
) -> None:
    """``show --events``: the raw log in [from_seq, to_seq), and a note when that is empty."""
    from session_sql.cli._render import event_line

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


@app.command(epilog=example("session-sql tail 3f2a9c -n 20", "session-sql tail 3f2a9c -f --json"))
@store_options()
def tail(
    session_id: SessionArg,
    *,
    db: StoreOptions,
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
    from session_sql.cli._render import event_line

    out = Out()

    def emit(event: SessionEvent) -> None:
        if as_json:
            out.json_line(event.to_wire())
        else:
            out.line(event_line(event, width=88, with_time=True))
        sys.stdout.flush()

    def last_events(store: StoreReads) -> tuple[str, int]:
        """Print the last ``lines`` events; the session's full id and head seq."""
        resolved = resolve_id(store, session_id)
        head = store.head_seq(resolved)
        recent = store.events(resolved, from_seq=max(0, head - lines + 1), to_seq=head + 1)
        for event in deque(recent, min(lines, head + 1)):  # (-n can be huge)
            emit(event)
        if head < 0 and not as_json:
            out.line(f"no events: the log of {resolved} is empty")
        return resolved, head

    try:
        if not follow:
            with db.reader() as reads:
                last_events(reads)
            return
        with db.open() as store:  # a follow needs the full store
            followed, head = last_events(store)
            for event in store.follow(followed, after_seq=head, timeout=timeout):
                emit(event)
    except KeyboardInterrupt:
        if not follow:
            raise
        # Ctrl-C is how -f is meant to stop, at any moment: a normal end, exit code 0.
