"""The worker's hooks, as an observer registered on the app sees them, on both stores:
claims, attempts and how each ended, suspensions and resumptions, lost leases, reaped runs.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import Store, poller_thread
from test_reaper import expire_lease
from worker_app import wait_until

from simpleworkflow import App, Client, Context, RetryPolicy, RunStatus, observe

FLOW = "obs.flow.v1"
RETRY_IN = 0.2


class Recorder(observe.Observer):
    """Every worker-side hook, in the order called, as ``(hook, event)``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self._lock = threading.Lock()

    def _note(self, hook: str, event: Any) -> None:
        with self._lock:
            self.seen.append((hook, event))

    def run_claimed(self, event: observe.RunClaimed) -> None:
        self._note("claimed", event)

    def run_resumed(self, event: observe.RunResumed) -> None:
        self._note("resumed", event)

    def attempt_started(self, event: observe.AttemptStarted) -> None:
        self._note("started", event)

    def attempt_finished(self, event: observe.AttemptFinished) -> None:
        self._note("finished", event)

    def run_suspended(self, event: observe.RunSuspended) -> None:
        self._note("suspended", event)

    def lease_lost(self, event: observe.LeaseLost) -> None:
        self._note("lease_lost", event)

    def leases_reaped(self, event: observe.LeasesReaped) -> None:
        self._note("reaped", event)

    def names(self) -> list[str]:
        """``hook`` or ``hook:detail`` for each call: the outcome, or the kind of wait."""
        out = []
        for hook, event in list(self.seen):
            detail = getattr(event, "outcome", None) or getattr(event, "kind", None)
            out.append(f"{hook}:{detail}" if detail else hook)
        return out


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def app(store: Store, recorder: Recorder) -> App:
    return App(store.url, schema=store.schema, observers=[recorder])


def test_hooks_fire_in_order_for_a_run_claimed_suspended_resumed_retried_and_succeeding(
    app: App, client: Client, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    @app.workflow(FLOW, retry=RetryPolicy(backoff="fixed", base=RETRY_IN, jitter=0))
    async def flow(payload: Any, ctx: Context) -> str:
        await ctx.sleep("nap", 0.3)
        if ctx.attempt == 1:
            raise RuntimeError("the first attempt fails")
        return "done"

    caplog.set_level(logging.INFO, logger="simpleworkflow.worker")
    run_id = client.start(FLOW).id
    with poller_thread(app, worker_id="w-obs", poll_interval=0.1):
        assert client.wait(run_id, timeout=20).status is RunStatus.SUCCEEDED

    assert recorder.names() == [
        "claimed", "started", "finished:suspended", "suspended:sleep",
        "claimed", "resumed:sleep", "started", "finished:retried",
        "claimed", "started", "finished:succeeded",
    ]  # fmt: skip
    events = [event for _, event in recorder.seen]
    assert {event.run.id for event in events} == {run_id}
    assert [e.run.attempt for h, e in recorder.seen if h == "started"] == [0, 0, 1]
    assert {e.worker_id for h, e in recorder.seen if h in ("claimed", "started")} == {"w-obs"}
    claims = [e for h, e in recorder.seen if h == "claimed"]
    assert all(0 <= e.queued_for < 10 for e in claims)
    finished = [e for h, e in recorder.seen if h == "finished"]
    assert all(e.duration >= 0 for e in finished)
    suspended, retried, succeeded = finished
    assert (suspended.waits, suspended.error) == ("sleeping", None)
    assert (retried.error, retried.retry_in) == ("the first attempt fails", RETRY_IN)
    assert (succeeded.error, succeeded.retry_in) == (None, None)
    (sleep,) = [e for h, e in recorder.seen if h == "suspended"]
    assert sleep.until is not None
    assert abs(sleep.until - datetime.now(UTC)) < timedelta(seconds=30)

    # The outcome log is an observer too, ahead of the app's: its lines are as before.
    lines = [r.getMessage() for r in caplog.records if r.name == "simpleworkflow.worker"]
    assert f"run {run_id} ({FLOW}) attempt 1 failed: the first attempt fails; retrying in 0.2s" in (
        lines
    )
    assert f"run {run_id} ({FLOW}) succeeded on attempt 2" in lines


def test_waits_for_a_signal_and_a_child_are_named_by_their_kind(
    app: App, client: Client, recorder: Recorder
) -> None:
    @app.workflow("obs.child.v1")
    def child(payload: Any) -> str:
        time.sleep(0.5)  # still running when the parent waits for it
        return "child done"

    @app.workflow("obs.parent.v1")
    async def parent(payload: Any, ctx: Context) -> Any:
        kid = await ctx.start_child("obs.child.v1", {}, name="kid")
        await ctx.wait_child(kid)
        return await ctx.wait_for_event("go", event="obs.go")

    run_id = client.start("obs.parent.v1").id
    with poller_thread(app, worker_id="w-obs", poll_interval=0.1):
        wait_until(lambda: "suspended:signal" in recorder.names(), 20, recorder.names)
        client.signal(run_id, "obs.go", {"ok": True})
        assert client.wait(run_id, timeout=20).status is RunStatus.SUCCEEDED

    of_parent = [
        name
        for name, (_, event) in zip(recorder.names(), recorder.seen, strict=True)
        if event.run.id == run_id and name.split(":")[0] in ("suspended", "resumed")
    ]
    assert of_parent == ["suspended:child", "resumed:child", "suspended:signal", "resumed:signal"]
    (wait,) = [e for h, e in recorder.seen if h == "suspended" and e.kind == "signal"]
    assert wait.until is None  # no timeout: only the signal wakes it


def test_a_lease_taken_by_another_worker_is_a_lost_lease(
    store: Store, app: App, client: Client, recorder: Recorder
) -> None:
    started = threading.Event()

    @app.workflow("obs.long.v1")
    async def long(payload: Any, ctx: Context) -> None:
        started.set()
        await ctx.wait_cancelled()

    run_id = client.start("obs.long.v1").id
    with poller_thread(app, worker_id="w-obs", lease_duration=1.5):
        assert started.wait(15)
        store.sql("update workflow_run set lease_token = null where id = ?", run_id)
        wait_until(lambda: "finished:lease_lost" in recorder.names(), 15, recorder.names)

    names = recorder.names()
    assert names[names.index("lease_lost") :] == ["lease_lost", "finished:lease_lost"]
    lost = next(e for h, e in recorder.seen if h == "lease_lost")
    assert (lost.run.id, lost.worker_id, lost.reason) == (run_id, "w-obs", "taken")


def test_a_cancelled_run_ends_its_attempt_as_cancelled(
    app: App, client: Client, recorder: Recorder
) -> None:
    started = threading.Event()

    @app.workflow("obs.long.v1")
    async def long(payload: Any, ctx: Context) -> None:
        started.set()
        await ctx.wait_cancelled()
        ctx.raise_if_cancelled()

    run_id = client.start("obs.long.v1").id
    with poller_thread(app, worker_id="w-obs"):
        assert started.wait(15)
        client.cancel(run_id)
        wait_until(lambda: "finished:cancelled" in recorder.names(), 15, recorder.names)
    assert recorder.names() == ["claimed", "started", "finished:cancelled"]


def test_runs_of_a_dead_worker_are_reported_reaped(
    store: Store, app: App, client: Client, recorder: Recorder
) -> None:
    @app.workflow("obs.quick.v1")
    def quick(payload: Any) -> str:
        return "done"

    run_id = client.start("obs.quick.v1").id
    expire_lease(store, run_id, "w-dead")  # a worker died holding it
    with poller_thread(app, worker_id="w-obs"):
        assert client.wait(run_id, timeout=20).status is RunStatus.SUCCEEDED
    reaped = [e for h, e in recorder.seen if h == "reaped"]
    assert [e.run_ids for e in reaped] == [(run_id,)]
    # Not ordered against the claim: the reaper's commit wakes the listener, whose claim
    # may be heard before the reaper's own task resumes to report (it did, under load).
    assert "claimed" in recorder.names()


class ResumedOnly(observe.Observer):
    """Overrides one hook: the resumption of a run that slept."""

    def __init__(self) -> None:
        self.resumed: list[observe.RunResumed] = []

    def run_resumed(self, event: observe.RunResumed) -> None:
        self.resumed.append(event)


def test_an_observer_of_one_hook_gets_it_and_no_other_event_is_built(
    store: Store, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events are built only for the hooks an observer overrides: the claims, starts,
    suspension and steps of this run make none (the outcome log still hears each end)."""
    built: list[str] = []

    def counted(name: str) -> Any:
        made = getattr(observe, name)

        def build(*args: Any) -> Any:
            built.append(name)
            return made(*args)

        return build

    for name in ("RunClaimed", "AttemptStarted", "RunSuspended", "StepStarted", "StepCompleted"):
        monkeypatch.setattr(observe, name, counted(name))
    only = ResumedOnly()
    app = App(store.url, schema=store.schema, observers=[only])

    @app.workflow(FLOW)
    async def flow(payload: Any, ctx: Context) -> str:
        await ctx.step("one", lambda: 1)
        await ctx.sleep("nap", 0.3)
        return "done"

    run_id = client.start(FLOW).id
    with poller_thread(app, worker_id="w-one", poll_interval=0.1):
        assert client.wait(run_id, timeout=20).status is RunStatus.SUCCEEDED
    assert [(e.run.id, e.kind) for e in only.resumed] == [(run_id, "sleep")]
    assert built == []
