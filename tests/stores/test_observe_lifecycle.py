"""One observer on the app sees every hook of a run's life, in order, on both stores.

The workflow has a step that fails once, a sleep, a wait for a signal, a child, and a
first attempt that fails at its end (a retry of the whole run); the second attempt
replays all of it from the journal. Hooks are recorded per run, so the child's own
(interleaved) life is checked apart from its parent's.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from conftest import Store, poller_thread
from worker_app import wait_until

from simpleworkflow import App, Context, Observer, RetryPolicy, Run, RunStatus

PARENT = "obs.life.parent.v1"
CHILD = "obs.life.child.v1"
FAST = RetryPolicy(backoff="fixed", base=0.1, jitter=0)
# The hooks that take an event: not the wrappers, nor ``inject`` (what a tracer adds to
# what is stored, see tests/test_tracing.py).
HOOKS = [
    name
    for name, value in vars(Observer).items()
    if callable(value) and not name.startswith(("_", "around_")) and name != "inject"
]


class Recorder(Observer):
    """Every hook as ``hook`` or ``hook:detail``, by run id; wrappers as enter/leave."""

    def __init__(self) -> None:
        self.by_run: dict[str, list[str]] = {}
        self.other: list[str] = []
        self._lock = threading.Lock()

    def note(self, run_id: str | None, entry: str) -> None:
        with self._lock:
            (self.by_run.setdefault(run_id, []) if run_id else self.other).append(entry)

    def seen(self, run_id: str) -> list[str]:
        with self._lock:
            return list(self.by_run.get(run_id, []))

    @contextlib.contextmanager
    def around_attempt(self, run: Run, worker_id: str) -> Iterator[None]:
        self.note(run.id, "enter attempt")
        try:
            yield
        finally:
            self.note(run.id, "leave attempt")

    @contextlib.contextmanager
    def around_step(self, run: Run, step: str, attempt: int) -> Iterator[None]:
        self.note(run.id, f"enter step {step}#{attempt}")
        try:
            yield
        finally:
            self.note(run.id, f"leave step {step}#{attempt}")


def _hook(name: str) -> Any:
    def record(self: Recorder, event: Any) -> None:
        run = getattr(event, "run", None)
        run_id = run.id if run is not None else getattr(event, "run_id", None)
        detail = next(
            (
                str(value)
                for field in ("outcome", "kind", "step", "event")
                if (value := getattr(event, field, None)) is not None
            ),
            "",
        )
        self.note(run_id, f"{name}:{detail}" if detail else name)

    return record


for _name in HOOKS:
    setattr(Recorder, _name, _hook(_name))


def test_every_hook_fires_in_order_for_a_step_a_sleep_a_signal_a_child_and_a_retry(
    store: Store,
) -> None:
    recorder = Recorder()
    app = App(store.url, schema=store.schema, retry=FAST, observers=[recorder])
    charges: list[int] = []

    def charge() -> str:
        charges.append(1)
        if len(charges) == 1:
            raise ConnectionError("the card service hiccuped")
        return "charged"

    @app.workflow(CHILD)
    async def child(payload: Any, ctx: Context) -> str:
        await ctx.wait_for_event("dispatch", event="ship")
        return "shipped"

    @app.workflow(PARENT)
    async def parent(payload: Any, ctx: Context) -> str:
        await ctx.step("charge", charge, retry=FAST)
        await ctx.set_value("stage", "charged")
        await ctx.stream_append("log", "charged")
        await ctx.stream_close("log")
        await ctx.sleep("nap", 0.2)
        approval = await ctx.wait_for_event("approval", event="approve")
        child_id = await ctx.start_child(CHILD, {"order": 1})
        shipped = await ctx.wait_child(child_id)
        if ctx.attempt == 1:  # counts from 1
            raise RuntimeError("the end of the first attempt fails")
        return f"{approval['by']}:{shipped}"

    with app.client() as client:
        run_id = client.start(PARENT).id
        with poller_thread(app, worker_id="w-life", poll_interval=0.1):
            wait_until(
                lambda: "run_suspended:signal" in recorder.seen(run_id),
                20,
                lambda: f"the run never waited for its signal: {recorder.seen(run_id)}",
            )
            client.signal(run_id, "approve", {"by": "ada"})
            wait_until(
                lambda: "run_suspended:child" in recorder.seen(run_id),
                20,
                lambda: f"the run never waited for its child: {recorder.seen(run_id)}",
            )
            (child_run,) = client.list(type_prefix=CHILD).runs
            wait_until(
                lambda: "run_suspended:signal" in recorder.seen(child_run.id),
                20,
                lambda: f"the child never waited: {recorder.seen(child_run.id)}",
            )
            client.signal(child_run.id, "ship")
            done = client.wait(run_id, timeout=30)
        assert (done.status, done.result) == (RunStatus.SUCCEEDED, "ada:shipped")
        child_id = child_run.id

    # The client's signal_delivered fires after its commit, on the test's thread: the
    # worker may claim the run, and consume the signal, before that. So may it the child
    # before the parent's attempt, which committed it, fires its run_created. Both are
    # checked apart.
    parent_seen, child_seen = (
        [entry for entry in recorder.seen(run) if not entry.startswith("signal_delivered")]
        for run in (run_id, child_id)
    )
    assert child_seen.count("run_created") == 1
    child_seen.remove("run_created")
    for run, event in ((run_id, "approve"), (child_id, "ship")):
        seen = recorder.seen(run)
        delivered = seen.index(f"signal_delivered:{event}")
        assert seen.count(f"signal_delivered:{event}") == 1
        # after the wait began; before or after the worker consumed it (see above)
        assert seen.index("run_suspended:signal") < delivered
    assert parent_seen == [
        "run_created",  # by the client, which shares the app's observers
        # attempt 1: the step fails and is retried later, in a new attempt
        "run_claimed", "attempt_started", "enter attempt",
        "step_started:charge", "enter step charge#1", "leave step charge#1",
        "step_failed:charge", "step_retried:charge",
        "leave attempt", "attempt_finished:suspended", "run_suspended:retry",
        # attempt 2: the step succeeds, the run publishes a value and a stream (never
        # again on the replays that follow); the sleep suspends
        "run_claimed", "run_resumed:retry", "attempt_started", "enter attempt",
        "step_started:charge", "enter step charge#2", "leave step charge#2",
        "step_completed:charge",
        "value_set:value:stage", "stream_appended:@stream:log", "stream_closed:@stream:log#2",
        "leave attempt", "attempt_finished:suspended", "run_suspended:sleep",
        # attempt 3: replays the step, waits for the signal
        "run_claimed", "run_resumed:sleep", "attempt_started", "enter attempt",
        "leave attempt", "attempt_finished:suspended", "run_suspended:signal",
        # attempt 4: takes the signal, starts the child and waits for it
        "run_claimed", "run_resumed:signal", "attempt_started", "enter attempt",
        "signal_consumed:approve",
        "leave attempt", "attempt_finished:suspended", "run_suspended:child",
        # attempt 5: the child is done; the end of the first attempt fails
        "run_claimed", "run_resumed:child", "attempt_started", "enter attempt",
        "leave attempt", "attempt_finished:retried",
        # attempt 6: replays everything and succeeds
        "run_claimed", "attempt_started", "enter attempt",
        "leave attempt", "attempt_finished:succeeded",
    ]  # fmt: skip
    assert child_seen == [
        # run_created, by the parent's attempt 4 through the durable layer: checked above
        "run_claimed", "attempt_started", "enter attempt",
        "leave attempt", "attempt_finished:suspended", "run_suspended:signal",
        "run_claimed", "run_resumed:signal", "attempt_started", "enter attempt",
        "signal_consumed:ship",
        "leave attempt", "attempt_finished:succeeded",
    ]  # fmt: skip
    assert recorder.other == []
    fired = {entry.split(":")[0] for run in (run_id, child_id) for entry in recorder.seen(run)}
    # The four left need a lost lease, a crashed worker, a purge or a fork: see
    # test_observe_worker.py, test_admin.py and test_observe_published.py.
    assert set(HOOKS) - fired == {"lease_lost", "leases_reaped", "runs_deleted", "run_forked"}
    assert len(charges) == 2
