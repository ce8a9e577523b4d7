"""The demo: a realistic coding-agent session recorded through the public API.

``record_demo`` writes what a real agent loop writes — turns and steps, streamed
``assistant/chunk``s, tool calls with their results, a failed model attempt and a retry — and
then the things the library exists for: a long tool result pruned by a ``tool/result``
replacement, a compaction summary that replaces the first turn (with provenance, between
``compaction/start`` and ``compaction/end``), a fork at an earlier turn, and a crash inside an
open turn that a second "process" repairs. It returns a ``DemoRun`` naming the interesting
events so that ``session-sql demo`` can show them and the tests can check them.

Every session is written with ``invariant_validator()`` attached, so the demo cannot drift into
a log the library would call unsound.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from session_sql import (
    Replace,
    SessionEvent,
    StoredSession,
    invariant_validator,
    open_store,
    thaw,
)

__all__ = ["MODEL", "PROVIDER", "DemoRun", "explore_queries", "record_demo"]

PROVIDER = "demo"
MODEL = "demo-large"
CONTEXT_WINDOW = 128_000
SYSTEM_PROMPT = (
    "You are a careful coding agent working in /srv/invoice-service. Run tests before and "
    "after every change and explain what you did."
)
TOOLS = (
    {"name": "shell", "description": "Run a shell command in the repository."},
    {"name": "read_file", "description": "Read a file of the repository."},
    {"name": "edit_file", "description": "Replace text in a file of the repository."},
)
_SYSTEM_TOKENS = 900  # what the system prompt and tool schemas cost on every request


@dataclass(frozen=True)
class DemoRun:
    """What ``record_demo`` wrote, by seq, so a caller can point at it."""

    session_id: str
    fork_id: str
    fork_boundary: int
    """The last parent seq the fork inherited (the end of turn 1)."""
    pruned_seq: int
    """The long ``tool/result`` that was pruned (still in the log)."""
    prune_seq: int
    """The ``tool/result`` that replaced it on the surface."""
    summary_seq: int
    """The compaction summary (a ``user/message`` replacing turn 1)."""
    summary_shadowed: tuple[int, ...]
    crash_seq: int
    """The last event the crashed process wrote."""
    repaired: tuple[SessionEvent, ...]
    """The closers ``repair`` appended."""
    forget_seq: int
    """The fork's ``surface/removed``: the user said "forget that"."""
    forgotten: tuple[int, ...]
    """The fork's user message and reply it took off the surface (still in the log)."""


def _pytest_failure_output() -> str:
    """A long, realistic test-run output: what a tool result looks like before pruning."""
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0",
        "rootdir: /srv/invoice-service",
        "configfile: pyproject.toml",
        "collected 42 items",
        "",
        "tests/test_invoice.py ..........                                         [ 23%]",
        "tests/test_tax.py ...F.F..F...                                           [ 52%]",
        "tests/test_totals.py ....................                                [100%]",
        "",
        "=================================== FAILURES ===================================",
    ]
    failures = [
        ("test_half_cent_rounds_up", 'round_cents(Decimal("0.125"))', "0.12", "0.13"),
        ("test_vat_rounding", 'vat(Decimal("10.05"), rate=Decimal("0.19"))', "1.90", "1.91"),
        ("test_invoice_total_with_discount", "invoice_total(DISCOUNTED)", "94.22", "94.23"),
    ]
    for name, call, got, want in failures:
        lines += [
            f"{'_' * 27} {name} {'_' * 27}",
            "",
            f"    def {name}():",
            f">       assert {call} == Decimal({want!r})",
            f"E       AssertionError: assert Decimal({got!r}) == Decimal({want!r})",
            f"E        +  where Decimal({got!r}) = {call}",
            "",
            "tests/test_tax.py:41: AssertionError",
            "----------------------------- Captured log call ------------------------------",
        ]
        lines += [
            f"DEBUG    billing.tax:tax.py:{20 + i} line {i}: amount={want} scale=2 mode=half-even"
            for i in range(12)
        ]
    lines += [
        "",
        "=============================== warnings summary ===============================",
    ]
    lines += [
        f"tests/test_totals.py::test_total_{i}\n  /srv/invoice-service/billing/totals.py:{80 + i}: "
        "DeprecationWarning: datetime.utcnow() is deprecated"
        for i in range(20)
    ]
    lines += [
        "",
        "=========================== short test summary info ============================",
        *(f"FAILED tests/test_tax.py::{name} - AssertionError" for name, *_ in failures),
        "=================== 3 failed, 39 passed, 20 warnings in 2.31s ===================",
    ]
    return "\n".join(lines)


TAX_PY = '''"""Tax and rounding helpers."""
from decimal import Decimal


def round_cents(amount: Decimal) -> Decimal:
    """Round to whole cents."""
    return Decimal(str(round(amount, 2)))


def vat(net: Decimal, rate: Decimal) -> Decimal:
    return round_cents(net * rate)
'''


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _pieces(text: str, words: int = 4) -> list[str]:
    """Split ``text`` into streamed deltas of a few words (joined they give ``text`` back)."""
    parts = text.split(" ")
    return [
        " ".join(parts[i : i + words]) + (" " if i + words < len(parts) else "")
        for i in range(0, len(parts), words)
    ]


class _Agent:
    """Appends events the way an agent loop does, one committed event at a time."""

    def __init__(self, session: StoredSession, *, turn: int = 0) -> None:
        self.session = session
        self.turn = turn
        self.step = 0
        session.add_validator(invariant_validator())

    def append(self, type_: str, data: Any, **kwargs: Any) -> SessionEvent:
        return self.session.append(type_, data, **kwargs)

    def _context_tokens(self) -> int:
        """A rough token count of what the model would be sent now (4 characters a token)."""
        size = sum(len(json.dumps(m)) for m in self.session.messages())
        return _SYSTEM_TOKENS + size // 4

    def start_turn(self, text: str, *, first: bool = False) -> SessionEvent:
        self.turn += 1
        self.step = 0
        self.append("turn/start", {"turn": self.turn})
        if first:
            header = {
                "config": {"provider": PROVIDER, "model": MODEL, "temperature": 0},
                "system": SYSTEM_PROMPT,
                "tools": list(TOOLS),
            }
            self.append("request/header", {"header": header, "reason": "initial"})
        message = {
            "id": f"msg-{self.session.seq}",
            "role": "user",
            "content": [_text(text)],
            "source": {"kind": "user"},
        }
        return self.append("user/message", message, surface_op="append")

    def start_step(self) -> None:
        self.step += 1
        self.append("step/start", {"turn": self.turn, "step": self.step})
        context = {"provider": PROVIDER, "model": MODEL, "contextWindow": CONTEXT_WINDOW}
        self.append("request/context", context)

    def where(self) -> dict[str, int]:
        return {"turn": self.turn, "step": self.step}

    def reply(
        self, text: str, calls: Sequence[tuple[str, str, dict[str, Any]]] = ()
    ) -> SessionEvent:
        """Stream ``text`` and the tool calls as chunks, then log the assembled message."""
        chunks: list[int] = []
        index = 0
        for piece in _pieces(text):
            delta = {"type": "text-delta", "index": index, "text": piece}
            chunks.append(self.append("assistant/chunk", {**self.where(), "chunk": delta}).seq)
        for call_id, name, arguments in calls:
            index += 1
            delta = {
                "type": "tool-call-delta",
                "index": index,
                "id": call_id,
                "name": name,
                "argumentsDelta": json.dumps(arguments),
            }
            chunks.append(self.append("assistant/chunk", {**self.where(), "chunk": delta}).seq)
        content = [_text(text)] + [
            {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}
            for call_id, name, arguments in calls
        ]
        message = {
            "id": f"msg-{self.session.seq}",
            "role": "assistant",
            "content": content,
            "source": {"kind": "model", "provider": PROVIDER, "model": MODEL},
        }
        usage = {
            "inputTokens": self._context_tokens(),
            "outputTokens": len(text) // 4 + 15 * len(calls) + 3,
        }
        data = {**self.where(), "message": message, "usage": usage}
        return self.append("assistant/message", data, surface_op="append", source_event_seqs=chunks)

    def run_tool(
        self,
        call_id: str,
        name: str,
        arguments: dict[str, Any],
        output: str,
        *,
        error: dict[str, str] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> SessionEvent:
        """Log the tool call, then its result; returns the ``tool/result``."""
        call = self.append(
            "tool/call",
            {**self.where(), "callId": call_id, "name": name, "arguments": json.dumps(arguments)},
        )
        block: dict[str, Any] = {
            "type": "tool-result",
            "toolCallId": call_id,
            "content": [_text(output)],
        }
        if error is not None:
            block["isError"] = True
        data: dict[str, Any] = {
            **self.where(),
            "message": {
                "id": f"msg-{self.session.seq}",
                "role": "user",
                "content": [block],
                "source": {"kind": "tool", "callId": call_id},
            },
        }
        if error is not None:
            data["error"] = error
        if meta is not None:
            data["meta"] = meta
        return self.append("tool/result", data, surface_op="append", source_event_seqs=[call.seq])

    def end_step(self) -> None:
        self.append("step/end", self.where())

    def end_turn(self) -> SessionEvent:
        return self.append("turn/end", {"turn": self.turn, "reason": {"kind": "completed"}})


def _turn_one(agent: _Agent) -> tuple[int, int]:
    """Investigate the failing tests; returns (the long test-run result, the turn/end)."""
    agent.start_turn(
        "The billing tests started failing after yesterday's merge. Can you find out why?",
        first=True,
    )
    agent.start_step()
    agent.reply(
        "I'll run the billing tests first to see what fails.",
        [("call-1", "shell", {"cmd": "pytest billing -q"})],
    )
    test_run = agent.run_tool(
        "call-1",
        "shell",
        {"cmd": "pytest billing -q"},
        _pytest_failure_output(),
        meta={"exitCode": 1, "durationMs": 2310},
    )
    agent.end_step()
    agent.start_step()
    agent.reply(
        "All three failures are in tests/test_tax.py and are off by one cent. "
        "Let me read the tax module.",
        [("call-2", "read_file", {"path": "billing/taxes.py"})],
    )
    agent.run_tool(
        "call-2",
        "read_file",
        {"path": "billing/taxes.py"},
        "No such file: billing/taxes.py",
        error={"name": "FileNotFoundError", "code": "ENOENT"},
    )
    agent.end_step()
    agent.start_step()
    agent.reply(
        "Wrong file name; it is billing/tax.py.",
        [("call-3", "read_file", {"path": "billing/tax.py"})],
    )
    agent.run_tool("call-3", "read_file", {"path": "billing/tax.py"}, TAX_PY)
    agent.end_step()
    agent.start_step()
    agent.reply(
        "Found it: `round_cents` now uses the built-in `round()`, which rounds half to even, "
        "so 0.125 becomes 0.12 instead of 0.13. The three failing tests all hit a half cent."
    )
    agent.end_step()
    end = agent.end_turn()
    agent.append("session/title", {"title": "Failing billing tests: half-cent rounding"})
    return test_run.seq, end.seq


def _prune(agent: _Agent, result_seq: int) -> int:
    """Replace the long test output on the surface with a short note; returns the new seq."""
    original = agent.session.events[result_seq]
    data = thaw(original.data)
    size = len(data["message"]["content"][0]["content"][0]["text"])
    note = (
        f"[pruned {size:,} characters of test output to save context: 3 failed, 39 passed. "
        "Failures in tests/test_tax.py: test_half_cent_rounds_up, test_vat_rounding, "
        f"test_invoice_total_with_discount, all off by one cent. Full output: event {result_seq}.]"
    )
    data["message"]["content"][0]["content"] = [_text(note)]
    agent.append("compaction/prune", {"seqs": [result_seq], "reason": "tool output over 4 KB"})
    event = agent.append(
        "tool/result",
        data,
        surface_op=Replace(result_seq, result_seq),
        source_event_seqs=[result_seq],
    )
    return event.seq


def _turn_two(agent: _Agent, pruned_seq: int) -> int:
    """Fix the bug and add a regression test; the pruning happens before the first request."""
    agent.start_turn("Please fix it and add a regression test for the half-cent case.")
    prune_seq = _prune(agent, pruned_seq)
    agent.start_step()
    agent.reply(
        "Restoring half-up rounding with Decimal.quantize.",
        [
            (
                "call-4",
                "edit_file",
                {
                    "path": "billing/tax.py",
                    "old": "Decimal(str(round(amount, 2)))",
                    "new": 'amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)',
                },
            )
        ],
    )
    agent.run_tool(
        "call-4", "edit_file", {"path": "billing/tax.py"}, "Applied 1 edit to billing/tax.py"
    )
    agent.end_step()
    agent.start_step()
    agent.reply(
        "Adding the regression test.",
        [("call-5", "edit_file", {"path": "tests/test_tax.py", "append": "def test_0125(): ..."})],
    )
    agent.run_tool(
        "call-5", "edit_file", {"path": "tests/test_tax.py"}, "Applied 1 edit to tests/test_tax.py"
    )
    agent.end_step()
    agent.start_step()
    # The provider was overloaded once: the failed attempt and the retry stay in the log.
    agent.append(
        "assistant/attempt",
        {**agent.where(), "error": {"kind": "overloaded", "status": 529}},
    )
    agent.append("llm/retry", {"attempt": 1, "delayMs": 800, "reason": "overloaded"})
    agent.reply(
        "Running the billing tests again.",
        [("call-6", "shell", {"cmd": "pytest billing -q"})],
    )
    agent.run_tool(
        "call-6",
        "shell",
        {"cmd": "pytest billing -q"},
        "43 passed in 1.92s",
        meta={"exitCode": 0, "durationMs": 1920},
    )
    agent.end_step()
    agent.start_step()
    agent.reply(
        "Fixed: `round_cents` quantizes with ROUND_HALF_UP again, and a new test pins "
        "0.125 -> 0.13. All 43 billing tests pass."
    )
    agent.end_step()
    agent.end_turn()
    return prune_seq


def _compact(agent: _Agent, first: int, last: int) -> tuple[int, tuple[int, ...]]:
    """Replace surface nodes ``first..last`` with a summary; returns (its seq, shadowed)."""
    nodes = agent.session.surface.nodes
    shadowed = nodes[nodes.index(first) : nodes.index(last) + 1]
    before = agent._context_tokens()
    agent.append(
        "compaction/start",
        {
            "reason": "context over 2,000 tokens (a low threshold, for the demo)",
            "tokensBefore": before,
        },
    )
    summary = {
        "id": f"msg-{agent.session.seq}",
        "role": "user",
        "content": [
            _text(
                "Summary of the earlier conversation: the billing tests failed (3 of 42, all "
                "off by one cent in tests/test_tax.py). Cause: `round_cents` in billing/tax.py "
                "switched to the built-in round(), which rounds half to even."
            )
        ],
        "source": {"kind": "compaction"},
    }
    event = agent.append(
        "user/message",
        summary,
        surface_op=Replace(first, last),
        source_event_seqs=list(shadowed),
    )
    agent.append(
        "compaction/end",
        {
            "summarySeq": event.seq,
            "replaced": len(shadowed),
            "tokensBefore": before,
            "tokensAfter": agent._context_tokens(),
        },
    )
    return event.seq, tuple(shadowed)


def _turn_three_crashes(agent: _Agent, first_user: int, last_reply: int) -> tuple[int, int]:
    """Compact turn 1 away, then crash while a tool runs; returns (summary seq, last seq)."""
    agent.start_turn("Great. Now run the whole test suite and the linter.")
    summary = _compact(agent, first_user, last_reply)
    agent.start_step()
    agent.reply(
        "Running both.",
        [
            ("call-7", "shell", {"cmd": "pytest -q"}),
            ("call-8", "shell", {"cmd": "make lint"}),
        ],
    )
    started = agent.append(
        "tool/call",
        {**agent.where(), "callId": "call-7", "name": "shell", "arguments": '{"cmd": "pytest -q"}'},
    )
    # The process dies here: call-7 is running, call-8 never started, the turn is open.
    return summary[0], started.seq


def _fork_turn(agent: _Agent) -> None:
    """The fork asks a different follow-up to turn 1."""
    agent.start_turn("Before changing anything: which commit introduced round() there?")
    agent.start_step()
    agent.reply(
        "Searching the history of billing/tax.py.",
        [("call-f1", "shell", {"cmd": 'git log -S "round(" --oneline -- billing/tax.py'})],
    )
    agent.run_tool(
        "call-f1",
        "shell",
        {"cmd": 'git log -S "round(" --oneline -- billing/tax.py'},
        "9c41e2a billing: simplify rounding helpers (#1284)",
    )
    agent.end_step()
    agent.start_step()
    agent.reply("Commit 9c41e2a (#1284, 'simplify rounding helpers') introduced it yesterday.")
    agent.end_step()
    agent.end_turn()


def _fork_forget(agent: _Agent) -> tuple[int, tuple[int, ...]]:
    """A turn the user regrets: "forget that" takes it off the surface, not out of the log."""
    user = agent.start_turn("Also, the staging database password is hunter2, if you need it.")
    agent.start_step()
    reply = agent.reply("Noted, though this change does not need the database.")
    agent.end_step()
    agent.end_turn()
    # The user says "forget that": the application takes their message and the reply off the
    # surface. The model never sees them again; the log keeps them, with this removal.
    forgotten = (user.seq, reply.seq)
    removal = agent.append(
        "surface/removed",
        {"reason": "the user said: forget that"},
        surface_op=Replace(user.seq, reply.seq),
        source_event_seqs=list(forgotten),
    )
    return removal.seq, forgotten


def record_demo(
    url: str = "sqlite:///sessions.db",
    *,
    schema: str = "session_sql",
    session_id: str | None = None,
    tenant: str = "",
) -> DemoRun:
    """Record the demo session, its fork, the crash and the repair; return what was written.

    The crash is real as far as the store can tell: the writing store is closed with a turn
    open, and a second store (another process, in real life) repairs the session.
    """
    with open_store(url, schema=schema, tenant=tenant) as store:
        session = store.create_session(session_id)
        main = _Agent(session)
        pruned_seq, turn_one_end = _turn_one(main)
        first_user = next(e.seq for e in session.events if e.type == "user/message")
        last_reply = max(
            e.seq for e in session.events[:turn_one_end] if e.type == "assistant/message"
        )
        fork = store.fork_session(session.id, boundary=turn_one_end)
        fork_agent = _Agent(fork, turn=1)
        _fork_turn(fork_agent)
        forget_seq, forgotten = _fork_forget(fork_agent)
        prune_seq = _turn_two(main, pruned_seq)
        summary_seq, crash_seq = _turn_three_crashes(main, first_user, last_reply)
        summary_shadowed = tuple(session.events[summary_seq].source_event_seqs or ())
    with open_store(url, schema=schema, tenant=tenant) as store:
        repaired = store.repair(session.id)
    return DemoRun(
        session_id=session.id,
        fork_id=fork.id,
        fork_boundary=turn_one_end,
        pruned_seq=pruned_seq,
        prune_seq=prune_seq,
        summary_seq=summary_seq,
        summary_shadowed=summary_shadowed,
        crash_seq=crash_seq,
        repaired=tuple(repaired),
        forget_seq=forget_seq,
        forgotten=forgotten,
    )


def explore_queries(session_id: str) -> list[tuple[str, str]]:
    """Three queries to paste into ``sqlite3`` or ``psql`` (valid on both), with titles.

    ``session_id`` is interpolated as an SQL string literal (quotes doubled), since these are
    meant to be pasted into a shell, not executed with bound parameters.
    """
    sid = "'" + session_id.replace("'", "''") + "'"
    return [
        (
            "What the model sees now, straight from the surface_messages view",
            "SELECT pos, seq, type, substr(CAST(data AS TEXT), 1, 60) AS data\n"
            f"FROM surface_messages WHERE session_id = {sid} ORDER BY pos;",
        ),
        (
            "Messages that are in the log but no longer on the surface (shadowed)",
            "SELECT e.seq, e.type, length(CAST(e.data AS TEXT)) AS bytes\n"
            "FROM events e JOIN sessions s ON s.session_key = e.session_key\n"
            f"WHERE s.id = {sid}\n"
            "  AND e.type IN ('user/message', 'assistant/message', 'tool/result')\n"
            "  AND NOT EXISTS (SELECT 1 FROM surface f\n"
            "                  WHERE f.session_key = e.session_key AND f.event_seq = e.seq)\n"
            "ORDER BY e.seq;",
        ),
        (
            "Tokens per session and model (a fork's inherited events are counted once)",
            "SELECT s.id AS session_id,\n"
            "       e.data -> 'message' -> 'source' ->> 'model' AS model,\n"
            "       SUM(CAST(e.data -> 'usage' ->> 'inputTokens' AS BIGINT)) AS input_tokens,\n"
            "       SUM(CAST(e.data -> 'usage' ->> 'outputTokens' AS BIGINT)) AS output_tokens\n"
            "FROM events e JOIN sessions s ON s.session_key = e.session_key\n"
            "WHERE e.type = 'assistant/message' AND e.seq >= s.inherited_event_count\n"
            "GROUP BY s.session_key, s.id, e.data -> 'message' -> 'source' ->> 'model'\n"
            "ORDER BY s.id;",
        ),
    ]
