"""The one rule for what a failed append transaction means (``transactions.classify``), on its
own (no database): a head update that matched no row is a lost race, whatever else failed; a
taken key under a matched head is a row already past the head; anything else is re-raised."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from session_sql import CorruptSessionError
from session_sql._store.transactions import AppendPart, classify, taken_key

PARTS = [AppendPart(f"s{i}", i + 1, {}, [], [], 0, 0) for i in range(3)]


def test_the_first_unmatched_head_is_the_lost_race_whatever_else_failed():
    assert classify(PARTS, [1, 0, 0]) == 1
    assert classify(PARTS, [1, 1, 0], at=1) == 2  # a short count after a lost race follows it
    assert classify(PARTS, [0, 1, 1], error=psycopg.errors.UniqueViolation()) == 0


def test_a_count_not_known_is_lost_only_when_nothing_raised():
    assert classify(PARTS, [1, -1]) == 1
    with pytest.raises(psycopg.errors.CheckViolation):
        classify(PARTS, [1, -1], at=0, error=psycopg.errors.CheckViolation())


def test_a_taken_key_under_a_matched_head_is_a_row_past_the_head():
    with pytest.raises(CorruptSessionError, match="past the session's head") as short:
        classify(PARTS, [1, 1, 1], at=2)
    assert short.value.session_id == "s2"
    taken = psycopg.errors.UniqueViolation()
    with pytest.raises(CorruptSessionError) as raised:
        classify(PARTS, [1, 1], at=1, error=taken)
    assert raised.value.session_id == "s1"
    assert raised.value.__cause__ is taken


def test_a_taken_key_not_placed_under_a_matched_head_is_not_read_as_one():
    taken = psycopg.errors.UniqueViolation()
    with pytest.raises(psycopg.errors.UniqueViolation):
        classify(PARTS, [1, 1], error=taken)  # which part's insert raised is not known


def test_other_errors_and_interrupts_are_re_raised():
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        classify(PARTS, [1], at=0, error=psycopg.errors.ForeignKeyViolation())
    with pytest.raises(KeyboardInterrupt):
        classify(PARTS, [0], error=KeyboardInterrupt())


def test_taken_keys_of_both_dialects():
    assert taken_key(psycopg.errors.UniqueViolation())
    assert not taken_key(psycopg.errors.DivisionByZero())
    lite = sqlite3.IntegrityError("UNIQUE constraint failed")
    lite.sqlite_errorname = "SQLITE_CONSTRAINT_PRIMARYKEY"
    assert taken_key(lite)
    assert not taken_key(sqlite3.OperationalError("locked"))
