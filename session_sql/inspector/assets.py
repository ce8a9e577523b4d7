"""The inspector's style sheet and its one script, served from the app itself
(``/static/inspector.css``, ``/static/inspector.js``): the Content-Security-Policy allows no
other source and no inline script. The script only adds live events to the log, building
each row with ``textContent``: event text never becomes markup in the browser either."""

from __future__ import annotations

__all__ = ["CSS", "JS"]

CSS = """
:root { --fg: #1d1f23; --dim: #6b7280; --line: #e5e7eb; --bg: #fff; --accent: #2563eb;
  --shadow: #fde68a; --replace: #a7f3d0; --remove: #fecaca; --in: #93c5fd; --out: #2563eb; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
header, main, #timeline { padding: 8px 16px; }
h1 { font-size: 20px; margin: 4px 0; overflow-wrap: anywhere; }
h2 { font-size: 15px; margin: 8px 0; }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
.crumbs { margin: 0; color: var(--dim); overflow-wrap: anywhere; }
.facts { display: grid; grid-template-columns: max-content 1fr max-content 1fr max-content 1fr;
  gap: 2px 10px; margin: 4px 0; }
.facts dt { color: var(--dim); }
.facts dd { margin: 0; overflow-wrap: anywhere; }
.label { display: inline-block; background: #eef2ff; border-radius: 3px; padding: 0 4px;
  margin: 0 3px 2px 0; font-size: 12px; overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 3px 6px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { color: var(--dim); font-weight: 600; position: sticky; top: 0; background: var(--bg); }
td.num, td.seq { text-align: right; font-variant-numeric: tabular-nums; }
td.id, td.time { white-space: nowrap; font-family: ui-monospace, monospace; font-size: 12px; }
td.type { white-space: nowrap; font-family: ui-monospace, monospace; font-size: 12px; }
td.op { white-space: nowrap; color: var(--dim); }
.filters { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0; align-items: end; }
.filters label { display: flex; flex-direction: column; font-size: 12px; color: var(--dim); }
.pager a { margin-right: 12px; }
.split { display: grid; grid-template-columns: minmax(260px, 2fr) 3fr; gap: 16px; }
#surface, #log { min-width: 0; }
#surface { position: sticky; top: 0; align-self: start; max-height: 100vh; overflow-y: auto; }
.nodes { list-style: none; padding: 0; margin: 0; }
.node { border-left: 3px solid var(--line); padding: 4px 8px; margin-bottom: 6px;
  content-visibility: auto; contain-intrinsic-size: auto 3em; }
.node.role-user { border-color: #60a5fa; }
.node.role-assistant { border-color: #34d399; }
.where { display: block; color: var(--dim); font-size: 12px; }
.text, .summary { white-space: pre-wrap; overflow-wrap: anywhere; }
.notes { font-size: 12px; color: var(--dim); }
tr.shadowed td { background: var(--shadow); }
tr.shadowed .summary { text-decoration: line-through; text-decoration-color: #b45309; }
tr.replacement td { background: var(--replace); }
tr.removal td { background: var(--remove); }
tr.t-assistant-chunk td { color: var(--dim); }
tr:target td { outline: 2px solid var(--accent); outline-offset: -2px; }
tr.live-new td { background: #dbeafe; }
details summary { cursor: pointer; color: var(--dim); font-size: 12px; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 2px 0; font-size: 12px; }
.chart { width: 100%; height: 80px; background: #f9fafb; display: block; }
.chart .in, .key.in { fill: var(--in); background: var(--in); }
.chart .out, .key.out { fill: var(--out); background: var(--out); }
.key { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 8px; }
.legend, .more, .empty, .live { color: var(--dim); font-size: 12px; }
.turn-list { max-height: 15em; overflow: auto; display: flex; flex-direction: column-reverse;
  width: max-content; max-width: 100%; align-items: flex-start; border: 1px solid var(--line);
  margin: 4px 0; }
.turns { font-size: 13px; width: auto; }
.turns td, .turns th { white-space: nowrap; padding: 1px 12px; }
.turns .num { text-align: right; font-variant-numeric: tabular-nums; }
.turn.interrupted td, .turn.error td, .turn.aborted td { color: #b91c1c; }
.swatch { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 8px;
  border: 1px solid #9ca3af; vertical-align: baseline; }
.swatch.shadowed { background: var(--shadow); }
.swatch.replacement { background: var(--replace); }
.swatch.removal { background: var(--remove); }
.swatch.role-user { background: #60a5fa; }
.swatch.role-assistant { background: #34d399; }
.ordinal { font-weight: 600; color: var(--fg); }
.find { padding: 0 16px; }
.search { display: flex; gap: 8px; align-items: center; margin: 4px 0; }
.search label { color: var(--dim); font-size: 12px; }
.search input { width: 24em; max-width: 60vw; }
.hits { font-size: 13px; max-height: 20em; overflow: auto; margin: 4px 0; }
.snippet { white-space: pre-wrap; overflow-wrap: anywhere; color: var(--dim); }
mark { background: #fde047; color: var(--fg); }
@media (max-width: 900px) { .split { grid-template-columns: 1fr; } }
"""

JS = """
"use strict";
(function () {
  var body = document.body;
  var id = body.dataset.session;
  if (!id || body.dataset.live !== "1" || !window.EventSource) { return; }
  var rows = document.getElementById("log-rows");
  var status = document.getElementById("live");
  var after = body.dataset.head;
  function cell(row, text, cls) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    td.textContent = text;
    row.appendChild(td);
    return td;
  }
  function time(ms) {
    var d = new Date(ms);  // beyond a Date's range: shown as its milliseconds, as the page does
    return isNaN(d.getTime()) ? ms + " ms" : d.toISOString().slice(0, 19).replace("T", " ");
  }
  function op(ev) {
    var o = ev.surfaceOp;
    if (o === undefined) { return ""; }
    if (o === "append") { return "+"; }
    return (ev.type === "surface/removed" ? "\\u2715 " : "\\u21c4 ") + o.start + ".." + o.end;
  }
  function add(ev) {
    var row = document.createElement("tr");
    row.id = "e" + ev.seq;
    row.className = "ev live-new";
    var seq = cell(row, "", "seq");
    var a = document.createElement("a");
    a.href = "#e" + ev.seq;
    a.textContent = String(ev.seq);
    seq.appendChild(a);
    cell(row, time(ev.time), "time");
    cell(row, ev.type, "type");
    cell(row, op(ev), "op");
    var text = JSON.stringify(ev.data);
    if (text.length > 240) { text = text.slice(0, 239) + "\\u2026"; }
    var what = cell(row, "", "what");
    var summary = document.createElement("div");
    summary.className = "summary";
    summary.textContent = text;
    what.appendChild(summary);
    rows.appendChild(row);
  }
  var url = "/api/sessions/" + encodeURIComponent(id) + "/follow?after_seq=" + after;
  var source = new EventSource(url);
  source.addEventListener("ready", function () {
    status.hidden = false;
    status.textContent = "following: new events appear below";
  });
  source.addEventListener("event", function (message) {
    var ev = JSON.parse(message.data);
    add(ev);
    body.dataset.head = String(ev.seq);
    status.textContent = "following: last event " + ev.seq;
  });
  source.addEventListener("deleted", function () {
    source.close();  // a session created again under this id is another one
    status.textContent = "this session was deleted: no more events";
  });
  source.onerror = function () { status.textContent = "following: reconnecting"; };
})();
"""
