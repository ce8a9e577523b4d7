"""The plumbing of the ``session-sql`` CLI: exit codes, output policy, progress, opening stores.

* **Exit codes** are decided in one place, :func:`run_guarded`: 0 ok (also when the reader of
  a pipe goes away early); 1 a check failed or the command could not do its job (missing or
  ambiguous session, bad file, unreachable database); 2 a usage error. Every error is one line
  on stderr; with ``--debug`` the traceback comes first.
* **Session ids** may be given by a unique prefix, as in git (:func:`resolve_id`).
* **Output** (:class:`Out`): styled text and tables only when stdout is a terminal, plain text
  when it is piped, plain JSON with ``--json``. Progress bars go to stderr, only on a terminal.
* **Imports**: rich, the store (SQLAlchemy, psycopg) and the bench and demo modules are
  imported by the code that uses them, not at start-up, so that ``--help``, ``--version`` and
  the reading commands start quickly (docs/performance.md, "CLI startup").
"""

from __future__ import annotations

import io
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from session_sql import (
    ConfigurationError,
    SessionNotFoundError,
    SessionSQLError,
    StoreError,
    thaw,
)

if TYPE_CHECKING:  # rich and the store load when a command uses them (startup time)
    from rich.console import Console
    from rich.progress import Progress
    from rich.text import Text

    from session_sql import SessionStore
    from session_sql.quick import StoreReads

__all__ = [
    "PROG",
    "CliError",
    "CountingReader",
    "CountingWriter",
    "GuardedGroup",
    "Out",
    "State",
    "cli_reader",
    "cli_store",
    "error_line",
    "format_time",
    "isatty",
    "one_line",
    "progress_bar",
    "resolve_id",
    "warn",
    "when_ms",
]

PROG = "session-sql"


# --------------------------------------------------------------------------------------------
# Errors and exit codes


class CliError(Exception):
    """A command could not do its job: one line on stderr, then exit ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class State:
    """Per-invocation settings the root command fills in (``ctx.obj``)."""

    debug: bool = False


def one_line(text: str) -> str:
    """``text`` with its lines joined by spaces (an error is one line on stderr)."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def error_line(message: str) -> None:
    """One error line on stderr."""
    sys.stderr.write(f"{PROG}: error: {one_line(message)}\n")
    sys.stderr.flush()


def warn(message: str) -> None:
    """One warning line on stderr."""
    sys.stderr.write(f"{PROG}: warning: {one_line(message)}\n")


def counted(count: int, noun: str) -> str:
    """``"1 session"``, ``"1,024 sessions"``: a count with its noun, in the right number."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def format_time(ms: int) -> str:
    """Epoch milliseconds as an ISO-8601 UTC timestamp with seconds.

    The store keeps any safe integer as a time (an event's ``time`` is the writer's clock):
    one outside the years 1 to 9999 is shown as its milliseconds, so a listing never fails
    on one row."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms"


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def when_ms(given: str, option: str) -> int:
    """An option's time as epoch milliseconds: an ISO-8601 date or time (UTC unless it names
    an offset), or a time ago as a number and a unit (``90m``, ``12h``, ``7d``, ``2w``).

    Anything else is a usage error (exit code 2) naming the option.
    """
    text = given.strip()
    number, unit = text[:-1], text[-1:].lower()
    if unit in _UNITS and number.isdigit():
        now = datetime.now(tz=UTC).timestamp()
        return int((now - int(number) * _UNITS[unit]) * 1000)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{given!r} is neither a date or time (2026-12-01, 2026-12-01T09:30) nor a time "
            "ago (90m, 12h, 7d, 2w)",
            param_hint=f"'{option}'",
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def isatty(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (false for anything that cannot tell)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def run_guarded(invoke: Callable[[], Any], state: State) -> int:
    """Run the command line; map every outcome to an exit code and at most one error line."""
    try:
        result = invoke()
    except typer.TyperException as exc:  # click's usage errors (exit code 2) and friends
        code = int(getattr(exc, "exit_code", 1))
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else PROG
        hint = f" (see '{where} --help')" if code == 2 else ""
        error_line(exc.format_message() + hint)
        return code
    except typer.Abort:
        error_line("aborted")
        return 1
    except KeyboardInterrupt:
        return 130
    except (BrokenPipeError, _PipeClosedError):
        # The reader went away (``| head -1``): it had what it wanted, so stop quietly with 0,
        # and keep the interpreter from complaining when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (CliError, SessionSQLError) as exc:
        if state.debug:
            traceback.print_exc()
        error_line(str(exc))
        return exc.code if isinstance(exc, CliError) else 1
    except Exception as exc:
        if state.debug:
            traceback.print_exc()
        checked = _invalid_value(exc)
        if checked is not None:
            error_line(checked)
            return 1
        if state.debug:
            error_line(f"{type(exc).__name__}: {exc}")
        else:
            error_line(f"{type(exc).__name__}: {exc} (run with --debug for a traceback)")
        return 1
    return result if isinstance(result, int) else 0


def _invalid_value(exc: Exception) -> str | None:
    """A value pydantic refused, said as one line: each field and why, without pydantic's
    headings and prefixes ("1 validation error for ...", "Value error, ")."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return None
    reasons = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        why = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        reasons.append(f"{where}: {why}" if where else why)
    return "; ".join(reasons)


class _PipeClosedError(Exception):
    """stdout's reader went away; carried past click, which would turn it into exit 1."""


class GuardedGroup(TyperGroup):
    """The root command: runs non-standalone and routes every outcome through ``run_guarded``.

    Both the console script and typer's ``CliRunner`` come through ``main``, so tests see the
    same exit codes and error lines as users.
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        state = State(debug=os.environ.get("SESSION_SQL_DEBUG", "") not in ("", "0"))
        extra["obj"] = state

        def invoke() -> Any:
            result = super(GuardedGroup, self).main(
                args=args,
                prog_name=PROG,
                complete_var=complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
            sys.stdout.flush()  # a closed pipe shows up here at the latest
            return result

        code = run_guarded(invoke, state)
        if standalone_mode:
            sys.exit(code)
        return code

    def invoke(self, ctx: Any) -> Any:  # click's Context (vendored by typer, typed privately)
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise _PipeClosedError() from exc


# --------------------------------------------------------------------------------------------
# Output


class Out:
    """stdout: styled on a terminal, plain text in a pipe, plain JSON with ``--json``."""

    def __init__(self) -> None:
        self.tty = isatty(sys.stdout)
        self.console: Console | None = None
        if self.tty:
            from rich.console import Console

            self.console = Console(file=sys.stdout, highlight=False, markup=False, emoji=False)

    def line(self, text: Text | str = "") -> None:
        if self.console is not None:
            self.console.print(text)
        else:
            sys.stdout.write((text if isinstance(text, str) else text.plain) + "\n")

    def lines(self, texts: Sequence[Text | str], indent: str = "") -> None:
        for text in texts:
            if isinstance(text, str):
                self.line(indent + text)
            else:  # a rich Text: rich is loaded already
                from rich.text import Text

                self.line(Text(indent) + text)

    def heading(self, text: str) -> None:
        self.line("")
        if self.console is None:
            self.line(text)
        else:
            from rich.text import Text

            self.line(Text(text, style="bold underline"))

    def table(
        self, headers: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None
    ) -> None:
        """A rich table on a terminal; aligned plain columns otherwise."""
        if self.console is not None:
            from rich.table import Table

            table = Table(title=title, title_justify="left", header_style="bold")
            for i, header in enumerate(headers):
                # The first column holds ids (or names) that must stay whole to be copied.
                table.add_column(header, no_wrap=i == 0, overflow="fold")
            for row in rows:
                table.add_row(*row)
            self.console.print(table)
            return
        if title:
            sys.stdout.write(f"{title}\n")
        columns = zip(headers, *rows, strict=True)
        widths = [max(len(str(cell)) for cell in column) for column in columns]
        for row in (headers, *rows):
            cells = [str(c).ljust(w) for c, w in zip(row, widths, strict=True)]
            sys.stdout.write("  ".join(cells).rstrip() + "\n")

    @staticmethod
    def json(value: Any) -> None:
        """One JSON document, indented."""
        sys.stdout.write(json.dumps(thaw(value), ensure_ascii=False, indent=2) + "\n")

    @staticmethod
    def json_line(value: Any) -> None:
        """One compact JSON value on its own line (JSON Lines)."""
        sys.stdout.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")

    @staticmethod
    def json_array(items: Iterator[Any]) -> None:
        """Stream a JSON array, one element per line, without holding it in memory."""
        sys.stdout.write("[")
        first = True
        for item in items:
            sys.stdout.write("\n" if first else ",\n")
            sys.stdout.write(json.dumps(item, ensure_ascii=False, separators=(",", ":")))
            first = False
        sys.stdout.write("]\n" if first else "\n]\n")


def progress_bar(*, in_bytes: bool = False) -> Progress:
    """A transient progress bar on stderr, disabled unless stderr is a terminal."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    terminal = isatty(sys.stderr)
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn() if in_bytes else MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(file=sys.stderr, force_terminal=terminal),
        transient=True,
        disable=not terminal,
    )


class CountingWriter(io.TextIOBase):
    """Passes text through to ``target`` and reports each line written (for a progress bar)."""

    def __init__(self, target: IO[str], on_lines: Callable[[int], None]) -> None:
        self._target = target
        self._on_lines = on_lines

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        written = self._target.write(text)
        self._on_lines(text.count("\n"))
        return written


class CountingReader:
    """Reads lines of a binary file and reports the bytes read (for a progress bar).

    Reports in steps of ``step`` bytes (and the rest at the end), not at every line, so a
    file of a million short lines does not redraw the bar a million times.
    """

    def __init__(self, source: IO[bytes], on_bytes: Callable[[int], None], step: int = 1 << 16):
        self._source = source
        self._on_bytes = on_bytes
        self._step = step
        self._pending = 0
        self.name = getattr(source, "name", None)  # the file name error messages show

    def _count(self, data: bytes) -> bytes:
        self._pending += len(data)
        if self._pending >= self._step or not data:
            self._on_bytes(self._pending)
            self._pending = 0
        return data

    def readline(self, size: int = -1) -> bytes:
        return self._count(self._source.readline(size))

    def __iter__(self) -> CountingReader:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line


# --------------------------------------------------------------------------------------------
# Opening the store, naming sessions

AMBIGUOUS_SHOWN = 8  # an ambiguous prefix lists at most this many of the ids it matches


@contextmanager
def cli_store(
    url: str,
    schema: str,
    *,
    tenant: str = "",
    create: bool = False,
    distributed: bool | None = None,
) -> Iterator[SessionStore]:
    """Open the store (scoped to ``tenant``); unless ``create``, a missing or empty store is an
    error, never created.

    A URL, schema or tenant name the library refuses is a usage error (exit code 2).
    """
    from session_sql import open_store

    try:
        store = open_store(
            url, schema=schema, tenant=tenant, create=create, distributed=distributed
        )
    except ConfigurationError as exc:
        if exc.option == "distributed":
            raise CliError(str(exc), code=2) from exc
        if exc.option == "tenant":
            raise CliError(f"invalid --tenant {tenant!r}: {exc}", code=2) from exc
        if exc.option == "url":
            raise CliError(f"invalid --url {url!r}: {exc}", code=2) from exc
        raise CliError(f"invalid --url or --schema: {exc}", code=2) from exc
    except StoreError as exc:
        if exc.path is None:
            raise
        raise CliError(
            f"no store at {exc.path} (create one with '{PROG} init' or '{PROG} demo', "
            "or pass --url / SESSION_SQL_URL)"
        ) from exc
    try:
        yield store
    finally:
        store.close()


@contextmanager
def cli_reader(url: str, schema: str, *, tenant: str = "") -> Iterator[StoreReads]:
    """The store as the reading commands (``ls``, ``show``, ``tail``) see it: on a SQLite file
    that is exactly this build's store, a quick reader that loads no SQLAlchemy
    (``backends.sqlite.quick``); otherwise the store ``cli_store`` opens, errors and all."""
    from session_sql.quick import open_quick

    quick = open_quick(url, schema, tenant)
    if quick is None:
        with cli_store(url, schema, tenant=tenant) as store:
            yield store
        return
    try:
        yield quick
    finally:
        quick.close()


def resolve_id(store: StoreReads, given: str) -> str:
    """The session ``given`` names: that exact id, else the one id that starts with it (git's
    rule). No match is ``SessionNotFoundError``; several are an error listing them (exit 1,
    like a missing session: whether a prefix is unique depends on what the store holds).
    """
    try:
        store.head_seq(given)
        return given
    except SessionNotFoundError as missing:
        if not given:
            raise
        matches = [
            info.id
            for info in store.list_sessions(
                id_prefix=given, limit=AMBIGUOUS_SHOWN + 1, order="created"
            )
        ]
        if not matches:
            raise CliError(
                f"session {given!r} not found: no session id is or starts with it (see '{PROG} ls')"
            ) from missing
    if len(matches) == 1:
        return matches[0]
    shown = ", ".join(matches[:AMBIGUOUS_SHOWN])
    if len(matches) > AMBIGUOUS_SHOWN:
        count, shown = f"more than {AMBIGUOUS_SHOWN}", shown + ", ..."
    else:
        count = str(len(matches))
    raise CliError(
        f"session id prefix {given!r} is ambiguous: {count} session ids start with it "
        f"({shown}); give more of the id"
    )
