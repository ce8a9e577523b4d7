"""``verify``: replay a stored log and compare its fold with the ``surface`` table and the row."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from pydantic import BaseModel, ConfigDict

from session_sql._store import reader
from session_sql._store.context import StoreContext
from session_sql._store.database import snapshot_tx, translate_errors
from session_sql._store.rows import stored_problems
from session_sql._store.stored import event_from_row, frozen_header
from session_sql.arguments import lookup_id
from session_sql.errors import SessionSQLError
from session_sql.events import SessionEvent
from session_sql.jsonvalue import FrozenDict
from session_sql.session import END_SEED, replay_checked
from session_sql.surface import Replay


class VerifyReport(BaseModel):
    """The outcome of ``verify``: ``ok`` when the log, the surface table and the row agree."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    ok: bool
    events: int
    problems: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok


def verify(
    ctx: StoreContext, session_id: str, seen: Callable[[SessionEvent], None] | None = None
) -> VerifyReport:
    """``SessionStore.verify``, showing each event read to ``seen`` (``migrate`` compares the
    copied log with its source in the same pass)."""
    problems: list[str] = []
    lookup_id(session_id)
    state = Replay(keep_surface_events=True)
    marker: SessionEvent | None = None  # the event at seq inherited_event_count, if folded
    count = 0
    with translate_errors(session_id), snapshot_tx(ctx.engine) as conn:
        row = reader.session_row(conn, ctx, session_id)
        key = {"b_key": row.session_key}
        table = [(pos, seq) for pos, seq in conn.execute(ctx.statements.surface_rows, key).all()]
        rows = reader.event_rows_in(conn, ctx, row.session_key)  # all, past the head too

        def events() -> Iterator[SessionEvent]:
            nonlocal count
            for r in rows:
                count += 1
                event = event_from_row(session_id, r)
                if seen is not None:
                    seen(event)
                yield event

        try:
            for step in replay_checked(events(), state, ctx.catalog, parsed=True):
                if step.event.seq == row.inherited_event_count:
                    marker = step.event
        except SessionSQLError as exc:
            problems.append(f"log: {exc}")
            count += sum(1 for _ in rows)  # the report still counts every stored event
    if not problems:
        problems.extend(stored_problems(row, state, table))
    try:
        header = frozen_header(session_id, row.header)
    except SessionSQLError as exc:
        problems.append(f"header: {exc}")
        header = FrozenDict()
    for column, said in (
        ("id", header.get("id")),
        ("format_version", header.get("version")),
        ("created_at", header.get("createdAt")),
        ("parent_session", header.get("parentSession")),
    ):
        if header and getattr(row, column) != said:
            problems.append(f"sessions.{column} is {getattr(row, column)!r}, header says {said!r}")
    inherited = row.inherited_event_count
    if inherited and not (
        header.get("isSeeded") is True
        and marker is not None
        and marker.type == END_SEED
        and marker.data == {"inherited": True}
    ):
        problems.append(
            f"sessions.inherited_event_count is {inherited}, but seq {inherited} is not the "
            "end of an inherited prefix"
        )
    return VerifyReport(
        session_id=session_id, ok=not problems, events=count, problems=tuple(problems)
    )
