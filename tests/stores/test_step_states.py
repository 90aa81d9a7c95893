"""A journaled call's state reads the same on the API, in ``runs show`` and ``runs steps``,
and on the dashboard's run page, on both stores: a step that gave up is ``failed`` (not
the stored ``retrying``), a step between tries ``retrying`` with its next try, a wait
``waiting`` with what for."""

from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import Any

import pytest
from api_helpers import PREFIX, Api
from conftest import Store, poller_thread
from pydantic import TypeAdapter
from test_cli import run_cli
from test_dashboard import Dash
from worker_app import wait_until

from simpleworkflow import App, Client, Context, RetryPolicy
from simpleworkflow.models import Run
from simpleworkflow.server import schemas

DOOMED = "states.doomed.v1"
FLAKY = "states.flaky.v1"
PATIENT = "states.patient.v1"


def _app(store: Store) -> App:
    app = App(store.url, schema=store.schema)

    @app.workflow(DOOMED)
    async def doomed(payload: Any, ctx: Context) -> None:
        await ctx.step("charge", _refuse, retry=RetryPolicy(max_attempts=1))

    @app.workflow(FLAKY)
    async def flaky(payload: Any, ctx: Context) -> None:
        await ctx.step("fetch", _refuse, retry=RetryPolicy(base=3600, max_attempts=3))

    @app.workflow(PATIENT)
    async def patient(payload: Any, ctx: Context) -> Any:
        return await ctx.wait_for_event("approval", event="approved", timeout="1h")

    return app


def _refuse() -> None:
    raise ValueError("card declined")


def _until(client: Client, run_id: str, check: Any) -> Run:
    def there() -> Run | None:
        run = client.get(run_id)
        return run if check(run) else None

    found: Run = wait_until(there, 30, lambda: f"the run never got there: {client.get(run_id)}")
    return found


@pytest.fixture
def runs(store: Store, client: Client) -> dict[str, Run]:
    """A run whose step gave up (failed), one between tries, one waiting for a signal."""
    ids = {
        "doomed": client.start(DOOMED, max_attempts=1).id,
        "flaky": client.start(FLAKY).id,
        "patient": client.start(PATIENT).id,
    }
    with poller_thread(_app(store), poll_interval=0.05):
        found = {
            "doomed": _until(client, ids["doomed"], lambda r: r.is_terminal),
            "flaky": _until(client, ids["flaky"], lambda r: r.waiting_states == ["retrying"]),
            "patient": _until(
                client, ids["patient"], lambda r: r.waiting_states == ["waiting-signal"]
            ),
        }
    assert found["doomed"].status.value == "failed"
    return found


def test_the_api_tells_a_failed_step_from_one_retrying_and_a_wait(
    store: Store, runs: dict[str, Run]
) -> None:
    api = Api(store)
    try:
        steps = {
            name: api.get(f"{PREFIX}/runs/{run.id}/steps").json() for name, run in runs.items()
        }
    finally:
        api.close()
    for found in steps.values():
        TypeAdapter(list[schemas.StepOut]).validate_python(found)
    [charge] = steps["doomed"]
    assert (charge["step_name"], charge["status"], charge["attempts"]) == ("charge", "failed", 1)
    assert "card declined" in charge["output"]["gave_up"]
    [fetch] = steps["flaky"]
    assert (fetch["status"], fetch["attempts"], fetch["waiting_for"]) == ("retrying", 1, None)
    assert datetime.fromisoformat(fetch["at"]) == runs["flaky"].run_at  # the next try
    [approval] = steps["patient"]
    assert (approval["status"], approval["waiting_for"]) == ("waiting", "signal 'approved'")
    assert datetime.fromisoformat(approval["at"]) == runs["patient"].run_at  # its timeout


def test_runs_show_and_runs_steps_read_the_same_states(
    store: Store, runs: dict[str, Run], capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("show", "steps"):
        shown = {
            name: run_cli(store, capsys, "runs", command, run.id, "--json").json()["steps"]
            for name, run in runs.items()
        }
        assert [step["status"] for step in shown["doomed"]] == ["failed"]
        assert [(s["status"], s["at"]) for s in shown["flaky"]] == [
            ("retrying", runs["flaky"].run_at.isoformat())
        ]
        assert [(s["status"], s["waiting_for"]) for s in shown["patient"]] == [
            ("waiting", "signal 'approved'")
        ]
    table = run_cli(store, capsys, "runs", "show", runs["doomed"].id).out
    assert re.search(r"charge\s+step\s+failed\s+1", table), table
    table = run_cli(store, capsys, "runs", "steps", runs["flaky"].id).out
    assert re.search(r"fetch\s+step\s+retrying at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", table)
    table = run_cli(store, capsys, "runs", "show", runs["patient"].id).out
    assert "waiting for signal 'approved' until" in table


def test_the_run_page_and_its_timeline_show_a_failed_step_as_failed(
    store: Store, runs: dict[str, Run]
) -> None:
    dash = Dash(store)
    try:
        pages = {name: dash.get(f"/runs/{run.id}").text for name, run in runs.items()}
    finally:
        dash.close()
    assert '<td class="step-failed">failed</td>' in pages["doomed"]
    # The step's bar is red, and ends when it gave up: the timeline does not draw it
    # as going on until the end of the page's time.
    bar = re.search(
        r'class="bar kind-(\w+)" style="[^"]*" title="charge \(([^"]+)"', pages["doomed"]
    )
    assert bar and bar.group(1) == "failed", pages["doomed"]
    assert "step, failed" in bar.group(2) and "→ —" not in bar.group(2)
    assert '<td class="step-retrying">retrying at ' in pages["flaky"]
    assert "waiting for signal &#39;approved&#39; until" in pages["patient"]


def test_a_step_failure_is_logged_when_retried_and_with_its_traceback_when_it_gives_up(
    store: Store, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="simpleworkflow")
    doomed = client.start(DOOMED, max_attempts=1).id
    flaky = client.start(FLAKY).id
    with poller_thread(_app(store), poll_interval=0.05):
        _until(client, doomed, lambda r: r.is_terminal)
        _until(client, flaky, lambda r: r.waiting_states == ["retrying"])
    retried = [r for r in caplog.records if flaky in r.getMessage() and "'fetch'" in r.getMessage()]
    assert [r.levelno for r in retried] == [logging.WARNING]
    line = retried[0].getMessage()
    assert all(part in line for part in (FLAKY, "attempt 1", "ValueError: card declined")), line
    assert "retried" in line
    gave_up = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(gave_up) == 1 and doomed in gave_up[0].getMessage()
    assert "gave up on attempt 1: ValueError: card declined" in gave_up[0].getMessage()
    assert gave_up[0].exc_text and "_refuse" in gave_up[0].exc_text  # the user's frame


def test_a_failed_runs_error_starts_with_the_users_exception_and_folds_library_frames(
    store: Store, runs: dict[str, Run], client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    run = runs["doomed"]
    error = run.last_error or ""
    lines = error.splitlines()
    assert lines[0] == "ValueError: card declined", error
    frames = [line for line in lines if line.startswith("  File ")]
    assert frames[0].startswith('  File "') and "test_step_states.py" in frames[0]
    assert "in _refuse" in frames[0], error  # the user's frame that raised, first
    assert "simpleworkflow/" not in error and "raise outcome" not in error, error
    assert re.search(r"\[\d+ library frames? left out\]", error), error
    assert lines[-1].endswith("step 'charge' failed after 1 attempt: ValueError: card declined")

    [failed] = [e for e in client.events(run.id) if e.event_type == "failed"]
    assert failed.data["error"]["traceback"] == error
    [gave_up] = [e for e in client.events(run.id) if e.event_type == "step_failed"]
    assert gave_up.data["error"]["traceback"].startswith("ValueError: card declined\n")

    api = Api(store)
    try:
        assert api.get(f"{PREFIX}/runs/{run.id}").json()["last_error"] == error
    finally:
        api.close()
    shown = run_cli(store, capsys, "runs", "show", run.id).out
    assert "last_error       ValueError: card declined" in shown, shown
    dash = Dash(store)
    try:
        page = dash.get(f"/runs/{run.id}").text
    finally:
        dash.close()
    pre = re.search(r'<pre class="error" id="error">(.*?)</pre>', page, re.S)
    assert pre and pre.group(1).startswith("ValueError: card declined\n"), page


def test_a_waiting_run_and_the_same_run_cancelled_show_the_same_attempts_everywhere(
    store: Store, runs: dict[str, Run], client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Attempts made, on every surface: the CLI's list and show, the API, the dashboard's
    list and run page; suspended, then cancelled while suspended (not 0 of 3)."""
    run_id = runs["patient"].id

    def shown() -> list[str]:
        listing = run_cli(store, capsys, "runs", "list", "--type", PATIENT).out
        row = next(line for line in listing.splitlines() if line.startswith(run_id))
        header = listing.splitlines()[0]
        as_json = run_cli(store, capsys, "runs", "show", run_id, "--json").json()["run"]
        assert "attempt" not in as_json
        api = Api(store)
        try:
            body = api.get(f"{PREFIX}/runs/{run_id}").json()
        finally:
            api.close()
        assert "attempt" not in body
        dash = Dash(store)
        try:
            page = dash.get(f"/runs/{run_id}").text
            listed = dash.get(f"/runs?type={PATIENT}").text
        finally:
            dash.close()
        return [
            row[header.index("ATTEMPT") :].split()[0],
            re.findall(
                r"attempts +(\d+ of \d+)", run_cli(store, capsys, "runs", "show", run_id).out
            )[0],
            f"{as_json['attempts_made']} of {as_json['max_attempts']}",
            f"{body['attempts_made']} of {body['max_attempts']}",
            re.findall(r"<dt>attempts</dt><dd>([^<]+)</dd>", page)[0],
            re.findall(r'<td class="num">(\d+/\d+)</td>', listed)[0],
        ]

    waiting = shown()
    assert waiting == ["1/3", "1 of 3", "1 of 3", "1 of 3", "1 of 3", "1/3"]
    client.cancel(run_id)
    assert client.get(run_id).status.value == "cancelled"
    assert shown() == waiting
