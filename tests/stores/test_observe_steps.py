"""Observer hooks of a workflow's durable calls, on both stores, with a real worker.

One workflow meets every hook of the durable layer: a step that fails once and is
retried, a signal wait, a child it starts and waits for, and a last step. Its runs take
three attempts, and the observer must see each step's hooks once per try of the step,
nothing for what a replay answers from the journal, and the wrappers entered where the
user's code runs (a tracer's span must be current inside it). An observer that raises
must fail nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Store
from test_durable import QUICK, wait_suspended, wait_terminal, working

from simpleworkflow import Break, Client, Context, Continue, RunStatus, observe
from simpleworkflow.app import App
from simpleworkflow.models import Run

#: What a tracer would make current: the span its ``around_*`` wrapper opened.
SPAN: contextvars.ContextVar[str | None] = contextvars.ContextVar("span", default=None)

PARENT = "test.observe.parent.v1"
CHILD = "test.observe.child.v1"


class Recorder(observe.Observer):
    """Notes every hook of the durable layer, keyed by the run it is about (a child's
    ``run_created`` by its parent), and opens a "span" in each wrapper."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seen: list[tuple[str, str]] = []
        self.step_threads: dict[tuple[str, int], str] = {}
        self.events: list[object] = []

    def note(self, run_id: str, text: str, event: object = None) -> None:
        with self._lock:
            self.seen.append((run_id, text))
            if event is not None:
                self.events.append(event)

    def of(self, run_id: str) -> list[str]:
        with self._lock:
            return [text for key, text in self.seen if key == run_id]

    def step_started(self, event: observe.StepStarted) -> None:
        self.note(event.run.id, f"started {event.step} {event.attempt}", event)

    def step_completed(self, event: observe.StepCompleted) -> None:
        self.note(event.run.id, f"completed {event.step} {event.attempt}", event)

    def step_failed(self, event: observe.StepFailed) -> None:
        text = f"failed {event.step} {event.attempt} retrying={event.retrying}"
        self.note(event.run.id, text, event)

    def step_retried(self, event: observe.StepRetried) -> None:
        self.note(event.run.id, f"retried {event.step} {event.attempt} in {event.delay:g}s")

    def signal_consumed(self, event: observe.SignalConsumed) -> None:
        self.note(event.run.id, f"consumed {event.event}")

    def run_created(self, event: observe.RunCreated) -> None:
        key = event.run.parent_id or event.run.id
        self.note(key, f"created {event.run.type} created={event.created}", event)

    @contextlib.contextmanager
    def around_attempt(self, run: Run, worker_id: str) -> Iterator[None]:
        self.note(run.id, "attempt")
        token = SPAN.set(f"attempt of {run.id}")
        try:
            yield
        finally:
            SPAN.reset(token)
            self.note(run.id, "attempt end")

    @contextlib.contextmanager
    def around_step(self, run: Run, step: str, attempt: int) -> Iterator[None]:
        with self._lock:
            self.step_threads[(step, attempt)] = threading.current_thread().name
        token = SPAN.set(f"step {step} {attempt}")
        try:
            yield
        finally:
            SPAN.reset(token)


class Witness:
    """What the step functions saw, noted by themselves: their thread and current span."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.steps: list[tuple[str, str | None]] = []  # (thread, span) per call
        self.handler_spans: list[str | None] = []

    def step(self, fails: bool = False) -> str:
        with self._lock:
            self.steps.append((threading.current_thread().name, SPAN.get()))
            first = len(self.steps) == 1
        if fails and first:
            raise ConnectionError("card network down")
        return "ok"

    def handler(self) -> None:
        with self._lock:
            self.handler_spans.append(SPAN.get())


def register(app: App, witness: Witness, sync: bool) -> None:
    """The parent workflow, as a ``def`` body or an ``async def`` one, and its child."""

    if sync:

        @app.workflow(PARENT)
        def parent(payload: Any, ctx: Context) -> Any:
            witness.handler()
            ctx.step("charge", witness.step, True, retry=QUICK)
            signal = ctx.wait_for_event("approval", event="approved")
            child = ctx.wait_child(ctx.start_child(CHILD))
            return [signal, child, ctx.step("receipt", witness.step)]

    else:

        @app.workflow(PARENT)
        async def parent(payload: Any, ctx: Context) -> Any:
            witness.handler()
            await ctx.step("charge", witness.step, True, retry=QUICK)
            signal = await ctx.wait_for_event("approval", event="approved")
            child = await ctx.wait_child(await ctx.start_child(CHILD))
            return [signal, child, await ctx.step("receipt", witness.step)]

    @app.workflow(CHILD)
    async def child(payload: Any, ctx: Context) -> Any:
        return await ctx.wait_for_event("go", event="go")


def run_parent(store: Store, app: App, client: Client, recorder: Recorder) -> str:
    """Start the parent, approve it, let its child go once the parent waits for it, and
    wait for the parent's end; return its id."""
    run_id = client.start(PARENT).id
    client.signal(run_id, "approved", {"by": "ops"})  # stored until the wait takes it
    with working(app):
        wait_suspended(client, run_id, "child")
        created = [e for e in recorder.events if isinstance(e, observe.RunCreated)]
        assert len(created) == 1, recorder.seen
        client.signal(created[0].run.id, "go", {"n": 7})
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == [{"by": "ops"}, {"n": 7}, "ok"]
    return run_id


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema, retry=QUICK)


@pytest.mark.parametrize("sync", [False, True], ids=["async_body", "def_body"])
def test_durable_calls_fire_their_hooks_in_order_and_replays_fire_none(
    store: Store, app: App, client: Client, sync: bool
) -> None:
    recorder, witness = Recorder(), Witness()
    app.observe(recorder)
    register(app, witness, sync)

    run_id = run_parent(store, app, client, recorder)

    assert recorder.of(run_id) == [
        "attempt",
        "started charge 1",
        "failed charge 1 retrying=True",
        "retried charge 1 in 0.2s",  # the step's policy: fixed 0.2 s
        "attempt end",
        "attempt",
        "started charge 2",
        "completed charge 2",
        "consumed approved",
        f"created {CHILD} created=True",
        "attempt end",
        "attempt",  # charge, the wait and the child come from the journal: no hook
        "started receipt 1",
        "completed receipt 1",
        "attempt end",
    ]
    failure = next(e for e in recorder.events if isinstance(e, observe.StepFailed))
    assert isinstance(failure.error, ConnectionError)
    done = [e for e in recorder.events if isinstance(e, observe.StepCompleted)]
    assert all(e.duration >= 0 and e.run.id == run_id for e in done)


@pytest.mark.parametrize("sync", [False, True], ids=["async_body", "def_body"])
def test_the_wrappers_enclose_the_users_code_on_the_thread_that_runs_it(
    store: Store, app: App, client: Client, sync: bool
) -> None:
    recorder, witness = Recorder(), Witness()
    app.observe(recorder)
    register(app, witness, sync)

    run_id = run_parent(store, app, client, recorder)

    # Each try of a step ran inside its own span, on the thread around_step was entered on.
    tries = [("charge", 1), ("charge", 2), ("receipt", 1)]
    assert [span for _, span in witness.steps] == [f"step {s} {a}" for s, a in tries]
    assert [thread for thread, _ in witness.steps] == [recorder.step_threads[t] for t in tries]
    # A def body runs in a thread, into which the attempt's span was carried.
    assert witness.handler_spans == [f"attempt of {run_id}"] * 3


class Broken(observe.Observer):
    """Raises wherever it can: in hooks, in making a wrapper, and on leaving one."""

    def step_started(self, event: observe.StepStarted) -> None:
        raise RuntimeError("metrics exporter down")

    def step_completed(self, event: observe.StepCompleted) -> None:
        raise RuntimeError("metrics exporter down")

    def step_failed(self, event: observe.StepFailed) -> None:
        raise RuntimeError("metrics exporter down")

    def signal_consumed(self, event: observe.SignalConsumed) -> None:
        raise RuntimeError("metrics exporter down")

    def run_created(self, event: observe.RunCreated) -> None:
        raise RuntimeError("metrics exporter down")

    def around_attempt(self, run: Run, worker_id: str) -> contextlib.AbstractContextManager[None]:
        raise RuntimeError("tracer down")

    @contextlib.contextmanager
    def around_step(self, run: Run, step: str, attempt: int) -> Iterator[None]:
        yield
        raise RuntimeError("tracer down on the way out")


def test_an_observer_that_raises_fails_nothing(store: Store, app: App, client: Client) -> None:
    recorder, witness = Recorder(), Witness()
    app.observe(Broken())
    app.observe(recorder)  # after the broken one: it is still called
    register(app, witness, sync=False)

    run_id = run_parent(store, app, client, recorder)

    assert len(witness.steps) == 3, "each try of a step ran once"
    assert "completed receipt 1" in recorder.of(run_id)
    assert client.get(run_id).attempt == 0, "no attempt of the run failed"


def test_a_step_out_of_attempts_fires_failed_without_a_retry(
    store: Store, app: App, client: Client
) -> None:
    recorder = Recorder()
    app.observe(recorder)

    @app.workflow("test.observe.hopeless.v1")
    async def hopeless(payload: Any, ctx: Context) -> Any:
        def refuse() -> None:
            raise ValueError("card declined")

        return await ctx.step("charge", refuse, retry=dataclasses.replace(QUICK, max_attempts=2))

    run_id = client.start("test.observe.hopeless.v1", max_attempts=1).id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.FAILED
    assert recorder.of(run_id) == [
        "attempt",
        "started charge 1",
        "failed charge 1 retrying=True",
        "retried charge 1 in 0.2s",
        "attempt end",
        "attempt",
        "started charge 2",
        "failed charge 2 retrying=False",
        "attempt end",
    ]


@pytest.mark.parametrize("sync", [False, True], ids=["async_body", "def_body"])
def test_steps_in_loops_and_joins_fire_their_hooks_and_spans_by_path(
    store: Store, app: App, client: Client, sync: bool
) -> None:
    recorder, witness = Recorder(), Witness()
    app.observe(recorder)

    if sync:

        @app.workflow("test.observe.scoped.v1")
        def scoped(payload: Any, ctx: Context) -> Any:
            def turn(n: int) -> Any:
                ctx.step("work", witness.step)
                return Break(n) if n == 1 else Continue(n + 1)

            ctx.loop("items", 0, turn)
            return ctx.join("both", {"a": lambda: ctx.step("call", witness.step)})

    else:

        @app.workflow("test.observe.scoped.v1")
        async def scoped(payload: Any, ctx: Context) -> Any:
            async def turn(n: int) -> Any:
                await ctx.step("work", witness.step)
                return Break(n) if n == 1 else Continue(n + 1)

            await ctx.loop("items", 0, turn)
            return await ctx.join("both", {"a": lambda: ctx.step("call", witness.step)})

    run_id = client.start("test.observe.scoped.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert recorder.of(run_id) == [
        "attempt",
        "started items/~0/work 1",
        "completed items/~0/work 1",
        "started items/~1/work 1",
        "completed items/~1/work 1",
        "started both/a/call 1",
        "completed both/a/call 1",
        "attempt end",
    ]
    assert [span for _, span in witness.steps] == [
        "step items/~0/work 1",
        "step items/~1/work 1",
        "step both/a/call 1",
    ]
