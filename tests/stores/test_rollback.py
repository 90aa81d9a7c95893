"""Errors that skip retries, and compensations (``ctx.on_rollback``), on both stores.

A ``PermanentError`` fails the run at once wherever it is raised (the body, a step of
any kind); a run that fails for good runs the compensations it registered, in reverse
order, each once as a journaled step. The step functions note every call in a ledger
kept by the test, so that "ran once" is what really ran, not what the engine says.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from typing import Any

import pytest
from api_helpers import PREFIX, Api
from conftest import Store, poller_thread
from test_dashboard import Dash
from worker_app import wait_until

from simpleworkflow import Break, Client, Context, RunStatus, errors, observe
from simpleworkflow.admin import replaycheck
from simpleworkflow.app import App
from simpleworkflow.models import Run
from simpleworkflow.retry import RetryPolicy

QUICK = RetryPolicy(backoff="fixed", base=0.2, jitter=0)
ONCE = RetryPolicy(max_attempts=1)


class Ledger:
    """What the functions ran, in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[str] = []

    def note(self, key: str) -> str:
        with self._lock:
            self.calls.append(key)
        return key

    def count(self, key: str) -> int:
        with self._lock:
            return self.calls.count(key)

    def of(self, prefix: str) -> list[str]:
        with self._lock:
            return [c for c in self.calls if c.startswith(prefix)]


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema, retry=QUICK)


def working(app: App) -> Any:
    return poller_thread(app, type_prefixes=["test.%"], poll_interval=0.1)


def finished(client: Client, run_id: str, timeout: float = 20) -> Run:
    wait_until(lambda: client.get(run_id).is_terminal, timeout, lambda: str(client.get(run_id)))
    return client.get(run_id)


def lifecycle(client: Client, run_id: str) -> list[str]:
    return [e.event_type for e in client.events(run_id) if e.event_type != "heartbeat"]


def failed_event(client: Client, run_id: str) -> dict[str, Any]:
    (event,) = [e for e in client.events(run_id) if e.event_type == "failed"]
    assert isinstance(event.data, dict)
    return event.data


# -- PermanentError from inside a step ------------------------------------------------


def _refuse(ledger: Ledger) -> Any:
    ledger.note("refuse")
    raise errors.PermanentError("card declined")


PATHS = ["async step", "def step of an async body", "def body", "transactional step", "body"]


def _register_refusing(app: App, ledger: Ledger, path: str) -> str:
    async def refuse_async() -> Any:
        return _refuse(ledger)

    async def async_step(payload: Any, ctx: Context) -> Any:
        await ctx.step("charge", refuse_async)
        ledger.note("after")

    async def def_step(payload: Any, ctx: Context) -> Any:
        await ctx.step("charge", _refuse, ledger)
        ledger.note("after")

    def def_body(payload: Any, ctx: Context) -> Any:
        ctx.step("charge", _refuse, ledger)
        ledger.note("after")

    def transactional(payload: Any, ctx: Context) -> Any:
        ctx.transaction("charge", lambda conn: _refuse(ledger))
        ledger.note("after")

    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.step("before", ledger.note, "before")
        _refuse(ledger)

    bodies = [async_step, def_step, def_body, transactional, body]
    type_ = f"test.rollback.permanent{PATHS.index(path)}.v1"
    app.workflow(type_)(bodies[PATHS.index(path)])
    return type_


@pytest.mark.parametrize("path", PATHS)
def test_a_permanent_error_fails_the_run_at_once_wherever_it_is_raised(
    app: App, client: Client, ledger: Ledger, path: str
) -> None:
    """Seed 004's ``CriticalError``: no step retry, no run retry, whatever the policies."""
    type_ = _register_refusing(app, ledger, path)
    run_id = client.start(type_, max_attempts=3).id
    with working(app):
        run = finished(client, run_id)

    assert run.status is RunStatus.FAILED
    assert "card declined" in (run.last_error or "")
    assert (ledger.count("refuse"), ledger.count("after")) == (1, 0)
    assert run.attempt == 1
    assert "resumed" not in lifecycle(client, run_id)
    assert failed_event(client, run_id)["retryable"] is False


# -- compensations --------------------------------------------------------------------


def _saga(app: App, ledger: Ledger, sync: bool, type_: str, fail: Any, undo: Any = None) -> None:
    """Three steps, each followed by its compensation; then ``fail()`` in the body."""
    undo = undo or {}

    def compensation(name: str) -> Any:
        return undo.get(name, lambda: ledger.note(f"undo {name}"))

    if sync:

        @app.workflow(type_)
        def body(payload: Any, ctx: Context) -> Any:
            for name in ("a", "b", "c"):
                ctx.step(name, ledger.note, f"do {name}")
                ctx.on_rollback(name, compensation(name), retry=QUICK)
            fail(ctx)

    else:

        @app.workflow(type_)
        async def body_async(payload: Any, ctx: Context) -> Any:
            for name in ("a", "b", "c"):
                await ctx.step(name, ledger.note, f"do {name}")
                await ctx.on_rollback(name, compensation(name), retry=QUICK)
            fail(ctx)


def _roll_back(ctx: Context) -> None:
    raise errors.RollbackError("order cancelled by the shop")


def journal_of(client: Client, run_id: str) -> list[tuple[str, str, str]]:
    return [(e.step_name, e.kind, e.status) for e in client.steps(run_id)]


@pytest.mark.parametrize("sync", [False, True], ids=["async_body", "def_body"])
def test_compensations_run_once_in_reverse_order_and_the_run_fails_with_its_error(
    app: App, client: Client, ledger: Ledger, sync: bool
) -> None:
    _saga(app, ledger, sync, "test.rollback.saga.v1", _roll_back)
    run_id = client.start("test.rollback.saga.v1", max_attempts=3).id
    with working(app):
        run = finished(client, run_id)

    assert run.status is RunStatus.FAILED
    assert "RollbackError: order cancelled by the shop" in (run.last_error or "")
    assert run.attempt == 1, "a RollbackError is not retried"
    assert ledger.calls == ["do a", "do b", "do c", "undo c", "undo b", "undo a"]
    assert journal_of(client, run_id) == [
        ("a", "step", "completed"),
        ("on_rollback/a", "on_rollback", "completed"),
        ("b", "step", "completed"),
        ("on_rollback/b", "on_rollback", "completed"),
        ("c", "step", "completed"),
        ("on_rollback/c", "on_rollback", "completed"),
        ("@rollback", "rollback", "completed"),
        ("rollback/c", "step", "completed"),
        ("rollback/b", "step", "completed"),
        ("rollback/a", "step", "completed"),
    ]
    data = failed_event(client, run_id)
    assert data["error"]["type"] == "simpleworkflow.errors.RollbackError"
    assert [o["outcome"] for o in data["rollback"]] == ["completed"] * 3
    assert [o["step"] for o in data["rollback"]] == ["rollback/c", "rollback/b", "rollback/a"]
    assert lifecycle(client, run_id)[-1] == "failed"
    assert "rolling_back" in lifecycle(client, run_id)


@pytest.mark.parametrize("sync", [False, True], ids=["async_body", "def_body"])
def test_a_compensation_that_retries_resumes_without_running_anything_twice(
    app: App, client: Client, ledger: Ledger, sync: bool
) -> None:
    """The retry of ``undo b`` suspends the run; the next attempt replays the body (no
    step, no registration again), skips ``undo c`` (journaled) and goes on."""
    tries: list[int] = []

    def flaky_undo_b() -> None:
        tries.append(1)
        ledger.note("undo b")
        if len(tries) == 1:
            raise ConnectionError("refund endpoint timed out")

    _saga(app, ledger, sync, "test.rollback.flaky.v1", _roll_back, {"b": flaky_undo_b})
    run_id = client.start("test.rollback.flaky.v1").id
    with working(app):
        run = finished(client, run_id)

    assert run.status is RunStatus.FAILED
    assert ledger.calls == ["do a", "do b", "do c", "undo c", "undo b", "undo b", "undo a"]
    registrations = [n for n, kind, _ in journal_of(client, run_id) if kind == "on_rollback"]
    assert registrations == ["on_rollback/a", "on_rollback/b", "on_rollback/c"]
    assert [o["outcome"] for o in failed_event(client, run_id)["rollback"]] == ["completed"] * 3
    assert "resumed" in lifecycle(client, run_id)


@pytest.mark.parametrize("sync", [False, True], ids=["async_body", "def_body"])
def test_a_compensation_that_fails_for_good_is_recorded_and_the_others_still_run(
    app: App, client: Client, ledger: Ledger, sync: bool
) -> None:
    def broken_undo_b() -> None:
        ledger.note("undo b")
        raise errors.PermanentError("refund refused")

    _saga(app, ledger, sync, "test.rollback.broken.v1", _roll_back, {"b": broken_undo_b})
    run_id = client.start("test.rollback.broken.v1").id
    with working(app):
        run = finished(client, run_id)

    assert run.status is RunStatus.FAILED
    assert ledger.calls == ["do a", "do b", "do c", "undo c", "undo b", "undo a"]
    assert "RollbackError: order cancelled by the shop" in (run.last_error or "")
    assert "compensation 'rollback/b' failed" in (run.last_error or "")
    outcomes = failed_event(client, run_id)["rollback"]
    assert [o["outcome"] for o in outcomes] == ["completed", "failed", "completed"]
    assert "refund refused" in outcomes[1]["error"]


def test_compensations_run_only_after_the_runs_last_attempt(
    app: App, client: Client, ledger: Ledger
) -> None:
    def flaky(ctx: Context) -> None:
        ledger.note(f"attempt {ctx.attempt}")
        raise ConnectionError("warehouse unreachable")

    _saga(app, ledger, False, "test.rollback.attempts.v1", flaky)
    run_id = client.start("test.rollback.attempts.v1", max_attempts=2).id
    with working(app):
        run = finished(client, run_id)

    assert run.status is RunStatus.FAILED
    assert "warehouse unreachable" in (run.last_error or "")
    assert ledger.calls == [
        *("do a", "do b", "do c", "attempt 1"),
        *("attempt 2", "undo c", "undo b", "undo a"),
    ]
    assert lifecycle(client, run_id).count("retried") == 1


def test_a_permanent_error_from_a_step_rolls_back_the_body_s_compensations(
    app: App, client: Client, ledger: Ledger
) -> None:
    def refused(ctx: Context) -> None:
        raise AssertionError("not reached")

    @app.workflow("test.rollback.stepped.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.step("reserve", ledger.note, "reserve")
        await ctx.on_rollback("release", ledger.note, "release")
        await ctx.step("ship", _refuse, ledger)

    run_id = client.start("test.rollback.stepped.v1").id
    with working(app):
        run = finished(client, run_id)

    assert run.status is RunStatus.FAILED
    assert ledger.calls == ["reserve", "refuse", "release"]
    assert "StepFailed" in failed_event(client, run_id)["error"]["type"]


def test_a_cancelled_run_runs_no_compensations(app: App, client: Client, ledger: Ledger) -> None:
    @app.workflow("test.rollback.cancel.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.step("reserve", ledger.note, "reserve")
        await ctx.on_rollback("release", ledger.note, "release")
        await ctx.wait_for_event("approval", event="approved")

    run_id = client.start("test.rollback.cancel.v1").id
    with working(app):
        wait_until(lambda: client.get(run_id).waiting_for is not None, 15, "run never waited")
        client.cancel(run_id)
        run = finished(client, run_id)

    assert run.status is RunStatus.CANCELLED
    assert ledger.calls == ["reserve"]
    assert "@rollback" not in [name for name, _, _ in journal_of(client, run_id)]


def test_a_run_that_registers_none_fails_as_before(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.rollback.none.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.step("reserve", ledger.note, "reserve")
        raise errors.RollbackError("nothing to undo")

    run_id = client.start("test.rollback.none.v1").id
    with working(app):
        run = finished(client, run_id)

    assert run.status is RunStatus.FAILED and run.attempt == 1
    assert journal_of(client, run_id) == [("reserve", "step", "completed")]
    assert "rollback" not in failed_event(client, run_id)
    assert "rolling_back" not in lifecycle(client, run_id)


def test_on_rollback_refuses_what_is_not_a_function(app: App, client: Client) -> None:
    @app.workflow("test.rollback.refused.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.on_rollback("release", "not a function")

    run_id = client.start("test.rollback.refused.v1", max_attempts=3).id
    with working(app):
        run = finished(client, run_id)

    assert run.status is RunStatus.FAILED and run.attempt == 1
    assert "on_rollback needs a function" in (run.last_error or "")


def test_on_rollback_is_refused_inside_a_loop_or_a_join(app: App, client: Client) -> None:
    """A later attempt answers a finished loop or join from its journal, so it could not
    register their compensations again: refused at once, rather than lost later."""

    @app.workflow("test.rollback.in_loop.v1")
    async def in_loop(payload: Any, ctx: Context) -> Any:
        async def body(n: int) -> Any:
            await ctx.on_rollback("undo", lambda: None)
            return Break(n)

        return await ctx.loop("items", 0, body)

    @app.workflow("test.rollback.in_join.v1")
    async def in_join(payload: Any, ctx: Context) -> Any:
        async def branch() -> Any:
            await ctx.on_rollback("undo", lambda: None)

        return await ctx.join("fan", {"a": branch})

    ids = [
        client.start(t, max_attempts=3).id
        for t in ("test.rollback.in_loop.v1", "test.rollback.in_join.v1")
    ]
    with working(app):
        runs = [finished(client, run_id) for run_id in ids]

    for run, scope in zip(runs, ("items/~0", "fan/a"), strict=True):
        assert run.status is RunStatus.FAILED and run.attempt == 1, run
        assert f"on_rollback inside a loop or join ({scope})" in (run.last_error or ""), run


# -- every surface ---------------------------------------------------------------------


class Steps(observe.Observer):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def step_started(self, event: observe.StepStarted) -> None:
        self.seen.append(f"started {event.step}")

    def step_completed(self, event: observe.StepCompleted) -> None:
        self.seen.append(f"completed {event.step}")


def test_observers_see_compensations_as_steps(app: App, client: Client, ledger: Ledger) -> None:
    steps = Steps()
    app.observe(steps)
    _saga(app, ledger, False, "test.rollback.observed.v1", _roll_back)
    run_id = client.start("test.rollback.observed.v1").id
    with working(app):
        finished(client, run_id)

    assert steps.seen[-6:] == [
        *("started rollback/c", "completed rollback/c", "started rollback/b"),
        *("completed rollback/b", "started rollback/a", "completed rollback/a"),
    ]


def test_replay_check_passes_a_run_halfway_through_its_compensations(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    """A compensation waits an hour for its retry: replay-check replays the body up to
    its registrations, and the compensations' own entries are not the body's."""

    def slow_undo_b() -> None:
        ledger.note("undo b")
        raise errors.RetryAfter("1h")

    _saga(app, ledger, False, "test.rollback.checked.v1", _roll_back, {"b": slow_undo_b})
    run_id = client.start("test.rollback.checked.v1").id
    with working(app):
        wait_until(lambda: ledger.count("undo b") == 1, 15, "undo b never ran")
        wait_until(lambda: client.get(run_id).status is RunStatus.PENDING, 15, "not suspended")

    backend = store.backend()
    try:
        (report,) = [
            r for r in asyncio.run(replaycheck.check_runs(app, backend)) if r.run_id == run_id
        ]
    finally:
        backend.close()
    assert report.verdict == replaycheck.OK, report.detail
    assert ledger.calls == ["do a", "do b", "do c", "undo c", "undo b"]

    changed = App(store.url, schema=store.schema)  # "b" is no longer registered

    @changed.workflow("test.rollback.checked.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        for name in ("a", "b", "c"):
            await ctx.step(name, ledger.note, f"do {name}")
            if name != "b":
                await ctx.on_rollback(name, ledger.note, f"undo {name}")
        _roll_back(ctx)

    backend = store.backend()
    try:
        reports = asyncio.run(replaycheck.check_runs(changed, backend))
    finally:
        backend.close()
    (report,) = [r for r in reports if r.run_id == run_id]
    assert report.verdict == replaycheck.DIVERGED
    assert "'on_rollback/b'" in report.detail


@pytest.mark.parametrize("sync", [False, True], ids=["async_body", "def_body"])
def test_an_attempt_out_of_time_leaves_the_compensations_to_the_next_one(
    app: App, client: Client, ledger: Ledger, sync: bool
) -> None:
    """The last attempt runs past the handler's timeout: it journals the rollback and
    gives the run back; the next replays the body only up to its registrations (not into
    the slow work again) and runs the compensations."""
    type_ = f"test.rollback.slow{'sync' if sync else 'async'}.v1"
    if sync:

        @app.workflow(type_, timeout=1)
        def slow(payload: Any, ctx: Context) -> Any:
            ctx.step("reserve", ledger.note, "reserve")
            ctx.on_rollback("release", ledger.note, "release")
            ledger.note("slow work")
            while not ctx.is_cancelled():
                time.sleep(0.01)

    else:

        @app.workflow(type_, timeout=1)
        async def slow_async(payload: Any, ctx: Context) -> Any:
            await ctx.step("reserve", ledger.note, "reserve")
            await ctx.on_rollback("release", ledger.note, "release")
            ledger.note("slow work")
            await asyncio.sleep(60)

    run_id = client.start(type_, max_attempts=1).id
    with working(app):
        run = finished(client, run_id)

    assert run.status is RunStatus.FAILED
    assert "HandlerTimeout" in (run.last_error or "")
    assert ledger.calls == ["reserve", "slow work", "release"]
    assert [o["outcome"] for o in failed_event(client, run_id)["rollback"]] == ["completed"]


def test_the_api_and_the_dashboard_show_registrations_and_compensations(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    _saga(app, ledger, False, "test.rollback.shown.v1", _roll_back)
    run_id = client.start("test.rollback.shown.v1").id
    with working(app):
        finished(client, run_id)

    api, dash = Api(store), Dash(store)
    try:
        steps = api.get(f"{PREFIX}/runs/{run_id}/steps").json()
        page = dash.get(f"/runs/{run_id}").text
    finally:
        api.close()
        dash.close()
    shown = [(s["step_name"], s["kind"], s["status"]) for s in steps]
    assert shown[5:] == [
        ("on_rollback/c", "on_rollback", "completed"),
        ("@rollback", "rollback", "completed"),
        ("rollback/c", "step", "completed"),
        ("rollback/b", "step", "completed"),
        ("rollback/a", "step", "completed"),
    ]
    assert "<td>on_rollback/a</td><td>on_rollback</td>" in page
    assert "<td>rollback/a</td><td>step</td>" in page
    bar = re.search(r'class="bar kind-(\w+)" style="[^"]*" title="rollback/a \(([^"]+)"', page)
    assert bar and bar.group(1) == "step", page
