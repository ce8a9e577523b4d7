"""Every writer stores an event's row the same way: one append at a time (PostgreSQL's one
round trip, sync and async), a batch (``COPY`` or ``unnest`` from 32 events), an import and
a fork all bind ``rows.event_values``, so the stored texts are equal byte for byte."""

from __future__ import annotations

from typing import Any

from .store_builders import dump_tables, session_row, tables

TEXT = 'a\\b\n"q" \u00e9 \u4e2d \U0001f600 %s %(x)s'


def _user(i: Any, text: str) -> dict[str, Any]:
    content = [{"type": "text", "text": text}]
    return {"id": f"u{i}", "role": "user", "content": content, "source": {"kind": "user"}}


def _items() -> list[dict[str, Any]]:
    """40 events (past the bulk threshold): surface appends, then a replace with sources."""
    items: list[dict[str, Any]] = [
        {
            "type": "user/message",
            "data": _user(i, TEXT),
            "surface_op": "append",
        }
        for i in range(39)
    ]
    items.append(
        {
            "type": "user/message",
            "data": _user("sum", "summary"),
            "surface_op": {"op": "replace", "start": 30, "end": 38},
            "source_event_seqs": list(range(30, 39)),
        }
    )
    return items


def _rows(store: Any, session_id: str, *, times: bool) -> list[tuple[Any, ...]]:
    """The session's stored event rows as text, without the session key (a number given per
    creation, so an import or a fork has another) and, unless ``times``, the time."""
    names = [c.name for c in tables(store).events.c]
    key = str(session_row(store, session_id).session_key)
    skip = {"session_key"} if times else {"session_key", "time"}
    rows = [dict(zip(names, r, strict=True)) for r in dump_tables(store)["events"]]
    return [
        tuple(v for n, v in r.items() if n not in skip) for r in rows if r["session_key"] == key
    ]


def test_every_writer_stores_the_same_row_texts(store, tmp_path):
    one = store.create_session("one")
    for item in _items():
        one.append(
            item["type"],
            item["data"],
            surface_op=item["surface_op"],
            source_event_seqs=item.get("source_event_seqs"),
        )
    store.create_session("many").append_many(_items())
    appended = _rows(store, "one", times=True)
    assert len(appended) == 40
    assert _rows(store, "many", times=False) == _rows(store, "one", times=False)

    path = tmp_path / "one.jsonl"
    store.export_jsonl("one", str(path))
    store.delete_session("one")
    assert store.import_jsonl(str(path)) == "one"
    assert _rows(store, "one", times=True) == appended

    store.fork_session("one", child_id="fork")
    assert _rows(store, "fork", times=True)[:40] == appended
