"""Commands that show a session in a browser: ``serve`` and ``view`` (SPEC §12.5)."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from session_sql.cli._root import (
    SessionArg,
    StoreOptions,
    app,
    example,
    store_options,
)
from session_sql.cli._support import CliError, Out, resolve_id

# Starlette, uvicorn and the inspector are imported inside the commands: --help and the other
# commands load none of them (the extra session-sql[serve] may not even be installed).

EXTRA_HINT = "install the extra: pip install 'session-sql[serve]'"


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bound_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound here: a busy port or an unknown address is one error line
    and exit code 1 (uvicorn would log its own error and exit 3)."""
    address = host.strip("[]")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        return socket.create_server((address, port), family=family, backlog=2048)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise CliError(f"cannot listen on {host} port {port}: {reason}") from exc


@app.command(
    epilog=example(
        "session-sql serve --url postgresql://postgres@localhost/agents --port 9000",
        "session-sql serve --host 0.0.0.0 --port 9000 --token 5f0c2a9e7d1b4c8e",
    )
)
@store_options()
def serve(
    *,
    db: StoreOptions,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            metavar="ADDRESS",
            help="The address to listen on. Anything but loopback needs --token.",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, metavar="PORT", help="The TCP port.")
    ] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="SESSION_SQL_TOKEN",
            metavar="TOKEN",
            help=(
                "Require this token on every request: 'Authorization: Bearer TOKEN', or open "
                "the printed address once (?token=...), which sets a cookie."
            ),
        ),
    ] = None,
) -> None:
    """Browse sessions in a read-only web inspector, with a JSON and Server-Sent Events API.

    Pages: the sessions (filters and paging as 'ls') and one session (the surface beside the
    log, each paged, what each replacement shadows, tool calls and results, turns and token
    usage, forks, a search over the messages, new events live). The API: /api/sessions,
    /api/sessions/ID and its /events, /messages, /surface, /search and /follow (see
    docs/inspector.md). Only GET requests are served; the store is never written. Ctrl-C
    stops it.
    """
    if not is_loopback(host) and not token:
        raise CliError(
            f"--host {host} is reachable from other machines: pass --token (any long random "
            "string) to require it on every request, or serve on 127.0.0.1",
            code=2,
        )
    try:
        import uvicorn

        from session_sql.inspector.app import LOOPBACK_HOSTS, create_app
    except ImportError as exc:
        raise CliError(f"serve needs Starlette and uvicorn ({exc}); {EXTRA_HINT}") from exc

    with bound_socket(host, port) as listening, db.open() as store:
        allowed = LOOPBACK_HOSTS if is_loopback(host) else None
        application = create_app(store, token=token, allowed_hosts=allowed)
        shown = "localhost" if is_loopback(host) else host
        address = f"http://{shown}:{listening.getsockname()[1]}/"
        if token:
            address += f"?token={token}"
        announcement = f"serving {store.display_url} (read-only) at {address}"
        server = uvicorn.Server(
            uvicorn.Config(
                application, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5
            )
        )
        startup = server.startup

        async def announced(sockets: Any = None) -> None:
            await startup(sockets=sockets)
            if server.started:  # listening now: the address answers
                Out().line(announcement)
                sys.stdout.flush()

        server.startup = announced  # type: ignore[method-assign]
        exit_handler = server.handle_exit

        def handle_exit(sig: int, frame: object) -> None:
            application.stopping.set()  # the follow streams end, then the server does
            exit_handler(sig, frame)  # type: ignore[arg-type]

        server.handle_exit = handle_exit  # type: ignore[method-assign]
        # uvicorn raises the Ctrl-C again once it has stopped: the way serve is meant to end,
        # so a normal end (exit code 0), as for tail -f.
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=[listening])


@app.command(epilog=example("session-sql view 3f2a9c -o session.html"))
@store_options()
def view(
    session_id: SessionArg,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE.html",
            help="Write the page here.",
            dir_okay=False,
            writable=True,
        ),
    ],
    *,
    db: StoreOptions,
    last: Annotated[
        int,
        typer.Option(
            "--last",
            min=1,
            metavar="N",
            help="The last N events of the log, and the last N surface nodes.",
        ),
    ] = 1000,
) -> None:
    """Write one session as a self-contained HTML page, to attach to a bug report.

    The page of 'serve' in one file: no script, no style sheet or image from elsewhere, no
    network (its Content-Security-Policy allows nothing else). It holds the last 1000 events
    of the log and the last 1000 surface nodes (all of them when there are fewer; --last for
    more or fewer), so the file of a long session stays a few MB.
    """
    from session_sql.inspector import render_file

    with db.open() as store:
        session_id = resolve_id(store, session_id)
        head = store.head_seq(session_id)
        nodes = len(store.surface(session_id))
        page = render_file(store, session_id, last=last)
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {output}: {exc.strerror or exc}") from exc
    Out().line(f"{session_id}: wrote {output} ({len(page.encode()):,} bytes)")
    if head + 1 > last:
        Out().line(f"(the last {last:,} of {head + 1:,} events: --last N for more)")
    if nodes > last:
        Out().line(f"(the last {last:,} of {nodes:,} surface nodes: --last N for more)")
