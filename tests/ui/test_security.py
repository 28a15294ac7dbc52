"""Access to the UI server: loopback Host check by default, a token when bound wider."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from stepscope.ui import create_app
from stepscope.ui.security import COOKIE_NAME, is_loopback

from .conftest import write_job_folder

TOKEN = "s3cret-token-for-tests"


@pytest.fixture
def app_factory(tmp_path: Path, jobs_root: Path, table_opener):
    write_job_folder(jobs_root, "job-a")

    def make(**kwargs):
        return create_app(
            [jobs_root],
            settings_path=tmp_path / "settings.json",
            job_opener=table_opener,
            **kwargs,
        )

    return make


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.0.1:8765", "[::1]:8765"])
def test_loopback_hosts_are_served(app_factory, host):
    client = TestClient(app_factory(), base_url="http://127.0.0.1")
    assert client.get("/api/jobs", headers={"host": host}).status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "192.168.1.20:8765", ""])
def test_other_host_headers_are_refused_without_a_token(app_factory, host):
    """A page on another site cannot reach the local server through DNS rebinding."""
    client = TestClient(app_factory(), base_url="http://127.0.0.1")
    response = client.get("/api/jobs", headers={"host": host})
    assert response.status_code == 403
    assert "jobs" not in response.json()


def test_a_token_is_required_on_every_request(app_factory):
    client = TestClient(app_factory(token=TOKEN), base_url="http://192.168.1.20:8765")
    for path in ("/", "/api/jobs", "/api/settings", "/static/js/main.js", "/vendor/plotly.min.js"):
        assert client.get(path).status_code == 401, path
    assert client.get("/api/jobs?token=wrong").status_code == 401
    assert client.get("/api/jobs", headers={"authorization": "Bearer wrong"}).status_code == 401
    client.cookies.set(COOKIE_NAME, "wrong")
    assert client.get("/api/jobs").status_code == 401


def test_the_token_in_the_url_sets_a_cookie_and_is_dropped_from_the_url(app_factory):
    client = TestClient(app_factory(token=TOKEN), base_url="http://192.168.1.20:8765")
    first = client.get(f"/dashboard?token={TOKEN}&x=1", follow_redirects=False)
    assert first.status_code == 303
    assert first.headers["location"] == "/dashboard?x=1"
    cookie = first.headers["set-cookie"]
    assert f"{COOKIE_NAME}={TOKEN}" in cookie and "HttpOnly" in cookie
    assert "samesite=strict" in cookie.lower()
    # the client now carries the cookie only
    assert client.get("/api/jobs").status_code == 200
    assert client.get("/dashboard").status_code == 200


def test_api_clients_may_send_the_token_as_a_bearer_header(app_factory):
    client = TestClient(app_factory(token=TOKEN), base_url="http://192.168.1.20:8765")
    response = client.get("/api/jobs", headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200 and response.json()["jobs"][0]["name"] == "job-a"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.20", False),
        ("example.com", False),
    ],
)
def test_which_binds_stay_on_this_machine(host, loopback):
    assert is_loopback(host) is loopback


def test_changes_from_another_site_are_refused(app_factory, tmp_path: Path):
    client = TestClient(app_factory(), base_url="http://127.0.0.1:8765")
    job = client.get("/api/jobs").json()["jobs"][0]["id"]
    evil = {"origin": "https://evil.example"}
    assert (
        client.put("/api/settings", json={"auto_shutdown_enabled": False}, headers=evil).status_code
        == 403
    )
    assert client.post(f"/api/jobs/{job}/load", headers=evil).status_code == 403
    assert client.get("/api/settings", headers=evil).json()["auto_shutdown_enabled"] is True
    own = {"origin": "http://127.0.0.1:8765"}
    assert (
        client.put("/api/settings", json={"auto_shutdown_enabled": False}, headers=own).status_code
        == 200
    )
    assert client.post(f"/api/jobs/{job}/load", headers=own).status_code == 202
