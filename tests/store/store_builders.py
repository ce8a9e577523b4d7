"""Builders and probes for the store suite.

Builders make valid messages and whole scenarios; each ``say``/``reply``/... helper appends to
a live session (``Session`` or ``StoredSession``) or to a ``WireLog`` and returns the new seq.
Probes look at the database underneath a store: ``dump_tables`` (every row of ``sessions``,
``events`` and ``surface`` as text, in key order), ``recorded`` (the statements an engine runs)
and ``refused`` (a refused call changes neither the tables nor the handle).

The module is named ``store_builders`` rather than ``builders`` so that it cannot shadow the
core suite's ``builders`` module: neither test directory is a package.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import Engine, Text, cast, event, select

from session_sql import Replace, Session, SessionEvent, SessionStore
from session_sql._store.schema import tables_for

T0 = 1_700_000_000_000


# -- messages and data ------------------------------------------------------------------------


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def user_message(text: str = "hello", *, id: str = "u") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": [text_block(text)], "source": {"kind": "user"}}


def assistant_message(
    text: str | None = "ok", *, id: str = "a", tool_calls: Sequence[str] = ()
) -> dict[str, Any]:
    """An assistant message; ``text=None`` without calls gives empty content (usage only)."""
    content: list[dict[str, Any]] = [] if text is None else [text_block(text)]
    content += [
        {"type": "tool-call", "id": call_id, "name": "shell", "arguments": {"cmd": "ls"}}
        for call_id in tool_calls
    ]
    return {
        "id": id,
        "role": "assistant",
        "content": content,
        "source": {"kind": "model", "provider": "prov", "model": "mod"},
    }


def tool_result_data(
    call_id: str, output: str = "done", *, turn: int = 1, step: int = 1, id: str | None = None
) -> dict[str, Any]:
    block = {"type": "tool-result", "toolCallId": call_id, "content": [text_block(output)]}
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": f"r-{call_id}" if id is None else id,
            "role": "user",
            "content": [block],
            "source": {"kind": "tool", "callId": call_id},
        },
    }


def request_header_data() -> dict[str, Any]:
    return {"header": {"config": {"provider": "prov", "model": "mod"}}, "reason": "initial"}


# -- scenarios --------------------------------------------------------------------------------


def wire(
    type: str,
    seq: int,
    data: Any = None,
    *,
    time: int = T0,
    surface_op: Any = None,
    source_event_seqs: Sequence[int] | None = None,
    ignorable: bool = False,
) -> dict[str, Any]:
    """A wire event; optional keys only when given."""
    out: dict[str, Any] = {"type": type, "seq": seq, "time": time, "data": data}
    if surface_op is not None:
        out["surfaceOp"] = surface_op.to_json() if isinstance(surface_op, Replace) else surface_op
    if source_event_seqs is not None:
        out["sourceEventSeqs"] = list(source_event_seqs)
    if ignorable:
        out["ignorable"] = True
    return out


class WireLog:
    """A list of wire events built with ``Session.append``'s signature."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    @property
    def seq(self) -> int:
        return len(self.events)

    def append(
        self,
        type: str,
        data: Any = None,
        *,
        surface_op: Any = None,
        source_event_seqs: Sequence[int] | None = None,
        ignorable: bool = False,
    ) -> int:
        seq = self.seq
        self.events.append(
            wire(
                type,
                seq,
                data,
                time=T0 + seq,
                surface_op=surface_op,
                source_event_seqs=source_event_seqs,
                ignorable=ignorable,
            )
        )
        return seq


def _seq(appended: SessionEvent | int) -> int:
    return appended.seq if isinstance(appended, SessionEvent) else appended


def say(
    target: Any,
    text: str = "hello",
    *,
    surface_op: Any = "append",
    sources: Sequence[int] | None = None,
) -> int:
    message = user_message(text, id=f"u{target.seq}")
    return _seq(
        target.append("user/message", message, surface_op=surface_op, source_event_seqs=sources)
    )


def reply(
    target: Any,
    text: str | None = "ok",
    *,
    turn: int = 1,
    step: int = 1,
    tool_calls: Sequence[str] = (),
    sources: Sequence[int] | None = None,
) -> int:
    data = {
        "turn": turn,
        "step": step,
        "message": assistant_message(text, id=f"a{target.seq}", tool_calls=tool_calls),
    }
    return _seq(
        target.append("assistant/message", data, surface_op="append", source_event_seqs=sources)
    )


def answer(
    target: Any,
    call_id: str,
    output: str = "done",
    *,
    turn: int = 1,
    step: int = 1,
    surface_op: Any = "append",
    sources: Sequence[int] | None = None,
) -> int:
    data = tool_result_data(call_id, output, turn=turn, step=step)
    return _seq(
        target.append("tool/result", data, surface_op=surface_op, source_event_seqs=sources)
    )


def call_tool(target: Any, call_id: str, *, turn: int = 1, step: int = 1) -> int:
    data = {"turn": turn, "step": step, "callId": call_id, "name": "shell", "arguments": "{}"}
    return _seq(target.append("tool/call", data))


def chunk(target: Any, text: str = "x", *, turn: int = 1, step: int = 1, index: int = 0) -> int:
    delta = {"type": "text-delta", "index": index, "text": text}
    data = {"turn": turn, "step": step, "chunk": delta}
    return _seq(target.append("assistant/chunk", data))


def begin_turn(target: Any, turn: int = 1) -> int:
    return _seq(target.append("turn/start", {"turn": turn}))


def end_turn(target: Any, turn: int = 1) -> int:
    return _seq(target.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}}))


def begin_step(target: Any, turn: int = 1, step: int = 1) -> int:
    return _seq(target.append("step/start", {"turn": turn, "step": step}))


def end_step(target: Any, turn: int = 1, step: int = 1) -> int:
    return _seq(target.append("step/end", {"turn": turn, "step": step}))


def summarize(target: Any, start: int, end: int, sources: Sequence[int]) -> int:
    """A summary ``user/message`` replacing surface nodes ``start..end``."""
    return say(target, "summary", surface_op=Replace(start, end), sources=sources)


def tool_turn(target: Any, turn: int = 1, *, close: bool = True) -> dict[str, int]:
    """One turn: request, question, a chunk, a tool-calling reply, call, result, final reply.

    ``close=False`` stops after the ``tool/call`` (a crash in the middle of step 1).
    """
    seqs = {"turn/start": begin_turn(target, turn)}
    target.append("request/header", request_header_data())
    seqs["user"] = say(target, f"question {turn}")
    begin_step(target, turn, 1)
    seqs["chunk"] = chunk(target, turn=turn)
    seqs["reply"] = reply(
        target, "let me look", turn=turn, tool_calls=[f"c{turn}"], sources=[seqs["chunk"]]
    )
    seqs["tool/call"] = call_tool(target, f"c{turn}", turn=turn)
    if not close:
        return seqs
    seqs["tool/result"] = answer(
        target, f"c{turn}", "file.txt", turn=turn, sources=[seqs["tool/call"]]
    )
    end_step(target, turn, 1)
    begin_step(target, turn, 2)
    seqs["final"] = reply(target, "done", turn=turn, step=2)
    end_step(target, turn, 2)
    seqs["turn/end"] = end_turn(target, turn)
    return seqs


def tool_turn_log(turns: int = 1) -> list[dict[str, Any]]:
    """The wire log of ``turns`` closed ``tool_turn``s."""
    log = WireLog()
    for turn in range(1, turns + 1):
        tool_turn(log, turn)
    return log.events


def wires(events: Any) -> list[dict[str, Any]]:
    """Events as plain wire dicts, for comparing logs."""
    return [e.to_json() for e in events]


# -- the database underneath ------------------------------------------------------------------

Dump = dict[str, list[tuple[str | None, ...]]]


def dump_tables(store: SessionStore) -> Dump:
    """Every row of ``sessions``, ``events`` and ``surface``, each column as its text, by key."""
    t = tables_for(store.schema)
    out: Dump = {}
    with store.engine.connect() as conn:
        for table in (t.sessions, t.events, t.surface):
            query = select(*(cast(c, Text) for c in table.c)).order_by(*table.primary_key.columns)
            out[table.name] = [tuple(row) for row in conn.execute(query)]
        conn.rollback()
    return out


WRITE_SQL = re.compile(r"^\s*(INSERT|UPDATE|DELETE|CREATE|DROP|ALTER)\b", re.IGNORECASE)


_CONTROL = re.compile(r"^\s*(BEGIN|PRAGMA)\b", re.IGNORECASE)


@dataclass
class Recorder:
    """What an engine ran inside a ``recorded`` block."""

    executed: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def statements(self) -> list[str]:
        return [statement for statement, _ in self.executed]

    @property
    def queries(self) -> list[str]:
        """Statements other than transaction control (BEGIN, pragmas)."""
        return [s for s in self.statements if not _CONTROL.match(s)]

    @property
    def parameters(self) -> list[Any]:
        """The parameters of ``queries``, in the same order."""
        return [p for s, p in self.executed if not _CONTROL.match(s)]

    @property
    def writes(self) -> list[str]:
        return [s for s in self.statements if WRITE_SQL.match(s)]


@contextmanager
def recorded(engine: Engine) -> Iterator[Recorder]:
    """Record every statement SQLAlchemy runs on ``engine`` inside the block."""
    rec = Recorder()

    def on_statement(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        rec.executed.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", on_statement)
    try:
        yield rec
    finally:
        event.remove(engine, "before_cursor_execute", on_statement)


@contextmanager
def failing_trigger(store: SessionStore, table: str, when: str) -> Iterator[None]:
    """Make the database refuse inserts into ``table`` for rows matching ``when`` (SQL on NEW).

    A trigger fails the statement inside the server, whatever path the store takes to the
    database, so it tests that a failure in the middle of a transaction leaves nothing behind.
    """
    name = "boom_" + table
    if store.schema is None:
        create = [
            f"CREATE TRIGGER {name} BEFORE INSERT ON {table} WHEN {when} "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        ]
        drop = [f"DROP TRIGGER {name}"]
    else:
        schema = f'"{store.schema}"'
        create = [
            f"CREATE FUNCTION {schema}.{name}() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'injected failure'; END $$",
            f"CREATE TRIGGER {name} BEFORE INSERT ON {schema}.{table} FOR EACH ROW "
            f"WHEN ({when}) EXECUTE FUNCTION {schema}.{name}()",
        ]
        drop = [f"DROP TRIGGER {name} ON {schema}.{table}", f"DROP FUNCTION {schema}.{name}()"]
    with store.engine.begin() as conn:
        for statement in create:
            conn.exec_driver_sql(statement)
    try:
        yield
    finally:
        with store.engine.begin() as conn:
            for statement in drop:
                conn.exec_driver_sql(statement)


# -- "a refused input changes nothing" --------------------------------------------------------


@dataclass(frozen=True)
class HandleState:
    """What a refused append must leave exactly as it was in a handle's memory."""

    seq: int
    events: tuple[SessionEvent, ...]
    nodes: tuple[int, ...]
    replace_generation: int
    messages: tuple[Any, ...]
    message_ids: tuple[int, ...]


def capture(session: Session) -> HandleState:
    messages = session.messages()
    return HandleState(
        seq=session.seq,
        events=tuple(session.events),
        nodes=session.surface.nodes,
        replace_generation=session.surface.replace_generation,
        messages=tuple(messages),
        message_ids=tuple(id(m) for m in messages),
    )


def view(session: Session) -> tuple[Any, ...]:
    """What two handles on one session must agree on (``capture`` without identities)."""
    state = capture(session)
    return (state.seq, state.events, state.nodes, state.replace_generation, state.messages)


@contextmanager
def refused(
    store: SessionStore,
    error: type[BaseException],
    *handles: Session,
    match: str | None = None,
) -> Iterator[pytest.ExceptionInfo[Any]]:
    """Expect ``error`` from the block; the three tables and every handle stay as they were."""
    before_tables = dump_tables(store)
    before = [capture(h) for h in handles]
    with pytest.raises(error, match=match) as info:
        yield info
    assert dump_tables(store) == before_tables
    assert [capture(h) for h in handles] == before


def tables(store: SessionStore) -> Any:
    """The store's ``SchemaTables`` (for reading and hand-editing rows)."""
    return tables_for(store.schema)


def execute(store: SessionStore, *statements: Any) -> None:
    """Run hand-written statements in one committed transaction (editing rows underneath)."""
    with store.engine.begin() as conn:
        for statement in statements:
            conn.execute(statement)


def session_row(store: SessionStore, session_id: str) -> Any:
    s = tables(store).sessions
    with store.engine.connect() as conn:
        return conn.execute(select(s).where(s.c.id == session_id)).one()


def surface_table(store: SessionStore, session_id: str) -> list[tuple[int, int]]:
    """The ``(pos, event_seq)`` rows of a session's surface, by position."""
    sf = tables(store).surface
    query = select(sf.c.pos, sf.c.event_seq).where(sf.c.session_id == session_id)
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(query.order_by(sf.c.pos))]  # type: ignore[misc]


def event_rows(store: SessionStore, session_id: str) -> list[Any]:
    e = tables(store).events
    query = select(e).where(e.c.session_id == session_id).order_by(e.c.seq)
    with store.engine.connect() as conn:
        return list(conn.execute(query))
