"""JSONL interchange (SPEC §1.4): line 1 the header, then one event per line.

Reading streams: a file is never held in memory whole. Only a final line without its newline
that does not parse is a torn tail (a writer died mid-line): it is dropped with a
``TornTailWarning``. Any newline-terminated line that does not parse is corruption
(``CorruptSessionError`` with its line number); blank lines are skipped wherever they are.

An export says how many events follow its header (``EVENTS_KEY``): a file holding fewer was
cut short (a copy stopped, a disk filled), whether at a line boundary or inside a line, and
is refused as corrupt rather than read as a shorter session.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import secrets
import stat
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from session_sql.errors import (
    CorruptSessionError,
    InvalidArgumentError,
    InvalidEventError,
    InvalidHeaderError,
    NotJSONError,
    PermanentStoreError,
    TornTailWarning,
)
from session_sql.events import SessionEvent, check_header, is_safe_int
from session_sql.jsoncodec import dumps_compact, loads_frozen
from session_sql.jsonvalue import FrozenDict

try:  # the lock that marks a reusable temporary file as being written (POSIX)
    import fcntl
except ImportError:  # pragma: no cover - Windows: unique temporary names only
    fcntl = None  # type: ignore[assignment]

PathLike = str | os.PathLike[str]

EVENTS_KEY = "x-session-sql-events"
"""The header key under which an export states its number of event lines (SPEC §1.4 keeps any
other header key verbatim, so a plain reader keeps it as one more key; a reader of this module
takes it out of the header and refuses a file that holds fewer events). A file holding more
is accepted: a build that does not know the key keeps it in the stored header, and a later
export of that build, grown since, still carries the old count."""


_SAFE_NAME_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789._-")
MAX_NAME_BYTES = 255
"""The file-name limit of common file systems, in bytes."""


def jsonl_file_name(session_id: str) -> str:
    """The file name ``<encoded id>.jsonl`` under which a session's export can be stored safely.

    Every byte of the id's UTF-8 outside ``[a-z0-9._-]`` is percent-encoded (``%2F`` for
    ``/``, ``%41`` for ``A``, ``%E2%98%83`` for ``☃``), and so is a leading dot: the name never
    contains a path separator, is never ``.``, ``..`` or hidden, and distinct ids give
    distinct names even on a case-insensitive file system. Percent-decoding the stem gives the
    id back, except for a name too long for a file system (over 255 bytes), which is cut and
    made unique with a hash of the id after a ``~`` (a character no encoded name contains).
    """
    encoded = "".join(
        chr(byte) if byte in _SAFE_NAME_BYTES else f"%{byte:02X}"
        for byte in session_id.encode("utf-8")
    )
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]
    name = f"{encoded}.jsonl"
    if len(name) > MAX_NAME_BYTES:
        digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:32]
        name = f"{encoded[:180]}~{digest}.jsonl"
    return name


def dumps_line(obj: Any) -> str:
    """One compact JSON line (UTF-8 text, no NaN, newline-terminated)."""
    return dumps_compact(obj) + "\n"


@contextmanager
def published_file(target: PathLike, *, reuse_temporary: bool = False) -> Iterator[IO[str]]:
    """A text file that appears at ``target`` complete, or not at all.

    It is written under a unique temporary name in the target's directory (so concurrent
    writers of one path never share a file), fsynced, then renamed over ``target``: a reader
    sees the old file or the whole new one. On an exception the temporary file is removed and
    ``target`` is left as it was. The file gets the mode an ordinary ``open`` gives (0666
    less the umask). A target that exists and is not a regular file (a device, a FIFO) is
    written in place. A file system error (a full disk, no permission) is a ``StoreError``
    naming the file and the error.

    ``reuse_temporary``: the temporary name is fixed (``.NAME.tmp``) and the file is held
    under an exclusive lock from its creation to its rename, so that a writer killed midway
    (whose file nothing else removes) leaves it to the next writer of the same target, which
    takes it over once no live process holds it; while one does, a unique name is used.
    """
    path = Path(target)
    try:
        if path.exists() and not path.is_file():
            # A device or a FIFO (/dev/null, a pipe to another program) is written in place:
            # renaming over it would replace the device with a regular file.
            with path.open("w", encoding="utf-8", newline="\n") as fh:
                yield fh
            return
        claimed = _claim_temporary(path) if reuse_temporary else None
        fd, tmp = claimed if claimed is not None else _create_temporary(path)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
                if claimed is not None:
                    # Renamed while open: its lock is held until it is in place, so no other
                    # writer takes it over (and empties it) in between.
                    os.replace(tmp, path)
            if claimed is None:
                os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        code = errno.errorcode.get(exc.errno or 0)
        why = f"{exc.strerror} ({code})" if exc.strerror and code else str(exc)
        raise PermanentStoreError(f"cannot write {path}: {why}; {path} was left as it was") from exc
    _fsync_directory(path.parent)


def _create_temporary(path: Path) -> tuple[int, str]:
    """A new file beside ``path`` under a unique name, opened for writing.

    Not ``tempfile.mkstemp``: it creates the file 0600, whereas ``os.open`` with 0666 lets the
    kernel apply the umask (and a default ACL), as for any file the user creates.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = str(path.parent / f".{path.name[:64]}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue


def _claim_temporary(path: Path) -> tuple[int, str] | None:
    """``.NAME.tmp`` beside ``path``, created or taken over, locked and emptied; ``None`` when
    a live writer holds it, it is not a regular file of ours to write, or locks are missing.

    The lock is taken on the open file, then the name is checked to still lead to it: a
    file renamed or removed by its previous holder in between is not the one to write.
    """
    if fcntl is None:  # pragma: no cover - Windows
        return None
    tmp = str(path.parent / f".{path.name}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(3):
        try:
            fd = os.open(tmp, flags, 0o666)
        except OSError:  # another user's file, a symlink, a name too long: not ours
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            mine = os.fstat(fd)
            there = os.stat(tmp, follow_symlinks=False)
            if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                if not stat.S_ISREG(mine.st_mode):
                    os.close(fd)
                    return None
                os.ftruncate(fd, 0)
                return fd, tmp
        except BlockingIOError:  # a live writer holds it
            os.close(fd)
            return None
        except OSError:  # renamed or removed by its holder meanwhile: try the name again
            pass
        os.close(fd)
    return None


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: not every platform can)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_jsonl(
    target: PathLike | IO[str], header: Any, events: Iterable[SessionEvent | dict[str, Any]]
) -> int:
    """Write a session to ``target``; returns the number of events written.

    A path is written through :func:`published_file`: it holds the whole session or nothing.
    """
    if isinstance(target, str | os.PathLike):
        with published_file(target) as fh:
            return write_jsonl(fh, header, events)
    target.write(dumps_line(header))
    count = 0
    for event in events:
        wire = event.to_wire() if isinstance(event, SessionEvent) else event
        target.write(dumps_line(wire))
        count += 1
    return count


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_refuse_constant)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads_line(text: str) -> Any:
    """An event line, parsed straight into a frozen, validated value when it is lossless JSON
    (so the envelope check copies nothing); otherwise parsed as before, so that the envelope
    check names the bad value's path, or the line's parse error is raised."""
    try:
        return loads_frozen(text, root="event")
    except NotJSONError:
        return _loads(text)


def _problem(exc: BaseException) -> str:
    """Why a line does not parse, placed by column only: the caller names the file's line.

    (``JSONDecodeError`` counts lines within the text it was given, and the newline that ends
    a JSONL line makes that "line 2" -- a second, wrong line number next to the right one.)
    """
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at column {exc.pos + 1}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 (byte {exc.start + 1})"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc)


class JsonlReader:
    """Iterates the events of a JSONL file after reading its header (``.header``).

    ``source`` is a path, or a file opened in binary mode that the caller keeps and closes
    (the reader only reads it, so a caller can count the bytes as they go by).
    """

    def __init__(self, source: PathLike | IO[bytes]) -> None:
        if isinstance(source, str | os.PathLike):
            self.path = Path(source)
            self._fh: IO[bytes] = open(self.path, "rb")  # noqa: SIM115 - closed by close()
            self._owned = True
        else:
            if isinstance(source, io.TextIOBase):
                raise InvalidArgumentError(
                    "a JSONL file object must be opened in binary mode ('rb')", argument="path"
                )
            name = getattr(source, "name", None)
            self.path = Path(name if isinstance(name, str) else "<stream>")
            self._fh = source
            self._owned = False
        self.dropped_tail = False
        first = self._fh.readline()
        try:
            raw_header = _loads(first.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            self.close()
            raise CorruptSessionError(
                f"{self.path}: line 1 (the header) is not JSON: {_problem(exc)}", line=1
            ) from exc
        if not isinstance(raw_header, dict):
            self.close()
            raise CorruptSessionError(f"{self.path}: line 1 is not a header object", line=1)
        try:
            # The header is kept without ``EVENTS_KEY``: a count of this file's lines, not
            # part of the session.
            self.declared_events = _declared_events(raw_header)
            raw_header.pop(EVENTS_KEY, None)
            self.header: FrozenDict = check_header(raw_header)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the file this reader opened (a caller's file object stays open)."""
        if self._owned:
            self._fh.close()

    def corrupt(self, line: int, exc: Exception, session_id: str) -> CorruptSessionError:
        """The error for the bad event on ``line`` (an import's checks name the file's line)."""
        return CorruptSessionError(
            f"{self.path}: line {line}: {exc}", session_id=session_id, line=line
        )

    def __enter__(self) -> JsonlReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def raw_events(self) -> Iterator[tuple[int, Any]]:
        """Yield ``(line number, parsed JSON)`` for every event line, handling a torn tail.

        Blank lines are skipped. A newline-terminated line that does not parse is corruption;
        only a final line without its newline may be torn (dropped with a warning).
        """
        line_no = 1
        count = 0
        torn: tuple[int, Exception] | None = None
        try:
            for raw in self._fh:
                line_no += 1
                if raw.isspace():  # a blank line (ASCII whitespace, as strip() takes off)
                    continue
                try:
                    value = _loads_line(raw.decode("utf-8"))
                    if not raw.endswith(b"\n") and not isinstance(value, dict):
                        raise ValueError("unterminated final line is not an object")
                except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                    if raw.endswith(b"\n"):
                        raise CorruptSessionError(
                            f"{self.path}: line {line_no} is not a valid event line: "
                            f"{_problem(exc)}",
                            line=line_no,
                        ) from exc
                    torn = (line_no, exc)  # the last line: iteration ends here
                    continue
                count += 1
                yield line_no, value
        finally:
            self.close()
        if self.declared_events is not None and count < self.declared_events:
            cut = f"; its final line {torn[0]} is torn ({_problem(torn[1])})" if torn else ""
            raise CorruptSessionError(
                f"{self.path}: truncated: the header ({EVENTS_KEY}) says "
                f"{self.declared_events} events follow, the file holds {count}{cut}",
                session_id=str(self.header["id"]),
                line=line_no + 1 if torn is None else torn[0],
            )
        if torn is not None:
            self.dropped_tail = True
            warnings.warn(
                f"{self.path}: dropped a torn final line {torn[0]} "
                f"(no newline; {_problem(torn[1])})",
                TornTailWarning,
                stacklevel=2,
            )

    def values(self) -> Iterator[Any]:
        """The parsed event lines (not yet validated), torn tail handled."""
        for _, value in self.raw_events():
            yield value

    def events(self) -> Iterator[SessionEvent]:
        """Envelope-checked events (``CorruptSessionError`` names the line of a bad one)."""
        for line_no, value in self.raw_events():
            try:
                yield SessionEvent.from_json(value)
            except InvalidEventError as exc:
                raise CorruptSessionError(
                    f"{self.path}: line {line_no}: {exc}", line=line_no
                ) from exc


def _declared_events(header: dict[str, Any]) -> int | None:
    """The event count a header states under ``EVENTS_KEY`` (``None``: it states none)."""
    declared = header.get(EVENTS_KEY)
    if declared is not None and (not is_safe_int(declared) or declared < 0):
        raise InvalidHeaderError(f"header {EVENTS_KEY} must be an int >= 0, got {declared!r}")
    return declared


def read_jsonl(path: PathLike) -> tuple[FrozenDict, list[SessionEvent]]:
    """Read a whole JSONL session: ``(header, events)``."""
    reader = JsonlReader(path)
    return reader.header, list(reader.events())
