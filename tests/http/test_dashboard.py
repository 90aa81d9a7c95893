"""The web dashboard on both stores, through the ASGI interface: every page renders what
the store holds, filters and pages, escapes payloads, refuses forged and read-only
writes, counts its bulk actions truly, and works under a prefix. (In a real browser:
test_dashboard_browser.py.)"""

from __future__ import annotations

import asyncio
import html
import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from api_helpers import READ_TOKEN, TOKEN
from conftest import Store, poller_thread
from fastapi import FastAPI
from worker_app import wait_until

from simpleworkflow import App, AsyncClient, Break, Client, Context, Continue, dashboard, errors
from simpleworkflow.backends.presence_ops import Presence
from simpleworkflow.retry import RetryPolicy
from simpleworkflow.server import Auth, create_app

TYPE = "shop.order.v1"
OTHER = "mail.send.v1"
_CSRF = re.compile(r'"X-CSRF-Token": "([^"]+)"')


class Dash:
    """The dashboard in this process, on a private event loop: a browser-like session
    (cookies kept) sending requests through the ASGI interface."""

    def __init__(self, store: Store, *, auth: Auth | None = None, mount: str = "") -> None:
        self._loop = asyncio.new_event_loop()
        self.client = AsyncClient(store.url, schema=store.schema)
        if mount:
            self.app: Any = FastAPI()
            self.app.mount(mount, dashboard.create_app(self.client, auth=auth))
        else:
            self.app = create_app(self.client, auth=auth)
        self.prefix = mount
        transport = httpx.ASGITransport(app=self.app)
        self.http = httpx.AsyncClient(transport=transport, base_url="http://localhost")

    def get(self, url: str, **options: Any) -> httpx.Response:
        return self._loop.run_until_complete(self.http.get(self.prefix + url, **options))

    def post(self, url: str, data: Any = None, **options: Any) -> httpx.Response:
        request = self.http.post(self.prefix + url, data=data, **options)
        return self._loop.run_until_complete(request)

    def csrf(self, page: str = "/") -> str:
        """The CSRF token of this session, as a page gives it to htmx (and its forms)."""
        found = _CSRF.search(self.get(page).text)
        assert found, "no CSRF token on the page"
        return found.group(1)

    def act(self, url: str, **fields: Any) -> httpx.Response:
        """Send a form as the page would: with the session's CSRF token."""
        return self.post(url, data={"csrf_token": self.csrf(), **fields})

    def log_in(self, token: str) -> httpx.Response:
        response = self.post("/login", data={"csrf_token": self.csrf("/login"), "token": token})
        assert response.status_code == 303, response.text
        return response

    def close(self) -> None:
        self._loop.run_until_complete(self.http.aclose())
        self._loop.run_until_complete(self.client.aclose())
        self._loop.close()


@pytest.fixture
def dash(store: Store) -> Iterator[Dash]:
    found = Dash(store)
    yield found
    found.close()


def texts(html: str, css_class: str) -> list[str]:
    """The text of each notice of a class (``ok``, ``error``, ``warn``) on a page."""
    pattern = rf'<p class="notice {css_class}"[^>]*>(.*?)</p>'
    return [re.sub(r"<[^>]+>", "", found).strip() for found in re.findall(pattern, html, re.S)]


def run_links(html: str) -> list[str]:
    return re.findall(r'href="[^"]*/runs/([0-9a-f-]{36})"', html)


# -- pages --------------------------------------------------------------------------


def test_every_page_renders_what_the_store_holds(store: Store, dash: Dash, client: Client) -> None:
    run = client.start(TYPE, {"customer": "c_1"})
    client.start(OTHER, {"to": "x@example.com"})
    for path in ("/", "/runs", f"/runs/{run.id}", "/types", "/workers", "/login"):
        response = dash.get(path)
        assert response.status_code == 200, (path, response.text[-2000:])
        assert response.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in response.headers["content-security-policy"]
    overview = dash.get("/").text
    assert TYPE in overview and OTHER in overview and 'id="throughput-data"' in overview
    assert 'aria-current="page">Overview' in overview
    assert TYPE in dash.get(f"/runs/{run.id}").text and "c_1" in dash.get(f"/runs/{run.id}").text
    # Scripts and styles come from the package: the page works offline.
    for asset in re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', overview):
        assert asset.startswith("/static/"), asset
        assert dash.get(asset).status_code == 200
    # The icon: named in every page's head, and where a browser looks when none is named.
    icon = re.search(r'<link rel="icon"[^>]* href="([^"]+)"', overview)
    assert icon and icon.group(1) == "/static/favicon.svg", overview[:1000]
    for url in (icon.group(1), "/favicon.ico"):
        served = dash.get(url)
        assert served.status_code == 200 and served.headers["content-type"] == "image/svg+xml"
        assert served.text.startswith("<svg") and "default-src 'none'" in str(served.headers)
    assert dash.get("/static/../site.py").status_code == 404
    assert dash.get("/static/site.py").status_code == 404
    assert dash.get("/runs/00000000-0000-7000-8000-000000000000").status_code == 404


def test_the_workers_page_shows_idle_and_stopped_workers(
    store: Store, dash: Dash, client: Client
) -> None:
    backend = client.backend
    for worker_id, pid in (("idle-worker", 11), ("busy-worker", 12), ("done-worker", 13)):
        me = Presence(worker_id, "host-a", pid, "python", ("shop.%",), 5, "0.1.0")
        backend.execute(backend.worker_seen(me, 30, starting=True))
    backend.execute(backend.worker_stopped("done-worker", 13))
    run = client.start(TYPE).id
    store.sql(
        "update workflow_run set status = 'leased', leased_by = 'busy-worker', "
        "lease_until = updated_at where id = ?",
        run,
    )
    rows = re.findall(
        r'<tr class="worker-(\w+)[^"]*">\s*<td><code>([^<]+)</code>', dash.get("/workers").text
    )
    # Live first, the idle one too; the stopped one after.
    assert rows == [("live", "busy-worker"), ("live", "idle-worker"), ("stopped", "done-worker")]
    page = dash.get("/workers").text
    assert "host-a / 11" in page and "idle" in page and "<code>shop.%</code>" in page


def test_the_overview_counts_derived_states_and_warns_of_overdue_and_paused_types(
    store: Store, client: Client
) -> None:
    sleeping = client.start(TYPE).id
    store.sql(
        "update workflow_run set waiting_for = ?, attempt = 0 where id = ?",
        '{"kind": "sleep", "step": "nap"}',
        sleeping,
    )
    throttled = client.start(TYPE).id
    store.sql(
        "update workflow_run set waiting_for = ? where id = ?",
        '{"kind": "throttle", "rate_limit": "partner-api", "until": "2030-01-01"}',
        throttled,
    )
    late = client.start(OTHER).id
    store.sql(
        "update workflow_run set run_at = ? where id = ?", "2000-01-01 00:00:00.000", late
    ) if store.kind == "sqlite" else store.sql(
        "update workflow_run set run_at = now() - interval '1 hour' where id = ?", late
    )
    client.admin.set_runtime(TYPE, "python")
    client.admin.pause(TYPE)
    dash = Dash(store)
    try:
        page = dash.get("/").text
    finally:
        dash.close()
    row = re.search(
        rf"<tr[^>]*>\s*<th scope=\"row\"><a[^>]*>{re.escape(TYPE)}</a>.*?</tr>", page, re.S
    )
    assert row, page
    cells = dict(
        re.findall(r'class="num state-([a-z-]+)">(?:<a[^>]*>)?(?:<span[^>]*>)?(\d+)', row.group(0))
    )
    assert cells["pending"] == "2" and cells["sleeping"] == "1" and cells["waiting-signal"] == "0"
    assert cells["throttled"] == "1"
    warnings = texts(page, "warn")
    assert any(OTHER in w and "Overdue" in w for w in warnings), warnings
    assert any(TYPE in w and "Paused" in w for w in warnings), warnings


def test_the_overview_counts_a_run_that_failed_after_retries_once(
    store: Store, dash: Dash, client: Client
) -> None:
    app = App(
        store.url, schema=store.schema, retry=RetryPolicy(backoff="fixed", base=0.05, jitter=0)
    )

    @app.workflow("shop.ok.v1")
    def ok(payload: dict[str, Any]) -> str:
        return "fine"

    @app.workflow("shop.doomed.v1")
    def doomed(payload: dict[str, Any]) -> str:
        raise ValueError("never")

    fine = [client.start("shop.ok.v1").id for _ in range(3)]
    failing = client.start("shop.doomed.v1", max_attempts=3).id  # fails 3 times, ends once
    with poller_thread(app):
        for run_id in [*fine, failing]:
            client.wait(run_id, timeout=30)
    assert client.get(failing).status.value == "failed"
    heading = re.search(r'<small id="finished">(.*?)</small>', dash.get("/").text)
    assert heading, "no count of what finished"
    assert heading.group(1) == "3 succeeded, 1 failed for good, 2 failed attempts retried"


def test_each_event_s_data_opens_in_full_with_its_traceback_as_lines(
    store: Store, dash: Dash, client: Client
) -> None:
    app = App(store.url, schema=store.schema)
    message = "card declined " + "x" * 400 + " <b>the end</b>"

    @app.workflow("shop.declined.v1")
    def declined(payload: dict[str, Any]) -> str:
        raise ValueError(message)

    run_id = client.start("shop.declined.v1", max_attempts=1).id
    with poller_thread(app):
        client.wait(run_id, timeout=30)
    failed = next(e for e in client.admin.events(run_id) if e.event_type == "failed")
    page = dash.get(f"/runs/{run_id}").text
    found = re.search(
        rf'<details class="event-data" id="event-{failed.id}">(.*?)</details>', page, re.S
    )
    assert found, page[-3000:]
    summary, full = found.group(1).split("</summary>")
    assert "…" in summary and "the end" not in summary  # the line is cut; the details are not
    shown = html.unescape(re.sub(r"<[^>]+>", "", full))
    assert json.dumps(message) in shown and "<b>" not in full  # whole, and as text
    traceback = failed.data["error"]["traceback"]
    assert "\n" in traceback and traceback.strip() in shown  # its lines, as lines
    assert "error.traceback:" in shown


def test_runs_filter_by_type_status_time_and_payload_and_page_by_cursor(
    store: Store, dash: Dash, client: Client
) -> None:
    mine = [client.start(TYPE, {"customer": "c_1", "n": n}).id for n in range(3)]
    client.start(TYPE, {"customer": "c_2"})
    client.start(OTHER, {"customer": "c_1"})
    found = run_links(
        dash.get("/runs", params={"payload": '{"customer": "c_1"}', "type": "shop."}).text
    )
    assert sorted(found) == sorted(mine)
    assert len(run_links(dash.get("/runs", params={"type": "mail."}).text)) == 1
    assert run_links(dash.get("/runs", params={"status": "failed"}).text) == []
    assert len(run_links(dash.get("/runs", params={"status": "pending"}).text)) == 5
    assert run_links(dash.get("/runs", params={"since": "2999-01-01T00:00"}).text) == []
    assert (
        len(run_links(dash.get("/runs", params={"until": "2999-01-01T00:00:00+00:00"}).text)) == 5
    )

    bad = dash.get("/runs", params={"payload": "{customer"})
    assert bad.status_code == 422 and "not JSON" in texts(bad.text, "error")[0]
    bad = dash.get("/runs", params={"since": "yesterday"})
    assert bad.status_code == 422 and "since" in texts(bad.text, "error")[0]
    bad = dash.get("/runs", params={"until": "0001-01-01T00:00"})  # year 0 west of UTC
    assert bad.status_code == 422 and "until must be a time from" in texts(bad.text, "error")[0]
    bad = dash.get("/runs", params={"status": "sideways"})
    assert bad.status_code == 422 and "unknown status" in texts(bad.text, "error")[0]

    client.start_many([(OTHER, {"n": n}) for n in range(55)])
    first = dash.get("/runs", params={"type": "mail."}).text
    assert len(run_links(first)) == 50
    following = re.search(r'rel="next" href="([^"]+)"', first)
    assert following, "no next page link"
    second = dash.get(following.group(1).replace("&amp;", "&")).text
    assert len(run_links(second)) == 6 and not set(run_links(second)) & set(run_links(first))
    assert 'rel="next"' not in second


def test_payloads_and_names_from_users_are_shown_as_text(
    store: Store, dash: Dash, client: Client
) -> None:
    evil = "<script>alert('x')</script>"
    run = client.start(TYPE, {"note": evil, "<img src=x onerror=alert(1)>": 1})
    client.signal(run.id, "approved", {"html": evil})
    store.sql("update workflow_run set last_error = ? where id = ?", "<b>bold</b> error", run.id)
    for path in (f"/runs/{run.id}", "/runs", f"/runs?payload={quote(evil)}"):
        html = dash.get(path).text
        assert "<script>alert" not in html and "<img src=x" not in html and "<b>bold" not in html
    html = dash.get(f"/runs/{run.id}").text
    assert "&lt;script&gt;alert(" in html and "&lt;b&gt;bold&lt;/b&gt; error" in html


# -- actions ------------------------------------------------------------------------


def test_a_form_without_its_csrf_token_or_from_another_site_is_refused(
    store: Store, dash: Dash, client: Client
) -> None:
    run = client.start(TYPE)
    token = dash.csrf()
    assert dash.post(f"/runs/{run.id}/cancel").status_code == 403
    assert dash.post(f"/runs/{run.id}/cancel", data={"csrf_token": "forged"}).status_code == 403
    other_site = {"origin": "http://evil.example"}
    refused = dash.post(f"/runs/{run.id}/cancel", data={"csrf_token": token}, headers=other_site)
    assert refused.status_code == 403 and "another site" in refused.text
    # Another browser (no cookie of this session) cannot reuse the token either.
    stranger = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=dash.app), base_url="http://localhost"
    )
    try:
        response = asyncio.new_event_loop().run_until_complete(
            stranger.post(f"/runs/{run.id}/cancel", data={"csrf_token": token})
        )
    finally:
        asyncio.new_event_loop().run_until_complete(stranger.aclose())
    assert response.status_code == 403
    assert client.get(run.id).status.value == "pending"

    done = dash.act(f"/runs/{run.id}/cancel")
    assert done.status_code == 303 and done.headers["location"].endswith("?done=cancelled")
    assert client.get(run.id).status.value == "cancelled"
    assert texts(dash.get(done.headers["location"]).text, "ok") == ["The run was cancelled."]
    again = dash.act(f"/runs/{run.id}/retry")
    assert again.status_code == 303 and client.get(run.id).status.value == "pending"


def test_a_signal_with_a_payload_that_is_not_json_is_refused_and_nothing_is_sent(
    store: Store, dash: Dash, client: Client
) -> None:
    run = client.start(TYPE)
    bad = dash.act(f"/runs/{run.id}/signal", event="approved", payload="{by: alice}")
    assert bad.status_code == 422 and "not JSON" in bad.text
    assert "{by: alice}" in bad.text  # the text stays in the editor, to be fixed
    assert client.signals(run.id) == []
    sent = dash.act(f"/runs/{run.id}/signal", event="approved", payload='{"by": "alice"}')
    assert sent.status_code == 303 and "done=signalled" in sent.headers["location"]
    [signal] = client.signals(run.id)
    assert signal.event == "approved" and signal.payload == {"by": "alice"}


def test_pause_and_resume_a_type(store: Store, dash: Dash, client: Client) -> None:
    client.admin.set_runtime(TYPE, "python")
    assert "Pause</button>" in dash.get("/types").text
    paused = dash.act(f"/types/{TYPE}/pause")
    assert paused.status_code == 303
    assert next(e for e in client.admin.registry() if e.workflow_name == TYPE).is_enabled is False
    assert "Resume</button>" in dash.get("/types").text
    assert dash.act(f"/types/{TYPE}/resume").status_code == 303
    assert client.admin.registry()[0].is_enabled is True
    assert dash.act("/types/not.registered.v1/pause").status_code == 404


def test_bulk_actions_say_how_many_runs_they_touch_and_touch_that_many(
    store: Store, dash: Dash, client: Client
) -> None:
    pending = [client.start(TYPE, {"n": n}).id for n in range(5)]
    failed = [client.start(TYPE, {"n": n}).id for n in range(3)]
    for run_id in failed:
        store.sql("update workflow_run set status = 'failed', attempt = 3 where id = ?", run_id)
    client.start(OTHER)

    confirm = dash.get("/bulk/cancel", params={"type": "shop."}).text
    assert re.search(r'data-count="5"', confirm) and "cancel <strong>5</strong> runs" in confirm
    ids = re.findall(r'name="run_id" value="([^"]+)"', confirm)
    assert sorted(ids) == sorted(pending)
    done = dash.post("/bulk/cancel", data={"csrf_token": dash.csrf(), "run_id": ids})
    assert done.status_code == 200 and 'data-done="5" data-asked="5"' in done.text
    assert {client.get(i).status.value for i in pending} == {"cancelled"}
    assert client.get(failed[0]).status.value == "failed"

    confirm = dash.get("/bulk/retry", params={"type": "shop.", "status": "failed"}).text
    ids = re.findall(r'name="run_id" value="([^"]+)"', confirm)
    assert sorted(ids) == sorted(failed) and 'data-count="3"' in confirm
    # One of them changes meanwhile: the result says so rather than counting it.
    client.admin.retry(failed[0])
    done = dash.post("/bulk/retry", data={"csrf_token": dash.csrf(), "run_id": ids})
    assert 'data-done="2" data-asked="3"' in done.text and "1 had changed" in done.text
    assert {client.get(i).status.value for i in failed} == {"pending"}
    assert "No run matching" in dash.get("/bulk/retry", params={"type": "mail."}).text


def test_a_bulk_cancel_of_leased_runs_cancels_them_together(
    store: Store, dash: Dash, client: Client
) -> None:
    """Each cancel of a leased run returns 0.2 s after its commit (no step begins after
    it); one after the other, 32 would take 6.4 s."""
    leased = [client.start(TYPE, {"n": n}).id for n in range(32)]
    for run_id in leased:
        store.sql(
            "update workflow_run set status = 'leased', leased_by = 'w', lease_token = ?, "
            "lease_until = '2999-01-01 00:00:00' where id = ?",
            str(uuid.uuid4()),
            run_id,
        )
    began = time.monotonic()
    done = dash.post("/bulk/cancel", data={"csrf_token": dash.csrf(), "run_id": leased})
    took = time.monotonic() - began
    assert 'data-done="32" data-asked="32"' in done.text
    assert {client.get(i).status.value for i in leased} == {"cancelled"}
    # One after the other they could not take less than 6.4 s, however fast the machine.
    assert took < 6.0, f"the bulk cancel took {took:.1f} s: were the cancels one at a time?"


# -- auth ---------------------------------------------------------------------------


def test_with_tokens_pages_need_a_login_and_the_cookie_is_strict(
    store: Store, client: Client
) -> None:
    dash = Dash(store, auth=Auth(token=TOKEN, read_token=READ_TOKEN))
    try:
        response = dash.get("/runs")
        assert response.status_code == 303 and "/login?next=%2Fruns" in response.headers["location"]
        wrong = dash.post("/login", data={"csrf_token": dash.csrf("/login"), "token": "x" * 20})
        assert wrong.status_code == 401 and "not valid" in wrong.text
        assert dash.post("/login", data={"token": TOKEN}).status_code == 403  # no CSRF token
        opened = dash.post(
            "/login",
            data={"csrf_token": dash.csrf("/login"), "token": TOKEN, "next": "/runs"},
        )
        assert opened.status_code == 303 and opened.headers["location"] == "/runs"
        cookie = opened.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        assert dash.get("/runs").status_code == 200
        # Off-site redirects after login are refused.
        elsewhere = dash.post(
            "/login",
            data={"csrf_token": dash.csrf("/login"), "token": TOKEN, "next": "//evil.example/"},
        )
        assert elsewhere.headers["location"] == "/"
        # A script may use the bearer header instead of a cookie.
        bare = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=dash.app), base_url="http://localhost"
        )
        loop = asyncio.new_event_loop()
        try:
            seen = loop.run_until_complete(
                bare.get("/types", headers={"Authorization": f"Bearer {TOKEN}"})
            )
            wrong_bearer = loop.run_until_complete(
                bare.get("/types", headers={"Authorization": "Bearer nope-nope-nope-nope"})
            )
        finally:
            loop.run_until_complete(bare.aclose())
            loop.close()
        assert seen.status_code == 200 and wrong_bearer.status_code == 303
    finally:
        dash.close()


def test_the_read_only_token_shows_no_action_and_a_forged_post_is_refused(
    store: Store, client: Client
) -> None:
    run = client.start(TYPE)
    failed = client.start(TYPE).id
    store.sql("update workflow_run set status = 'failed' where id = ?", failed)
    client.admin.set_runtime(TYPE, "python")
    dash = Dash(store, auth=Auth(token=TOKEN, read_token=READ_TOKEN))
    try:
        dash.log_in(READ_TOKEN)
        for path in (f"/runs/{run.id}", f"/runs/{failed}", "/types", "/runs"):
            html = dash.get(path).text
            assert "read-only" in html
            assert not re.search(r"<button[^>]*>(Cancel|Retry|Send|Pause|Resume)", html), path
            assert "Cancel matching" not in html
        token = dash.csrf()
        for url in (f"/runs/{run.id}/cancel", f"/runs/{failed}/retry", f"/types/{TYPE}/pause"):
            refused = dash.post(url, data={"csrf_token": token})
            assert refused.status_code == 403 and "may only read" in refused.text
        refused = dash.post("/bulk/cancel", data={"csrf_token": token, "run_id": [run.id]})
        assert refused.status_code == 403
        bearer = {"Authorization": f"Bearer {READ_TOKEN}"}
        assert dash.post(f"/runs/{run.id}/cancel", headers=bearer).status_code == 403
        assert client.get(run.id).status.value == "pending"
        assert client.get(failed).status.value == "failed"
        assert client.admin.registry()[0].is_enabled
    finally:
        dash.close()


# -- under a prefix, with a real worker ---------------------------------------------


def test_mounted_under_a_prefix_every_link_and_form_follows_the_mount(
    store: Store, client: Client
) -> None:
    run = client.start(TYPE, {"customer": "c_1"})
    dash = Dash(store, mount="/ops/workflows")
    try:
        page = dash.get("/")
        assert page.status_code == 200
        cookie = page.headers["set-cookie"]
        assert "Path=/ops/workflows/" in cookie
        html = page.text + dash.get(f"/runs/{run.id}").text + dash.get("/runs").text
        urls = re.findall(r'(?:href|action|hx-get|src)="(/[^"]*)"', html)
        assert urls and all(url.startswith("/ops/workflows/") for url in urls), urls
        done = dash.act(f"/runs/{run.id}/cancel")
        assert done.status_code == 303
        assert done.headers["location"].startswith(f"/ops/workflows/runs/{run.id}")
        assert client.get(run.id).status.value == "cancelled"
    finally:
        dash.close()


def test_a_run_page_links_the_runs_it_continued_from_and_as(store: Store, client: Client) -> None:
    first, second = client.start(OTHER).id, client.start(OTHER).id
    store.sql("update workflow_run set continued_as = ? where id = ?", second, first)
    store.sql("update workflow_run set continued_from = ? where id = ?", first, second)
    dash = Dash(store)
    try:
        before, after = dash.get(f"/runs/{first}").text, dash.get(f"/runs/{second}").text
        plain = dash.get(f"/runs/{client.start(OTHER).id}").text
    finally:
        dash.close()
    assert re.search(rf'id="continued-as" href="[^"]*/runs/{second}"', before)
    assert re.search(rf'id="continued-from" href="[^"]*/runs/{first}"', after)
    assert 'id="continued-from"' not in before and 'id="continued-as"' not in after
    assert "continued" not in plain


def test_a_run_page_shows_its_step_timeline_signals_and_children(
    store: Store, client: Client
) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow("shop.approve.v1")
    async def approve(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        price = await ctx.step("price", lambda: 42)
        await ctx.sleep("cool-off", 0.3)
        answer = await ctx.wait_for_event("approval", event="approved", timeout="1h")
        return {"price": price, "answer": answer}

    run_id = client.start("shop.approve.v1", {"customer": "c_9"}).id
    child = client.start(OTHER).id
    store.sql("update workflow_run set parent_id = ? where id = ?", run_id, child)
    dash = Dash(store)
    try:
        with poller_thread(app):
            wait_until(
                lambda: client.get(run_id).waiting_states == ["waiting-signal"],
                30,
                lambda: f"the run never waited for its signal: {client.get(run_id)}",
            )
            html = dash.get(f"/runs/{run_id}").text
            assert 'id="signal-form"' in html and "waiting-signal" in html
            sent = dash.act(f"/runs/{run_id}/signal", event="approved", payload='"yes"')
            assert "done=signalled-woke" in sent.headers["location"]
            client.wait(run_id, timeout=30)
        html = dash.get(f"/runs/{run_id}").text
    finally:
        dash.close()
    lanes = re.findall(r'<div class="lane step"><span class="lane-name" title="([^"]+)"', html)
    assert lanes == ["price", "cool-off", "approval"]
    assert re.search(r'class="bar kind-sleep" style="left: [\d.]+%; width: [\d.]+%"', html)
    assert "kind-succeeded" in html and "kind-suspended" in html  # attempts, with gaps
    # Each claim on the attempts lane, numbered as attempts made: it slept and waited
    # within its first attempt, which succeeded ("1 of 3" above).
    claims = re.findall(r'title="(attempt \d+): (\w+):', html)
    assert claims == [
        ("attempt 1", "sleeping"),
        ("attempt 1", "waiting"),
        ("attempt 1", "succeeded"),
    ], claims
    assert "<dt>attempts</dt><dd>1 of 3</dd>" in html
    assert "&#34;price&#34;: 42" in html and "&#34;answer&#34;: &#34;yes&#34;" in html
    assert f'/runs/{child}"' in html  # the child, linked
    child_page = Dash(store)
    try:
        assert f'/runs/{run_id}"' in child_page.get(f"/runs/{child}").text  # the parent
    finally:
        child_page.close()


def test_options_come_from_the_environment_and_bad_ones_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SIMPLEWORKFLOW_DASHBOARD_OVERDUE_SECONDS", "300")
    monkeypatch.setenv("SIMPLEWORKFLOW_DASHBOARD_REFRESH_SECONDS", "2.5")
    assert dashboard.Options.from_env() == dashboard.Options(overdue_after=300, refresh_seconds=2.5)
    monkeypatch.setenv("SIMPLEWORKFLOW_DASHBOARD_REFRESH_SECONDS", "soon")
    with pytest.raises(errors.ConfigurationError, match="REFRESH_SECONDS"):
        dashboard.Options.from_env()
    for bad in (0, -1, float("nan"), float("inf"), True):
        with pytest.raises(errors.ConfigurationError, match="overdue_after"):
            dashboard.Options(overdue_after=bad)


def test_the_api_alone_when_asked_and_its_openapi_document_has_no_page(store: Store) -> None:
    loop = asyncio.new_event_loop()
    client = AsyncClient(store.url, schema=store.schema)

    async def get(app: Any, url: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            return await http.get(url)

    try:
        alone = loop.run_until_complete(get(create_app(client, dashboard=False), "/"))
        assert alone.status_code == 404
        with_pages = create_app(client)
        paths = loop.run_until_complete(get(with_pages, "/openapi.json")).json()["paths"]
        assert all(path.startswith(("/api/v1", "/healthz", "/readyz")) for path in paths)
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()


def test_a_run_page_and_the_api_show_loop_iterations_and_join_branches_by_path(
    store: Store, client: Client
) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow("shop.batch.v1")
    async def batch(payload: dict[str, Any], ctx: Context) -> Any:
        async def page(n: int) -> Any:
            await ctx.step("fetch", lambda: n)
            return Break(n) if n == 2 else Continue(n + 1)

        pages = await ctx.loop("pages", 0, page, commit_every=1)
        both = await ctx.join("checks", {"a": lambda: ctx.step("check", lambda: "A")})
        return {"pages": pages, **both}

    run_id = client.start("shop.batch.v1").id
    with poller_thread(app):
        client.wait(run_id, timeout=30)
    dash = Dash(store)
    try:
        html = dash.get(f"/runs/{run_id}").text
        steps = dash.get(f"/api/v1/runs/{run_id}/steps").json()
    finally:
        dash.close()
    lanes = re.findall(r'<div class="lane step"><span class="lane-name" title="([^"]+)"', html)
    assert lanes == [
        "pages/~0/fetch",
        "pages/~1",
        "pages/~1/fetch",
        "pages/~2",
        "pages/~2/fetch",
        "pages",
        "checks/a/check",
        "checks/a",
        "checks",
    ]
    assert "kind-loop_state" in html and "<td>loop_state</td>" in html
    kinds = {step["step_name"]: step["kind"] for step in steps}
    assert (kinds["pages/~1"], kinds["pages"], kinds["checks/a"], kinds["checks"]) == (
        "loop_state",
        "loop",
        "join_branch",
        "join",
    )
    assert kinds["pages/~2/fetch"] == kinds["checks/a/check"] == "step"


def test_a_run_page_shows_the_values_the_run_published(store: Store, client: Client) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow("shop.stages.v1")
    def stages(payload: Any, ctx: Context) -> Any:
        ctx.set_value("stage", "charging")
        ctx.set_value("stage", {"paid": "ch_1"})
        return "done"

    run_id = client.start("shop.stages.v1").id
    plain = client.start(OTHER).id
    with poller_thread(app):
        wait_until(lambda: client.get(run_id).is_terminal, 20, "the run did not finish")
    dash = Dash(store)
    try:
        page, other = dash.get(f"/runs/{run_id}").text, dash.get(f"/runs/{plain}").text
    finally:
        dash.close()
    values = page[page.index("<h2>Values</h2>") : page.index("<h2>Signals</h2>")]
    assert "<td>stage</td>" in values and "{&#34;paid&#34;: &#34;ch_1&#34;}" in values
    assert "<td>2</td>" in values and "<td>value:stage#2</td>" in values
    assert "<h2>Values</h2>" not in other
