"""A realistic Claude Code transcript (main and subagent), as the CLI writes its JSONL lines.

One line per content block of an API message, each repeating that message's usage so far;
thinking, parallel tool calls with their results, a system line, a file-history snapshot, a
custom title and a summary (lines without uuid), and a subagent's sidechain transcript.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SESSION_ID = "5f0c3c1e-8a53-4d5e-9d7b-2f8a51c0e0aa"
AGENT = "agent-a1b2c3"
SUBPATH = f"subagents/{AGENT}"
CWD = "/home/dev/proj"
MODEL = "claude-sonnet-4-5-20250929"


def _base(uuid: str, parent: str | None, at: int, **more: Any) -> dict[str, Any]:
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": CWD,
        "sessionId": SESSION_ID,
        "version": "2.1.3",
        "gitBranch": "main",
        **more,
        "uuid": uuid,
        "timestamp": f"2026-01-05T10:00:{at:02d}.000Z",
    }


def _user(uuid: str, parent: str | None, at: int, content: Any, **more: Any) -> dict[str, Any]:
    entry = _base(uuid, parent, at, type="user", message={"role": "user", "content": content})
    entry.update(more)
    return entry


def _assistant(
    uuid: str, parent: str, at: int, msg: str, block: Any, out: int, stop: str | None = None
) -> dict[str, Any]:
    message = {
        "model": MODEL,
        "id": msg,
        "type": "message",
        "role": "assistant",
        "content": [block],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 1200,
            "cache_creation_input_tokens": 300,
            "cache_read_input_tokens": 9000,
            "output_tokens": out,
            "service_tier": "standard",
        },
    }
    return _base(uuid, parent, at, message=message, requestId=f"req_{msg}", type="assistant")


def main_entries() -> list[dict[str, Any]]:
    """The main transcript: two turns, the second with two tool calls answered at once."""
    read = {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"path": "utils.py"}}
    grep = {"type": "tool_use", "id": "toolu_02", "name": "Grep", "input": {"q": "def slug"}}
    run = {"type": "tool_use", "id": "toolu_03", "name": "Bash", "input": {"cmd": "pytest -q"}}
    return [
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {"files": {}}},
        _user("u1", None, 0, "Fix the failing test in utils.py, please.\nIt is slugify."),
        _assistant(
            "a1",
            "u1",
            1,
            "msg_01",
            {"type": "thinking", "thinking": "Read first.", "signature": "c2ln"},
            8,
        ),
        _assistant("a2", "a1", 2, "msg_01", {"type": "text", "text": "Let me look."}, 30),
        _assistant("a3", "a2", 3, "msg_01", read, 61, "tool_use"),
        _user(
            "u2",
            "a3",
            4,
            [{"tool_use_id": "toolu_01", "type": "tool_result", "content": "def slugify(s): ..."}],
            toolUseResult={"type": "text", "file": {"filePath": "utils.py", "numLines": 1}},
        ),
        _assistant("a4", "u2", 5, "msg_02", {"type": "text", "text": "Fixed: strip first."}, 12),
        {
            "parentUuid": "a4",
            "type": "system",
            "subtype": "turn_duration",
            "durationMs": 5123,
            "uuid": "s1",
            "timestamp": "2026-01-05T10:00:06.000Z",
            "isMeta": False,
        },
        _user("u3", "s1", 7, [{"type": "text", "text": "Now run the tests."}]),
        _assistant("a5", "u3", 8, "msg_03", grep, 20),
        _assistant("a6", "a5", 9, "msg_03", run, 44, "tool_use"),
        _user(
            "u4",
            "a6",
            10,
            [
                {"tool_use_id": "toolu_02", "type": "tool_result", "content": "utils.py:3"},
                {
                    "tool_use_id": "toolu_03",
                    "type": "tool_result",
                    "content": [{"type": "text", "text": "1 failed"}],
                    "is_error": True,
                },
            ],
        ),
        _assistant("a7", "u4", 11, "msg_04", {"type": "text", "text": "One still fails: ü ✓."}, 9),
        _assistant("a8", "a7", 12, "msg_04", {"type": "text", "text": "Done."}, 15, "end_turn"),
        {"type": "custom-title", "customTitle": "Fix slugify", "sessionId": SESSION_ID},
        {"type": "summary", "summary": "Slugify fix and test run", "leafUuid": "a8"},
    ]


def subagent_entries() -> list[dict[str, Any]]:
    """A subagent's sidechain transcript."""
    first = _user(
        "su1", None, 20, "Search for callers of slugify.", isSidechain=True, agentId=AGENT
    )
    answer = _assistant(
        "sa1", "su1", 21, "msg_s1", {"type": "text", "text": "Two callers."}, 7, "end_turn"
    )
    answer.update(isSidechain=True, agentId=AGENT)
    return [first, answer]


def write_transcripts(projects: Path, project_key: str) -> None:
    """Lay the transcripts out as the CLI does under ``CLAUDE_CONFIG_DIR/projects``."""
    folder = projects / project_key
    (folder / SESSION_ID / "subagents").mkdir(parents=True)
    lines = "".join(json.dumps(entry) + "\n" for entry in main_entries())
    (folder / f"{SESSION_ID}.jsonl").write_text(lines, encoding="utf-8")
    sub = "".join(json.dumps(entry) + "\n" for entry in subagent_entries())
    (folder / SESSION_ID / f"{SUBPATH}.jsonl").write_text(sub, encoding="utf-8")
    meta = {"agentType": "general-purpose", "description": "find callers"}
    (folder / SESSION_ID / f"{SUBPATH}.meta.json").write_text(json.dumps(meta), encoding="utf-8")
