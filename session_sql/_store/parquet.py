"""``export_parquet``: a tenant's sessions as Parquet files, one per table, fed incrementally.

Everything is read in one snapshot transaction. The snapshot's session rows give each session's
head seq, and a session's events up to its head are exactly the ones committed with that row
(each append writes its events and the new head in one transaction), so the pair
``(session_key, head_seq)`` per session is a consistent bound: the cursor records it for every
session, and the next export reads each session's events after it. Session keys are never
reused (a deleted and recreated session gets a new one), so no event is read twice or skipped,
whatever writers commit meanwhile.

Rows are written in row groups of ``BATCH_ROWS`` (or fewer when their JSON is large), so
memory follows a batch, not the store. Each file is written under a hidden temporary name,
fsynced and renamed: a reader of ``*.parquet`` never sees a partial file.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import json
import os
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Connection, Text, cast, select

from session_sql._store.context import StoreContext
from session_sql._store.database import snapshot_tx, translate_errors
from session_sql._store.listing import own
from session_sql._store.views import view_table, views_for
from session_sql.errors import ConfigurationError, InvalidArgumentError, PermanentStoreError
from session_sql.jsonl import _create_temporary, _fsync_directory

__all__ = ["TABLES", "ParquetExport", "export_parquet"]

TABLES = ("sessions", "events", "messages", "tool_calls", "turns")
"""The files of an export, one per table, in the order they are written."""

BATCH_ROWS = 50_000
"""Rows per row group (and per read page of events)."""
BATCH_BYTES = 64 << 20
"""A row group is also written once its JSON text reaches this size."""
CURSOR_VERSION = "pq1"

ID = "gen_ai.conversation.id"
MODEL = "gen_ai.request.model"
PROVIDER = "gen_ai.provider.name"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
CALL_ID = "gen_ai.tool.call.id"
MESSAGE_TYPES = frozenset({"user/message", "assistant/message", "tool/result"})
_INT64 = (-(1 << 63), (1 << 63) - 1)
APPEND_OP = json.dumps("append")  # how ``events.surface_op`` stores "append"


@dataclass(frozen=True)
class ParquetExport:
    """What ``export_parquet`` wrote: ``files`` maps each table to its file, ``rows`` to its
    row count; ``cursor`` is what the next export takes as ``since`` (an opaque string)."""

    cursor: str
    files: dict[str, str] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)


def _arrow() -> tuple[Any, Any]:
    """``pyarrow`` and ``pyarrow.parquet``: the ``parquet`` extra, imported on first use."""
    try:
        return importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError as exc:
        raise ConfigurationError(
            "export_parquet needs pyarrow: pip install 'session-sql[parquet]'"
        ) from exc


def _schemas() -> dict[str, Any]:
    """Each table's columns, as pyarrow schemas."""
    pa, _ = _arrow()
    text, i64, flag = pa.string(), pa.int64(), pa.bool_()
    key = [("tenant", text), (ID, text)]
    return {
        "sessions": pa.schema(
            [
                *key,
                ("parent_session", text),
                ("format_version", i64),
                ("created_at", i64),
                ("updated_at", i64),
                ("head_seq", i64),
                ("inherited_event_count", i64),
                ("incarnation", text),
                ("user_id", text),
                ("title", text),
                ("labels", text),
                ("header", text),
            ]
        ),
        "events": pa.schema(
            [
                *key,
                ("seq", i64),
                ("time", i64),
                ("type", text),
                ("ignorable", flag),
                ("surface_op", text),
                ("source_event_seqs", text),
                ("data", text),
                ("inherited", flag),
            ]
        ),
        "messages": pa.schema(
            [
                *key,
                ("seq", i64),
                ("time", i64),
                ("type", text),
                ("turn", i64),
                ("role", text),
                ("text", text),
                (PROVIDER, text),
                (MODEL, text),
                (INPUT_TOKENS, i64),
                (OUTPUT_TOKENS, i64),
                (CALL_ID, text),
                ("is_error", flag),
                ("content", text),
                ("inherited", flag),
            ]
        ),
        "tool_calls": pa.schema(
            [
                *key,
                ("call_seq", i64),
                (CALL_ID, text),
                (TOOL_NAME, text),
                ("arguments", text),
                ("turn", i64),
                ("call_time", i64),
                ("result_seq", i64),
                ("is_error", flag),
                ("latency_ms", i64),
                ("inherited", flag),
            ]
        ),
        "turns": pa.schema(
            [
                *key,
                ("turn", i64),
                ("start_seq", i64),
                ("end_seq", i64),
                ("start_time", i64),
                ("end_time", i64),
                ("duration_ms", i64),
                ("reason", text),
                ("user_messages", i64),
                ("assistant_messages", i64),
                ("tool_calls", i64),
                ("tool_results", i64),
                ("inherited", flag),
            ]
        ),
    }


# -- the cursor ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Cursor:
    """Where an export stopped: the export's number in its chain and each session's head."""

    number: int
    heads: dict[int, int]


def _encode(tenant: str, cursor: _Cursor) -> str:
    keys = sorted(cursor.heads)
    deltas = [b - a for a, b in zip([0, *keys], keys, strict=False)]
    body = json.dumps([tenant, cursor.number, deltas, [cursor.heads[k] for k in keys]])
    packed = base64.urlsafe_b64encode(zlib.compress(body.encode(), 9)).decode().rstrip("=")
    return f"{CURSOR_VERSION}.{packed}"


def _decode(tenant: str, text: str | None) -> _Cursor:
    if text is None:
        return _Cursor(0, {})
    if not isinstance(text, str):
        raise InvalidArgumentError(f"since must be a cursor string, not {type(text).__name__}")
    try:
        version, packed = text.strip().split(".", 1)
        if version != CURSOR_VERSION:
            raise ValueError(version)
        raw = zlib.decompress(base64.urlsafe_b64decode(packed + "=" * (-len(packed) % 4)))
        owner, number, deltas, heads = json.loads(raw)
        keys: list[int] = []
        for delta in deltas:
            keys.append((keys[-1] if keys else 0) + int(delta))
        parsed = _Cursor(int(number), dict(zip(keys, map(int, heads), strict=True)))
    except (ValueError, TypeError, zlib.error) as exc:
        raise InvalidArgumentError(
            "since is not a cursor that export_parquet returned (pass the cursor string of "
            "the previous export as it is)"
        ) from exc
    if owner != tenant:
        raise InvalidArgumentError(
            f"since is a cursor of tenant {owner!r}; this store exports tenant {tenant!r}"
        )
    return parsed


# -- writing ------------------------------------------------------------------------------


Offload = Callable[[Callable[[], None]], None]
"""Runs a piece of file I/O (encoding and writing a row group, fsync, rename) to completion:
inline by default; the async store on PostgreSQL, whose reads run on the event loop, runs it
in a worker thread so that the loop never waits on the disk."""


def _inline(work: Callable[[], None]) -> None:
    work()


class _TableFile:
    """One table's file: rows gathered into columns, written a row group at a time."""

    def __init__(self, target: Path, schema: Any, offload: Offload = _inline) -> None:
        pa, pq = _arrow()
        self.batch = pa.record_batch
        self.target = target
        self.schema = schema
        self.rows = 0
        self.offload = offload
        fd, self.tmp = _create_temporary(target)
        self.fh = os.fdopen(fd, "wb")
        self.writer = pq.ParquetWriter(self.fh, schema, compression="zstd")
        self.pending: list[tuple[Any, ...]] = []
        self.pending_bytes = 0

    def add(self, row: tuple[Any, ...], size: int = 0) -> None:
        self.pending.append(row)
        self.pending_bytes += size
        if len(self.pending) >= BATCH_ROWS or self.pending_bytes >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write the rows gathered so far as one row group (turned into columns at once)."""
        if not self.pending:
            return
        columns = [list(c) for c in zip(*self.pending, strict=True)]
        batch = self.batch(columns, schema=self.schema)
        self.offload(lambda: self.writer.write_batch(batch))
        self.rows += len(self.pending)
        self.pending = []
        self.pending_bytes = 0

    def publish(self) -> None:
        """Write what is left, fsync, and rename over the target."""
        self.flush()

        def finish() -> None:
            self.writer.close()
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
            os.replace(self.tmp, self.target)

        self.offload(finish)

    def discard(self) -> None:
        with contextlib.suppress(Exception):  # already failing: that error is raised
            self.writer.close()
        self.fh.close()
        Path(self.tmp).unlink(missing_ok=True)


def export_parquet(
    ctx: StoreContext,
    directory: str | os.PathLike[str],
    since: str | None = None,
    offload: Offload = _inline,
) -> ParquetExport:
    """Write the tenant's rows added since ``since`` under ``directory`` (see
    ``SessionStore.export_parquet``)."""
    before = _decode(ctx.tenant, since)
    _arrow()
    root = Path(directory)
    # Named after the cursor it starts from: a rerun from it replaces an interrupted attempt.
    started = hashlib.sha256((since or "").strip().encode()).hexdigest()[:12]
    name = f"{before.number + 1:08d}-{started}"
    schemas = _schemas()
    with ExitStack() as stack:
        files: dict[str, _TableFile] = {}

        def create() -> None:
            for table in TABLES:
                (root / table).mkdir(parents=True, exist_ok=True)
                target = root / table / f"{name}.parquet"
                files[table] = _TableFile(target, schemas[table], offload)

        def discard() -> None:
            for opened in files.values():
                opened.discard()

        try:
            offload(create)
        except OSError as exc:
            offload(discard)
            raise _write_error(root, exc) from exc
        done = False

        def cleanup() -> None:
            if not done:
                offload(discard)

        stack.callback(cleanup)
        with translate_errors(None), snapshot_tx(ctx.engine) as conn:
            heads = _write_rows(conn, ctx, before, files)
        try:
            for table in TABLES:
                files[table].publish()
            done = True
        except OSError as exc:
            raise _write_error(root, exc) from exc

    def fsync_directories() -> None:
        for table in TABLES:
            _fsync_directory(root / table)

    offload(fsync_directories)
    after = _Cursor(before.number + 1, heads)
    return ParquetExport(
        cursor=_encode(ctx.tenant, after),
        files={t: str(f.target) for t, f in files.items()},
        rows={t: f.rows for t, f in files.items()},
    )


def _write_error(root: Path, exc: OSError) -> PermanentStoreError:
    return PermanentStoreError(f"cannot write the Parquet export in {root}: {exc.strerror or exc}")


def _write_rows(
    conn: Connection, ctx: StoreContext, before: _Cursor, files: Mapping[str, _TableFile]
) -> dict[int, int]:
    """Every row after ``before`` in this snapshot; returns each session's head in it."""
    s = ctx.tables.sessions
    sessions = conn.execute(
        select(
            s.c.session_key,
            s.c.tenant,
            s.c.id,
            s.c.parent_session,
            s.c.format_version,
            s.c.created_at,
            s.c.updated_at,
            s.c.head_seq,
            s.c.inherited_event_count,
            s.c.incarnation,
            s.c.user_id,
            s.c.title,
            cast(s.c.labels, Text),
            cast(s.c.header, Text),
        )
        .where(own(ctx, s))
        .order_by(s.c.session_key)
    ).all()
    heads: dict[int, int] = {}
    for row in sessions:
        key, head = int(row[0]), int(row[7])
        heads[key] = head
        start = before.heads.get(key, -1)
        if key in before.heads and head <= start:
            continue
        files["sessions"].add(tuple(row[1:]))
        if head > start:
            _session_rows(conn, ctx, key, (row.tenant, row.id), start, head, row[8], files)
    return heads


def _session_rows(
    conn: Connection,
    ctx: StoreContext,
    key: int,
    public: tuple[str, str],
    after: int,
    head: int,
    inherited: int,
    files: Mapping[str, _TableFile],
) -> None:
    """One session's events ``after < seq <= head``, with their messages, calls and turns."""
    for row in _event_rows(conn, ctx, key, after, head):
        seq, time, kind, ignorable, op, sources, data = row
        copied = seq < inherited
        op_text = "append" if op == APPEND_OP else op  # a replacement stays JSON
        files["events"].add(
            (*public, seq, time, kind, ignorable, op_text, sources, data, copied), len(data)
        )
        if kind in MESSAGE_TYPES:
            files["messages"].add((*public, *_message(seq, time, kind, data), copied), len(data))
    tenant, session_id = public
    for view, first in (("tool_calls", "call_seq"), ("turns", "start_seq")):
        table = view_table(
            next(v for v in views_for() if v.name == view), ctx.tables.metadata.schema
        )
        query = (
            select(*table.c)
            .where(
                table.c.tenant == tenant,
                table.c.session_id == session_id,
                table.c[first] > after,
                table.c[first] <= head,
            )
            .order_by(table.c[first])
        )
        for found in conn.execute(query):
            values = list(found)
            values[-1] = bool(values[-1])  # SQLite gives booleans as 0/1
            if view == "tool_calls":
                values[9] = None if values[9] is None else bool(values[9])
            files[view].add(tuple(values))


def _event_rows(
    conn: Connection, ctx: StoreContext, key: int, after: int, head: int
) -> Iterator[Any]:
    """The event rows in pages of ``BATCH_ROWS`` (keyset on seq, all in the snapshot)."""
    e = ctx.tables.events
    query = select(
        e.c.seq,
        e.c.time,
        e.c.type,
        e.c.ignorable,
        e.c.surface_op,
        e.c.source_event_seqs,
        cast(e.c.data, Text),
    ).order_by(e.c.seq)
    while after < head:
        page = conn.execute(
            query.where(e.c.session_key == key, e.c.seq > after, e.c.seq <= head).limit(BATCH_ROWS)
        ).all()
        if not page:
            return
        yield from page
        after = int(page[-1][0])


def _int(value: Any) -> int | None:
    """A token count as it was written, or None when it is not a sane integer."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if _INT64[0] <= value <= _INT64[1] else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _message(seq: int, time: int, kind: str, raw: str) -> tuple[Any, ...]:
    """A message event's columns (after the key; before ``inherited``)."""
    data = orjson.loads(raw)
    body = data.get("message") if isinstance(data, dict) else None
    body = body if isinstance(body, dict) else {}
    source = body.get("source")
    source = source if isinstance(source, dict) else {}
    usage = data.get("usage") if isinstance(data, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    content = body.get("content")
    blocks = content if isinstance(content, list) else []
    texts = [b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)]
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "tool-result":
            texts += [
                c["text"]
                for c in block.get("content") or []
                if isinstance(c, dict) and isinstance(c.get("text"), str)
            ]
    error = None
    if kind == "tool/result":
        error = any(isinstance(b, dict) and b.get("isError") is True for b in blocks)
    turn = data.get("turn") if isinstance(data, dict) else None
    return (
        seq,
        time,
        kind,
        _int(turn),
        _text(body.get("role")),
        "\n".join(texts) if texts else None,
        _text(source.get("provider")),
        _text(source.get("model")),
        _int(usage.get("inputTokens")),
        _int(usage.get("outputTokens")),
        _text(source.get("callId")),
        error,
        None if content is None else orjson.dumps(content).decode(),
    )
