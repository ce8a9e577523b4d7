"""Human-readable renderings of messages, events and surfaces for the ``session-sql`` CLI.

Everything here returns ``rich.text.Text`` built from plain strings (never parsed as markup,
so a message containing ``[bold]`` prints as written). The CLI prints the styled text on a
terminal and ``Text.plain`` everywhere else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text

from session_sql import Replace, SessionEvent, SurfaceFold
from session_sql.cli._support import counted, format_time

if TYPE_CHECKING:  # types only: importing them would load the store
    from session_sql import VerifyReport
    from session_sql.cli.demo import DemoRun

__all__ = [
    "brief_log",
    "demo_report",
    "event_line",
    "event_summary",
    "format_time",
    "message_lines",
    "one_line",
    "replacement_lines",
    "surface_lines",
    "verify_line",
]

_ROLE_STYLE = {"user": "bold green", "assistant": "bold cyan", "tool": "bold magenta"}
SURFACE_TYPES = frozenset({"user/message", "assistant/message", "tool/result"})


def one_line(text: str, width: int | None = 72) -> str:
    """``text`` on one line (newlines shown as ``⏎``), cut to ``width`` with an ellipsis."""
    flat = " ⏎ ".join(part.strip() for part in text.strip().splitlines() if part.strip())
    if width is not None and len(flat) > width:
        return flat[: max(width - 1, 0)] + "…"
    return flat


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _block_texts(blocks: Any) -> list[str]:
    """The text of ``text`` blocks, in order (tool results nest their own blocks)."""
    out: list[str] = []
    for block in blocks if isinstance(blocks, Sequence) else ():
        if isinstance(block, Mapping) and block.get("type") == "text":
            out.append(str(block.get("text", "")))
    return out


def _role(message: Mapping[str, Any]) -> tuple[str, str]:
    """(role label, its style) of a message: tool results are labelled ``tool``."""
    source = message.get("source")
    kind = source.get("kind") if isinstance(source, Mapping) else None
    if kind == "tool":
        return "tool", _ROLE_STYLE["tool"]
    role = str(message.get("role", "?"))
    label = role if kind in (None, "user", "model") else f"{role} ({kind})"
    return label, _ROLE_STYLE.get(role, "bold")


def message_lines(message: Any, *, width: int | None = None) -> list[Text]:
    """A message as lines: a role line, then its blocks indented.

    ``width`` cuts each block to one line of that many characters (``None``: full text).
    """
    if not isinstance(message, Mapping):
        return [Text(_compact_json(message))]
    label, style = _role(message)
    lines = [Text(label, style=style)]
    for block in message.get("content") or ():
        lines.extend(Text("    ") + line for line in _block_lines(block, width))
    return lines


def _body(text: str, width: int | None) -> list[str]:
    return [one_line(text, width)] if width is not None else text.splitlines() or [""]


def _block_lines(block: Any, width: int | None) -> list[Text]:
    if not isinstance(block, Mapping):
        return [Text(one_line(_compact_json(block), width))]
    kind = block.get("type")
    if kind == "text":
        return [Text(line) for line in _body(str(block.get("text", "")), width)]
    if kind == "reasoning":
        return [Text(line, style="dim italic") for line in _body(str(block.get("text", "")), width)]
    if kind == "tool-call":
        args = block.get("arguments")
        args_text = args if isinstance(args, str) else _compact_json(args)
        head = Text.assemble(
            ("→ ", "yellow"), (str(block.get("name", "?")), "bold yellow"), " ", args_text
        )
        head.append(f"  [{block.get('id', '?')}]", style="dim")
        if width is not None:
            head.truncate(width + 8, overflow="ellipsis")
        return [head]
    if kind == "tool-result":
        error = block.get("isError") is True
        head = Text.assemble(("✗ error " if error else "← ", "red" if error else "magenta"))
        head.append(f"result of {block.get('toolCallId', '?')}", style="dim")
        texts = _block_texts(block.get("content"))
        if width is not None:
            head.append(": " + one_line(" ".join(texts), width))
            return [head]
        return [head] + [Text(line) for text in texts for line in _body(text, None)]
    return [Text(f"[{kind}]", style="dim")]


def event_summary(event: SessionEvent, width: int = 64) -> str:
    """What one event says, in a few words (its type is printed separately)."""
    data = event.data
    t = event.type
    d: Mapping[str, Any] = data if isinstance(data, Mapping) else {}
    if t in ("turn/start", "step/start", "step/end"):
        return " ".join(f"{k} {d[k]}" for k in ("turn", "step") if k in d)
    if t == "turn/end":
        reason = d.get("reason")
        kind = reason.get("kind") if isinstance(reason, Mapping) else reason
        return f"turn {d.get('turn')} {kind}"
    if t == "user/message":
        return one_line(" ".join(_block_texts(d.get("content"))), width)
    if t == "assistant/chunk":
        chunk = d.get("chunk")
        if isinstance(chunk, Mapping):
            piece = chunk.get("text") or chunk.get("name") or chunk.get("argumentsDelta") or ""
            return f"{chunk.get('type')} {json.dumps(piece, ensure_ascii=False)}"
        return ""
    if t == "assistant/message":
        message = d.get("message")
        content = message.get("content") if isinstance(message, Mapping) else ()
        words = " ".join(_block_texts(content))
        calls = [
            str(b.get("name"))
            for b in content or ()
            if isinstance(b, Mapping) and b.get("type") == "tool-call"
        ]
        if calls:
            words += " → " + ", ".join(calls)
        return one_line(words, width) if words else "(no content: usage only)"
    if t == "assistant/attempt":
        return "failed: " + _compact_json(d.get("error")) if "error" in d else "no message"
    if t == "tool/call":
        return one_line(f"{d.get('name')} {d.get('arguments')}  [{d.get('callId')}]", width)
    if t == "tool/result":
        message = d.get("message")
        blocks = message.get("content") if isinstance(message, Mapping) else ()
        block = blocks[0] if blocks else {}
        text = " ".join(_block_texts(block.get("content") if isinstance(block, Mapping) else ()))
        mark = "✗ " if isinstance(block, Mapping) and block.get("isError") is True else ""
        return one_line(
            f"{mark}{block.get('toolCallId', '?')}: ({len(text):,} chars) {text}", width
        )
    if t == "request/header":
        header = d.get("header")
        config = header.get("config") if isinstance(header, Mapping) else None
        config = config if isinstance(config, Mapping) else {}
        return f"{config.get('provider')}/{config.get('model')} ({d.get('reason')})"
    if t == "request/context":
        return f"{d.get('provider')}/{d.get('model')} window {d.get('contextWindow', '?')}"
    if t == "session/end-seed":
        return "end of the inherited prefix (fork cut)" if d.get("inherited") else "end of seed"
    return one_line(_compact_json(data), width)


def _op_text(event: SessionEvent) -> Text:
    op = event.surface_op
    if op == "append":
        return Text("+", style="green")
    if isinstance(op, Replace):
        return Text(f"⇄ {op.start}..{op.end}", style="bold yellow")
    return Text("")


def event_line(event: SessionEvent, *, width: int = 64, with_time: bool = False) -> Text:
    """One event as ``seq  type  op  summary`` (``op``: ``+`` append, ``⇄ a..b`` replace)."""
    line = Text.assemble((f"{event.seq:>5}  ", "dim"))
    if with_time:
        line.append(format_time(event.time) + "  ", style="dim")
    line.append(f"{event.type:<18}", style="bold" if event.type in SURFACE_TYPES else "")
    line.append(" ")
    line.append_text(_op_text(event))
    op_len = len(_op_text(event).plain)
    line.append(" " * max(1, 10 - op_len))
    line.append(event_summary(event, width))
    if event.source_event_seqs:
        line.append(f"  ⟵ {_seq_list(event.source_event_seqs)}", style="dim")
    return line


def _seq_list(seqs: Sequence[int], limit: int = 8) -> str:
    shown = ", ".join(str(s) for s in seqs[:limit])
    return f"[{shown}{', …' if len(seqs) > limit else ''}]"


def brief_log(events: Iterable[SessionEvent], *, width: int = 60) -> list[Text]:
    """The log with each run of ``assistant/chunk`` collapsed into one line."""
    lines: list[Text] = []
    run: list[SessionEvent] = []

    def flush() -> None:
        if not run:
            return
        if len(run) == 1:
            lines.append(event_line(run[0], width=width))
        else:
            text = "".join(
                str(e.data["chunk"].get("text", ""))
                for e in run
                if isinstance(e.data, Mapping) and isinstance(e.data.get("chunk"), Mapping)
            )
            span = f"{run[0].seq}-{run[-1].seq}"
            line = Text.assemble((f"{span:>5}  ", "dim"))
            line.append(f"{'assistant/chunk':<18} ")
            line.append(" " * 10)
            line.append(f"×{len(run)} streamed: " + one_line(json.dumps(text), width - 14))
            lines.append(line)
        run.clear()

    for event in events:
        if event.type == "assistant/chunk":
            run.append(event)
            continue
        flush()
        lines.append(event_line(event, width=width))
    flush()
    return lines


def surface_lines(
    fold: SurfaceFold, events: Sequence[SessionEvent], *, width: int = 60
) -> list[Text]:
    """The surface in order: ``pos  seq  type  summary``, marking replacing events."""
    replaced_by = {r.seq: r for r in fold.replacements}
    lines: list[Text] = []
    for pos, seq in enumerate(fold.nodes):
        event = events[seq]
        line = Text.assemble((f"{pos:>4}  ", "dim"))
        line.append(f"{seq:>5}  {event.type:<18} ")
        line.append(event_summary(event, width))
        if seq in replaced_by:
            line.append(f"  (replaces {_seq_list(replaced_by[seq].shadowed)})", style="yellow")
        lines.append(line)
    return lines


def replacement_lines(fold: SurfaceFold, events: Sequence[SessionEvent]) -> list[Text]:
    """One line per replace: what replaced what, and how much text it took off the surface."""
    lines: list[Text] = []
    for r in fold.replacements:
        event = events[r.seq]
        before = sum(_size(events[s]) for s in r.shadowed)
        line = Text.assemble((f"seq {r.seq} ", "bold"))
        verb = "removed" if event.type == "surface/removed" else f"{event.type} replaced"
        line.append(f"{verb} surface {r.start}..{r.end}, shadowing ")
        line.append(_seq_list(r.shadowed, limit=12), style="yellow")
        line.append(f": {before:,} → {_size(event):,} bytes of message data", style="dim")
        lines.append(line)
    return lines


def _size(event: SessionEvent) -> int:
    return len(json.dumps(event.data, ensure_ascii=False, separators=(",", ":")))


def verify_line(report: VerifyReport) -> Text:
    """``ok``/``FAIL``, the session and its event count; each problem on its own line."""
    count = f"{report.session_id}  {counted(report.events, 'event')}"
    if report.ok:
        return Text.assemble(("  ok    ", "bold green"), count)
    line = Text.assemble(("  FAIL  ", "bold red"), count)
    for problem in report.problems:
        line.append("\n        " + one_line(problem, None))
    return line


def _heading(text: str) -> list[Text]:
    return [Text(""), Text(text, style="bold underline")]


def demo_report(
    run: DemoRun,
    *,
    events: Sequence[SessionEvent],
    fork_events: Sequence[SessionEvent],
    messages: Sequence[Any],
    fold: SurfaceFold,
    reports: Sequence[VerifyReport],
    where: str,
    shell: str,
    search_path: str | None,
    queries: Sequence[tuple[str, str]],
) -> list[Text]:
    """What ``session-sql demo`` prints about the session it recorded, section by section."""
    sid = run.session_id
    turns = sum(1 for e in events if e.type == "turn/start")
    lines = [
        Text(f"Recorded a demo coding-agent session in {where}", style="bold"),
        Text(
            f"  session {sid}  {len(events)} events, {turns} turns "
            f"(turn {turns} crashed inside a tool call; repair closed it)"
        ),
        Text(
            f"  fork    {run.fork_id}  {len(fork_events)} events: the first "
            f"{run.fork_boundary + 1} inherited (turn 1), then its own turn 2, and a turn 3"
        ),
        Text(
            f"          the user asked to forget: seq {run.forget_seq} (surface/removed) took "
            f"{_seq_list(run.forgotten)} off the fork's surface; the log keeps them"
        ),
    ]
    lines += _heading(
        f"1. What the model sees now: {len(messages)} messages (session-sql show {sid})"
    )
    for message in messages:
        lines += [Text("  ") + line for line in message_lines(message, width=88)]
    lines += _heading(
        "2. The raw log, in brief (+ appended to the surface, ⇄ a..b replaced surface "
        "entries a..b, ⟵ cites)"
    )
    lines += [Text("  ") + line for line in brief_log(events, width=56)]
    lines += _heading(
        "3. Replacements: what each one shadows (the shadowed events stay in the log)"
    )
    lines += [Text("  ") + line for line in replacement_lines(fold, events)]
    lines.append(
        Text(
            f"  seq {run.pruned_seq} (the full test output) is still in the log: "
            f"session-sql show {sid} --events --from {run.pruned_seq} --to {run.pruned_seq + 1}"
        )
    )
    lines += _heading(
        f"4. The crash: the writer died after seq {run.crash_seq} inside turn {turns}; "
        "'session-sql repair' appended"
    )
    lines += [Text("  ") + event_line(e, width=70) for e in run.repaired]
    lines += _heading("5. verify: replay each log and compare it with the surface table")
    lines += [verify_line(report) for report in reports]
    lines += _heading(f"6. Explore it with SQL:  {shell}")
    if search_path is not None:
        lines.append(Text(f"SET search_path TO {search_path};"))
    for title, sql in queries:
        lines += [Text(f"-- {title}", style="dim"), Text(sql), Text("")]
    lines.append(
        Text(
            f"Next: session-sql show {sid} --surface   ·   session-sql stats   ·   "
            "session-sql ls   ·   docs/index.md"
        )
    )
    return lines
