"""PostgreSQL's one-round-trip append: one session's append as one query that also commits.

The statements of :func:`one_trip`, bound on the client, go as one query on a connection in
autocommit: several statements in one query are one implicit transaction, committed when the
query returns or rolled back whole by the first error. One query is one send and one wait,
where a pipeline flushes and polls once per statement. The query cannot count rows, so the
server fails it instead (a lost race is a division by zero, a row past the head a unique
violation), and :func:`one_trip_outcome` maps those errors onto ``transactions.classify``.
With psycopg's prepared statements on, the statements run prepared on the connection once it
is known what is prepared there (:func:`trip_query`). :func:`one_trip_flow` is the whole
transaction, the stale-prepared retry included, for both of ``driving``'s loops.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import psycopg

from session_sql._store.backends.postgresql.driving import PG_INERROR
from session_sql._store.backends.postgresql.prepared import (
    forget_prepared,
    know_prepared,
    prepared_on,
)
from session_sql._store.backends.postgresql.statements import drop_nodes_params
from session_sql._store.transactions import (
    ROLLBACK,
    AppendPart,
    Flow,
    Query,
    Run,
    SurfaceOp,
    Writes,
    classify,
    event_rows,
    surface_ops,
)

if TYPE_CHECKING:
    from session_sql._store.context import Compiled

_log = logging.getLogger("session_sql")


def tenant_params(w: Writes) -> Any:
    """The parameters of ``set_tenant``: this store's tenant."""
    c = w.own.set_tenant
    return c.bind({**c.defaults, "b_tenant": w.tenant})


def tenant_runs(w: Writes) -> list[Run]:
    """The tenant setting as a pipeline's first statement (``set_tenant``); none where it
    must reach Citus's workers, whose flows send ``tenant_first`` before their pipeline."""
    if w.own.distributed_sets:
        return []
    return [Run(w.own.set_tenant.sql, tenant_params(w))]


def tenant_first(w: Writes) -> Flow[None]:
    """Where the tenant settings must reach Citus's workers (a distributed store whose role
    row-level security applies to): its ``SET LOCAL`` statements as one query of their own,
    before the transaction's pipeline. Citus sends them on to a worker when it
    first uses one; sent inside a pipeline, or in one query with the statements that follow,
    they make Citus plan those statements for every shard, or fail them."""
    if w.own.distributed_sets:
        reply = yield Query(";".join(w.own.distributed_sets))
        if reply.error is not None:
            raise reply.error


def one_trip_flow(
    w: Writes, part: AppendPart, driver: Any, bind: Callable[[str, Any], str]
) -> Flow[bool]:
    """One session's append as one query (``driving``'s ``Query``): False (nothing written)
    when its head update matched no row. ``driver`` is the psycopg connection it runs on
    (idle, in autocommit), ``bind`` its client cursor's ``mogrify``.

    A query that fails because what was known to be prepared on the connection was not
    (``STALE_PREPARED``) wrote nothing: it runs once more, unprepared, reading what is.
    On a distributed store with its delegated function, an append of its shape is that
    function's call instead (:func:`delegated_flow`).
    """
    call = delegated_call(w, part, bind)
    if call is not None:
        return (yield from delegated_flow(w, part, call, bind))
    literal = False
    while True:
        trip = trip_query(bind, w, part, driver, literal=literal)
        reply = yield Query(trip.query, last_rows=trip.reads_prepared)
        error = reply.error
        if error is None:
            settle_prepared(driver, trip, reply.rows)
            return True
        if reply.broken or not isinstance(error, psycopg.Error):
            raise error
        forget_prepared(driver)
        if driver.info.transaction_status == PG_INERROR:
            yield ROLLBACK  # the failed explicit block of a listening store
        if trip.uses is not None and error.sqlstate in STALE_PREPARED:
            literal = True  # nothing was written: once more, unprepared
            continue
        return one_trip_outcome(error, part)


def delegated_call(w: Writes, part: AppendPart, bind: Callable[[str, Any], str]) -> str | None:
    """The call of the store's delegated function (``delegation``) that appends ``part``,
    when the store has one and ``part`` is of its shape: one event, and no surface change
    but one new node."""
    fn = w.own.delegated
    if fn is None or len(part.events) != 1:
        return None
    ops = surface_ops(w, part.session_key, part.transitions, part.next_pos)
    if ops and (len(ops) > 1 or ops[0][0] is not SurfaceOp.INSERT_NODES or len(ops[0][1]) > 1):
        return None
    node = ops[0][1][0] if ops else None
    (event,) = event_rows(w, part)
    return bind(fn.call, fn.values(part.session_key, part.advance, event, node))


def delegated_flow(
    w: Writes, part: AppendPart, call: str, bind: Callable[[str, Any], str]
) -> Flow[bool]:
    """:func:`one_trip_flow` by the delegated ``call``: one statement in autocommit (which
    Citus sends whole to the worker, where it commits), then the wake-up as a query of its
    own when the store listens (in the call's query it would make a transaction block, which
    Citus does not delegate). The call fails as the one query does (a lost race with
    ``division_by_zero``, a row past the head with a unique violation)."""
    reply = yield Query(call)
    if reply.error is not None:
        if reply.broken or not isinstance(reply.error, psycopg.Error):
            raise reply.error
        return one_trip_outcome(reply.error, part)
    notes = [] if w.wake_notes is None else w.wake_notes([(part.session_id, part.head)])
    if notes:
        sql, names = w.own.notify.positional
        reply = yield Query(bind(sql, [notes[0][name] for name in names]))
        if reply.error is not None:  # the append is committed: its followers poll
            if not isinstance(reply.error, psycopg.Error):
                raise reply.error
            _log.warning("waking the followers after an append failed: %s", reply.error)
    return True


def one_trip(w: Writes, part: AppendPart) -> list[tuple[Compiled, list[Any]]]:
    """The statements of one session's append in PostgreSQL's one-round-trip form, each with
    the parameters it runs with (one execution per entry): the tenant setting, the guarded
    head update, the event rows and the surface upkeep, in that order.

    Nothing in it depends on a row count read by the client (see ``Statements``): a lost
    race fails the guard, a row past the head fails an insert, either way the whole
    transaction rolls back, so it can be sent with its commit.
    """
    c, own = w.compiled, w.own
    out: list[tuple[Compiled, list[Any]]] = [
        (own.set_tenant, [tenant_params(w)]),
        (own.guarded_advance, [own.guarded_advance.bind(part.advance)]),
    ]
    out.append((own.insert_event_strict, event_rows(w, part)))  # in the statement's order
    for op, params in surface_ops(w, part.session_key, part.transitions, part.next_pos):
        if op is SurfaceOp.INSERT_NODES:
            out.append((own.insert_node_strict, params))
        elif op is SurfaceOp.DROP_NODES:
            out.append((own.drop_nodes, [drop_nodes_params(*params)]))
        else:
            out.append((c.retarget_node, [params]))
    return out


PREPARED_PREFIX: Final = "session_sql_"
"""How the names of the one query's prepared statements start (then a digest of the text)."""

PREPARED_NAMES: Final = (
    "SELECT name FROM pg_prepared_statements WHERE from_sql AND left(name, 12) = 'session_sql_'"
)
"""The store's statements prepared on this connection (the names of ``PREPARED_PREFIX``)."""

STALE_PREPARED: Final = frozenset({"26000", "42P05"})
"""invalid_sql_statement_name, duplicate_prepared_statement: what was known to be prepared on
the connection was not what the server had (the statement failed before ``COMMIT``)."""

_PLACEHOLDER: Final = re.compile(r"%%|%s")


class PreparedForm(NamedTuple):
    """A statement of the one query as a prepared statement of the connection."""

    name: str
    prepare: str  # PREPARE name AS ...: final text, no client parameters
    call: str  # EXECUTE name(%s, ...): bound with the query


@functools.lru_cache(maxsize=256)
def prepared_form(sql: str) -> PreparedForm:
    """``sql`` (a statement's positional form: ``%s`` for each parameter, ``%%`` for a percent
    sign) as a statement to prepare once per connection, named by a digest of its text (so a
    name always means the same statement), and the ``EXECUTE`` that runs it."""
    count = 0

    def number(match: re.Match[str]) -> str:
        nonlocal count
        if match[0] == "%%":
            return "%"  # the statement is sent as it is, with no client parameters
        count += 1
        return "$" + str(count)

    body = _PLACEHOLDER.sub(number, sql)
    name = PREPARED_PREFIX + hashlib.blake2b(sql.encode(), digest_size=16).hexdigest()
    call = "EXECUTE " + name + ("(" + ", ".join(["%s"] * count) + ")" if count else "")
    return PreparedForm(name, "PREPARE " + name + " AS " + body, call)


@functools.lru_cache(maxsize=64)
def _bound_name(sql: str, values: tuple[Any, ...]) -> str:
    """The name of ``sql`` prepared with ``values`` bound into it (the tenant setting)."""
    key = json.dumps([sql, values], separators=(",", ":"))
    return PREPARED_PREFIX + hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


class TripQuery(NamedTuple):
    """One session's append as one query (:func:`trip_query`)."""

    query: str
    uses: frozenset[str] | None  # the prepared statements it runs (and prepares if needed)
    reads_prepared: bool  # its last result lists the connection's prepared statements


def trip_query(
    bind: Callable[[str, Any], str],
    w: Writes,
    part: AppendPart,
    driver: Any,
    *,
    literal: bool = False,
) -> TripQuery:
    """The one query of ``part`` for the psycopg connection ``driver``.

    With psycopg's prepared statements on (its ``prepare_threshold``; a transaction-pooling
    proxy needs them off, and then the query is :func:`one_query` as it is), the statements
    run as prepared statements of the connection (:func:`prepared_query`): the server then
    parses and plans them once per connection, not on every append. What is prepared on a
    connection is known from the last query that ran on it; when it is not (a new
    connection, a failed statement, a rollback of an open transaction: psycopg's may send
    ``DEALLOCATE ALL``), or ``literal`` is asked for, the query is :func:`one_query` and reads
    the connection's prepared statements in the same round trip (``PREPARED_NAMES``).
    """
    if getattr(driver, "prepare_threshold", None) is None:
        return TripQuery(one_query(bind, w, part), None, False)
    known = None if literal else prepared_on(driver)
    if known is None:
        return TripQuery(one_query(bind, w, part) + ";" + PREPARED_NAMES, None, True)
    query, uses = prepared_query(bind, w, part, known)
    return TripQuery(query, uses, False)


def settle_prepared(driver: Any, trip: TripQuery, names: list[Any] | None) -> None:
    """After ``trip`` ran on ``driver`` to its end: what is prepared on the connection now
    (``names``: the rows of its last result, when it read them)."""
    if trip.reads_prepared and names is not None:
        know_prepared(driver, {str(row[0]) for row in names})
    elif trip.uses is not None:
        known = prepared_on(driver)
        if known is None or not trip.uses <= known:  # (else nothing new: no new set)
            know_prepared(driver, set(trip.uses) if known is None else known | trip.uses)


def prepared_query(
    bind: Callable[[str, Any], str], w: Writes, part: AppendPart, known: set[str]
) -> tuple[str, frozenset[str]]:
    """:func:`one_query` with each statement ``EXECUTE``d as a prepared statement of the
    connection (``PREPARE``d first in the same query when not in ``known``), and the names
    it uses.

    The same statements run in the same order, in the same transaction, with the same values
    bound by the driver, so a lost race, a taken key or the wake-up fail as they do in
    :func:`one_query`; an insert of several rows is one ``EXECUTE`` per row. The tenant
    setting is prepared with the store's tenant bound into it (its name covers the values).
    ``PREPARE`` is not transactional: a statement prepared by a query that then failed stays
    prepared."""
    trip = one_trip(w, part)
    (tenant, (tenant_params,)), rest = trip[0], trip[1:]
    tenant_sql, tenant_names = tenant.positional
    tenant_values = tuple(tenant_params[name] for name in tenant_names)
    tenant_name = _bound_name(tenant_sql, tenant_values)
    prepares: list[str] = []
    if tenant_name not in known:
        prepares.append(bind("PREPARE " + tenant_name + " AS " + tenant_sql, tenant_values))
    uses = {tenant_name}
    statements = ["EXECUTE " + tenant_name]
    values: list[Any] = []
    for stmt, params in rest:
        sql, names = stmt.positional
        form = prepared_form(sql)
        if form.name not in known and form.name not in uses:
            prepares.append(form.prepare)
        uses.add(form.name)
        statements.extend([form.call] * len(params))
        for one in params:
            values.extend(one if type(one) is tuple else [one[name] for name in names])
    statements = _with_wake(w, part, statements, values)
    return ";".join([*prepares, bind(";".join(statements), values)]), frozenset(uses)


def one_query(bind: Callable[[str, Any], str], w: Writes, part: AppendPart) -> str:
    """:func:`one_trip`'s statements joined into one query and bound by one call of ``bind``
    (a client cursor's ``mogrify``), in their positional form: a call per statement cost
    the driver's fixed work (a transformer, the query's lookup) seven times over. An insert
    of several rows is one multi-row ``VALUES`` statement: one statement for the server to
    parse, and no arrays for the client to adapt (binding ``unnest`` arrays cost more than
    the rows' own values).

    When the store listens, the query is ``BEGIN; ...; COMMIT; SELECT pg_notify(...)``: the
    wake-up runs in a transaction of its own after the append's, which writes nothing and so
    never waits for a WAL flush. (``NOTIFY`` inside the append would hold PostgreSQL's one
    database-wide notify lock across the append's durable commit, so that appends to
    different sessions queued on it one flush at a time; docs/performance.md.) A first
    error skips the rest of the query, the ``NOTIFY`` included."""
    statements: list[str] = []
    values: list[Any] = []
    for stmt, params in one_trip(w, part):
        sql, names = stmt.positional
        if len(params) > 1 and sql.startswith("INSERT "):
            head, sep, row = sql.partition(" VALUES ")
            statements.append(head + sep + ", ".join([row] * len(params)))
        else:
            statements.extend([sql] * len(params))
        for one in params:
            values.extend(one if type(one) is tuple else [one[name] for name in names])
    return bind(";".join(_with_wake(w, part, statements, values)), values)


def _with_wake(w: Writes, part: AppendPart, statements: list[str], values: list[Any]) -> list[str]:
    """``statements`` as one explicit block followed by the wake-up when the store listens
    (its values appended to ``values``); as they are otherwise.

    An explicit block: a COMMIT that ends the query's implicit transaction instead commits
    it with a WARNING ("there is no transaction in progress"), which the server writes to its
    log and sends to the client on every append."""
    notes = [] if w.wake_notes is None else w.wake_notes([(part.session_id, part.head)])
    if not notes:
        return statements
    sql, names = w.own.notify.positional
    values.extend(notes[0][name] for name in names)
    return ["BEGIN", *statements, "COMMIT", sql]


def one_trip_outcome(exc: psycopg.Error, part: AppendPart) -> bool:
    """What a failed one query means, by ``transactions.classify``: its statements run in order,
    so the guard's division by zero is the head update matching no row, and any later error
    ran under the matched head (nothing was written). False for a lost race;
    ``CorruptSessionError`` raised for a taken key; anything else re-raised, except an error
    of PostgreSQL's notify code (``async.c``), which only the wake-up after the ``COMMIT`` can
    raise: the append committed (True), and its followers find it at their next poll."""
    if exc.diag.source_file == "async.c":
        _log.warning("waking the followers after an append failed: %s", exc)
        return True
    matched = 0 if isinstance(exc, psycopg.errors.DivisionByZero) else 1
    classify([part], [matched], at=0, error=exc)
    return False
