"""Retention: ``prune`` deletes whole sessions, oldest first, in bounded batches (SPEC §12.3).

The walk is one generator, ``prune_steps``, shared by the sync and the async store: it yields
what to do next (read a page of candidates, archive one session, delete a batch, give space
back) and is sent the result, so the rules — the order, the batch bounds, archive before
delete, a moved session kept — live here once and each store only does the I/O.

Why it is safe to kill at any point: a session's archive file is published (written under a
temporary name, fsynced, renamed, its directory fsynced) before the transaction deleting it
begins, and each delete is conditional on the row being the one selected and archived
(``updated_at``, ``head_seq``, ``incarnation`` and the metadata unchanged), so a session
appended to or edited meanwhile is kept. A re-run selects what is left and rewrites an
archive file whole.

Why an archive is never overwritten by another session: its name carries, after the id's
``jsonl_file_name`` stem, a digest of the session's tenant and incarnation (the row's own
identity, new for every session created, imported or recreated under a reused id). The
same session always gets the same name (a re-run rewrites its file, no second copy); another
session, in another tenant or a later one under the same id, gets another. The temporary
file has a fixed name too, locked while written, so a re-run takes over what a killed run
left (``published_file(reuse_temporary=True)``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Connection, and_, delete, func, or_, select, tuple_

from session_sql._store.context import StoreContext
from session_sql._store.database import read_tx, translate_errors, write_tx
from session_sql._store.listing import own
from session_sql._store.metadata import check_labels, check_user_id
from session_sql.arguments import clamp, int_arg
from session_sql.errors import InvalidArgumentError
from session_sql.jsonl import MAX_NAME_BYTES, jsonl_file_name

__all__ = [
    "PruneReport",
    "PrunedSession",
    "archive_file_name",
    "check_request",
    "prune_steps",
    "run",
]

PAGE_SESSIONS = 200
"""Candidates read per query (one short read of the index that answers the order)."""
BATCH_SESSIONS = 100
BATCH_EVENTS = 20_000
"""A delete transaction holds at most this many sessions, and stops adding sessions once it
holds this many events (a bigger session is a transaction of its own): the write lock
(SQLite) or the row locks (PostgreSQL) are held for one bounded batch, never for the run."""
MAX_PAUSE = 0.2
"""The longest pause between two delete transactions (see ``Pause``), in seconds."""
VACUUM_PAGES = 256
"""Pages an SQLite incremental vacuum step gives back per transaction (1 MiB of 4 KiB pages)."""


class PrunedSession(BaseModel):
    """One session ``prune`` deleted (or, in a dry run, would delete)."""

    model_config = ConfigDict(frozen=True)

    id: str
    user_id: str | None
    parent_session: str | None
    updated_at: int
    events: int
    """Rows of its log (``head_seq + 1``, a fork's inherited copies included)."""
    bytes: int
    """Bytes of its events' data, as stored (UTF-8 JSON text)."""
    archive: str | None = None
    """The archive file written before it was deleted (``None`` without ``archive_dir``)."""


class PruneReport(BaseModel):
    """What ``prune`` selected and did: a record an operator can file (``model_dump()``)."""

    model_config = ConfigDict(frozen=True)

    tenant: str
    dry_run: bool
    updated_before: int | None
    user_id: str | None
    labels: dict[str, str]
    archive_dir: str | None
    started_at: int
    finished_at: int
    """Milliseconds since the epoch (the store's clock)."""
    sessions: list[PrunedSession]
    """Deleted (dry run: selected) sessions, oldest update first."""
    kept: list[str] = []
    """Selected, then written to (or deleted) by someone else before its delete: not deleted
    then (a later page selects it again if its new last update still matches)."""

    @property
    def events(self) -> int:
        return sum(s.events for s in self.sessions)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.sessions)


@dataclass(frozen=True, slots=True)
class PruneRequest:
    """``prune``'s arguments, checked."""

    updated_before: int | None
    user_id: str | None
    labels: dict[str, str]
    archive_dir: Path | None
    dry_run: bool


@dataclass(frozen=True, slots=True)
class Candidate:
    """A selected session, with the row values its delete is conditional on."""

    session: PrunedSession
    key: int
    head_seq: int
    incarnation: str
    metadata: tuple[Any, ...]
    """``(user_id, title, labels)`` as selected: an edit of them (which moves no
    ``updated_at``) between the archive and the delete keeps the session."""


# The steps ``prune_steps`` yields, and what each is sent back.


@dataclass(frozen=True, slots=True)
class ReadPage:
    """``read_page(ctx, request, after)`` -> ``list[Candidate]``."""

    request: PruneRequest
    after: tuple[int, str] | None


@dataclass(frozen=True, slots=True)
class Archive:
    """Export ``session_id`` to ``path`` -> the number of events written (``None``: gone)."""

    session_id: str
    path: Path


@dataclass(frozen=True, slots=True)
class Delete:
    """``delete_batch(ctx, batch)`` -> one bool per candidate: deleted or not."""

    batch: Sequence[Candidate]


@dataclass(frozen=True, slots=True)
class Pause:
    """Sleep ``seconds`` -> None: a database with one write lock lets waiting writers in."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Reclaim:
    """``ctx.backend.reclaim_space(ctx.engine, VACUUM_PAGES)`` -> None."""


Step = ReadPage | Archive | Delete | Pause | Reclaim
Progress = Callable[[PrunedSession], None]


def check_request(
    updated_before: object,
    user_id: object,
    labels: object,
    archive_dir: object,
    dry_run: object,
) -> PruneRequest:
    """``prune``'s arguments, or ``InvalidArgumentError`` before anything is read or written.

    At least one selector is required: an empty call would delete the tenant's every session.
    ``archive_dir`` must be a directory this process can create files in (tried), except in
    a dry run, which writes nothing (it may then not exist yet).
    """
    before = (
        None
        if updated_before is None
        else clamp(int_arg("updated_before", updated_before, minimum=0))
    )
    user = check_user_id(user_id, argument="user_id")
    wanted = check_labels(labels, "labels")
    if not isinstance(dry_run, bool):
        raise InvalidArgumentError(f"dry_run must be a bool, not {dry_run!r}", argument="dry_run")
    if before is None and user is None and not wanted:
        raise InvalidArgumentError(
            "prune needs a selector (updated_before, user_id or labels); to prune every "
            "session, pass updated_before as a time in the future",
            argument="updated_before",
        )
    folder = None if archive_dir is None else _archive_dir(archive_dir, dry_run)
    return PruneRequest(before, user, wanted, folder, dry_run)


def _archive_dir(archive_dir: object, dry_run: bool) -> Path:
    if not isinstance(archive_dir, str | os.PathLike):
        raise InvalidArgumentError(
            f"archive_dir must be a path, not {archive_dir!r}", argument="archive_dir"
        )
    folder = Path(archive_dir)
    if dry_run and not folder.exists():
        return folder
    if not folder.is_dir():
        raise InvalidArgumentError(
            f"archive_dir {str(folder)!r} is not a directory", argument="archive_dir"
        )
    try:  # access() can say yes where a create fails (read-only mounts, ACLs): try one
        with tempfile.TemporaryFile(dir=folder, prefix=".session-sql-prune-"):
            pass
    except OSError as exc:
        raise InvalidArgumentError(
            f"archive_dir {str(folder)!r} is not writable: {exc.strerror or exc}",
            argument="archive_dir",
        ) from exc
    return folder


def archive_file_name(session_id: str, tenant: str, incarnation: str) -> str:
    """``<stem>~<16 hex>.jsonl``: the id's ``jsonl_file_name`` stem, then a digest of the
    session's tenant and incarnation, so that no other session's archive has this name.

    A stem too long for the digest to fit in 255 bytes is cut and made unique by a hash of
    the id, as ``jsonl_file_name`` does for its own long names.
    """
    identity = f"{tenant}\0{incarnation}".encode()
    tag = hashlib.sha256(identity).hexdigest()[:16]
    stem = jsonl_file_name(session_id).removesuffix(".jsonl")
    name = f"{stem}~{tag}.jsonl"
    if len(name) > MAX_NAME_BYTES - len("..tmp"):  # its temporary file's name must fit too
        digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:32]
        name = f"{stem[:180]}~{digest}~{tag}.jsonl"
    return name


def prune_steps(
    ctx: StoreContext, request: PruneRequest, progress: Progress | None = None
) -> Generator[Step, Any, PruneReport]:
    """The whole prune as steps (see the module docstring); returns the report."""
    started = ctx.clock()
    done: list[PrunedSession] = []
    kept: list[str] = []
    after: tuple[int, str] | None = None
    while True:
        page: list[Candidate] = yield ReadPage(request, after)
        if not page:
            break
        last = page[-1].session
        after = (last.updated_at, last.id)
        if request.dry_run:
            done.extend(c.session for c in page)
            for candidate in page:
                if progress is not None:
                    progress(candidate.session)
            continue
        for batch in _batches(page):
            ready: list[Candidate] = []
            for candidate in batch:
                if request.archive_dir is None:
                    ready.append(candidate)
                    continue
                name = archive_file_name(candidate.session.id, ctx.tenant, candidate.incarnation)
                path = request.archive_dir / name
                written = yield Archive(candidate.session.id, path)
                if written != candidate.head_seq + 1:
                    kept.append(candidate.session.id)  # moved (or gone) since it was selected
                    continue
                ready.append(_archived(candidate, path))
            if not ready:
                continue
            began = time.monotonic()
            deleted: list[bool] = yield Delete(ready)
            if ctx.backend.single_writer:
                # Writers blocked on the lock retry at growing intervals (SQLite's busy
                # handler): were the next batch to start at once, they could wait for many.
                yield Pause(min(time.monotonic() - began, MAX_PAUSE))
            for candidate, gone in zip(ready, deleted, strict=True):
                if not gone:
                    kept.append(candidate.session.id)
                    continue
                done.append(candidate.session)
                if progress is not None:
                    progress(candidate.session)
    if done and not request.dry_run:
        yield Reclaim()
    return PruneReport(
        tenant=ctx.tenant,
        dry_run=request.dry_run,
        updated_before=request.updated_before,
        user_id=request.user_id,
        labels=request.labels,
        archive_dir=None if request.archive_dir is None else str(request.archive_dir),
        started_at=started,
        finished_at=ctx.clock(),
        sessions=done,
        kept=kept,
    )


def _archived(candidate: Candidate, path: Path) -> Candidate:
    session = candidate.session.model_copy(update={"archive": str(path)})
    return Candidate(
        session, candidate.key, candidate.head_seq, candidate.incarnation, candidate.metadata
    )


def _batches(page: Sequence[Candidate]) -> Generator[list[Candidate], None, None]:
    """``page`` cut into delete transactions (``BATCH_SESSIONS``, ``BATCH_EVENTS``)."""
    batch: list[Candidate] = []
    events = 0
    for candidate in page:
        if batch and (len(batch) >= BATCH_SESSIONS or events >= BATCH_EVENTS):
            yield batch
            batch, events = [], 0
        batch.append(candidate)
        events += candidate.session.events
    if batch:
        yield batch


def read_page(
    ctx: StoreContext, request: PruneRequest, after: tuple[int, str] | None
) -> list[Candidate]:
    """The next ``PAGE_SESSIONS`` selected sessions after ``after`` (oldest update first),
    with their sizes: one read transaction, walking the (tenant, [user_id,] updated_at, id)
    index."""
    s = ctx.tables.sessions
    query = select(
        s.c.id,
        s.c.session_key,
        s.c.updated_at,
        s.c.head_seq,
        s.c.incarnation,
        s.c.user_id,
        s.c.parent_session,
        s.c.title,
        s.c.labels,
    ).where(own(ctx, s))
    if request.updated_before is not None:
        query = query.where(s.c.updated_at < request.updated_before)
    if request.user_id is not None:
        query = query.where(s.c.user_id == request.user_id)
    for condition in ctx.backend.labels_match(s.c.labels, request.labels):
        query = query.where(condition)
    if after is not None:
        query = query.where(
            or_(s.c.updated_at > after[0], and_(s.c.updated_at == after[0], s.c.id > after[1]))
        )
    query = query.order_by(s.c.updated_at, s.c.id).limit(PAGE_SESSIONS)
    with translate_errors(), read_tx(ctx.engine) as conn:
        rows = conn.execute(query).all()
        sizes = _sizes(conn, ctx, [row.session_key for row in rows]) if rows else {}
    return [
        Candidate(
            PrunedSession(
                id=row.id,
                user_id=row.user_id,
                parent_session=row.parent_session,
                updated_at=row.updated_at,
                events=row.head_seq + 1,
                bytes=sizes.get(row.session_key, 0),
            ),
            row.session_key,
            row.head_seq,
            row.incarnation,
            (row.user_id, row.title, dict(row.labels)),
        )
        for row in rows
    ]


def _sizes(conn: Connection, ctx: StoreContext, keys: Sequence[int]) -> dict[int, int]:
    e = ctx.tables.events
    query = (
        select(e.c.session_key, func.sum(ctx.backend.text_bytes(e.c.data)))
        .where(own(ctx, e), e.c.session_key.in_(keys))
        .group_by(e.c.session_key)
    )
    return {int(key): int(size or 0) for key, size in conn.execute(query)}


def delete_batch(ctx: StoreContext, batch: Sequence[Candidate]) -> list[bool]:
    """Delete each session of ``batch`` that is still as selected, in one write transaction;
    one bool each.

    The rows still as selected (``updated_at``, ``head_seq``, ``incarnation``, and the
    metadata, which an edit changes without moving ``updated_at``) are locked
    first (PostgreSQL: ``FOR UPDATE``, which re-reads a row an append committed meanwhile;
    SQLite holds the write lock already); then their surface rows, session rows and
    ``session_ids`` rows go in one statement per table, and the events with their session
    rows through the foreign key's ``ON DELETE CASCADE``, as in ``delete_session``: it runs
    with the table owner's rights, so a writer whose log is append-only (no ``DELETE`` on
    ``events``) can prune.
    """
    s, sf = ctx.tables.sessions, ctx.tables.surface
    selected = [(c.key, c.session.updated_at, c.head_seq, c.incarnation) for c in batch]
    still = (
        select(s.c.session_key, s.c.user_id, s.c.title, s.c.labels)
        .where(
            own(ctx, s),
            # The keys alone first: SQLite looks them up by rowid, where a row-value IN
            # alone would scan the table.
            s.c.session_key.in_([c.key for c in batch]),
            tuple_(s.c.session_key, s.c.updated_at, s.c.head_seq, s.c.incarnation).in_(selected),
        )
        .with_for_update()
    )
    with translate_errors(), write_tx(ctx.engine) as conn:
        metadata = {c.key: c.metadata for c in batch}
        if ctx.distributed:
            # Citus locks rows only by a statement on one shard: one per session.
            rows = [
                row for c in batch for row in conn.execute(still.where(s.c.session_key == c.key))
            ]
        else:
            rows = list(conn.execute(still))
        keys = {
            row.session_key
            for row in rows
            if (row.user_id, row.title, dict(row.labels)) == metadata[row.session_key]
        }
        if keys:
            for table in (sf, s):
                conn.execute(delete(table).where(own(ctx, table), table.c.session_key.in_(keys)))
            ids = ctx.tables.session_ids
            pruned = [c.session.id for c in batch if c.key in keys]
            conn.execute(
                delete(ids).where(own(ctx, ids), ids.c.id.in_(pruned), ids.c.session_key.in_(keys))
            )
    for c in batch:
        if c.key in keys:
            ctx.keys.pop(c.session.id, None)
    return [c.key in keys for c in batch]


def reclaim(ctx: StoreContext) -> None:
    """Give the freed space back as the database can (see ``Backend.reclaim_space``)."""
    with translate_errors():
        ctx.backend.reclaim_space(ctx.engine, VACUUM_PAGES)


def advance(steps: Generator[Step, Any, PruneReport], result: Any) -> Step | PruneReport:
    """Send ``result`` to ``prune_steps``: the next step, or the report once the walk is done
    (both stores drive the walk with it)."""
    try:
        return steps.send(result)
    except StopIteration as stop:
        report: PruneReport = stop.value
        return report


def run(
    ctx: StoreContext,
    request: PruneRequest,
    progress: Progress | None,
    archive: Callable[[str, Path], int | None],
) -> PruneReport:
    """The sync store's prune: ``prune_steps`` driven here; ``archive`` exports one session
    to a path (``None`` when it is gone)."""
    steps = prune_steps(ctx, request, progress)
    result: Any = None
    while not isinstance(step := advance(steps, result), PruneReport):
        if isinstance(step, ReadPage):
            result = read_page(ctx, step.request, step.after)
        elif isinstance(step, Archive):
            result = archive(step.session_id, step.path)
        elif isinstance(step, Delete):
            result = delete_batch(ctx, step.batch)
        elif isinstance(step, Pause):
            time.sleep(step.seconds)
            result = None
        else:
            reclaim(ctx)
            result = None
    return step
