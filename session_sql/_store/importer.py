"""The checked fold of a JSONL import, written in bulk inside the import's transaction.

Every event gets the checks of any logged event (envelope, expected seq, catalog and data
rules, the inherited-marker rule, surface planning); the rows go in as tuples in batches
(``bulk.BulkWriter``: ``executemany`` on SQLite, ``COPY`` on PostgreSQL where row security
allows it), and the surface rows once the log is complete. Memory follows the surface and one
batch, not the file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from session_sql._store import bulk
from session_sql._store.context import StoreContext
from session_sql._store.rows import event_values
from session_sql._store.stored import event_from_row
from session_sql.errors import InvalidEventError, NotJSONError
from session_sql.events import SessionEvent
from session_sql.rules import check_inherited_marker, is_inherited_marker
from session_sql.session import check_logged
from session_sql.surface import Replay

if TYPE_CHECKING:
    from session_sql._store.transfer import ImportSource

IMPORT_BATCH = 1000
"""Events held before a batch is written: large enough that the per-statement cost vanishes,
small enough that memory stays flat."""


class ImportFold:
    """The replay of an import, keeping what validation needs (the surface's seqs and
    positions) and at most ``IMPORT_BATCH`` events waiting to be written; the replacement rule
    looks an earlier event up in the batch or in the transaction. ``flush`` writes the rest
    and the surface rows; ``close`` releases the cursor.
    """

    def __init__(
        self, conn: Connection, ctx: StoreContext, session_id: str, session_key: int, seeded: bool
    ) -> None:
        self.conn = conn
        self.ctx = ctx
        self.session_id = session_id
        self.session_key = session_key
        self.seeded = seeded
        self.state = Replay()
        self.inherited = 0
        self.batch: list[SessionEvent] = []
        self.rows: list[tuple[Any, ...]] = []  # rows.event_values: the JSON text checked
        self.writer = bulk.BulkWriter(conn, ctx)

    def add(self, raw: Any, position: int, source: ImportSource) -> None:
        """Check and fold one event; ``source.corrupt`` says where a bad one was read."""
        ctx = self.ctx
        state = self.state
        try:
            event = check_logged(raw, state.length, ctx.catalog)
            # The cut of a seeded log is its last inherited marker: a fork of a fork also
            # inherits its parent's, earlier; the rule allows none after the cut.
            check_inherited_marker(event, self.seeded, event.seq if self.seeded else 0)
            state.fold(event, ctx.catalog, self._lookup)
        except (InvalidEventError, NotJSONError) as exc:  # SurfaceError included
            raise source.corrupt(position, exc, self.session_id) from exc
        self.rows.append(event_values(ctx.tenant, self.session_key, event, ctx.max_event_bytes))
        self.batch.append(event)
        if self.seeded and is_inherited_marker(event):
            self.inherited = event.seq
        if len(self.rows) >= IMPORT_BATCH:
            self._write_batch()

    def flush(self) -> None:
        """Write the pending events, then the surface rows."""
        self._write_batch()
        self.writer.surface(self.session_key, self.state.rows())

    def close(self) -> None:
        self.writer.close()

    def _write_batch(self) -> None:
        self.writer.events(self.rows)
        self.batch.clear()
        self.rows.clear()

    def _lookup(self, seq: int) -> SessionEvent:
        """An earlier event: from the pending batch, else as written in this transaction."""
        first = self.state.length - len(self.batch)
        if seq >= first:
            return self.batch[seq - first]
        row = self.conn.execute(
            self.ctx.statements.events_page,
            {"b_key": self.session_key, "b_after": seq - 1, "b_to": seq, "b_limit": 1},
        ).one()
        return event_from_row(self.session_id, row)
