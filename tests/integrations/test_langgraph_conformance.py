"""SPEC §12.4: LangGraph's own checkpointer conformance suite, run unchanged.

``langgraph-checkpoint-conformance`` detects the capabilities a saver implements and runs each
capability's tests; on both backends every capability (the base five and the extended
``delete_for_runs``, ``copy_thread`` and ``prune``) must be detected and pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from session_sql.integrations.langgraph import AsyncSessionSQLSaver, SessionSQLSaver

from ..conftest import Backend


def _report(backend: Backend) -> dict[str, tuple[bool | None, bool | None, int, int, list[str]]]:
    @checkpointer_test(name=f"AsyncSessionSQLSaver-{backend.name}")
    async def saver() -> AsyncIterator[AsyncSessionSQLSaver]:
        async with AsyncSessionSQLSaver.from_url(backend.url, schema=backend.schema) as made:
            yield made

    report = asyncio.run(validate(saver))
    return {
        name: (r.detected, r.passed, r.tests_passed, r.tests_failed, r.failures)
        for name, r in report.results.items()
    }


def test_every_capability_detected_and_passing(backend: Backend) -> None:
    results = _report(backend)
    _all_pass(results)


def test_the_sync_saver_passes_too(backend: Backend) -> None:
    """The sync saver's async forms (its sync calls in a worker thread) pass as well."""

    @checkpointer_test(name=f"SessionSQLSaver-{backend.name}")
    async def saver() -> AsyncIterator[SessionSQLSaver]:
        with SessionSQLSaver.from_url(backend.url, schema=backend.schema) as made:
            yield made

    report = asyncio.run(validate(saver))
    _all_pass(
        {
            name: (r.detected, r.passed, r.tests_passed, r.tests_failed, r.failures)
            for name, r in report.results.items()
        }
    )


def _all_pass(results: dict[str, tuple[bool | None, bool | None, int, int, list[str]]]) -> None:
    assert set(results) == {cap.value for cap in ALL_CAPABILITIES}
    failing = {name: r[4] for name, r in results.items() if not (r[0] and r[1])}
    assert not failing, failing
    assert all(r[3] == 0 and r[2] > 0 for r in results.values())


@pytest.mark.parametrize("capability", ["put", "list"])
def test_a_capability_alone(backend: Backend, capability: str) -> None:
    """A suite run on its own (a fresh saver per capability) passes too."""

    @checkpointer_test(name=f"AsyncSessionSQLSaver-{backend.name}-{capability}")
    async def saver() -> AsyncIterator[AsyncSessionSQLSaver]:
        async with AsyncSessionSQLSaver.from_url(backend.url, schema=backend.schema) as made:
            yield made

    report = asyncio.run(validate(saver, capabilities={capability}))
    result = report.results[capability]
    assert result.detected and result.passed, result.failures
