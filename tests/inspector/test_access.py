"""Who may read the inspector: loopback by default, a token to bind anywhere else (checked on
every request, by header or by the cookie a first ``?token=`` sets), loopback Host names only
when no token guards the app (no DNS rebinding)."""

from __future__ import annotations

import pytest

from session_sql.cli import main
from session_sql.cli._inspect import is_loopback
from session_sql.inspector.app import COOKIE, create_app

TOKEN = "s3cret-token-for-tests"


@pytest.fixture
def guarded(scene):
    from starlette.testclient import TestClient

    app = create_app(scene.store, token=TOKEN, allowed_hosts=None)
    with TestClient(app, base_url="http://inspector.example") as client:
        yield client


def test_without_a_token_nothing_is_served(guarded, scene):
    for path in ("/", f"/sessions/{scene.session_id}", "/api/sessions", "/static/inspector.js"):
        response = guarded.get(path)
        assert response.status_code == 401, path
        assert response.headers["www-authenticate"] == "Bearer"
        assert scene.session_id not in response.text


def test_a_wrong_token_is_refused_however_it_comes(guarded):
    assert guarded.get("/api/sessions", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert guarded.get("/api/sessions", params={"token": "nope"}).status_code == 401
    guarded.cookies.set(COOKIE, "nope")
    assert guarded.get("/api/sessions").status_code == 401


def test_the_bearer_header_opens_the_api(guarded, scene):
    response = guarded.get("/api/sessions", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert scene.session_id in response.text


def test_a_token_in_the_address_becomes_an_httponly_strict_cookie(guarded, scene):
    response = guarded.get(
        f"/sessions/{scene.session_id}",
        params={"token": TOKEN, "limit": "3"},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert response.headers["location"] == f"/sessions/{scene.session_id}?limit=3"  # token gone
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    page = guarded.get(response.headers["location"])  # the client keeps the cookie
    assert page.status_code == 200
    assert "log-rows" in page.text


def test_without_a_token_only_loopback_host_names_are_answered(scene):
    from starlette.testclient import TestClient

    app = create_app(scene.store)
    for base, status in [
        ("http://127.0.0.1:8765", 200),
        ("http://localhost:8765", 200),
        ("http://[::1]:8765", 200),
        ("http://rebound.example:8765", 400),
        ("http://127.0.0.1.rebound.example", 400),
    ]:
        with TestClient(app, base_url=base) as client:
            assert client.get("/api/sessions").status_code == status, base


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.com", False),
    ],
)
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::"])
def test_serve_refuses_to_bind_elsewhere_without_a_token(backend, scene, capsys, host):
    code = main(["serve", "--url", backend.url, "--schema", backend.schema, "--host", host])
    assert code == 2
    err = capsys.readouterr().err
    assert "--token" in err and host in err
