"""SPEC §12.1: what is appended is what is read, to the byte, key order included.

For arbitrary admissible values (§1.1) — keys in any order (longest first, as JSONB would
never give them back), nesting, astral and combining characters, numbers at the edges of the
safe range, floats that look like integers — ``json.dumps`` of the value as appended equals
``json.dumps`` of the value as read back, through every write path (seed, ``append``,
``append_many``, ``append_together``, their async twins, ``import_jsonl``) and every reader
(``events``, tail reads, ``load_session``, handles, ``refresh``, ``follow``, ``export_jsonl``,
``messages``, ``surface_messages``, the async API and the ORM), on both backends; and after an
export imported into the other backend, and after ``migrate`` in every direction. U+0000 and
unpaired surrogates stay refused, with nothing written.

Written against the public API only (no table columns), so that it holds whatever the
tables' key layout.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, create_engine, select
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.pool import NullPool

from session_sql import (
    AsyncSessionStore,
    SessionEvent,
    SessionStore,
    migrate,
    open_async_store,
    open_store,
)
from session_sql.errors import CorruptSessionError, InvalidSeedError, NotJSONError
from session_sql.orm import orm_models

from ..conftest import Backend
from ..core.test_properties import floats, texts
from ..reliability.reliability_strategies import MAX_SAFE, ODD_NUMBERS, ODD_TEXT
from .async_facade import LoopThread

# Fidelity does not depend on the tenant, and the ORM reads rows of the default tenant.
DEFAULT_TENANT_ONLY = True

PG = pytest.mark.postgresql
DIRECTIONS = [
    pytest.param("sqlite", "sqlite", id="sqlite-to-sqlite"),
    pytest.param("sqlite", "postgresql", id="sqlite-to-postgresql", marks=PG),
    pytest.param("postgresql", "sqlite", id="postgresql-to-sqlite", marks=PG),
    pytest.param("postgresql", "postgresql", id="postgresql-to-postgresql", marks=PG),
]

FIDELITY = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # one store per test on purpose, shared by examples
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

# -- admissible values ----------------------------------------------------------------------

EDGE_NUMBERS: list[Any] = [
    *ODD_NUMBERS,
    MAX_SAFE - 1,
    -MAX_SAFE + 1,
    1.0,
    -2.0,
    1.5e16,
    1e17,
    -9007199254740992.0,
    1e300,
    -1e-300,
    2.2250738585072014e-308,
]
EDGE_TEXT = [
    "e\u0301",  # a combining acute accent (not normalised to U+00E9)
    "\u00e9",
    "a\u0308\u0301\u20dd",
    "\U0001f600",
    "\U00010000",
    "\U0010fffd",
    "\\u0000",  # six characters, not U+0000
    "\u2028\u2029",
]
# Text of any storable characters (the UTF-8 codec leaves out lone surrogates, U+0000 is left
# out by hand), odd strings that are still valid, and both run together.
STORABLE_TEXT = st.one_of(
    texts,
    st.sampled_from(ODD_TEXT + EDGE_TEXT),
    st.tuples(texts, st.sampled_from(ODD_TEXT + EDGE_TEXT)).map("".join),
)
KEYS = st.one_of(
    st.sampled_from(["a", "b", "y", "zeta", "alpha", "id", "type", "input", "a_longer_key"]),
    STORABLE_TEXT,
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-MAX_SAFE, MAX_SAFE),
    floats,
    st.sampled_from(EDGE_NUMBERS),
    STORABLE_TEXT,
)


def _jsonb_order(key: str) -> tuple[int, bytes]:
    """The order JSONB stores object keys in: shorter first, then by bytes."""
    raw = key.encode("utf-8")
    return len(raw), raw


def _ordered(drawn: tuple[list[str], list[Any], bool]) -> dict[str, Any]:
    keys, values, against_jsonb = drawn
    if against_jsonb:
        keys = sorted(keys, key=_jsonb_order, reverse=True)
    return dict(zip(keys, values, strict=False))


def _objects(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects whose keys come in the drawn order, or in JSONB's order reversed. (Keys and
    values are drawn apart: a filter on pairs would repr the recursive strategy.)"""
    keys = st.lists(KEYS, unique=True, max_size=4)
    values = st.lists(children, min_size=4, max_size=4)
    return st.tuples(keys, values, st.booleans()).map(_ordered)


ADMISSIBLE = st.recursive(
    LEAVES, lambda children: st.lists(children, max_size=4) | _objects(children), max_leaves=16
)

TRICKY: list[Any] = [
    {"zeta": 1, "alpha": {"y": 2, "b": 3}},
    {"a_longer_key": [1e16, -MAX_SAFE, MAX_SAFE], "id": "e\u0301\U0001f600", "a": 5e-324},
    [{"type": "tool_use", "id": "toolu_1", "name": "n", "input": {"zz": 1.0, "z": None}}],
]

# -- events holding a value -----------------------------------------------------------------


def todo(value: Any) -> dict[str, Any]:
    """A log-only event whose data is the value itself (any JSON, scalars included)."""
    return {"type": "todo/write", "data": value}


def said(value: Any) -> dict[str, Any]:
    """A user message, keys out of order, carrying the value as extra fields: on the surface,
    so the message readers give it back too."""
    message = {
        "source": {"kind": "user", "extra": value},
        "role": "user",
        "id": f"m-{uuid.uuid4().hex[:8]}",
        "content": [{"type": "text", "text": "e\u0301 \U0001f600", "meta": value}],
        "zz_extra": value,
    }
    return {"type": "user/message", "data": message, "surface_op": "append"}


def items_for(values: list[Any]) -> list[dict[str, Any]]:
    return [item for value in values for item in (todo(value), said(value))]


def wire(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items as wire events (a seed, or the lines of a JSONL file)."""
    out = []
    for seq, item in enumerate(items):
        event = {"type": item["type"], "seq": seq, "time": 1_700_000_000_000, "data": item["data"]}
        if "surface_op" in item:
            event["surfaceOp"] = item["surface_op"]
        out.append(event)
    return out


def dumped(value: Any) -> str:
    return json.dumps(value)


class Expected:
    """What one session must give back: each payload event's ``json.dumps(data)`` by seq, and
    its messages in surface order (every ``said`` is appended to the surface)."""

    def __init__(self) -> None:
        self.data: dict[int, str] = {}
        self.messages: list[str] = []

    def add(self, events: list[SessionEvent], items: list[dict[str, Any]]) -> None:
        """Record ``items`` as appended (their own values, not what the store says back)."""
        assert [e.type for e in events] == [i["type"] for i in items]
        for event, item in zip(events, items, strict=True):
            self.data[event.seq] = dumped(item["data"])
            if item["type"] == "user/message":
                self.messages.append(dumped(item["data"]))

    def add_wire(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.data[event["seq"]] = dumped(event["data"])
            if event["type"] == "user/message":
                self.messages.append(dumped(event["data"]))


def payloads(events: Any, expected: Expected) -> dict[int, str]:
    """``json.dumps(data)`` of the events that hold a test value, by seq."""
    return {e.seq: dumped(e.data) for e in events if e.seq in expected.data}


def exported(text: str, expected: Expected) -> dict[int, str]:
    # Lines end with "\n" only (str.splitlines would also split at U+2028 inside a string).
    lines = [json.loads(line) for line in text.split("\n")[1:] if line]
    return {e["seq"]: dumped(e["data"]) for e in lines if e["seq"] in expected.data}


def message_texts(messages: Any) -> list[str]:
    return [dumped(m) for m in messages]


def check(
    name: str, got: Any, want: Any, failures: dict[str, tuple[Any, Any]], *, tail: int = 0
) -> None:
    """Record a reader whose bytes differ from what was appended."""
    if isinstance(want, dict) and tail:
        want = {seq: text for seq, text in want.items() if seq >= tail}
    elif isinstance(want, list) and tail:
        want = want[-tail:]
    if got != want:
        failures[name] = (got, want)


# -- readers --------------------------------------------------------------------------------


class Readers:
    """Every reader of a session, sync and async, on one backend."""

    def __init__(
        self, store: SessionStore, astore: AsyncSessionStore, loop: LoopThread, folder: Path
    ) -> None:
        self.store = store
        self.astore = astore
        self.loop = loop
        self.folder = folder
        self.user_engine: Engine = create_engine(store.engine.url, poolclass=NullPool)
        self.models = orm_models(store.schema)

    def close(self) -> None:
        self.user_engine.dispose()

    def check_all(self, session_id: str, expected: Expected) -> dict[str, tuple[Any, Any]]:
        """Read the session through every reader; returns the readers that differ."""
        store, want, msgs = self.store, expected.data, expected.messages
        fails: dict[str, tuple[Any, Any]] = {}
        half = max(want) // 2
        check("events", payloads(store.events(session_id), expected), want, fails)
        tail = payloads(store.events(session_id, from_seq=half), expected)
        check("events(from_seq)", tail, want, fails, tail=half)
        loaded = store.load_session(session_id)
        check("load_session", payloads(loaded.events, expected), want, fails)
        check("load_session.messages", message_texts(loaded.messages()), msgs, fails)
        handle = store.open_session(session_id)
        check("open_session.events", payloads(handle.events, expected), want, fails)
        check("open_session.messages", message_texts(handle.messages()), msgs, fails)
        # timeout=0: every committed event, then the follower stops (and closes) by itself
        followed = payloads(store.follow(session_id, timeout=0), expected)
        check("follow", followed, want, fails)
        out = io.StringIO()
        store.export_jsonl(session_id, out)
        check("export_jsonl", exported(out.getvalue(), expected), want, fails)
        check("messages", message_texts(store.messages(session_id)), msgs, fails)
        last = max(1, len(msgs) // 2)
        got = message_texts(store.messages(session_id, last=last))
        check("messages(last)", got, msgs, fails, tail=last)
        nodes = store.surface_messages(session_id)
        check("surface_messages", message_texts(n.message for n in nodes), msgs, fails)
        nodes = store.surface_messages(session_id, last=last)
        got = message_texts(n.message for n in nodes)
        check("surface_messages(last)", got, msgs, fails, tail=last)
        check("orm", self.orm(session_id, expected), want, fails)
        for name, (got, expect_all) in self.loop.run(self.read_async(session_id, expected)).items():
            tail_of = last if name.endswith("(last)") else 0
            check(name, got, expect_all, fails, tail=tail_of)
        return fails

    def orm(self, session_id: str, expected: Expected) -> dict[int, str]:
        m = self.models
        with OrmSession(self.user_engine) as db:
            row = db.scalars(select(m.SessionRow).where(m.SessionRow.id == session_id)).one()
            return {e.seq: dumped(e.data) for e in row.events if e.seq in expected.data}

    async def read_async(self, session_id: str, expected: Expected) -> dict[str, tuple[Any, Any]]:
        astore, want, msgs = self.astore, expected.data, expected.messages
        last = max(1, len(msgs) // 2)
        got: dict[str, tuple[Any, Any]] = {}
        events = [e async for e in await astore.events(session_id)]
        got["async events"] = (payloads(events, expected), want)
        loaded = await astore.load_session(session_id)
        got["async load_session"] = (payloads(loaded.events, expected), want)
        handle = await astore.open_session(session_id)
        got["async open_session.events"] = (payloads(handle.events, expected), want)
        followed = [e async for e in astore.follow(session_id, timeout=0)]
        got["async follow"] = (payloads(followed, expected), want)
        path = self.folder / f"{session_id}.export.jsonl"  # a path: written off the loop
        await astore.export_jsonl(session_id, path)
        text = path.read_text(encoding="utf-8")
        got["async export_jsonl"] = (exported(text, expected), want)
        got["async messages"] = (message_texts(await astore.messages(session_id)), msgs)
        nodes = await astore.surface_messages(session_id, last=last)
        got["async surface_messages(last)"] = (message_texts(n.message for n in nodes), msgs)
        return got


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.stop()


@pytest.fixture
def astore(backend: Backend, store: SessionStore, loop: LoopThread) -> Iterator[AsyncSessionStore]:
    """The async API on the ``store``'s database (opened after it, so the schema exists)."""
    opened = loop.run(open_async_store(backend.url, schema=backend.schema).__aenter__())
    yield opened
    loop.run(opened.close())


@pytest.fixture
def readers(
    store: SessionStore, astore: AsyncSessionStore, loop: LoopThread, tmp_path: Path
) -> Iterator[Readers]:
    made = Readers(store, astore, loop, tmp_path)
    yield made
    made.close()


def _jsonl(session_id: str, events: list[dict[str, Any]], *, ascii: bool = False) -> bytes:
    """A JSONL file of the events: UTF-8 as is, or (``ascii``) every non-ASCII one escaped."""
    header = {"version": 0, "id": session_id, "createdAt": 1_700_000_000_000, "isSeeded": False}
    lines = [json.dumps(header)] + [json.dumps(e, ensure_ascii=ascii) for e in events]
    return ("\n".join(lines) + "\n").encode("utf-8")


# -- every write path, every reader -----------------------------------------------------------


def test_every_write_path_and_reader_keeps_the_bytes(store, astore, loop, readers, tmp_path):
    @FIDELITY
    @given(values=st.lists(ADMISSIBLE, min_size=1, max_size=3))
    @example(values=TRICKY)
    def run(values: list[Any]) -> None:
        live = f"live-{uuid.uuid4().hex[:8]}"
        other = f"other-{uuid.uuid4().hex[:8]}"
        expected, others = Expected(), Expected()

        # seed, append, append_many, append_together: the sync API
        seed = wire(items_for(values[:1]))
        handle = store.create_session(live, seed=seed)
        expected.add_wire(seed)
        watcher = store.open_session(live)
        for item in items_for(values):
            expected.add([handle.append(**item)], [item])
        batch = items_for(values)
        expected.add(handle.append_many(batch), batch)
        partner = store.create_session(other)
        mine, theirs = items_for(values[::-1]), items_for(values)
        done = store.append_together([(handle, mine), (partner, theirs)])
        expected.add(done[0], mine)
        others.add(done[1], theirs)

        # the async API on the same sessions: append, append_many, append_together
        async def write_async() -> None:
            ahandle = await astore.open_session(live)
            for item in items_for(values):
                expected.add([await ahandle.append(**item)], [item])
            expected.add(await ahandle.append_many(batch), batch)
            apartner = await astore.open_session(other)
            joint = await astore.append_together([(ahandle, mine), (apartner, theirs)])
            expected.add(joint[0], mine)
            others.add(joint[1], theirs)

        loop.run(write_async())
        start = watcher.seq
        seen = watcher.refresh()  # another handle's read of what others committed
        failures: dict[str, tuple[Any, Any]] = {}
        check("refresh", payloads(seen, expected), expected.data, failures, tail=start)
        failures |= readers.check_all(live, expected)
        check("other events", payloads(store.events(other), others), others.data, failures)

        # import_jsonl, sync and async: the file's events, as written in it
        events = wire(items_for(values))
        for name, do_import in (("import", store.import_jsonl), ("async import", None)):
            sid = f"{name[:5]}-{uuid.uuid4().hex[:8]}"
            path = tmp_path / f"{sid}.jsonl"
            path.write_bytes(_jsonl(sid, events))
            if do_import is not None:
                assert do_import(path) == sid
            else:
                assert loop.run(astore.import_jsonl(path)) == sid
            imported = Expected()
            imported.add_wire(events)
            failures |= {
                f"{name}: {reader}": diff
                for reader, diff in readers.check_all(sid, imported).items()
            }
        assert not failures, _report(failures)

    run()


def _report(failures: dict[str, tuple[Any, Any]]) -> str:
    """Each failing reader with its first difference (or the counts, when they differ)."""
    lines = []
    for name, (got, want) in failures.items():
        pairs = (
            [(seq, got.get(seq), want.get(seq)) for seq in sorted(set(got) | set(want))]
            if isinstance(want, dict)
            else list(itertools.zip_longest(range(len(want)), got, want))
        )
        where, read, appended = next((p for p in pairs if p[1] != p[2]), (None, None, None))
        lines.append(f"{name} ({len(got)} read, {len(want)} appended), first at {where}:")
        lines.append(f"  read     {read}\n  appended {appended}")
    return "\n".join(lines)


def _objects_in(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
    children = value.values() if isinstance(value, dict) else value
    if isinstance(value, dict | list):
        for child in children:
            yield from _objects_in(child)


def test_the_values_have_keys_out_of_jsonb_order():
    """The property is only as good as its values: many objects must have keys out of JSONB's
    order, so that a backend that sorts keys fails it."""
    objects = [o for values in _values_list(40) for o in _objects_in(values) if len(o) > 1]
    reordered = [o for o in objects if list(o) != sorted(o, key=_jsonb_order)]
    assert len(reordered) >= 10, reordered
    assert list(TRICKY[0]["alpha"]) != sorted(TRICKY[0]["alpha"], key=_jsonb_order)


# -- across backends: export and import, migrate ---------------------------------------------


def _fill(store: SessionStore, values_list: list[list[Any]]) -> dict[str, Expected]:
    """One session per list of values, appended and appended in batches."""
    out: dict[str, Expected] = {}
    for n, values in enumerate(values_list):
        expected = Expected()
        handle = store.create_session(f"s{n}")
        for item in items_for(values):
            expected.add([handle.append(**item)], [item])
        batch = items_for(values)
        expected.add(handle.append_many(batch), batch)
        out[f"s{n}"] = expected
    return out


def _values_list(count: int) -> list[list[Any]]:
    """``count`` lists of values: the tricky ones, then drawn ones (a fixed seed)."""
    drawn: list[list[Any]] = [TRICKY]

    @settings(max_examples=count, deadline=None, database=None, derandomize=True)
    @given(values=st.lists(ADMISSIBLE, min_size=1, max_size=3))
    def collect(values: list[Any]) -> None:
        drawn.append(values)

    collect()
    return drawn[:count]


def _simple_reads(store: SessionStore, session_id: str, expected: Expected) -> dict[str, Any]:
    fails: dict[str, tuple[Any, Any]] = {}
    check("events", payloads(store.events(session_id), expected), expected.data, fails)
    loaded = store.load_session(session_id)
    check("load_session", payloads(loaded.events, expected), expected.data, fails)
    check("messages", message_texts(store.messages(session_id)), expected.messages, fails)
    return fails


def _open(where: Backend) -> SessionStore:
    return open_store(where.url, schema=where.schema)


@pytest.mark.parametrize(("first", "second"), DIRECTIONS)
def test_export_import_across_backends_keeps_the_bytes(place, first, second, tmp_path):
    """Written on one backend, exported, imported into the other, exported again, and
    imported back: every store reads the appended bytes, and the exports are identical."""
    a, b, c = place(first), place(second), place(first)
    with _open(a) as source, _open(b) as middle, _open(c) as back:
        sessions = _fill(source, _values_list(12))
        failures: dict[str, Any] = {}
        for sid, expected in sessions.items():
            texts = []
            for here, there in ((source, middle), (middle, back)):
                out = io.StringIO()
                here.export_jsonl(sid, out)
                texts.append(out.getvalue())
                there.import_jsonl(io.BytesIO(out.getvalue().encode("utf-8")))
                for reader, diff in _simple_reads(there, sid, expected).items():
                    failures[f"{sid} in {there.engine.dialect.name}: {reader}"] = diff
            if texts[0] != texts[1]:
                failures[f"{sid}: export after import"] = (texts[1], texts[0])
        assert not failures, _report(failures)


@pytest.mark.parametrize(("source_kind", "destination_kind"), DIRECTIONS)
def test_migrate_keeps_the_bytes(place, source_kind, destination_kind):
    source, destination = place(source_kind), place(destination_kind)
    with _open(source) as store:
        sessions = _fill(store, _values_list(12))
    report = migrate(
        source.url, destination.url, from_schema=source.schema, to_schema=destination.schema
    )
    assert report.ok and report.copied == len(sessions), report
    with _open(destination) as copied:
        failures: dict[str, Any] = {}
        for sid, expected in sessions.items():
            for reader, diff in _simple_reads(copied, sid, expected).items():
                failures[f"{sid}: {reader}"] = diff
        assert not failures, _report(failures)


# -- refusals ---------------------------------------------------------------------------------
# U+0000 and lone surrogates through append and append_many (sync and async) are refused in
# tests/store/test_store_refusals.py, and hostile JSONL lines in tests/reliability; these are
# the remaining write paths: a seed, append_together and an import.

UNSTORABLE = [
    pytest.param("a\x00b", id="nul"),
    pytest.param("\ud800", id="lone-high-surrogate"),
    pytest.param("x\udfff", id="lone-low-surrogate"),
]


def _log(store: SessionStore) -> list[tuple[str, list[str]]]:
    """Every session with the bytes of its log, through the public API."""
    return [
        (info.id, [dumped(e.to_json()) for e in store.events(info.id)])
        for info in store.iter_sessions()
    ]


@pytest.mark.parametrize("bad", UNSTORABLE)
def test_unstorable_strings_are_refused_on_every_write_path(store, bad, tmp_path):
    handle = store.create_session("a")
    handle.append_many(items_for(TRICKY))
    before = _log(store)
    nested = {"zeta": [1, {"deep": bad}], "alpha": 2}
    keyed = {"ok": 1, bad: 2}
    attempts: list[tuple[type[Exception], Callable[[], Any]]] = [
        (NotJSONError, lambda: store.append_together([(handle, [todo(nested)])])),
        (NotJSONError, lambda: store.append_together([(handle, [said(1), said(keyed)])])),
        (InvalidSeedError, lambda: store.create_session("b", seed=wire([todo(nested)]))),
        (InvalidSeedError, lambda: store.create_session("b", seed=wire([said(keyed)]))),
    ]
    for data in (nested, keyed):
        path = tmp_path / "bad.jsonl"
        path.write_bytes(_jsonl("c", wire([todo(1), todo(data), todo(2)]), ascii=True))
        attempts.append((CorruptSessionError, functools.partial(store.import_jsonl, path)))
    for error, attempt in attempts:
        with pytest.raises(error, match=r"U\+0000|surrogate"):
            attempt()
        assert _log(store) == before
    assert handle.append(**todo("still writable")).seq == len(before[0][1])
