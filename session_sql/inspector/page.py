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
from typing import TYPE_CHECKING, Any, TypeGuard
from urllib.parse import quote, urlencode

from session_sql import Replace, SessionEvent, SessionInfo
from session_sql.inspector.api import (
    EVENT_PAGE,
    SURFACE_PAGE,
    ListQuery,
    SessionView,
    call_id,
)
from session_sql.inspector.assets import CSS
from session_sql.inspector.timeline import timeline

if TYPE_CHECKING:
    from session_sql.inspector.search import SearchPage

__all__ = ["FILE_CSP", "esc", "session_page", "sessions_page"]

SUMMARY_CHARS = 240
DATA_CHARS = 8000
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


def session_href(session_id: str, **params: int | str) -> str:
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


def _log_state(view: SessionView) -> dict[str, int | str]:
    """The log's page as URL parameters (none for the latest page of the default size)."""
    if not view.at_tail:
        return {"from_seq": view.from_seq, "limit": view.page_size}
    return {} if view.page_size == EVENT_PAGE else {"limit": view.page_size}


def _surface_state(view: SessionView) -> dict[str, int | str]:
    """The surface's page as URL parameters (none for the last page of the default size)."""
    if not view.surface_at_tail:
        return {"surface_from": view.surface_first, "surface_limit": view.surface_page_size}
    return (
        {} if view.surface_page_size == SURFACE_PAGE else {"surface_limit": view.surface_page_size}
    )


def _href(
    view: SessionView,
    *,
    log: Mapping[str, int | str] | None = None,
    surface: Mapping[str, int | str] | None = None,
) -> str:
    """A link to this session page with the log or the surface paged on, the other kept."""
    params = {
        **(_log_state(view) if log is None else log),
        **(_surface_state(view) if surface is None else surface),
    }
    return session_href(view.info.id, **params)


def _pager_links(pairs: Sequence[tuple[str, str, str]]) -> str:
    links = [
        f'<a{f" rel={rel}" if rel else ""} href="{esc(href)}">{label}</a>'
        for label, rel, href in pairs
    ]
    return f'<p class="pager">{" ".join(links)}</p>' if links else ""


def _surface_pager(view: SessionView, standalone: bool) -> str:
    if standalone:
        return ""
    size, first = view.surface_page_size, view.surface_first
    pairs = []
    if first > 1:
        pairs.append(("first", "", _href(view, surface={"surface_from": 1, "surface_limit": size})))
        earlier = {"surface_from": max(1, first - size), "surface_limit": size}
        pairs.append(("earlier", "prev", _href(view, surface=earlier)))
    if not view.surface_at_tail:
        later = {"surface_from": first + len(view.surface), "surface_limit": size}
        pairs.append(("later", "next", _href(view, surface=later)))
        latest: dict[str, int | str] = {} if size == SURFACE_PAGE else {"surface_limit": size}
        pairs.append(("latest", "", _href(view, surface=latest)))
    return _pager_links([(label, rel, href + "#surface") for label, rel, href in pairs])


SURFACE_LEGEND = (
    '<p class="legend"><span class="swatch role-user"></span>user messages and tool results '
    '<span class="swatch role-assistant"></span>assistant messages. #n is the node\'s place '
    "on the surface (1 is what the model reads first); seq is the event it comes from.</p>"
)
LOG_LEGEND = (
    '<p class="legend colours"><span class="swatch shadowed"></span>shadowed: was on the '
    "surface, taken off since by a later replacement or removal "
    '<span class="swatch replacement"></span>replacement: a summary or a pruned tool result, '
    "put on the surface in place of earlier nodes "
    '<span class="swatch removal"></span>removal: took nodes off the surface</p>'
)


def _surface(view: SessionView, links: Links, standalone: bool) -> str:
    nodes = []
    for ordinal, node in enumerate(view.surface, start=view.surface_first):
        role = node.message.get("role", "") if isinstance(node.message, Mapping) else ""
        text = message_text(node.message) if node.message is not None else "(usage only)"
        if len(text) > DATA_CHARS:
            text = text[:DATA_CHARS] + "… (truncated: the API gives the whole message)"
        nodes.append(
            f'<li class="node role-{esc(role)}" id="s{ordinal}">'
            f'<span class="where"><b class="ordinal">#{ordinal}</b> · seq '
            f"{links.seq(node.seq, cls='node-seq')} · {esc(node.type)}</span>"
            f'<div class="text">{esc(text)}</div></li>'
        )
    length, first = view.surface_length, view.surface_first
    note = ""
    if view.surface and len(view.surface) < length:
        note = f"nodes #{first}–#{first + len(view.surface) - 1} of {length:,}"
        if standalone and first > 1:
            note += f"; the {first - 1:,} before are not in this file (--last N for more)"
        note = f'<p class="more">{note}</p>'
    pager = _surface_pager(view, standalone)
    return (
        f'<section id="surface"><h2>Surface: what the model sees ({length:,} '
        f"nodes)</h2>{SURFACE_LEGEND}{note}{pager}"
        f'<ol class="nodes">{"".join(nodes)}</ol>{pager}</section>'
    )


def _search_form(view: SessionView, search: SearchPage | None) -> str:
    value = esc(search.query) if search is not None else ""
    return (
        f'<form class="search" role="search" method="get" '
        f'action="{esc(session_href(view.info.id))}"><label>search the messages '
        f'<input type="search" name="q" value="{value}" placeholder="text in any message">'
        '</label><button type="submit">search</button></form>'
    )


def _search_results(view: SessionView, links: Links, search: SearchPage) -> str:
    items = []
    for m in search.matches:
        where = "on the surface" if m.on_surface else "not on the surface"
        items.append(
            f"<li>{links.seq(m.seq, f'seq {m.seq}')} · {esc(m.type)} · {when(m.time)} · "
            f'{where}<div class="snippet">{esc(m.before)}<mark>{esc(m.hit)}</mark>'
            f"{esc(m.after)}</div></li>"
        )
    count = len(search.matches)
    holds = "1 message holds" if count == 1 else f"{count:,} messages hold"
    heading = f"{holds} “{esc(search.query)}”"
    more = ""
    if search.next_after_seq is not None:
        heading += f" (up to seq {search.next_after_seq})"
        href = session_href(view.info.id, q=search.query, after_seq=search.next_after_seq)
        more = f'<p class="pager"><a rel="next" href="{esc(href)}#search">more matches</a></p>'
    listed = f'<ol class="hits">{"".join(items)}</ol>' if items else ""
    return f'<section id="search"><h2>Search: {heading}</h2>{listed}{more}</section>'


def _pager(view: SessionView, standalone: bool) -> str:
    if standalone:
        return ""
    size = view.page_size
    pairs = []
    if view.from_seq > 0:
        pairs.append(("first", "", _href(view, log={"from_seq": 0, "limit": size})))
        earlier = {"from_seq": max(0, view.from_seq - size), "limit": size}
        pairs.append(("earlier", "prev", _href(view, log=earlier)))
    if not view.at_tail:
        later = {"from_seq": view.from_seq + len(view.events), "limit": size}
        pairs.append(("later", "next", _href(view, log=later)))
        pairs.append(("latest", "", _href(view, log={})))
    return _pager_links(pairs)


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


def session_page(
    view: SessionView, *, standalone: bool = False, search: SearchPage | None = None
) -> str:
    """One session: header, search (served), turns and tokens, the surface beside a page of
    the log."""
    links = Links(view, standalone=standalone)
    shown = (
        f"seqs {view.from_seq}–{view.from_seq + len(view.events) - 1} of {view.info.event_count}"
        if view.events
        else "no events"
    )
    rows = "".join(event_row(e, view, links) for e in view.events)
    log = (
        f'<section id="log"><h2>Log ({esc(shown)})</h2>{LOG_LEGEND}{_pager(view, standalone)}'
        '<table class="log"><thead><tr><th>seq</th><th>time (UTC)</th><th>type</th><th>op</th>'
        f'<th>what</th></tr></thead><tbody id="log-rows">{rows}</tbody></table>'
        f'{_pager(view, standalone)}<p id="live" class="live" hidden></p></section>'
    )
    found = "" if search is None else _search_results(view, links, search)
    body = (
        _header(view, standalone)
        + ("" if standalone else f'<div class="find">{_search_form(view, search)}{found}</div>')
        + timeline(view, links)
        + f'<main class="split">{_surface(view, links, standalone)}{log}</main>'
    )
    attrs = ""
    if not standalone:
        attrs = (
            f' data-session="{esc(view.info.id)}" data-head="{view.head_seq}"'
            f' data-live="{"1" if view.at_tail else "0"}"'
        )
    title = f"{view.info.title or view.info.id} · session-sql"
    return _document(title, body, standalone=standalone, attrs=attrs)
