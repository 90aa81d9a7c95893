"""The HTTP surface's protections, as a browser and as a plain client see them: writes
from other sites refused, only the server's own host names answered, bodies limited
(and a caller authenticated before its body is read), every unexpected error a problem
with an id the log holds, /readyz naming no database to a stranger."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from api_helpers import PREFIX, READ_TOKEN, TOKEN, Api, assert_problem, served
from conftest import Store

from simpleworkflow import errors
from simpleworkflow.server import AllowedHosts, Auth, create_app
from simpleworkflow.web import guard

TYPE = "content.thumbnail.v1"
SCHEDULE = "content.thumbnail.nightly"
FULL = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"content-type": "application/json"}
#: What a page of another site sends through the user's browser.
NO_CORS_FETCH = {"origin": "http://evil.example", "sec-fetch-site": "cross-site"}
TEXT_FORM = {**NO_CORS_FETCH, "sec-fetch-mode": "navigate", "content-type": "text/plain"}
SAME_SITE = {"origin": "http://localhost:3000", "sec-fetch-site": "same-site"}
SAME_ORIGIN = {"origin": "http://localhost", "sec-fetch-site": "same-origin", **JSON}


def _ready(store: Store) -> tuple[str, str]:
    """A paused type, a paused schedule, a pending and a failed run; returns the run ids."""
    with store.client() as client:
        client.admin.set_runtime(TYPE, "python")
        client.schedules.create(SCHEDULE, TYPE, cron="@daily")
        client.schedules.pause(SCHEDULE)
        pending = client.start(TYPE).id
        failed = client.start(TYPE).id
    store.sql("update workflow_run set status = 'failed' where id = ?", failed)
    return pending, failed


def _state(store: Store, pending: str, failed: str) -> tuple[object, ...]:
    with store.client() as client:
        return (
            {entry.workflow_name: entry for entry in client.admin.registry()}[TYPE].is_enabled,
            client.schedules.get(SCHEDULE).paused,
            client.get(pending).status,
            client.get(failed).status,
            store.count("workflow_event"),
        )


def _writes(pending: str, failed: str) -> list[tuple[str, str]]:
    return [
        ("POST", f"{PREFIX}/types/{TYPE}/pause"),
        ("POST", f"{PREFIX}/schedules/{SCHEDULE}/resume"),
        ("POST", f"{PREFIX}/runs/{pending}/cancel"),
        ("POST", f"{PREFIX}/runs/{failed}/retry"),
        ("DELETE", f"{PREFIX}/runs/{pending}"),
        ("POST", f"/runs/{pending}/cancel"),  # the dashboard's, before it reads the form
        ("POST", f"/types/{TYPE}/pause"),
    ]


@pytest.mark.parametrize("tokens", [False, True])
def test_another_sites_page_cannot_write_through_the_browser(store: Store, tokens: bool) -> None:
    api = Api(store, auth=Auth(token=TOKEN) if tokens else None)
    auth = FULL if tokens else {}  # even a request that carries the token (a proxy adds it)
    try:
        pending, failed = _ready(store)
        before = _state(store, pending, failed)
        for method, path in _writes(pending, failed):
            for headers, body in (
                (NO_CORS_FETCH, None),  # fetch(url, {method: "POST", mode: "no-cors"})
                (TEXT_FORM, '{"reason": "x"}'),  # <form enctype="text/plain"> submitted
                ({"origin": "http://evil.example"}, None),  # a browser without Sec-Fetch-*
                ({"origin": "null"}, None),  # a sandboxed frame or a data: page
                (SAME_SITE, None),  # another port of the same machine is another origin
            ):
                response = api.request(method, path, headers={**headers, **auth}, content=body)
                assert_problem(response, 403, "refused")
                assert response.json()["type"] == "urn:simpleworkflow:cross-site"
        assert _state(store, pending, failed) == before
        # A form without Origin (an old browser) still cannot send JSON: refused as its type.
        form = {"content-type": "application/x-www-form-urlencoded", **auth}
        response = api.post(f"{PREFIX}/runs/{pending}/cancel", headers=form, content="reason=x")
        assert_problem(response, 415, "application/json")
        assert _state(store, pending, failed) == before
        # The reads a page may trigger stay served (the browser keeps their answers from it).
        assert api.get(f"{PREFIX}/runs/{pending}", headers={**NO_CORS_FETCH, **auth}).is_success

        # The same writes from the API's own origin, and from a plain client, are served.
        assert api.post(f"{PREFIX}/types/{TYPE}/pause", headers={**SAME_ORIGIN, **auth}).is_success
        assert api.post(f"{PREFIX}/schedules/{SCHEDULE}/resume", headers=auth).is_success
        cancel = api.post(f"{PREFIX}/runs/{pending}/cancel", headers=auth, json={"reason": "x"})
        assert cancel.json()["cancelled"] is True
        assert api.post(f"{PREFIX}/runs/{failed}/retry", headers=auth).is_success
        assert _state(store, pending, failed)[:4] == (False, False, "cancelled", "pending")
    finally:
        api.close()


def test_a_write_is_authenticated_before_its_body_is_read(store: Store) -> None:
    api = Api(store, auth=Auth(token=TOKEN, read_token=READ_TOKEN))
    read: list[int] = []

    async def body() -> AsyncIterator[bytes]:
        for _ in range(100):
            read.append(1)
            yield b"x" * 10_000

    try:
        for headers in ({}, {"Authorization": f"Bearer {READ_TOKEN}"}):
            response = api.post(f"{PREFIX}/runs", content=body(), headers={**JSON, **headers})
            assert response.status_code in (401, 403), response.text
            assert read == [], "the body was read before the caller was checked"
        not_json = api.post(f"{PREFIX}/runs", content=b"{not json", headers=JSON)
        assert_problem(not_json, 401)  # and not the 400 of a body it parsed
        assert_problem(api.post(f"{PREFIX}/runs", content=b"{", headers={**JSON, **FULL}), 400)
        assert store.count() == 0
    finally:
        api.close()


def test_every_body_is_limited_as_it_arrives_on_the_dashboard_too(store: Store) -> None:
    api = Api(store)
    read: list[int] = []

    async def form(chunks: int) -> AsyncIterator[bytes]:
        yield b"reason=x"
        for _ in range(chunks):  # fields of 512 KiB: under Starlette's limit of one field
            read.append(1)
            yield (b"&blob=" + b"x" * (512 * 1024 - 6)) * 2

    try:
        run_id = api.start(TYPE)["id"]
        urlencoded = {"content-type": "application/x-www-form-urlencoded"}
        # No Content-Length: counted as it comes, and cut off past the dashboard's limit.
        response = api.post(f"/runs/{run_id}/cancel", content=form(50), headers=urlencoded)
        assert_problem(response, 413, "larger than")
        limit_chunks = guard.FORM_MAX_BODY_BYTES // (1024 * 1024)
        assert len(read) <= limit_chunks + 1, len(read)
        # A declared length over it is refused before a byte is read.
        read.clear()
        big = {**urlencoded, "content-length": str(guard.FORM_MAX_BODY_BYTES + 1)}
        assert_problem(api.post("/login", content=form(5), headers=big), 413)
        assert read == []
        assert api.get(f"{PREFIX}/runs/{run_id}").json()["status"] == "pending"
        # The API's limit is its own (16 MiB): a batch of 4.5 MB is served.
        runs = [{"type": TYPE, "payload": {"b": "x" * 900_000}}] * 5
        assert api.post(f"{PREFIX}/runs/batch", json={"runs": runs}).status_code == 201
    finally:
        api.close()


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "localhost.evil.example"])
def test_a_host_not_of_the_server_is_refused_everywhere(store: Store, host: str) -> None:
    api = Api(store)
    try:
        for method, path in (
            ("GET", f"{PREFIX}/runs"),
            ("POST", f"{PREFIX}/runs"),
            ("GET", "/"),
            ("GET", "/docs"),
            ("GET", "/readyz"),
        ):
            response = api.request(method, path, headers={"host": host}, json={"type": TYPE})
            problem = assert_problem(response, 421, "does not answer to the host")
            assert problem["type"] == "urn:simpleworkflow:host-not-allowed"
        assert store.count() == 0
        for allowed in ("localhost:8000", "127.0.0.1", "[::1]:8000", "LOCALHOST."):
            assert api.get(f"{PREFIX}/runs", headers={"host": allowed}).is_success, allowed
    finally:
        api.close()


def test_allowed_hosts() -> None:
    hosts = AllowedHosts.of(["wf.example.com", ".corp.example"])
    assert hosts.allows("wf.example.com:443") and hosts.allows("a.corp.example")
    assert not hosts.allows("corp.example.evil") and not hosts.allows("example.com")
    assert not hosts.allows("10.0.0.5") and not hosts.allows(None)
    on_every_interface = AllowedHosts.for_bind("0.0.0.0")
    assert on_every_interface.allows("10.0.0.5:8000") and on_every_interface.allows("[fe80::1]")
    assert not on_every_interface.allows("evil.example")
    assert AllowedHosts.for_bind("10.0.0.5").allows("10.0.0.5")
    assert not AllowedHosts.for_bind("10.0.0.5").allows("10.0.0.6")
    assert AllowedHosts.of(["*"]).allows("anything.example")
    with pytest.raises(errors.ConfigurationError, match="allowed host"):
        AllowedHosts.of(["http://wf.example.com/"])


def test_an_unexpected_error_is_a_problem_with_an_id_the_log_holds(
    store: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = Api(store)

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the server")

    try:
        run_id = api.start(TYPE)["id"]
        monkeypatch.setattr(api.client, "get", broken)
        monkeypatch.setattr(api.client.admin, "stats", broken)
        caplog.set_level(logging.ERROR, "simpleworkflow.server")
        for path, accept in (
            (f"{PREFIX}/runs/{run_id}", "application/json"),  # an API route
            ("/", "application/json"),  # a dashboard page, asked by a script
        ):
            response = api.get(path, headers={"accept": accept})
            problem = assert_problem(response, 500, "unexpected error")
            assert "a bug" not in response.text, "the error's words stay in the log"
            logged = [r for r in caplog.records if problem["error_id"] in r.getMessage()]
            assert logged and logged[0].exc_info is not None, caplog.text
            assert "RuntimeError: a bug in the server" in caplog.text
        page = api.get("/", headers={"accept": "text/html"})  # a browser gets a page
        assert page.status_code == 500 and page.headers["content-type"].startswith("text/html")
        assert page.text.count("<code>") == 1 and "a bug" not in page.text
    finally:
        api.close()


def test_an_error_outside_every_route_is_a_problem_too(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    def build(client: object) -> object:
        app = create_app(client)  # type: ignore[arg-type]

        @app.get("/boom")
        async def boom() -> None:
            raise ValueError("not caught by any route")

        return app

    api = Api(store, build=build)
    try:
        caplog.set_level(logging.ERROR, "simpleworkflow.server")
        problem = assert_problem(api.get("/boom"), 500, "unexpected error")
        assert problem["type"] == "urn:simpleworkflow:internal-error"
        assert problem["error_id"] in caplog.text and "ValueError" in caplog.text
    finally:
        api.close()


@pytest.mark.parametrize("tokens", [False, True])
def test_readiness_names_the_database_only_to_a_caller_with_a_token(tokens: bool) -> None:
    unreachable = Store("postgres", "postgresql://nobody@127.0.0.1:1/secretdb", "workflow")
    api = Api(unreachable, auth=Auth(token=TOKEN, read_token=READ_TOKEN) if tokens else None)
    try:
        problem = assert_problem(api.get("/readyz"), 503, "unavailable")
        assert problem["type"] == "urn:simpleworkflow:store-unavailable"
        assert "nobody" not in problem["detail"] and "secretdb" not in problem["detail"]
        assert "127.0.0.1" not in problem["detail"]
        if tokens:
            shown = api.get("/readyz", headers={"Authorization": f"Bearer {READ_TOKEN}"})
            assert "secretdb" in assert_problem(shown, 503)["detail"]
    finally:
        api.close()


def test_ready_answers_name_nothing(store: Store) -> None:
    api = Api(store, auth=Auth(token=TOKEN))
    try:
        ready = api.get("/readyz")
        assert ready.status_code == 200 and set(ready.json()) == {"status", "schema_version"}
    finally:
        api.close()


def test_the_docs_page_loads_only_its_own_files(store: Store) -> None:
    api = Api(store)
    try:
        page = api.get("/docs")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "connect-src 'self'" in policy
        assert "http" not in page.text and "//" not in page.text  # nothing from elsewhere
        assert "<script>" not in page.text  # no inline script: the policy forbids them
        sources = [part.split('"')[0] for part in page.text.split('src="')[1:]]
        sources += [part.split('"')[0] for part in page.text.split('href="')[1:]]
        assert len(sources) == 5, sources
        for source in sources:
            asset = api.get(source)
            assert asset.status_code == 200 and len(asset.content) > 100, source
            kind = asset.headers["content-type"]
            assert kind.split("/")[0] in ("text", "image") and "nosniff" in str(asset.headers)
        bundle = api.get("/docs/assets/swagger-ui-bundle.js").text
        assert "SwaggerUIBundle" in bundle
        assert "validatorUrl: null" in api.get("/docs/assets/start.js").text
        assert_problem(api.get("/docs/assets/index.html"), 404)
        assert_problem(api.get("/docs/assets/..%2F__init__.py"), 404)
    finally:
        api.close()


def test_a_mounted_app_answers_its_hosts(store: Store) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    def build(client: object) -> object:
        inner = create_app(client, allowed_hosts=["wf.example.com"])  # type: ignore[arg-type]
        return Starlette(routes=[Mount("/workflows", inner)])

    api = Api(store, build=build)
    try:
        served = api.get("/workflows/docs", headers={"host": "wf.example.com"})
        assert served.status_code == 200 and 'src="/workflows/docs/assets/' in served.text
        assert_problem(api.get("/workflows/healthz", headers={"host": "evil.example"}), 421)
    finally:
        api.close()


# -- a real server ----------------------------------------------------------------------


@pytest.mark.parametrize("empty_store", ["sqlite"], indirect=True)
def test_serve_answers_its_hosts_and_refuses_the_rest(store: Store) -> None:
    env = {"SIMPLEWORKFLOW_ALLOWED_HOSTS": "ops.example.com, .corp.example"}
    with served(store, "--allowed-host", "wf.example.com", env=env) as base:
        for host in ("wf.example.com", "ops.example.com:8443", "a.corp.example", "localhost"):
            response = httpx.get(f"{base}{PREFIX}/runs", headers={"host": host})
            assert response.status_code == 200, (host, response.text)
        for host in ("evil.example", "wf.example.com.evil.example"):
            for path in (f"{PREFIX}/runs", "/", "/docs"):
                response = httpx.get(f"{base}{path}", headers={"host": host})
                assert_problem(response, 421, "does not answer to the host")
        # A browser on another site: refused, and told why; a plain client is served.
        url = f"{base}{PREFIX}/runs"
        form = {**TEXT_FORM, "host": base.removeprefix("http://")}
        assert_problem(httpx.post(url, headers=form, content=f'{{"type": "{TYPE}"}}'), 403)
        assert httpx.post(url, json={"type": TYPE}).status_code == 201
        assert store.count() == 1


@pytest.mark.parametrize("empty_store", ["sqlite"], indirect=True)
def test_serve_trusts_forwarded_headers_only_when_told(store: Store) -> None:
    forwarded = {"x-forwarded-proto": "https", "x-forwarded-for": "203.0.113.7"}

    def cookie_is_secure(base: str) -> bool:
        page = httpx.get(f"{base}/", headers=forwarded)  # the dashboard sets its cookie
        assert page.status_code == 200, page.text
        return "secure" in page.headers["set-cookie"].lower()

    with served(store) as base:
        assert not cookie_is_secure(base), "a local client made itself https"
    with served(store, "--forwarded-allow-ips", "127.0.0.1") as base:
        assert cookie_is_secure(base)
    with served(store, env={"SIMPLEWORKFLOW_FORWARDED_ALLOW_IPS": "127.0.0.1"}) as base:
        assert cookie_is_secure(base)


@pytest.mark.parametrize("empty_store", ["sqlite"], indirect=True)
def test_serve_cuts_a_body_off_at_its_limit(store: Store) -> None:
    def form() -> Iterator[bytes]:
        yield b"reason=x"
        for _ in range(40):
            yield (b"&blob=" + b"x" * (512 * 1024 - 6)) * 2

    with served(store) as base:
        run_id = httpx.post(f"{base}{PREFIX}/runs", json={"type": TYPE}).json()["id"]
        headers = {"content-type": "application/x-www-form-urlencoded"}
        response = httpx.post(f"{base}/runs/{run_id}/cancel", content=form(), headers=headers)
        assert_problem(response, 413, "larger than")
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}{PREFIX}/runs/{run_id}").json()["status"] == "pending"


@pytest.mark.parametrize("empty_store", ["sqlite"], indirect=True)
def test_serve_refuses_an_allowed_host_that_is_not_a_name(store: Store) -> None:
    env = {k: v for k, v in store.env.items() if not k.startswith("SIMPLEWORKFLOW_API_")}
    for args, more in (
        (["--allowed-host", "https://wf.example.com/"], {}),
        ([], {"SIMPLEWORKFLOW_ALLOWED_HOSTS": "wf.example.com, user@evil.example"}),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "simpleworkflow", "serve", "--port", "0", *args],
            env={**env, **more},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert "an allowed host is a host name" in done.stderr
