"""The ``session-sql`` application: the typer app, its root options, the options the
commands share, and session-id completion. The commands live in ``_browse``, ``_retention``,
``_transfer`` and ``_upkeep``; ``app`` puts them together."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from session_sql.cli._support import (
    PROG,
    GuardedGroup,
    State,
    cli_reader,
    cli_store,
)

if TYPE_CHECKING:
    from session_sql import SessionStore
    from session_sql.quick import StoreReads

DEFAULT_URL = "sqlite:///sessions.db"
DEFAULT_SCHEMA = "session_sql"
PROGRESS_MIN_BYTES = 1 << 20  # imports show a progress bar from this many bytes on
PROGRESS_MIN_EVENTS = 5000  # exports and verify --all from this many events/sessions on
COMPLETIONS = 50  # shell completion offers at most this many session ids


def example(*lines: str) -> str:
    """An epilog that click prints verbatim (``\\b`` stops it from re-wrapping the lines)."""
    return "\b\nExample:\n" + "\n".join(f"  {line}" for line in lines)


app = typer.Typer(
    name=PROG,
    cls=GuardedGroup,
    help=(
        "Store, inspect and analyse event-sourced LLM-agent sessions in SQLite or PostgreSQL. "
        "Start with 'session-sql demo'."
    ),
    epilog=example("session-sql demo && session-sql ls"),
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
UserOption = Annotated[
    str | None,
    typer.Option("--user", metavar="USER", help="Only this user's sessions.", show_default=False),
]
LabelOption = Annotated[
    list[str] | None,
    typer.Option(
        "--label",
        metavar="NAME=VALUE",
        help="Only sessions with this label (repeatable: every one must match).",
        show_default=False,
    ),
]


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """The store a command works on, as --url, --schema and --tenant name it."""

    url: str
    schema: str
    tenant: str = ""

    def open(
        self, *, create: bool = False, distributed: bool | None = None
    ) -> AbstractContextManager[SessionStore]:
        """``cli_store`` on this store."""
        return cli_store(
            self.url, self.schema, tenant=self.tenant, create=create, distributed=distributed
        )

    def reader(self) -> AbstractContextManager[StoreReads]:
        """``cli_reader`` on this store."""
        return cli_reader(self.url, self.schema, tenant=self.tenant)


_STORE_OPTIONS = {
    "url": (UrlOption, DEFAULT_URL),
    "schema": (SchemaOption, DEFAULT_SCHEMA),
    "tenant": (TenantOption, ""),
}
Command = TypeVar("Command", bound=Callable[..., None])


def store_options(*, tenant: bool = True) -> Callable[[Command], Command]:
    """A command's --url, --schema and --tenant (or only the first two): the command takes
    them as one keyword ``db: StoreOptions``, and its help lists them where ``where`` stands.

    Typer reads the options from the signature, so the command shown to it has them in place
    of ``db``; it is called with their values and hands them on as ``StoreOptions``.
    """
    names = ["url", "schema", "tenant"] if tenant else ["url", "schema"]

    def decorate(command: Command) -> Command:
        params: list[inspect.Parameter] = []
        for param in inspect.signature(command, eval_str=True).parameters.values():
            if param.name != "db":
                params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY))
                continue
            for name in names:
                annotation, default = _STORE_OPTIONS[name]
                params.append(
                    inspect.Parameter(
                        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
                    )
                )

        @functools.wraps(command)
        def run(**given: Any) -> None:
            command(db=StoreOptions(*(given.pop(name) for name in names)), **given)

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run  # type: ignore[return-value]

    return decorate


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


def id_argument(help: str, *, metavar: str = "ID") -> Any:
    """A session-id argument: no default shown, and shell completion of the ids in the store."""
    return typer.Argument(
        metavar=metavar, help=help, show_default=False, autocompletion=complete_session_id
    )


ID_HELP = "The session id, or a unique prefix of it."
SessionArg = Annotated[str, id_argument(ID_HELP)]
OptionalSessionArg = Annotated[str | None, id_argument(ID_HELP + " Or use --all.")]


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
