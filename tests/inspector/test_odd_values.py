"""Values the store accepts that the inspector's pages must still draw, on both backends:
odd token counts in ``usage`` (free-form JSON)."""

from __future__ import annotations

from typing import Any

import pytest

from session_sql import open_store
from session_sql.inspector.app import create_app
from tests.builders import assistant_data, assistant_message, begin_turn, end_turn


def client_for(store: Any) -> Any:
    from starlette.testclient import TestClient

    return TestClient(create_app(store), base_url="http://127.0.0.1")


@pytest.mark.parametrize(
    ("usage", "skipped"),
    [
        ({"inputTokens": 5, "outputTokens": -5}, 1),
        ({"inputTokens": -5, "outputTokens": 5}, 1),
        ({"inputTokens": 1.5, "outputTokens": "abc"}, 2),
        ({"inputTokens": 10**12, "outputTokens": True}, 2),
        ({"inputTokens": [1], "outputTokens": {"n": 1}}, 2),
    ],
    ids=["5,-5", "-5,5", "float,string", "huge,bool", "list,object"],
)
def test_a_session_page_with_odd_token_counts_is_drawn(backend, usage, skipped):
    with open_store(backend.url, schema=backend.schema) as store:
        session = store.create_session("odd")
        begin_turn(session, 1)
        data = assistant_data(assistant_message(), usage=usage)
        session.append("assistant/message", data, surface_op="append")
        end_turn(session, 1)
        with client_for(store) as client:
            page = client.get("/sessions/odd")
        assert page.status_code == 200, page.text
        assert f"{skipped} token counts that are not integers left out" in page.text


def test_pages_and_api_render_times_no_calendar_holds(backend, tmp_path):
    from tests.cli.test_odd_times import FAR, odd_store

    odd_store(backend.url, backend.schema, tmp_path)
    with open_store(backend.url, schema=backend.schema) as store, client_for(store) as client:
        listing = client.get("/")
        assert listing.status_code == 200, listing.text
        assert all(sid in listing.text for sid in ("far", "created-far", "imported", "plain"))
        assert f"{FAR} ms" in listing.text
        for sid, shown in (("far", FAR), ("created-far", FAR), ("imported", 10**15)):
            page = client.get(f"/sessions/{sid}")
            assert page.status_code == 200, page.text
            assert f"{shown} ms" in page.text
        assert client.get("/api/sessions").status_code == 200
        events = client.get("/api/sessions/far/events").json()["events"]
        assert events[0]["time"] == FAR
        script = client.get("/static/inspector.js").text
        assert 'ms + " ms"' in script  # the live rows render such a time as the page does
