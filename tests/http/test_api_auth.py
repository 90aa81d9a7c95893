"""Tokens: off by default; once set, every endpoint but the health checks (and the API's
own documents) needs one, and the read-only token is refused on every write."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import httpx
import pytest
from api_helpers import PREFIX, READ_TOKEN, TOKEN, Api, assert_problem, served
from conftest import Store

from simpleworkflow import errors
from simpleworkflow.server import Auth, is_loopback

TYPE = "content.thumbnail.v1"
SCHEDULE = "content.thumbnail.nightly"
FULL = {"Authorization": f"Bearer {TOKEN}"}
READ = {"Authorization": f"Bearer {READ_TOKEN}"}


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    api = Api(store, auth=Auth(token=TOKEN, read_token=READ_TOKEN))
    yield api
    api.close()


def endpoints(api: Api, run_id: str | None = None) -> list[tuple[str, str]]:
    """Every ``(method, path)`` of the API's document, path parameters filled in."""
    found = []
    run_id = run_id or str(uuid.uuid4())
    for path, operations in api.get("/openapi.json").json()["paths"].items():
        if not path.startswith(PREFIX):
            continue
        filled = path.replace("{run_id}", run_id).replace("{type}", TYPE)
        filled = filled.replace("{name}", SCHEDULE).replace("{key}", "stage")
        found += [(method.upper(), filled) for method in operations]
    return found


def test_every_endpoint_but_health_needs_a_token(api: Api) -> None:
    listed = endpoints(api)
    assert len(listed) >= 14
    for method, path in listed:
        for headers in (
            {},
            {"Authorization": "Bearer wrong-token-0123456789"},
            {"Authorization": TOKEN},
        ):
            response = api.request(method, path, headers=headers)
            assert_problem(response, 401)
            assert response.headers["www-authenticate"].startswith("Bearer"), (method, path)
    for open_path in ("/healthz", "/readyz", "/openapi.json", "/docs"):
        assert api.get(open_path).status_code == 200, open_path


def test_the_read_only_token_reads_and_is_refused_every_write(store: Store, api: Api) -> None:
    started = api.post(f"{PREFIX}/runs", json={"type": TYPE}, headers=FULL)
    assert started.status_code == 201
    run_id = started.json()["id"]
    with store.client() as client:  # for the schedule's GET
        client.schedules.create(SCHEDULE, TYPE, cron="@daily")
    before = [store.count(t) for t in ("workflow_run", "workflow_event", "workflow_signal")]
    writes = [(m, p) for m, p in endpoints(api, run_id) if m != "GET"]
    assert {m for m, _ in writes} == {"POST", "PUT", "DELETE"} and len(writes) >= 8
    for method, path in writes:
        assert_problem(api.request(method, path, headers=READ, json={}), 403, "may only read")
    assert [store.count(t) for t in ("workflow_run", "workflow_event", "workflow_signal")] == before
    assert api.get(f"{PREFIX}/runs/{run_id}", headers=READ).json()["status"] == "pending"

    for method, path in endpoints(api, run_id):
        if method == "GET" and not path.endswith("/streams/stage"):  # live until the run ends
            response = api.request(method, path, headers=READ)
            unset = "/values/" in path and response.status_code == 404  # the run set none
            assert response.status_code == 200 or unset, (path, response.text)


def test_the_full_token_writes(api: Api) -> None:
    started = api.post(f"{PREFIX}/runs", json={"type": TYPE}, headers=FULL)
    assert started.status_code == 201
    run_id = started.json()["id"]
    cancelled = api.post(f"{PREFIX}/runs/{run_id}/cancel", headers=FULL)
    assert cancelled.json()["cancelled"] is True
    assert api.get(f"{PREFIX}/runs", headers=FULL).json()["runs"][0]["id"] == run_id


def test_with_only_a_read_only_token_nothing_may_write(store: Store) -> None:
    api = Api(store, auth=Auth(read_token=READ_TOKEN))
    try:
        assert api.get(f"{PREFIX}/runs", headers=READ).status_code == 200
        assert_problem(api.post(f"{PREFIX}/runs", json={"type": TYPE}, headers=READ), 403)
        assert_problem(api.post(f"{PREFIX}/runs", json={"type": TYPE}), 401)
        assert store.count() == 0
    finally:
        api.close()


def test_tokens_are_checked_when_the_server_is_configured() -> None:
    assert not Auth().enabled and Auth(token=TOKEN).enabled
    auth = Auth(token=TOKEN, read_token=READ_TOKEN)
    assert auth.level(TOKEN) == "write" and auth.level(READ_TOKEN) == "read"
    assert auth.level(TOKEN[:-1]) is None and auth.level("") is None
    assert Auth(read_token=READ_TOKEN).level(TOKEN) is None
    for bad in ("short", "has a space in it somewhere", "naïve-token-0123456789"):
        with pytest.raises(errors.ConfigurationError, match="at least 16"):
            Auth(token=bad)
    with pytest.raises(errors.ConfigurationError, match="differ"):
        Auth(token=TOKEN, read_token=TOKEN)


def test_tokens_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIMPLEWORKFLOW_API_TOKEN", TOKEN)
    monkeypatch.setenv("SIMPLEWORKFLOW_API_READ_TOKEN", "")
    assert Auth.from_env() == Auth(token=TOKEN)
    other = "another-token-0123456789"
    assert Auth.from_env(token=other) == Auth(token=other)  # a flag wins


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.com", False),
    ],
)
def test_which_addresses_are_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_serve_refuses_a_public_address_without_a_token(store: Store) -> None:
    env = {k: v for k, v in store.env.items() if not k.startswith("SIMPLEWORKFLOW_API_")}
    done = subprocess.run(
        [sys.executable, "-m", "simpleworkflow", "serve", "--host", "0.0.0.0", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "refusing to serve on 0.0.0.0 without a token" in done.stderr
    assert "SIMPLEWORKFLOW_API_TOKEN" in done.stderr and "--insecure" in done.stderr


@pytest.mark.parametrize("empty_store", ["sqlite"], indirect=True)
def test_serve_on_a_public_address_with_a_token_or_insecure(store: Store) -> None:
    with served(store, "--host", "0.0.0.0", env={"SIMPLEWORKFLOW_API_TOKEN": TOKEN}) as base:
        base = base.replace("0.0.0.0", "127.0.0.1")
        assert httpx.get(f"{base}{PREFIX}/runs").status_code == 401
        assert httpx.get(f"{base}{PREFIX}/runs", headers=FULL).status_code == 200
        assert httpx.get(f"{base}/healthz").status_code == 200
    with served(store, "--host", "0.0.0.0", "--insecure") as base:
        base = base.replace("0.0.0.0", "127.0.0.1")
        assert httpx.get(f"{base}{PREFIX}/runs").status_code == 200
