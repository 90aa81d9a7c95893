"""Step timeouts on both stores: a try past its ``timeout`` fails with ``StepTimeout``.

An ``async def`` step is cancelled; a ``def`` step's thread cannot be, so the step stops
waiting for it and whatever it returns late is dropped. The tests block a first try on an
event far longer than its timeout (0.2 s) and assert what a user would see: the journal
holds the retry's value, never the late one; the run goes on while the thread is stuck.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from api_helpers import PREFIX, Api
from conftest import Store
from test_durable import Ledger, held, journal, step_events, wait_terminal, working
from test_observe_steps import Recorder
from worker_app import wait_until

from simpleworkflow import App, Client, Context, RetryPolicy, RunStatus, errors, observe
from simpleworkflow.admin import step_states

QUICK = RetryPolicy(backoff="fixed", base=0.2, jitter=0)
TWO_TRIES = RetryPolicy(backoff="fixed", base=0.2, jitter=0, max_attempts=2)
ONE_TRY = RetryPolicy(max_attempts=1)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema, retry=QUICK)


@pytest.fixture
def release() -> Any:
    """An event the stuck first tries block on; set at the end whatever happened."""
    event = threading.Event()
    yield event
    event.set()


def test_an_async_step_past_its_timeout_is_cancelled_and_retried(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    async def slow_then_quick() -> str:
        ledger.note("try")
        if ledger.count("try") == 1:
            try:
                await asyncio.Event().wait()  # never set: only the timeout ends it
            except asyncio.CancelledError:
                ledger.note("cancelled")
                raise
        return "fetched"

    @app.workflow("test.timeouts.async.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        return await ctx.step("fetch", slow_then_quick, retry=TWO_TRIES, timeout=0.2)

    run_id = client.start("test.timeouts.async.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == "fetched"
    assert (ledger.count("try"), ledger.count("cancelled")) == (2, 1)
    assert step_events(client, run_id) == [("step_failed", 1), ("step_completed", None)]
    failed = next(e for e in client.events(run_id) if e.event_type == "step_failed")
    assert failed.data["error"]["type"] == "StepTimeout"
    assert "within its 0.2s timeout" in failed.data["error"]["message"]
    assert [(s["output"], s["attempts"]) for s in journal(store, run_id)] == [("fetched", 2)]


@pytest.mark.parametrize("sync", [False, True], ids=["async_body", "def_body"])
def test_a_def_step_past_its_timeout_is_retried_and_its_late_result_discarded(
    store: Store, app: App, client: Client, ledger: Ledger, release: threading.Event, sync: bool
) -> None:
    def stuck_then_quick() -> str:
        ledger.note("try")
        if ledger.count("try") == 1:
            release.wait(60)  # far past the timeout: the thread goes on unheeded
            ledger.note("late return")
            return "late"
        return "fresh"

    policy = RetryPolicy(backoff="fixed", base=0.2, jitter=0, max_attempts=2, timeout="200ms")
    if sync:

        @app.workflow("test.timeouts.thread.v1")
        def body(payload: Any, ctx: Context) -> Any:
            return ctx.step("fetch", stuck_then_quick, retry=policy)  # the policy's timeout

    else:

        @app.workflow("test.timeouts.thread.v1")
        async def body(payload: Any, ctx: Context) -> Any:
            return await ctx.step("fetch", stuck_then_quick, retry=policy)

    @app.workflow("test.timeouts.other.v1")
    def other(payload: Any, ctx: Context) -> Any:
        return ctx.step("quick", lambda: "done")

    run_id = client.start("test.timeouts.thread.v1").id
    # One slot: the run and another one finish while the first try's thread is stuck.
    with working(app, concurrency=1):
        run = wait_terminal(client, run_id)
        other_id = client.start("test.timeouts.other.v1").id
        assert wait_terminal(client, other_id).status is RunStatus.SUCCEEDED
        assert ledger.count("late return") == 0, "the first try was not stuck"
        release.set()
        wait_until(lambda: ledger.count("late return") == 1, 10, lambda: "still stuck")
        held(client, run_id, 0.5)  # the late value lands nowhere

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == "fresh"
    assert client.get(run_id).result == "fresh"
    assert ledger.count("try") == 2
    assert [(s["output"], s["attempts"]) for s in journal(store, run_id)] == [("fresh", 2)]
    [failed] = [e for e in client.events(run_id) if e.event_type == "step_failed"]
    assert failed.data["error"]["type"] == "StepTimeout"


@pytest.mark.parametrize("sync", [False, True], ids=["async_body", "def_body"])
def test_a_timeout_with_no_retry_left_fails_the_step_with_step_timeout(
    store: Store, app: App, client: Client, release: threading.Event, sync: bool
) -> None:
    recorder = Recorder()
    app.observe(recorder)
    if sync:

        @app.workflow("test.timeouts.doomed.v1")
        def body(payload: Any, ctx: Context) -> Any:
            try:
                ctx.step("charge", release.wait, 60, retry=ONE_TRY, timeout=0.2)
            except errors.StepFailed as exc:
                return {"cause": type(exc.__cause__).__name__, "attempts": exc.attempts}
            return None

    else:

        @app.workflow("test.timeouts.doomed.v1")
        async def body(payload: Any, ctx: Context) -> Any:
            await ctx.step("charge", release.wait, 60, retry=ONE_TRY, timeout=0.2)

    run_id = client.start("test.timeouts.doomed.v1").id
    with working(app):
        run = wait_terminal(client, run_id)
        release.set()

    if sync:  # caught in the body: StepFailed, caused by StepTimeout
        assert run.status is RunStatus.SUCCEEDED, run.last_error
        assert run.result == {"cause": "StepTimeout", "attempts": 1}
    else:
        assert run.status is RunStatus.FAILED
        assert "StepFailed" in (run.last_error or "")
        assert "StepTimeout: step 'charge' did not finish" in (run.last_error or "")
        assert run.attempt == 1, "a step out of tries fails the run at once"
    [entry] = client.steps(run_id)
    state = step_states.step_state(entry, client.get(run_id), run.updated_at)
    assert state.status is step_states.StepStatus.FAILED
    assert "StepTimeout" in (state.error or "")
    [failure] = [e for e in recorder.events if isinstance(e, observe.StepFailed)]
    assert isinstance(failure.error, errors.StepTimeout)
    assert (failure.step, failure.retrying) == ("charge", False)


def test_a_step_between_timed_out_tries_reads_as_retrying(
    store: Store, client: Client, release: threading.Event
) -> None:
    app = App(store.url, schema=store.schema)
    slow = RetryPolicy(backoff="fixed", base=3600, max_attempts=3, timeout=0.2)

    @app.workflow("test.timeouts.retrying.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.step("fetch", release.wait, 60, retry=slow)

    run_id = client.start("test.timeouts.retrying.v1").id
    with working(app):
        wait_until(lambda: client.get(run_id).waiting_states == ["retrying"], 20, lambda: "no")
    api = Api(store)
    try:
        [fetch] = api.get(f"{PREFIX}/runs/{run_id}/steps").json()
    finally:
        api.close()
    assert (fetch["status"], fetch["attempts"]) == ("retrying", 1)


@pytest.mark.parametrize("timeout", [0, -1, "soon", True, float("nan")])
def test_a_bad_step_timeout_fails_the_run_at_once_naming_it(
    store: Store, app: App, client: Client, timeout: Any
) -> None:
    @app.workflow("test.timeouts.bad.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.step("fetch", lambda: "never", timeout=timeout)

    run_id = client.start("test.timeouts.bad.v1").id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.FAILED
    assert "InvalidArgument" in (run.last_error or "")
    assert "step timeout" in (run.last_error or "")
    assert run.attempt == 1
    assert client.steps(run_id) == []


def test_a_transactional_step_refuses_a_timeout(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.timeouts.transaction.v1")
    def body(payload: Any, ctx: Context) -> Any:
        # ``timeout=`` is the function's own keyword, as before; a policy's is refused.
        kept = ctx.transaction("kwarg", lambda conn, timeout: timeout, timeout=5)
        try:
            ctx.transaction("write", lambda conn: None, retry=RetryPolicy(timeout=1))
        except errors.InvalidArgument as exc:
            return {"kept": kept, "refused": str(exc)}
        return None

    run_id = client.start("test.timeouts.transaction.v1").id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result["kept"] == 5
    assert "ctx.transaction takes no timeout" in run.result["refused"]


@pytest.mark.parametrize("value", [0, "-1s", "never", False])
def test_a_retry_policy_refuses_a_bad_timeout_naming_it(value: Any) -> None:
    with pytest.raises(errors.InvalidArgument, match="retry timeout"):
        RetryPolicy(timeout=value)


def test_a_workflows_own_policy_refuses_a_timeout() -> None:
    app = App("sqlite:///unused.db")
    with pytest.raises(errors.InvalidArgument, match="bounds a step's try"):
        app.workflow("test.timeouts.run.v1", retry=RetryPolicy(timeout=1))(lambda p: p)
