"""The inspector's HTML: the sessions page and the session page, as strings.

Every value from the store (event data, titles, labels, user ids, session ids) goes through
``esc`` (``html.escape`` with quotes), in text and in attributes alike, and URLs are built
here from ids and numbers with ``urllib.parse``: no stored text is ever markup or a URL
scheme. The served pages load their one script and style sheet from the app (the
Content-Security-Policy allows nothing else); the file ``view`` writes carries its style
inline, allowed by its hash, and no script.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeGuard
from urllib.parse import quote, urlencode

from session_sql import Replace, SessionEvent, SessionInfo
from session_sql.inspector.api import ListQuery, SessionView, call_id
from session_sql.inspector.assets import CSS
from session_sql.inspector.outline import Turn

__all__ = ["FILE_CSP", "esc", "session_page", "sessions_page"]

SUMMARY_CHARS = 240
DATA_CHARS = 8000
MAX_TURNS_LISTED = 200
MAX_RUNS = 12
SURFACE_TYPES = frozenset({"user/message", "assistant/message", "tool/result", "surface/removed"})

_STYLE_HASH = base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode()
FILE_CSP = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; img-src data:; base-uri 'none'; "
    "form-action 'none'"
)
"""The policy the written file declares itself: its own style sheet, nothing else."""


def esc(value: object) -> str:
    """Text as HTML text or attribute value: ``& < > " '`` escaped."""
    return html.escape(str(value), quote=True)


def when(ms: int) -> str:
    """Epoch milliseconds as a UTC date and time; a time outside the years 1 to 9999 (the
    store keeps any safe integer) as its milliseconds, so a page never fails on one row."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms"


def session_href(session_id: str, **params: int) -> str:
    query = ("?" + urlencode(params)) if params else ""
    return f"/sessions/{quote(session_id, safe='')}{query}"


def _document(title: str, body: str, *, standalone: bool, attrs: str = "") -> str:
    if standalone:
        head = (
            f'<meta http-equiv="Content-Security-Policy" content="{esc(FILE_CSP)}">'
            f"<style>{CSS}</style>"
        )
        script = ""
    else:
        head = '<link rel="stylesheet" href="/static/inspector.css">'
        script = '<script src="/static/inspector.js"></script>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="referrer" content="no-referrer">{head}<title>{esc(title)}</title></head>'
        f"<body{attrs}>{body}{script}</body></html>"
    )


# --------------------------------------------------------------------------------------------
# The sessions page


def _labels(labels: Mapping[str, str]) -> str:
    return "".join(
        f'<span class="label">{esc(k)}={esc(v)}</span>' for k, v in sorted(labels.items())
    )


def sessions_page(infos: Sequence[SessionInfo], query: ListQuery, next_after: str | None) -> str:
    """The sessions list: filters (as ``ls``), one page of rows, and the link to the next."""
    rows = []
    for info in infos:
        parent = (
            f'<a href="{esc(session_href(info.parent_session))}">{esc(info.parent_session)}</a>'
            if info.parent_session
            else ""
        )
        rows.append(
            "<tr>"
            f'<td class="id"><a href="{esc(session_href(info.id))}">{esc(info.id)}</a></td>'
            f"<td>{esc(info.title or '')}</td><td>{esc(info.user_id or '')}</td>"
            f'<td>{_labels(info.labels)}</td><td class="num">{info.event_count}</td>'
            f"<td>{when(info.created_at)}</td><td>{when(info.updated_at)}</td><td>{parent}</td>"
            "</tr>"
        )
    # One input per label filter (a value may hold spaces), and an empty one to add another.
    label_inputs = "".join(
        f'<label>label <input name="label" value="{esc(f"{k}={v}")}"></label>'
        for k, v in query.labels
    )
    label_inputs += '<label>label <input name="label" placeholder="name=value"></label>'
    form = (
        '<form class="filters" method="get" action="/">'
        f'<label>user <input name="user" value="{esc(query.user or "")}"></label>'
        + label_inputs
        + f'<label>parent <input name="parent" value="{esc(query.parent or "")}"></label>'
        f'<label>id prefix <input name="id_prefix" value="{esc(query.id_prefix or "")}"></label>'
        '<label>order <select name="order">'
        + "".join(
            f'<option value="{o}"{" selected" if query.order == o else ""}>{o}</option>'
            for o in ("updated", "created")
        )
        + "</select></label>"
        f'<label>per page <input name="limit" type="number" min="1" value="{query.limit}"></label>'
        '<label title="sessions labelled session_sql.hidden=true">hidden <input name="hidden" '
        f'type="checkbox" value="1"{" checked" if query.hidden else ""}></label>'
        '<button type="submit">filter</button></form>'
    )
    pager = '<p class="pager">'
    if query.after:
        pager += f'<a href="/?{esc(urlencode(query.params(after=None)))}">first page</a> '
    if next_after:
        pager += (
            f'<a rel="next" href="/?{esc(urlencode(query.params(after=next_after)))}">next page</a>'
        )
    pager += "</p>"
    table = (
        '<table class="sessions"><thead><tr><th>id</th><th>title</th><th>user</th>'
        "<th>labels</th><th>events</th><th>created (UTC)</th><th>updated (UTC)</th>"
        "<th>parent</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        if rows
        else '<p class="empty">no sessions</p>'
    )
    body = f"<header><h1>Sessions</h1></header><main>{form}{table}{pager}</main>"
    return _document("Sessions · session-sql", body, standalone=False)


# --------------------------------------------------------------------------------------------
# One event


def _is_list(value: Any) -> TypeGuard[Sequence[Any]]:
    """A JSON array, as stored (a frozen list) or plain."""
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _block_text(block: Any) -> str:
    if not isinstance(block, Mapping):
        return ""
    kind = block.get("type")
    if kind in ("text", "reasoning"):
        return str(block.get("text", ""))
    if kind == "tool-call":
        arguments = block.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        return f"→ {block.get('name', '')}({arguments})"
    if kind == "tool-result":
        inner = block.get("content")
        parts = [_block_text(b) for b in inner] if _is_list(inner) else []
        return " ".join(p for p in parts if p)
    return f"[{kind}]"


def message_text(message: Any) -> str:
    """A message's readable text: its text blocks, tool calls and results, in order."""
    if not isinstance(message, Mapping):
        return ""
    content = message.get("content")
    if not _is_list(content):
        return ""
    return " ".join(t for t in (_block_text(b) for b in content) if t)


def event_summary(event: SessionEvent) -> str:
    """One line saying what an event holds."""
    data = event.data
    text: str
    if event.type == "user/message":
        text = message_text(data)
    elif event.type in ("assistant/message", "tool/result") and isinstance(data, Mapping):
        text = message_text(data.get("message"))
    elif event.type == "tool/call" and isinstance(data, Mapping):
        text = f"{data.get('name', '')}({data.get('arguments', '')})"
    elif event.type == "assistant/chunk" and isinstance(data, Mapping):
        chunk = data.get("chunk")
        text = str(chunk.get("delta", chunk.get("text", ""))) if isinstance(chunk, Mapping) else ""
    else:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _runs(seqs: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted seqs as inclusive runs: [3, 4, 5, 9] -> [(3, 5), (9, 9)]."""
    runs: list[tuple[int, int]] = []
    for seq in sorted(set(seqs)):
        if runs and runs[-1][1] == seq - 1:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return runs


class Links:
    """Where a link to an event of the session goes: in the page, or to a page of the log
    around it (served), or nowhere (a file holds only what it shows)."""

    def __init__(self, view: SessionView, *, standalone: bool) -> None:
        self.view, self.standalone = view, standalone

    def href(self, seq: int) -> str | None:
        if self.view.in_page(seq):
            return f"#e{seq}"
        if self.standalone:
            return None
        start = max(0, seq - 10)
        return (
            session_href(self.view.info.id, from_seq=start, limit=self.view.page_size) + f"#e{seq}"
        )

    def seq(self, seq: int, text: str | None = None, cls: str = "") -> str:
        label = esc(text if text is not None else seq)
        href = self.href(seq)
        klass = f' class="{cls}"' if cls else ""
        if href is None:
            return f'<span{klass} title="not in this page">{label}</span>'
        return f'<a{klass} href="{esc(href)}">{label}</a>'

    def runs(self, seqs: Iterable[int], cls: str) -> str:
        runs = _runs(seqs)
        shown = [self.seq(a, f"{a}" if a == b else f"{a}–{b}", cls=cls) for a, b in runs[:MAX_RUNS]]
        if len(runs) > MAX_RUNS:
            shown.append(f"… {len(runs) - MAX_RUNS} more")
        return ", ".join(shown)


def _op(event: SessionEvent) -> str:
    op = event.surface_op
    if op is None:
        return ""
    if isinstance(op, Replace):
        sign = "✕" if event.type == "surface/removed" else "⇄"
        return f"{sign} {op.start}..{op.end}"
    return "+"


def event_row(event: SessionEvent, view: SessionView, links: Links) -> str:
    """One row of the log, with its provenance, shadowing and tool-pair links."""
    classes = ["ev", "t-" + event.type.replace("/", "-")]
    notes: list[str] = []
    replacing = isinstance(event.surface_op, Replace)
    if replacing:
        classes.append("removal" if event.type == "surface/removed" else "replacement")
    if event.source_event_seqs:
        what = "shadows" if replacing else "cites"
        cls = "shadows" if replacing else "cites"
        notes.append(f"{what} {links.runs(event.source_event_seqs, cls)}")
    shadowers = view.shadowed_by.get(event.seq, [])
    if shadowers and event.type in SURFACE_TYPES and event.seq not in view.on_surface:
        classes.append("shadowed")
        notes.append("shadowed by " + ", ".join(links.seq(s, cls="shadowed-by") for s in shadowers))
    elif event.seq in view.on_surface:
        classes.append("on-surface")
    cid = call_id(event)
    if cid is not None:
        pair = view.pairs.get(cid, {})
        other = "result" if event.type == "tool/call" else "call"
        if other in pair and pair[other] != event.seq:
            notes.append(f"{other} {links.seq(pair[other], cls='pair')}")
    data = json.dumps(event.to_json()["data"], ensure_ascii=False, indent=1)
    if len(data) > DATA_CHARS:
        data = data[:DATA_CHARS] + "\n… (truncated: the API gives the whole event)"
    return (
        f'<tr id="e{event.seq}" class="{" ".join(classes)}">'
        f'<td class="seq"><a href="#e{event.seq}">{event.seq}</a></td>'
        f'<td class="time">{when(event.time)}</td><td class="type">{esc(event.type)}</td>'
        f'<td class="op">{esc(_op(event))}</td>'
        f'<td class="what"><div class="summary">{esc(event_summary(event))}</div>'
        + (f'<div class="notes">{" · ".join(notes)}</div>' if notes else "")
        + f"<details><summary>data</summary><pre>{esc(data)}</pre></details></td></tr>"
    )


# --------------------------------------------------------------------------------------------
# The session page


def _chart(turns: Sequence[Turn], links: Links, skipped: int = 0) -> str:
    """Token usage per turn as inline SVG bars (input below, output on top); ``skipped``
    counts that are not sane integers are left out, and said to be."""
    used = [t for t in turns if t.input_tokens or t.output_tokens]
    left_out = f" ({skipped} token counts that are not integers left out)" if skipped else ""
    if not used:
        return f'<p class="empty">no token usage recorded{left_out}</p>'
    peak = max(t.input_tokens + t.output_tokens for t in used)
    width, height, bar = max(200, 8 * len(used)), 80, 8
    parts = []
    for i, t in enumerate(used):
        h_in = t.input_tokens * height / peak
        h_out = t.output_tokens * height / peak
        x = i * bar
        tip = f"turn {t.turn}: {t.input_tokens} input, {t.output_tokens} output tokens"
        href = links.href(t.start_seq)
        bars = (
            f"<title>{esc(tip)}</title>"
            f'<rect class="in" x="{x}" y="{height - h_in:.1f}" width="{bar - 2}" '
            f'height="{h_in:.1f}"/>'
            f'<rect class="out" x="{x}" y="{height - h_in - h_out:.1f}" width="{bar - 2}" '
            f'height="{h_out:.1f}"/>'
        )
        parts.append(f'<a href="{esc(href)}">{bars}</a>' if href else f"<g>{bars}</g>")
    return (
        f'<svg class="chart" role="img" aria-label="tokens per turn" viewBox="0 0 {width} '
        f'{height}" preserveAspectRatio="none">' + "".join(parts) + "</svg>"
        f'<p class="legend"><span class="key in"></span>input <span class="key out"></span>'
        f"output tokens per turn (peak {peak}){left_out}</p>"
    )


def _timeline(view: SessionView, links: Links) -> str:
    turns = view.outline.turns
    if not turns:
        return '<section id="timeline"><h2>Turns</h2><p class="empty">no turns</p></section>'
    items = []
    for t in turns[-MAX_TURNS_LISTED:]:
        end = links.seq(t.end_seq) if t.end_seq is not None else "open"
        tokens = f"{t.input_tokens}+{t.output_tokens} tokens" if t.input_tokens else ""
        items.append(
            f'<li class="turn {esc(t.reason or "open")}">{links.seq(t.start_seq, f"turn {t.turn}")}'
            f" · seq {links.seq(t.start_seq)}–{end} · {t.steps} step{'s' if t.steps != 1 else ''}"
            f" · {esc(t.reason or 'not ended')}" + (f" · {tokens}" if tokens else "") + "</li>"
        )
    windowed = " near this page" if view.outline.turns_from > 0 else ""
    more = len(turns) - MAX_TURNS_LISTED
    earlier = f'<p class="more">{more} earlier turns not listed</p>' if more > 0 else ""
    if view.outline.turns_from > 0:
        earlier += (
            f'<p class="more">the turns that start from seq {view.outline.turns_from} on, '
            "to the end of this page (earlier pages show earlier turns)</p>"
        )
    return (
        f'<section id="timeline"><h2>Turns ({len(turns)}{windowed})</h2>'
        f"{_chart(turns, links, view.outline.skipped_tokens)}{earlier}"
        f'<ol class="turns">{"".join(items)}</ol></section>'
    )


def _surface(view: SessionView, links: Links) -> str:
    nodes = []
    for node in view.surface:
        role = node.message.get("role", "") if isinstance(node.message, Mapping) else ""
        text = message_text(node.message) if node.message is not None else "(usage only)"
        nodes.append(
            f'<li class="node role-{esc(role)}" id="s{node.pos}">'
            f'<span class="where">#{node.pos} · seq {links.seq(node.seq, cls="node-seq")} · '
            f'{esc(node.type)}</span><div class="text">{esc(text)}</div></li>'
        )
    hidden = view.surface_length - len(view.surface)
    note = f'<p class="more">{hidden} earlier nodes not shown</p>' if hidden > 0 else ""
    return (
        f'<section id="surface"><h2>Surface: what the model sees ({view.surface_length} '
        f'nodes)</h2>{note}<ol class="nodes">{"".join(nodes)}</ol></section>'
    )


def _pager(view: SessionView, standalone: bool) -> str:
    if standalone:
        return ""
    sid, size = view.info.id, view.page_size
    links = []
    if view.from_seq > 0:
        links.append(f'<a href="{esc(session_href(sid, from_seq=0, limit=size))}">first</a>')
        earlier = max(0, view.from_seq - size)
        links.append(
            f'<a rel="prev" href="{esc(session_href(sid, from_seq=earlier, limit=size))}">'
            "earlier</a>"
        )
    if not view.at_tail:
        later = view.from_seq + len(view.events)
        links.append(
            f'<a rel="next" href="{esc(session_href(sid, from_seq=later, limit=size))}">later</a>'
        )
        links.append(f'<a href="{esc(session_href(sid))}">latest</a>')
    return f'<p class="pager">{" ".join(links)}</p>' if links else ""


def _header(view: SessionView, standalone: bool) -> str:
    info = view.info
    facts = [
        f"<dt>id</dt><dd>{esc(info.id)}</dd>",
        f"<dt>user</dt><dd>{esc(info.user_id or '—')}</dd>",
        f"<dt>labels</dt><dd>{_labels(info.labels) or '—'}</dd>",
        f"<dt>events</dt><dd>{info.event_count}</dd>",
        f"<dt>created</dt><dd>{when(info.created_at)} UTC</dd>",
        f"<dt>updated</dt><dd>{when(info.updated_at)} UTC</dd>",
    ]
    if info.parent_session:
        parent = (
            esc(info.parent_session)
            if standalone
            else f'<a class="parent" href="{esc(session_href(info.parent_session))}">'
            f"{esc(info.parent_session)}</a>"
        )
        facts.append(f"<dt>forked from</dt><dd>{parent}</dd>")
    if view.children:
        kids = ", ".join(
            esc(c.id)
            if standalone
            else f'<a class="child" href="{esc(session_href(c.id))}">{esc(c.id)}</a>'
            for c in view.children
        )
        facts.append(f"<dt>forks</dt><dd>{kids}</dd>")
    home = "" if standalone else '<a href="/">sessions</a> / '
    return (
        f'<header><p class="crumbs">{home}{esc(info.id)}</p>'
        f'<h1>{esc(info.title or info.id)}</h1><dl class="facts">{"".join(facts)}</dl></header>'
    )


def session_page(view: SessionView, *, standalone: bool = False) -> str:
    """One session: header, turns and tokens, the surface beside a page of the log."""
    links = Links(view, standalone=standalone)
    shown = (
        f"seqs {view.from_seq}–{view.from_seq + len(view.events) - 1} of {view.info.event_count}"
        if view.events
        else "no events"
    )
    rows = "".join(event_row(e, view, links) for e in view.events)
    log = (
        f'<section id="log"><h2>Log ({esc(shown)})</h2>{_pager(view, standalone)}'
        '<table class="log"><thead><tr><th>seq</th><th>time (UTC)</th><th>type</th><th>op</th>'
        f'<th>what</th></tr></thead><tbody id="log-rows">{rows}</tbody></table>'
        f'{_pager(view, standalone)}<p id="live" class="live" hidden></p></section>'
    )
    body = (
        _header(view, standalone)
        + _timeline(view, links)
        + f'<main class="split">{_surface(view, links)}{log}</main>'
    )
    attrs = ""
    if not standalone:
        attrs = (
            f' data-session="{esc(view.info.id)}" data-head="{view.head_seq}"'
            f' data-live="{"1" if view.at_tail else "0"}"'
        )
    title = f"{view.info.title or view.info.id} · session-sql"
    return _document(title, body, standalone=standalone, attrs=attrs)
