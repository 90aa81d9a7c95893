"""What the dashboard refuses and withholds: a session past its lifetime or logged out
(its cookie and CSRF token both), a redirect after login to anything but a path of its
own, a cursor it did not write, and a failed database's whereabouts."""

from __future__ import annotations

import asyncio
import base64
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from api_helpers import READ_TOKEN, TOKEN
from conftest import Store
from starlette.requests import Request
from test_dashboard import TYPE, Dash, texts

from simpleworkflow import Client, dashboard, errors
from simpleworkflow.admin import Admin
from simpleworkflow.dashboard import sessions
from simpleworkflow.server import Auth

AUTH = Auth(token=TOKEN, read_token=READ_TOKEN)


def cookie_of(response: httpx.Response) -> str:
    found = re.search(r"simpleworkflow_dashboard=([^;]+)", response.headers["set-cookie"])
    assert found, response.headers["set-cookie"]
    return found.group(1)


def replay(dash: Dash, method: str, url: str, cookie: str, **options: Any) -> httpx.Response:
    """A request that carries ``cookie`` and nothing else of the browser's: what a copied
    cookie would send."""
    dash.http.cookies.clear()
    headers = {"Cookie": f"simpleworkflow_dashboard={cookie}", **options.pop("headers", {})}
    return dash._loop.run_until_complete(dash.http.request(method, url, headers=headers, **options))


def test_logging_out_ends_the_session_on_the_server(store: Store, client: Client) -> None:
    run = client.start(TYPE)
    dash = Dash(store, auth=AUTH)
    try:
        cookie = cookie_of(dash.log_in(TOKEN))
        token = dash.csrf()
        assert replay(dash, "GET", "/runs", cookie).status_code == 200
        dash.http.cookies.set("simpleworkflow_dashboard", cookie)
        out = dash.post("/logout", data={"csrf_token": token})
        assert out.status_code == 303 and out.headers["location"] == "/login"
        assert 'simpleworkflow_dashboard=""' in out.headers["set-cookie"]  # the browser's
        # The server's: the old cookie, and the CSRF token it came with, are refused.
        page = replay(dash, "GET", "/runs", cookie)
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        forged = replay(dash, "POST", f"/runs/{run.id}/cancel", cookie, data={"csrf_token": token})
        assert forged.status_code in (401, 403), forged.text
        assert client.get(run.id).status.value == "pending"
        # Logging out again with the ended cookie is harmless, and a new login works.
        assert replay(dash, "POST", "/logout", cookie).status_code == 303
        dash.http.cookies.clear()
        dash.log_in(TOKEN)
        assert dash.get("/runs").status_code == 200
    finally:
        dash.close()


def test_a_logout_ends_the_session_in_every_process_and_after_a_restart(
    store: Store, client: Client
) -> None:
    """Two dashboards on one store, as two processes serving it would be (two apps, two
    clients): a logout on one is honoured by the other, and by a third started after."""
    run = client.start(TYPE)
    one, other = Dash(store, auth=AUTH), Dash(store, auth=AUTH)
    restarted: Dash | None = None
    try:
        cookie = cookie_of(one.log_in(TOKEN))
        token = one.csrf()
        assert replay(other, "GET", "/runs", cookie).status_code == 200  # shared keys
        nonce = cookie.split(".")[2]
        one.http.cookies.set("simpleworkflow_dashboard", cookie)
        assert one.post("/logout", data={"csrf_token": token}).status_code == 303
        assert store.sql("select nonce from workflow_dashboard_logout") == [(nonce,)]
        restarted = Dash(store, auth=AUTH)
        for dash in (other, restarted):
            page = replay(dash, "GET", "/runs", cookie)
            assert page.status_code == 303 and page.headers["location"].startswith("/login")
            forged = replay(
                dash, "POST", f"/runs/{run.id}/cancel", cookie, data={"csrf_token": token}
            )
            assert forged.status_code in (401, 403), forged.text
            # Refused a second time from this process's own record: the same answer.
            assert replay(dash, "GET", "/types", cookie).status_code == 303
        assert client.get(run.id).status.value == "pending"
        # Each process remembers the logouts it made or found: without the row (deleted
        # by hand) it still refuses the cookie, with no read of the store.
        store.sql("delete from workflow_dashboard_logout")
        for dash in (one, other, restarted):
            assert replay(dash, "GET", "/runs", cookie).status_code == 303
        # Another session of the same token is not touched.
        other.http.cookies.clear()
        other.log_in(TOKEN)
        assert other.get("/runs").status_code == 200
    finally:
        for dash in (one, other, restarted):
            if dash is not None:
                dash.close()


def test_logouts_are_deleted_once_their_sessions_have_expired(store: Store) -> None:
    """A logout is kept until its session would have expired, plus the clocks' grace
    (the processes' clocks may disagree): the next logout deletes those past it."""
    now = datetime.now(UTC)
    with Admin(store.url, schema=store.schema) as admin:
        admin.end_dashboard_session("expired-within-the-grace", now - timedelta(seconds=10))
        admin.end_dashboard_session("expired-within-the-grace", now)  # again: no error
        admin.end_dashboard_session("expired-long-ago", now - timedelta(seconds=400))
        assert admin.dashboard_session_ended("expired-long-ago")
        assert not admin.dashboard_session_ended("never-logged-out")
        for bad in ("", "a.b", "x" * 65, 7):
            with pytest.raises(errors.InvalidArgument, match="nonce"):
                admin.dashboard_session_ended(bad)  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidArgument, match="expires_at"):
            admin.end_dashboard_session("naive", datetime(2030, 1, 1))
    dash = Dash(store, auth=AUTH)
    try:
        dash.log_in(TOKEN)
        assert dash.post("/logout", data={"csrf_token": dash.csrf()}).status_code == 303
    finally:
        dash.close()
    kept = {row[0] for row in store.sql("select nonce from workflow_dashboard_logout")}
    assert "expired-long-ago" not in kept and "expired-within-the-grace" in kept
    assert len(kept) == 2  # and the logout just made


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_session_that_cannot_be_checked_is_refused(tmp_path: Any, kind: str) -> None:
    """When the store cannot say whether a session was logged out, the request is
    refused (503), never let in unchecked; requests that need no check still work."""
    where = tmp_path / "no-such-folder" / "gone.db"
    gone = (
        Store("sqlite", f"sqlite:///{where}", "")
        if kind == "sqlite"
        else Store("postgres", "postgresql://nobody@127.0.0.1:1/gone.db?connect_timeout=2")
    )
    dash = Dash(gone, auth=AUTH)
    try:
        cookie = cookie_of(dash.log_in(TOKEN))  # logging in reads nothing
        page = replay(dash, "GET", "/login", cookie)  # the check is this page's only read
        assert page.status_code == 503 and "retry shortly" in page.text
        assert "gone.db" not in page.text
        # Logging out says the store could not be reached, and the browser forgets the
        # cookie all the same.
        out = replay(dash, "POST", "/logout", cookie, data={"csrf_token": "any"})
        assert out.status_code == 503 and "retry shortly" in out.text
        assert 'simpleworkflow_dashboard=""' in out.headers["set-cookie"]
        dash.http.cookies.clear()
        assert dash.get("/login").status_code == 200  # not logged in: nothing to check
        bearer = dash.get("/login", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 200  # a bearer token is never logged out
    finally:
        dash.close()


def test_a_session_ends_on_the_server_when_its_lifetime_has_passed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIMPLEWORKFLOW_DASHBOARD_SESSION_SECONDS", "2")  # as serve reads it
    dash = Dash(store, auth=AUTH)
    try:
        opened = dash.log_in(READ_TOKEN)
        assert (
            "Max-Age=2" in opened.headers["set-cookie"]
            or "Max-Age=1" in (opened.headers["set-cookie"])
        )
        cookie = cookie_of(opened)
        assert replay(dash, "GET", "/types", cookie).status_code == 200
        time.sleep(2.2)
        # A browser would have dropped it; one that kept it (or a copy) is refused.
        expired = replay(dash, "GET", "/types", cookie)
        assert expired.status_code == 303 and expired.headers["location"].startswith("/login")
    finally:
        dash.close()


def test_lifetime_and_logout_at_their_edges(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Sessions`` alone, on a clock of the test's: the last second of a session, the
    first after it, a cookie from a clock ahead, a logout, and the cap on remembered
    logouts."""
    now = [1_000_000.0]
    found = sessions.Sessions(AUTH, lifetime=60, clock=lambda: now[0])

    def of(cookie: str) -> sessions.Session:
        scope = {"type": "http", "headers": [(b"cookie", f"{sessions.COOKIE}={cookie}".encode())]}
        return asyncio.run(found.of(Request(scope)))

    opened = found.log_in(TOKEN)
    assert opened is not None and opened.cookie is not None
    cookie = opened.cookie
    now[0] += 59.9
    assert of(cookie).can_write and of(cookie).csrf == opened.csrf
    now[0] += 0.2
    assert of(cookie).level is None  # a new visitor's session: log in again
    now[0] = 1_000_000.0 - 10  # this process's clock is behind the one that issued it
    assert of(cookie).can_write
    name, issued, nonce, mac = cookie.split(".")
    assert of(f"{name}.{int(issued) - 1}.{nonce}.{mac}").level is None  # the time is signed
    asyncio.run(found.log_out(of(cookie)))
    assert of(cookie).level is None and of(cookie).csrf != opened.csrf
    other = found.log_in(READ_TOKEN)
    assert other is not None and other.cookie is not None and of(other.cookie).can_read
    # Remembered logouts are forgotten once expired, and the oldest past the cap.
    now[0] += 80
    monkeypatch.setattr(sessions, "MAX_REVOKED", 2)
    cookies = [_opened(found, TOKEN) for _ in range(3)]
    for one in cookies:
        asyncio.run(found.log_out(of(one)))
    assert len(found._revoked) == 2  # the first logout's expired session went first
    assert [of(one).level for one in cookies] == ["write", None, None]  # then the oldest


def _opened(found: sessions.Sessions, token: str) -> str:
    session = found.log_in(token)
    assert session is not None and session.cookie is not None
    return session.cookie


def test_the_session_lifetime_is_an_option(monkeypatch: pytest.MonkeyPatch) -> None:
    assert dashboard.Options().session_seconds == 12 * 3600
    monkeypatch.setenv("SIMPLEWORKFLOW_DASHBOARD_SESSION_SECONDS", "1800")
    assert dashboard.Options.from_env().session_seconds == 1800
    for bad in (0, -5, float("inf"), 401 * 86400):
        with pytest.raises(errors.ConfigurationError, match="session_seconds"):
            dashboard.Options(session_seconds=bad)


@pytest.mark.parametrize(
    ("given", "goes_to"),
    [
        ("/runs?status=failed", "/runs?status=failed"),
        ("/runs/x", "/runs/x"),
        ("/\t/evil.example", "/"),  # next=/%09/evil.example: browsers drop the tab
        ("/\n/evil.example", "/"),
        ("/runs\r\nSet-Cookie: x=1", "/"),  # a header split: used to drop the connection
        ("//evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("/%2F/evil.example", "/"),
        ("/%5Cevil.example", "/"),
        ("/%09/evil.example", "/"),
        ("https://evil.example/", "/"),
        ("javascript:alert(1)", "/"),
        ("runs", "/"),
        ("/r\u00e9sum\u00e9", "/"),
        ("", "/"),
    ],
)
def test_after_login_only_a_path_of_this_site_is_followed(
    store: Store, given: str, goes_to: str
) -> None:
    dash = Dash(store, auth=AUTH)
    try:
        form = dash.get("/login", params={"next": given})
        assert form.status_code == 200
        opened = dash.post(
            "/login", data={"csrf_token": dash.csrf("/login"), "token": TOKEN, "next": given}
        )
        assert opened.status_code == 303 and opened.headers["location"] == goes_to
    finally:
        dash.close()


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor", [_b64("[" * 5000), "[" * 5000, _b64('[{"a": 1}, []]'), _b64("[" * 150)]
)
def test_a_cursor_it_did_not_write_is_refused_with_a_page(store: Store, cursor: str) -> None:
    dash = Dash(store)
    try:
        page = dash.get("/runs", params={"cursor": cursor})
    finally:
        dash.close()
    assert page.status_code == 422, page.text[-1000:]
    assert "invalid cursor" in texts(page.text, "error")[0]


def test_a_failed_database_is_a_503_page_that_does_not_say_where_it_is(tmp_path: Any) -> None:
    where = tmp_path / "no-such-folder" / "secret-name.db"
    dash = Dash(Store("sqlite", f"sqlite:///{where}", ""))
    try:
        page = dash.get("/runs")
    finally:
        dash.close()
    assert page.status_code == 503 and "retry shortly" in page.text
    assert "secret-name" not in page.text and str(tmp_path) not in page.text


def test_an_unexpected_engine_error_is_a_page_with_an_id_the_log_holds(
    store: Store, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """An engine error no request should cause is not shown as it is (it may hold
    internals): the page says an id, and the server's log holds it with the traceback."""
    run = client.start(TYPE)
    dash = Dash(store)
    try:

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise errors.SimpleWorkflowError("internal detail: secret-table-name")

        dash.client.get = broken  # type: ignore[method-assign]
        caplog.set_level("ERROR", "simpleworkflow.server")
        page = dash.get(f"/runs/{run.id}")
        assert page.status_code == 500
        assert "secret-table-name" not in page.text
        found = re.search(r"under the id ([0-9a-f]{16})", page.text)
        assert found, page.text
        assert found.group(1) in caplog.text and "secret-table-name" in caplog.text
    finally:
        dash.close()
