"""The turns of a session page: the token chart and the list of turns, as HTML strings.

Both stay one screen's height at most, whatever the session's length: the chart draws at
most ``MAX_BARS`` bars (one per turn, or for a long session one per group of consecutive
turns, drawing the turn of the most tokens among them), and the list is a table of the last
``MAX_TURNS_LISTED`` turns in a box of fixed height that scrolls, opened at its end. A table
keeps its columns apart at any width (a numbered list laid out in columns drew the numbers
of one column over the text of the one before). Values go through ``esc`` as in ``page``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from session_sql.inspector.outline import Turn

if TYPE_CHECKING:
    from session_sql.inspector.api import SessionView
    from session_sql.inspector.page import Links

__all__ = ["MAX_BARS", "MAX_TURNS_LISTED", "timeline"]

MAX_TURNS_LISTED = 200
MAX_BARS = 300
HEIGHT = 80
BAR = 8


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _total(turn: Turn) -> int:
    return turn.input_tokens + turn.output_tokens


def _chart(turns: Sequence[Turn], links: Links, skipped: int = 0) -> str:
    """Token usage per turn as inline SVG bars (input below, output on top); ``skipped``
    counts that are not sane integers are left out, and said to be."""
    used = [t for t in turns if t.input_tokens or t.output_tokens]
    left_out = f" ({skipped:,} token counts that are not integers left out)" if skipped else ""
    if not used:
        return f'<p class="empty">no token usage recorded{left_out}</p>'
    group = math.ceil(len(used) / MAX_BARS)
    bars = [max(used[i : i + group], key=_total) for i in range(0, len(used), group)]
    tallest = max(bars, key=_total)
    peak = _total(tallest)
    width = max(200, BAR * len(bars))
    parts = []
    for i, t in enumerate(bars):
        h_in = t.input_tokens * HEIGHT / peak
        h_out = t.output_tokens * HEIGHT / peak
        x = i * BAR
        tip = f"turn {t.turn}: {t.input_tokens:,} input + {t.output_tokens:,} output tokens"
        href = links.href(t.start_seq)
        drawn = (
            f"<title>{esc(tip)}</title>"
            f'<rect class="in" x="{x}" y="{HEIGHT - h_in:.1f}" width="{BAR - 2}" '
            f'height="{h_in:.1f}"/>'
            f'<rect class="out" x="{x}" y="{HEIGHT - h_in - h_out:.1f}" width="{BAR - 2}" '
            f'height="{h_out:.1f}"/>'
        )
        parts.append(f'<a href="{esc(href)}">{drawn}</a>' if href else f"<g>{drawn}</g>")
    each = (
        f"one bar per {group} turns (the one of the most tokens among them)"
        if group > 1
        else "one bar per turn"
    )
    return (
        f'<svg class="chart" role="img" aria-label="tokens per turn" viewBox="0 0 {width} '
        f'{HEIGHT}" preserveAspectRatio="none">' + "".join(parts) + "</svg>"
        '<p class="legend"><span class="key in"></span>input tokens (below) '
        '<span class="key out"></span>output tokens (on top), '
        f"{each}; the tallest bar: turn {tallest.turn}, {tallest.input_tokens:,} input + "
        f"{tallest.output_tokens:,} output = {peak:,} tokens{left_out}</p>"
    )


def _row(t: Turn, links: Links) -> str:
    end = links.seq(t.end_seq) if t.end_seq is not None else "open"
    reason = t.reason or "open"
    return (
        f'<tr class="turn {esc(reason)}">'
        f'<td class="num">{links.seq(t.start_seq, str(t.turn))}</td>'
        f'<td class="num">{links.seq(t.start_seq)}–{end}</td>'
        f'<td class="num">{t.steps:,}</td><td>{esc(t.reason or "not ended")}</td>'
        f'<td class="num">{t.input_tokens:,}</td><td class="num">{t.output_tokens:,}</td></tr>'
    )


def timeline(view: SessionView, links: Links) -> str:
    """The turns section: heading, chart, and the scrolling table of the last turns."""
    turns = view.outline.turns
    if not turns:
        return '<section id="timeline"><h2>Turns</h2><p class="empty">no turns</p></section>'
    listed = turns[-MAX_TURNS_LISTED:]
    notes = []
    if view.outline.turns_from > 0:
        notes.append(
            f"the turns that start from seq {view.outline.turns_from:,} to the end of this "
            "page of the log (earlier pages show earlier turns)"
        )
    if len(turns) > len(listed):
        notes.append(f"the list holds the last {len(listed):,}")
    note = f'<p class="more">{esc("; ".join(notes))}</p>' if notes else ""
    near = " near this page" if view.outline.turns_from > 0 else ""
    table = (
        '<div class="turn-list"><table class="turns"><thead><tr><th class="num">turn</th>'
        '<th class="num">seqs</th><th class="num">steps</th><th>ended</th>'
        '<th class="num">input tokens</th><th class="num">output tokens</th></tr>'
        f"</thead><tbody>{''.join(_row(t, links) for t in listed)}</tbody></table></div>"
    )
    return (
        f'<section id="timeline"><h2>Turns ({len(turns):,}{near})</h2>'
        f"{_chart(turns, links, view.outline.skipped_tokens)}{note}{table}</section>"
    )
