"""The dashboard end to end, in a real headless Chromium (Debian's ``chromium``, driven by
Playwright; nothing is downloaded), against a real ``simpleworkflow serve`` process and a
real worker process, on both stores.

One browser for the module (pytest-playwright's fixtures, narrowed to this module: the
sync API's event loop must be gone before other tests call ``asyncio.run``); per store,
one server and one worker shared by the tests of this module.
``SIMPLEWORKFLOW_WRITE_DOCS=1`` also writes the screenshots of docs/img/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_helpers import READ_TOKEN, TOKEN, served
from conftest import Store, make_store, stop_processes
from worker_app import wait_until

from simpleworkflow import Client

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium binary on PATH (Debian: apt-get install chromium; .ci/run does)",
)
if CHROMIUM is not None:
    from playwright.sync_api import (
        Browser,
        BrowserContext,
        Page,
        Playwright,
        expect,
        sync_playwright,
    )

TESTS = Path(__file__).parents[1]
SCREENSHOTS = TESTS.parent / "docs" / "img"
WRITE_DOCS = os.environ.get("SIMPLEWORKFLOW_WRITE_DOCS") == "1"


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    """pytest-playwright's fixture, for this module only: the sync API keeps an event loop
    running in the main thread while it is started, and the tests after this module
    call ``asyncio.run``."""
    with sync_playwright() as started:
        yield started


@pytest.fixture(scope="module")
def browser_type_launch_args() -> dict[str, Any]:
    """pytest-playwright's launch arguments: the system's chromium, never a download."""
    return {"executable_path": CHROMIUM, "args": ["--no-sandbox"]}


@pytest.fixture(scope="module")
def browser(playwright: Playwright, browser_type_launch_args: dict[str, Any]) -> Iterator[Browser]:
    """One headless chromium for the module (both stores)."""
    launched = playwright.chromium.launch(headless=True, **browser_type_launch_args)
    yield launched
    launched.close()


@dataclass
class Site:
    """A served store with a worker: where the browser goes, and a client to arrange."""

    store: Store
    base: str
    client: Client


#: The servers' environment: tokens, and a run's page that refreshes every second.
ENV = {
    "SIMPLEWORKFLOW_API_TOKEN": TOKEN,
    "SIMPLEWORKFLOW_API_READ_TOKEN": READ_TOKEN,
    "SIMPLEWORKFLOW_DASHBOARD_REFRESH_SECONDS": "1",
}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    store = make_store(request.param, tmp_path_factory.mktemp("dash"), request).migrate()
    worker = subprocess.Popen(
        [sys.executable, "-m", "simpleworkflow", "worker", "dashboard_app:app"],
        cwd=TESTS,
        env={**store.env, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with served(store, env=ENV) as base, store.client() as client:
            _seed(client)
            yield Site(store, base, client)
    finally:
        worker.terminate()
        try:
            worker.wait(15)
        finally:
            stop_processes([worker])


def _seed(client: Client) -> None:
    """Runs of every kind, so that the pages (and the screenshots) show something."""
    for n in range(1, 6):
        client.start("dash.order.v1", {"customer": f"c_{n}", "items": n})
    client.start("dash.flaky.v1", {"batch": 0}, max_attempts=1)
    client.start("dash.slow.v1", {"reason": "to show a sleeping run"})
    client.start("dash.approval.v1", {"request": "expense 7", "amount": 120})
    client.start("dash.order.v1", {"customer": "c_late"}, delay=3600)


def logged_in(browser: Browser, site: Site, token: str = TOKEN) -> tuple[BrowserContext, Page]:
    """A new browser context (its own cookies) logged in through the login form."""
    context = browser.new_context(base_url=site.base, viewport={"width": 1280, "height": 860})
    context.set_default_timeout(20_000)
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm's questions
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login\?next=%2F$"))
    page.fill("input[name=token]", token)
    page.click("form.login button[type=submit]")
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    return context, page


@pytest.fixture
def page(browser: Browser, site: Site) -> Iterator[Page]:
    context, found = logged_in(browser, site)
    yield found
    context.close()


def screenshot(page: Page, site: Site, name: str) -> None:
    if WRITE_DOCS and site.store.kind == "postgres":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"dashboard-{name}.png"), full_page=True)


def finished(site: Site, run_id: str) -> str:
    return site.client.wait(run_id, timeout=30).status.value


def test_the_overview_shows_each_type_and_the_chart(page: Page, site: Site) -> None:
    order = site.client.start("dash.order.v1", {"customer": "c_9"}).id
    finished(site, order)
    page.reload()
    expect(page.locator("table.counts")).to_contain_text("dash.order.v1")
    expect(page.locator("#throughput .uplot canvas")).to_be_visible()  # uPlot drew it
    expect(page.locator("#finished")).to_contain_text("succeeded")
    screenshot(page, site, "overview")


def test_filter_runs_by_a_payload_field(page: Page, site: Site) -> None:
    page.get_by_role("link", name="Runs", exact=True).click()
    page.fill("input[name=payload]", '{"customer": "c_3"}')
    page.click("form.filters button[type=submit]")
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("c_3")
    # The editor refuses what is not JSON before anything is sent.
    page.fill("input[name=payload]", "{customer")
    expect(page.locator("input[name=payload]")).to_have_class(re.compile("invalid"))
    page.fill("input[name=payload]", "")
    page.click("form.filters button[type=submit]")
    expect(rows.first).to_be_visible()
    screenshot(page, site, "runs")


def test_open_a_run_and_see_its_step_timeline(page: Page, site: Site) -> None:
    run_id = site.client.start("dash.order.v1", {"customer": "c_timeline", "items": 2}).id
    assert finished(site, run_id) == "succeeded"
    page.goto("/runs?payload={%22customer%22:%22c_timeline%22}")
    page.locator("table.runs a.mono").first.click()
    expect(page.locator("#run-status")).to_have_attribute("data-status", "succeeded")
    lanes = page.locator(".lane.step .lane-name")
    expect(lanes).to_have_text(["reserve", "cool-off", "charge"])
    expect(page.locator(".lane.step .bar.kind-sleep")).to_be_visible()
    expect(page.locator("#result")).to_contain_text('"charged": 20')
    screenshot(page, site, "run")


def test_cancel_a_run(page: Page, site: Site) -> None:
    run_id = site.client.start("dash.slow.v1", {"to": "cancel"}).id
    wait_until(lambda: site.client.get(run_id).waiting_states == ["sleeping"], 30, "it never slept")
    page.goto(f"/runs/{run_id}")
    page.click("#cancel")
    expect(page.locator(".notice.ok")).to_have_text("The run was cancelled.")
    expect(page.locator("#run-status")).to_have_attribute("data-status", "cancelled")
    assert site.client.get(run_id).status.value == "cancelled"


def test_bulk_retry_failed_runs(page: Page, site: Site) -> None:
    batch = [site.client.start("dash.flaky.v1", {"batch": 1}, max_attempts=1).id for _ in "ab"]
    assert {finished(site, run_id) for run_id in batch} == {"failed"}
    page.goto('/runs?type=dash.flaky.&status=failed&payload={"batch":1}')
    expect(page.locator("table.runs tbody tr")).to_have_count(2)
    page.get_by_role("link", name="Retry matching runs…").click()
    expect(page.locator("#bulk-count")).to_have_attribute("data-count", "2")
    page.get_by_role("button", name="Retry 2 runs").click()
    expect(page.locator("#bulk-done")).to_have_attribute("data-done", "2")
    assert {finished(site, run_id) for run_id in batch} == {"succeeded"}


def test_send_a_signal_that_wakes_a_waiting_run_and_watch_it_finish(page: Page, site: Site) -> None:
    run_id = site.client.start("dash.approval.v1", {"request": "laptop"}).id
    wait_until(lambda: site.client.get(run_id).waiting_states == ["waiting-signal"], 30, "no wait")
    page.goto(f"/runs/{run_id}")
    page.fill("input[name=event]", "approved")
    editor = page.locator("textarea[name=payload]")
    editor.fill("{by: alice}")
    expect(page.locator(".json-state")).to_contain_text("Not JSON")
    page.click("#send-signal")  # refused in the browser: nothing is sent
    assert site.client.signals(run_id) == []
    editor.fill('{"by": "alice"}')
    expect(page.locator(".json-state")).to_have_text("")
    page.click("#send-signal")
    expect(page.locator(".notice.ok")).to_contain_text("The signal was sent")
    # The page refreshes itself until the run is over.
    expect(page.locator("#run-status")).to_have_attribute("data-status", "succeeded")
    expect(page.locator("#result")).to_contain_text('"by": "alice"')


def test_the_refresh_keeps_what_is_typed_or_opened_and_the_form_still_sends(
    page: Page, site: Site
) -> None:
    """An unfinished run's page refreshes itself (every second here), but not over a
    signal form being filled in or an event's data opened for reading."""
    run_id = site.client.start("dash.approval.v1", {"request": "monitor"}).id
    wait_until(lambda: site.client.get(run_id).waiting_states == ["waiting-signal"], 30, "no wait")
    refreshes: list[str] = []
    failures: list[str] = []
    page.on("request", lambda r: refreshes.append(r.url) if r.url.endswith(run_id) else None)
    page.on("response", lambda r: failures.append(r.url) if r.status >= 400 else None)
    page.on("console", lambda m: failures.append(m.text) if m.type == "error" else None)
    page.goto(f"/runs/{run_id}")
    with page.expect_request(lambda r: r.url.endswith(run_id)):  # it does refresh
        pass
    # An event's data, opened: the whole of it, kept open across what would be refreshes.
    created = page.locator("details.event-data").first
    created.locator("summary").click()
    expect(created.locator("pre.json")).to_be_visible()
    seen = len(refreshes)
    page.wait_for_timeout(2500)
    assert len(refreshes) == seen, "refreshed while an event was open"
    expect(created).to_have_attribute("open", "")
    created.locator("summary").click()  # closed: the refresh goes on
    with page.expect_request(lambda r: r.url.endswith(run_id)):
        pass
    # The signal form, typed into, then left (no focus): the text stays.
    page.fill("input[name=event]", "approved")
    page.locator("textarea[name=payload]").fill('{"by": "bob"}')
    page.locator("main h1").click()
    page.wait_for_timeout(2500)
    expect(page.locator("input[name=event]")).to_have_value("approved")
    expect(page.locator("textarea[name=payload]")).to_have_value('{"by": "bob"}')
    page.click("#send-signal")
    expect(page.locator(".notice.ok")).to_contain_text("The signal was sent")
    expect(page.locator("#run-status")).to_have_attribute("data-status", "succeeded")
    expect(page.locator("#result")).to_contain_text('"by": "bob"')
    assert failures == []


def test_a_runs_stream_shows_live_resumes_after_a_cut_and_stops_when_closed(
    browser: Browser, site: Site
) -> None:
    """The run page follows an open stream: each item appears as it is written (the run
    writes the next only when told, after the page showed the last), the row is kept
    across the page's refreshes (one event stream), it reconnects after its server was
    killed and resumes after the last item it had (Last-Event-ID), and it stops once the
    stream is closed."""
    run_id = site.client.start("dash.chat.v1").id
    wait_until(lambda: site.client.stream_items(run_id, "tokens"), 30, "no first item")
    port = _free_port()
    first, base = _server(site.store, port)
    context, page = logged_in(browser, Site(site.store, base, site.client))
    try:
        opened: list[str] = []
        page.on("request", lambda r: opened.append(r.url) if "/streams/tokens" in r.url else None)
        page.goto(f"/runs/{run_id}")
        row = page.locator("#stream-tokens")
        items = row.locator(".stream-items .item")
        expect(row.locator(".stream-state")).to_have_text("live")
        expect(items).to_have_text(['"hello"'])
        for n, word in enumerate(["brave", "new"]):
            site.client.signal(run_id, "word", {"word": word})
            expect(items).to_have_count(n + 2)
        expect(row.locator(".stream-count")).to_have_text("3")
        page.wait_for_timeout(2500)  # the page refreshes every second around the row
        expect(items).to_have_text(['"hello"', '"brave"', '"new"'])
        assert len(opened) == 1, "one event stream, kept across the refreshes"

        first.kill()  # the cut
        first.wait(10)
        expect(row.locator(".stream-state")).to_have_text("reconnecting")
        site.client.signal(run_id, "word", {"word": "world"})  # written while cut off
        second, _ = _server(site.store, port)
        try:
            # Resumed after the last item it had (Last-Event-ID): the page's address
            # starts after "hello", so a fresh start would show "brave" and "new" again.
            expect(items).to_have_text(['"hello"', '"brave"', '"new"', '"world"'])
            site.client.signal(run_id, "word", {"close": True})
            expect(row.locator(".stream-state")).to_have_text("ended")
            seen = len(opened)
            page.wait_for_timeout(2500)
            assert len(opened) == seen, "an ended stream is not opened again"
            expect(items).to_have_count(4)
        finally:
            context.close()
            second.terminate()
            second.wait(15)
    finally:
        context.close()
        stop_processes([first])
        site.client.signal(run_id, "done")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server(store: Store, port: int) -> tuple[subprocess.Popen[str], str]:
    """``simpleworkflow serve`` on ``port``, to be killed (``served`` stops its server
    politely); its base URL once it answers."""
    environment = {k: v for k, v in store.env.items() if not k.startswith("SIMPLEWORKFLOW_API_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "simpleworkflow", "serve", "--port", str(port)],
        env={**environment, **ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, "the server exited"
        try:
            return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(ready, 30, "the server never answered")
    return proc, base


def test_pause_a_type(page: Page, site: Site) -> None:
    page.goto("/types")
    row = page.locator("tr[data-type='dash.slow.v1']")
    row.get_by_role("button", name="Pause").click()
    expect(page.locator(".notice.ok")).to_contain_text("The type was paused")
    expect(row).to_contain_text("paused")
    assert not next(
        e for e in site.client.admin.registry() if e.workflow_name == "dash.slow.v1"
    ).is_enabled
    row.get_by_role("button", name="Resume").click()
    expect(row.get_by_role("button", name="Pause")).to_be_visible()


def test_pause_and_resume_a_schedule_from_the_navigation(page: Page, site: Site) -> None:
    site.client.schedules.create("dash.nightly", "dash.order.v1", cron="0 3 * * *")
    page.get_by_role("link", name="Schedules", exact=True).click()
    row = page.locator("tr[data-schedule='dash.nightly']")
    expect(row.locator(".schedule-state")).to_have_text("active")
    row.get_by_role("button", name="Pause").click()  # hx-confirm, accepted
    expect(page.locator(".notice.ok")).to_contain_text("The schedule was paused")
    expect(row.locator(".schedule-state")).to_have_text("paused")
    assert site.client.schedules.get("dash.nightly").paused
    row.get_by_role("button", name="Resume").click()
    expect(row.locator(".schedule-state")).to_have_text("active")
    assert not site.client.schedules.get("dash.nightly").paused
    row.get_by_role("button", name="Run now").click()  # hx-confirm, accepted
    expect(page.locator(".notice.ok")).to_contain_text("The schedule started a run now")
    page.locator(".notice.ok a").click()  # the run it names
    expect(page.locator("h1")).to_contain_text("dash.order.v1")
    page.get_by_role("link", name="Schedules", exact=True).click()
    page.get_by_role("link", name="Limits", exact=True).click()
    expect(page.get_by_role("heading", name="Limits", exact=True)).to_be_visible()


def test_the_read_only_token_shows_no_buttons_and_a_forged_post_is_refused(
    browser: Browser, site: Site
) -> None:
    run_id = site.client.start("dash.slow.v1", {"to": "stay"}).id
    context, page = logged_in(browser, site, READ_TOKEN)
    try:
        expect(page.locator(".badge.read-only")).to_be_visible()
        for path in (f"/runs/{run_id}", "/types", "/runs"):
            page.goto(path)
            expect(page.locator("main h1")).to_be_visible()
            expect(page.locator("main form[method=post]")).to_have_count(0)
            expect(page.locator("main a.button")).to_have_count(0)  # the bulk actions
        page.goto(f"/runs/{run_id}")
        # The session's own CSRF token, as htmx would send it: only the level is wrong.
        csrf = json.loads(page.locator("body").get_attribute("hx-headers") or "{}")
        forged = context.request.post(
            f"/runs/{run_id}/cancel", form={"csrf_token": csrf["X-CSRF-Token"]}, max_redirects=0
        )
        assert forged.status == 403 and "may only read" in forged.text()
        assert site.client.get(run_id).status.value != "cancelled"
    finally:
        context.close()


def test_the_api_docs_draw_every_operation_from_local_files(page: Page, site: Site) -> None:
    """/docs under its Content-Security-Policy, with no network: Swagger UI (from the
    installed package) reads the OpenAPI 3.1 document and lists the operations."""
    outside: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(site.base) else None)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto("/docs")
    expect(page.locator(".opblock-summary-path", has_text="/api/v1/runs").first).to_be_visible()
    expect(page.get_by_text("Unable to render this definition")).to_have_count(0)
    assert outside == [] and errors == []
