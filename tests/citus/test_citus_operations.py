"""Operating a distributed store on a live cluster (SPEC 13.1): shards moved while writers
append lose nothing, and a worker that is down fails the calls on the sessions it holds with
``TransientStoreError``, writing nothing partial, while the other sessions carry on.

Each test runs in a few seconds on the session's cluster (coordinator + 2 workers), whose
node settings it restores (``shouldhaveshards``, a stopped worker) whatever happens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import Engine, text

from session_sql import (
    ConcurrencyError,
    SessionNotFoundError,
    SessionStore,
    StoreError,
    TransientStoreError,
)

from ..builders import tool_turn, user_message, wires
from .cluster import CitusCluster
from .placement import (
    SHARDS,
    autocommit,
    colocation,
    layout,
    open_distributed,
    session_placement,
    shard_nodes,
    wait_for,
    without_shards,
)

WRITERS = 8
"""Sessions written at once during the rebalance, one thread each (at least SHARDS, so that
every shard of ``sessions`` holds one)."""


def _say(handle: Any, mark: str) -> None:
    handle.append("user/message", user_message(mark, id=mark), surface_op="append")


def _marks(store: SessionStore, session_id: str) -> list[str]:
    """The marks the test appended to the session (not the messages of its first turn)."""
    return [
        e.data["id"]
        for e in store.events(session_id)
        if e.type == "user/message" and e.data["id"].startswith(f"{session_id}-")
    ]


def _assert_distributed(admin: Engine, schema: str) -> None:
    """The store's tables are laid out as SPEC 13.1 says (the test would prove nothing on
    plain tables)."""
    assert layout(admin, schema) == {
        "sessions": ("h", "session_key"),
        "events": ("h", "session_key"),
        "surface": ("h", "session_key"),
        "session_ids": ("h", "id"),
        "session_sql_meta": ("n", ""),
    }
    groups = colocation(admin, schema)
    assert groups["events"] == groups["surface"] == groups["sessions"]
    assert groups["session_ids"] != groups["sessions"]


@dataclass
class Writer:
    """One thread appending marks to its own session, remembering what was acknowledged."""

    handle: Any
    attempted: list[str] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """The ``StoreError``s raised (an append's may or may not have committed)."""
    unsure: list[str] = field(default_factory=list)
    """The marks of the appends that failed."""
    raw: list[str] = field(default_factory=list)
    """Anything else raised: must stay empty."""

    def run(self, stop: threading.Event) -> None:
        name = self.handle.id
        i = 0
        while not stop.is_set():
            marks = [f"{name}-{i}"] if i % 4 else [f"{name}-{i}.{j}" for j in range(3)]
            i += 1
            self.attempted.extend(marks)
            try:
                if len(marks) == 1:
                    _say(self.handle, marks[0])
                else:  # several events in one append: all commit or none
                    self.handle.append_many(
                        [
                            {"type": "user/message", "data": user_message(m, id=m)}
                            | {"surface_op": "append"}
                            for m in marks
                        ]
                    )
                self.acknowledged.extend(marks)
            except ConcurrencyError:
                # An append before committed but its answer was lost: catch up, go on.
                self._refresh()
            except StoreError as exc:
                self.failures.append(f"{marks}: {exc!r}")
                self.unsure.extend(marks)
                self._refresh()
            except BaseException as exc:
                self.raw.append(repr(exc))
                return

    def _refresh(self) -> None:
        try:
            self.handle.refresh()
        except StoreError as exc:  # the next append fails the same way and says so
            self.failures.append(f"refresh: {exc!r}")

    def check(self, store: SessionStore) -> None:
        """Every acknowledged append is stored once, in order; a failed one is either wholly
        there or wholly absent; the session verifies."""
        assert self.raw == []
        stored = _marks(store, self.handle.id)
        assert len(stored) == len(set(stored))
        kept = set(stored)
        assert stored == [m for m in self.attempted if m in kept]
        assert set(self.acknowledged) <= kept
        assert kept - set(self.acknowledged) <= set(self.unsure)
        batches: dict[str, set[bool]] = {}  # an append_many is stored whole or not at all
        for mark in self.attempted:
            batch = mark.rpartition(".")[0]
            if batch:
                batches.setdefault(batch, set()).add(mark in kept)
        assert all(len(found) == 1 for found in batches.values())
        report = store.verify(self.handle.id)
        assert report.ok, report.problems


class Follower:
    """A thread following one session from the start, following again from the last seq it
    saw after each ``StoreError`` (as an application would), until stopped."""

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self.seqs: list[int] = []
        self.errors: list[str] = []
        self.raw: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(store, session_id), daemon=True)
        self._thread.start()

    def _run(self, store: SessionStore, session_id: str) -> None:
        while not self._stop.is_set():
            try:
                after = self.seqs[-1] if self.seqs else -1
                for event in store.follow(session_id, after_seq=after, timeout=0.2):
                    self.seqs.append(event.seq)
            except StoreError as exc:
                self.errors.append(repr(exc))
                self._stop.wait(0.05)
            except BaseException as exc:
                self.raw.append(repr(exc))
                return

    def reaches(self, seq: int, timeout: float = 30) -> None:
        wait_for(
            lambda: bool(self.seqs) and self.seqs[-1] >= seq,
            timeout,
            f"seq {seq} followed (at {self.seqs[-1:]}, errors {self.errors[-3:]}, {self.raw})",
        )

    def stop(self) -> None:
        """Stop following (at once, or after one more read); idempotent."""
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


def _key_shard(admin: Engine, schema: str, key: int) -> int:
    with admin.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT get_shard_id_for_distribution_column(CAST(:t AS regclass), "
                    "CAST(:k AS bigint))"
                ),
                {"t": f'"{schema}".sessions', "k": key},
            ).scalar_one()
        )


# --------------------------------------------------------------------------------------------
# Rebalance under writers


def test_moving_shards_under_writers_and_a_follower_loses_nothing(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    """The store is created while the second worker takes no shards, so all its shards are
    on the first; then the second takes shards again and ``citus_rebalance_start`` moves half
    of them (logical replication, writes carrying on) while a thread per session appends
    and a follower follows one of them."""
    first, second = citus_cluster.workers
    with without_shards(citus_admin, second):
        store = open_distributed(citus_cluster, citus_schema)
    followers: list[Follower] = []
    try:
        _assert_distributed(citus_admin, citus_schema)
        before = shard_nodes(citus_admin, citus_schema)
        assert {port for shards in before.values() for port in shards.values()} == {first.port}
        assert len(before["sessions"]) == SHARDS

        # Sessions until every shard of ``sessions`` holds one (keys hash to shards), so
        # whichever shards move, writers' sessions move with them.
        writers: list[Writer] = []
        shards_of: dict[str, int] = {}
        while len(writers) < WRITERS or len(set(shards_of.values())) < SHARDS:
            assert len(writers) < 64, f"{SHARDS} shards not covered: {shards_of}"
            handle = store.create_session(f"w{len(writers)}")
            tool_turn(handle, 1)  # some surface, tool calls and results to move as well
            key = session_placement(citus_admin, citus_schema, handle.id).key
            shards_of[handle.id] = _key_shard(citus_admin, citus_schema, key)
            writers.append(Writer(handle))
        follower = Follower(store, writers[0].handle.id)
        followers.append(follower)

        stop = threading.Event()
        threads = [threading.Thread(target=w.run, args=(stop,)) for w in writers]
        for thread in threads:
            thread.start()
        try:
            started = time.monotonic()
            wait_for(lambda: all(len(w.acknowledged) >= 5 for w in writers), 30, "writing")
            with citus_admin.connect() as conn:
                job = conn.execute(text("SELECT citus_rebalance_start()")).scalar_one()
                conn.commit()
            assert job is not None, "the rebalancer found nothing to move"
            moving_at = sum(len(w.acknowledged) for w in writers)
            autocommit(citus_admin, "SELECT citus_rebalance_wait()")
            moved_at = {w.handle.id: len(w.acknowledged) for w in writers}
            during = sum(moved_at.values()) - moving_at
            assert during > 0, "no append was acknowledged while the shards moved"
            rebalance_seconds = time.monotonic() - started
            # Every writer appends again after the moves, and the follower sees it.
            wait_for(
                lambda: all(len(w.acknowledged) >= moved_at[w.handle.id] + 5 for w in writers),
                30,
                "writing after the moves",
            )
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
        assert not any(thread.is_alive() for thread in threads)

        with citus_admin.connect() as conn:
            state = conn.execute(
                text("SELECT state FROM pg_dist_background_job WHERE job_id = :j"), {"j": job}
            ).scalar_one()
        assert state == "finished"
        after = shard_nodes(citus_admin, citus_schema)
        moved = {
            shard for table in after for shard, port in after[table].items() if port == second.port
        }
        assert moved, after
        assert set(after["sessions"]) == set(before["sessions"])
        moved_sessions = [s for s, shard in shards_of.items() if shard in moved]
        assert moved_sessions  # every shard holds a writer's session

        for writer in writers:
            writer.check(store)
        follower.reaches(writers[0].handle.seq - 1)
        follower.stop()
        assert follower.raw == []
        assert follower.seqs == list(range(writers[0].handle.seq))
        failures = [f for w in writers for f in w.failures]
        print(
            f"\nrebalance under {len(writers)} writers: {len(moved)} shards moved in "
            f"{rebalance_seconds:.1f} s, {sum(len(w.acknowledged) for w in writers)} appends "
            f"acknowledged ({during} while moving), {len(failures)} failed ({failures[:3]}), "
            f"follower errors {len(follower.errors)}"
        )
    finally:
        for live in followers:
            live.stop()
        store.close()


# --------------------------------------------------------------------------------------------
# A worker down


def _sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of the server error behind a store error (``None`` for none)."""
    cause: BaseException | None = error
    while cause is not None:
        state = getattr(cause, "sqlstate", None)
        if state:
            return str(state)
        cause = getattr(cause, "orig", None) or cause.__cause__
    return None


@dataclass
class Outage:
    """The transient failures seen while a worker is down: their SQLSTATEs and the longest
    a call took to fail."""

    states: set[str | None] = field(default_factory=set)
    slowest: float = 0.0

    def expect(self, call: Callable[[], object], within: float = 5.0) -> TransientStoreError:
        """``call`` fails with ``TransientStoreError`` within ``within`` seconds: a refused
        connection to the worker is reported at once, not after a timeout."""
        started = time.monotonic()
        with pytest.raises(TransientStoreError) as raised:
            call()
        took = time.monotonic() - started
        assert took < within
        self.slowest = max(self.slowest, took)
        self.states.add(_sqlstate(raised.value))
        return raised.value


def _lost_and_kept(
    store: SessionStore, admin: Engine, schema: str, cluster: CitusCluster
) -> tuple[Any, Any]:
    """Two new sessions, each with a turn: one whose key's rows are on the second worker
    (which the tests stop), one whose rows (its key's and its id's) are all on the first."""
    first, second = cluster.workers
    lost = kept = None
    for i in range(64):
        handle = store.create_session(f"s{i}")
        tool_turn(handle, 1)
        where = session_placement(admin, schema, handle.id)
        if lost is None and where.key_node == second.port:
            lost = handle
        if kept is None and where.key_node == where.id_node == first.port:
            kept = handle
        if lost is not None and kept is not None:
            return lost, kept
    raise AssertionError(f"64 sessions and none on one worker alone ({lost}, {kept})")


def test_a_worker_down_fails_its_sessions_cleanly_and_the_others_carry_on(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    """With the second worker stopped, every call on a session it holds fails with
    ``TransientStoreError`` at once and writes nothing; a session held by the first worker is
    written, read, verified and followed; a creation (two shards) succeeds or fails whole.
    Once the worker is back, everything works again and every follower has every event."""
    store = open_distributed(citus_cluster, citus_schema)
    followers: list[Follower] = []
    try:
        _assert_distributed(citus_admin, citus_schema)
        lost, kept = _lost_and_kept(store, citus_admin, citus_schema, citus_cluster)
        lost_id, kept_id = lost.id, kept.id
        lost_before = (
            wires(store.events(lost_id)),
            store.surface(lost_id),
            store.session_info(lost_id),
        )
        sessions_before = store.count_sessions()
        following = {lost_id: Follower(store, lost_id), kept_id: Follower(store, kept_id)}
        followers.extend(following.values())
        for session_id, follower in following.items():
            follower.reaches(store.head_seq(session_id))

        created: list[str] = []
        refused: list[str] = []
        outage = Outage()
        citus_cluster.stop_worker(1)
        try:
            # The sessions the stopped worker holds: every call fails, transient, at once.
            error = outage.expect(lambda: _say(lost, f"{lost_id}-down"))
            assert error.session_id == lost_id
            outage.expect(
                lambda: lost.append_many(
                    [{"type": "todo/write", "data": {"i": i}} for i in range(3)]
                )
            )
            outage.expect(lost.refresh)
            outage.expect(lambda: store.open_session(lost_id))
            outage.expect(lambda: store.load_session(lost_id))
            outage.expect(lambda: store.messages(lost_id))
            outage.expect(lambda: list(store.events(lost_id)))
            outage.expect(lambda: store.verify(lost_id))
            # Listings and stats fan out to every shard: they fail too.
            outage.expect(store.list_sessions)
            outage.expect(store.stats)
            # A new session writes two shards (its id's and its key's), which may be on either
            # worker: each creation either succeeds whole or fails, transient, whole.
            for i in range(8):
                try:
                    store.create_session(f"new{i}")
                    created.append(f"new{i}")
                except TransientStoreError as exc:
                    refused.append(f"new{i}")
                    outage.states.add(_sqlstate(exc))

            # The sessions of the worker still up: written, read, verified and followed.
            for i in range(5):
                _say(kept, f"{kept_id}-{i}")
            assert _marks(store, kept_id) == [f"{kept_id}-{i}" for i in range(5)]
            assert store.open_session(kept_id).seq == kept.seq
            report = store.verify(kept_id)
            assert report.ok, report.problems
            following[kept_id].reaches(kept.seq - 1)
            assert following[kept_id].errors == []
        finally:
            citus_cluster.start_worker(1)
        assert refused, "no creation touched the stopped worker"

        # Back: nothing of the failed calls was written, and the session works again.
        wait_for(lambda: _works(lost.refresh), 30, "the session's worker back")
        assert lost_before == (
            wires(store.events(lost_id)),
            store.surface(lost_id),
            store.session_info(lost_id),
        )
        for session_id in refused:
            with pytest.raises(SessionNotFoundError):
                store.open_session(session_id)
        assert store.count_sessions() == sessions_before + len(created)
        with citus_admin.connect() as conn:
            ids, rows = conn.execute(
                text(
                    f'SELECT (SELECT count(*) FROM "{citus_schema}".session_ids), '
                    f'(SELECT count(*) FROM "{citus_schema}".sessions)'
                )
            ).one()
        assert ids == rows  # no id kept without its session, nor a session without its id
        for session_id in refused:
            store.create_session(session_id)  # the id was never taken
        for i in range(3):
            _say(lost, f"{lost_id}-{i}")
        for session_id, follower in following.items():
            follower.reaches(store.head_seq(session_id))
            follower.stop()
            assert follower.raw == []
            assert follower.seqs == [e.seq for e in store.events(session_id)]
        assert _marks(store, lost_id) == [f"{lost_id}-{i}" for i in range(3)]
        for info in store.iter_sessions():
            report = store.verify(info.id)
            assert report.ok, (info.id, report.problems)
        # A worker refusing connections, relayed by the coordinator: connection_failure.
        assert outage.states == {"08006"}
        print(
            f"\nworker down: failures {sorted(map(str, outage.states))} within "
            f"{outage.slowest:.3f} s; creations {len(created)} made, {len(refused)} refused; "
            f"follower errors {[len(f.errors) for f in following.values()]}"
        )
    finally:
        for live in followers:
            live.stop()
        store.close()


def _works(call: Callable[[], object]) -> bool:
    try:
        call()
    except TransientStoreError:
        return False
    return True


def test_a_worker_down_leaves_the_other_workers_session_rows_readable(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    store = open_distributed(citus_cluster, citus_schema)
    try:
        _, kept = _lost_and_kept(store, citus_admin, citus_schema, citus_cluster)
        citus_cluster.stop_worker(1)
        try:
            assert store.session_info(kept.id).head_seq == kept.seq - 1
            assert store.update_session(kept.id, title="still here").title == "still here"
            assert store.stats(kept.id).events == kept.seq
        finally:
            citus_cluster.start_worker(1)
    finally:
        store.close()
