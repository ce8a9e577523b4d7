"""SPEC §9 (errors) and §10 (the public names)."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import pytest

import session_sql
from session_sql import (
    ConcurrencyError,
    ConfigurationError,
    CorruptSessionError,
    ForkError,
    InvalidArgumentError,
    InvalidEventError,
    InvalidHeaderError,
    InvalidSeedError,
    NotJSONError,
    PermanentStoreError,
    ReadOnlyError,
    ReentrantAppendError,
    SchemaMismatchError,
    SchemaVersionError,
    Session,
    SessionExistsError,
    SessionFormatUnsupportedError,
    SessionNotFoundError,
    SessionSQLError,
    StoreError,
    SurfaceError,
    TransientStoreError,
    snapshot_json,
)
from session_sql import errors as errors_module

from .builders import tool_turn_log, wire

# (error, its parent in the tree, the built-in it also is) as errors.py documents them
HIERARCHY: list[tuple[type[Exception], type[Exception], type[Exception]]] = [
    (NotJSONError, SessionSQLError, TypeError),
    (InvalidEventError, SessionSQLError, ValueError),
    (SurfaceError, InvalidEventError, ValueError),
    (InvalidSeedError, InvalidEventError, ValueError),
    (InvalidHeaderError, SessionSQLError, ValueError),
    (ReentrantAppendError, SessionSQLError, RuntimeError),
    (SessionFormatUnsupportedError, SessionSQLError, ValueError),
    (CorruptSessionError, SessionSQLError, ValueError),
    (SchemaVersionError, SessionSQLError, RuntimeError),
    (SchemaMismatchError, SchemaVersionError, RuntimeError),
    (ConcurrencyError, SessionSQLError, RuntimeError),
    (SessionNotFoundError, SessionSQLError, LookupError),
    (SessionExistsError, SessionSQLError, ValueError),
    (ForkError, SessionSQLError, ValueError),
    (ReadOnlyError, SessionSQLError, TypeError),
    (ConfigurationError, SessionSQLError, ValueError),
    (InvalidArgumentError, SessionSQLError, ValueError),
    (StoreError, SessionSQLError, RuntimeError),
    (TransientStoreError, StoreError, RuntimeError),
    (PermanentStoreError, StoreError, RuntimeError),
]


@pytest.mark.parametrize(("error", "parent", "builtin"), HIERARCHY)
def test_each_error_sits_in_the_tree_and_is_also_a_builtin(
    error: type[Exception], parent: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error, parent)
    assert issubclass(error, SessionSQLError)
    assert issubclass(error, builtin)
    assert error.__name__ in errors_module.__doc__  # drawn in the module docstring


def test_every_error_is_in_the_errors_page() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text("utf-8")
    for error, _, _ in HIERARCHY:
        assert f"| `{error.__name__}` |" in page, error.__name__
        assert re.search(rf"── {error.__name__}\b", page), error.__name__


def test_the_root_is_an_exception() -> None:
    assert issubclass(SessionSQLError, Exception)
    assert SessionSQLError("m").message == "m"


FIELDS: list[tuple[type[Exception], dict[str, Any]]] = [
    (NotJSONError, {"path": 'data["x"][2]'}),
    (InvalidEventError, {"seq": 4, "code": "x"}),
    (SurfaceError, {"seq": 4}),
    (InvalidSeedError, {"index": 3, "seq": 3}),
    (InvalidHeaderError, {}),
    (ReentrantAppendError, {}),
    (SessionFormatUnsupportedError, {}),
    (CorruptSessionError, {"session_id": "s", "seq": 2, "line": 7}),
    (SchemaVersionError, {"expected": 1, "actual": "2"}),
    (SchemaMismatchError, {"expected": 1, "differences": ("column x",)}),
    (ConcurrencyError, {"session_id": "s", "expected": 9}),
    (SessionNotFoundError, {"session_id": "s"}),
    (SessionExistsError, {"session_id": "s"}),
    (ForkError, {"code": "out_of_range"}),
    (ReadOnlyError, {"operation": "update", "entity": "Event"}),
    (ConfigurationError, {"option": "pool_size"}),
    (InvalidArgumentError, {"argument": "limit"}),
    (StoreError, {}),
    (TransientStoreError, {"session_id": "s"}),
    (PermanentStoreError, {"path": "sessions.db"}),
]


@pytest.mark.parametrize(("error", "fields"), FIELDS)
def test_errors_pickle_with_their_fields(error: type[Exception], fields: dict[str, Any]) -> None:
    original = error("what broke", **fields)
    copy = pickle.loads(pickle.dumps(original))
    assert type(copy) is error
    assert str(copy) == str(original) == "what broke"
    assert copy.args == ("what broke",)
    for name, value in fields.items():
        assert getattr(copy, name) == value


def test_raised_errors_carry_their_fields_through_pickle() -> None:
    log = tool_turn_log()
    log.append(wire("user/message", 13, {"bad": True}, surface_op="append"))
    with pytest.raises(InvalidSeedError) as seed_error:
        Session(seed=log)
    with pytest.raises(NotJSONError) as json_error:
        snapshot_json({"x": [0, float("nan")]}, root="data")
    with pytest.raises(ForkError) as fork_error:
        Session("p").fork()
    for info in (seed_error, json_error, fork_error):
        copy = pickle.loads(pickle.dumps(info.value))
        assert copy.__dict__ == info.value.__dict__
        assert str(copy) == str(info.value)
    assert seed_error.value.index == 13
    assert json_error.value.path == 'data["x"][1]'
    assert fork_error.value.code == "empty"


def test_a_seed_surface_error_pickles_as_both_kinds() -> None:
    log = tool_turn_log()
    log.append(wire("user/message", 13, log[2]["data"]))  # no surfaceOp
    with pytest.raises(InvalidSeedError) as info:
        Session(seed=log)
    copy = pickle.loads(pickle.dumps(info.value))
    assert isinstance(copy, InvalidSeedError)
    assert isinstance(copy, SurfaceError)
    assert copy.index == 13


def test_the_store_error_branches_are_apart() -> None:
    """A caller tells "retry later" from "retrying fails the same way" by class."""
    assert not issubclass(TransientStoreError, PermanentStoreError)
    assert not issubclass(PermanentStoreError, TransientStoreError)


CONSTRUCTED: list[tuple[SessionSQLError, str, dict[str, Any]]] = [
    (SessionNotFoundError.for_session("s"), "session 's' not found", {"session_id": "s"}),
    (
        SessionNotFoundError.deleted_since_opened("s", recreated=True),
        "session 's' was deleted (and recreated) since this handle opened it",
        {"session_id": "s"},
    ),
    (
        SessionNotFoundError.deleted_since_opened("s", recreated=False),
        "session 's' was deleted since this handle opened it",
        {"session_id": "s"},
    ),
    (SessionExistsError.for_session("s"), "session 's' already exists", {"session_id": "s"}),
    (SessionExistsError.for_session(None), "session already exists", {"session_id": None}),
    (
        ConcurrencyError.appended_first("s", head=4, expected=3),
        "session 's': another writer appended first (head is now seq 4, this handle expected "
        "3); refresh() and retry",
        {"session_id": "s", "expected": 3},
    ),
    (
        ConcurrencyError.appended_first("s"),
        "session 's': another writer appended first; refresh() and retry",
        {"session_id": "s", "expected": None},
    ),
    (
        PermanentStoreError.closed("open_store"),
        "the store is closed; open a new one with open_store()",
        {},
    ),
    (
        PermanentStoreError.no_store("x.db", "the file does not exist"),
        "no store at x.db: the file does not exist; create one with `session-sql init` or "
        "open_store(..., create=True)",
        {"path": "x.db"},
    ),
    (
        PermanentStoreError.no_store("x.db", "it has no session_sql tables", hint=False),
        "no store at x.db: it has no session_sql tables",
        {"path": "x.db"},
    ),
]


@pytest.mark.parametrize(("error", "message", "fields"), CONSTRUCTED)
def test_error_constructors_build_the_message_and_fields_and_pickle(
    error: SessionSQLError, message: str, fields: dict[str, Any]
) -> None:
    copy = pickle.loads(pickle.dumps(error))
    for each in (error, copy):
        assert str(each) == message
        assert each.args == (message,)
        for name, value in fields.items():
            assert getattr(each, name) == value
    assert type(copy) is type(error)


def test_session_not_found_reads_like_its_message() -> None:
    # LookupError would otherwise quote the message like a KeyError does.
    assert str(SessionNotFoundError("no session 'x'", session_id="x")) == "no session 'x'"


def test_messages_name_the_index_seq_and_rule() -> None:
    log = tool_turn_log()
    log[5] = {**log[5], "surfaceOp": "append", "sourceEventSeqs": [5]}
    with pytest.raises(InvalidSeedError) as info:
        Session(seed=log)
    message = str(info.value)
    assert "seed event 5" in message
    assert "sourceEventSeqs" in message


# -- §10 public names --------------------------------------------------------------------------

CORE_NAMES = {
    "SESSION_FORMAT_VERSION",
    "SessionEvent",
    "Replace",
    "Catalog",
    "DEFAULT_CATALOG",
    "Session",
    "fold_surface",
    "interrupted_turn_closers",
    "check_invariants",
    "invariant_validator",
    "snapshot_json",
    "thaw",
}
ERROR_NAMES = {
    "SessionSQLError",
    "NotJSONError",
    "InvalidEventError",
    "SurfaceError",
    "InvalidSeedError",
    "InvalidHeaderError",
    "ReentrantAppendError",
    "SessionFormatUnsupportedError",
    "CorruptSessionError",
    "SchemaVersionError",
    "SchemaMismatchError",
    "ConcurrencyError",
    "SessionNotFoundError",
    "SessionExistsError",
    "ForkError",
    "ConfigurationError",
    "InvalidArgumentError",
    "StoreError",
    "TransientStoreError",
    "PermanentStoreError",
}


def test_all_is_sorted() -> None:
    assert sorted(session_sql.__all__) == session_sql.__all__
    assert len(set(session_sql.__all__)) == len(session_sql.__all__)


STORE_NAMES = {
    "SCHEMA_VERSION",
    "open_store",
    "SessionStore",
    "StoredSession",
    "SessionInfo",
    "PruneReport",
    "ParquetExport",
}


def test_all_holds_every_spec_name() -> None:
    assert (CORE_NAMES | ERROR_NAMES | STORE_NAMES) - set(session_sql.__all__) == set()


def test_every_name_in_all_is_exported() -> None:
    namespace: dict[str, Any] = {}
    exec("from session_sql import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(session_sql.__all__)
