"""Bad values on the error paths, on both stores: step errors whose text no store can hold,
outcomes the store refuses, and names and keys with NUL or lone surrogates.

Each run is executed by a real worker (a poller on a thread, 2 s lease) so that a run the
worker forgot would show up as a lease that expired; step bodies count their executions
in a ledger outside the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import Store, poller_thread
from worker_app import wait_until

from simpleworkflow import App, Client, Context, RetryPolicy, RunStatus, errors
from simpleworkflow.backends import Backend
from simpleworkflow.backends.records import Claim, Suspension
from simpleworkflow.models import Event, Run
from simpleworkflow.worker.outbox import Outbox

QUICK = RetryPolicy(backoff="fixed", base=0.2, jitter=0)
BAD_TEXT = {"nul": "bad\x00byte", "surrogate": "bad\udc80byte"}
ONCE = RetryPolicy(max_attempts=1)


class Counts:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def note(self, key: str) -> int:
        with self._lock:
            self._counts[key] += 1
            return self._counts[key]

    def __getitem__(self, key: str) -> int:
        with self._lock:
            return self._counts[key]


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema, retry=QUICK)


@pytest.fixture
def counts() -> Counts:
    return Counts()


def working(app: App) -> contextlib.AbstractContextManager[Any]:
    return poller_thread(app, type_prefixes=["test.%"], poll_interval=0.1, lease_duration=2)


def finished(client: Client, run_id: str, timeout: float = 20) -> Run:
    wait_until(
        lambda: client.get(run_id).is_terminal,
        timeout,
        lambda: f"run is {client.get(run_id).status}: {kinds(client.events(run_id))}",
    )
    return client.get(run_id)


def kinds(events: list[Event]) -> list[str]:
    return [e.event_type for e in events if e.event_type != "heartbeat"]


def assert_never_left_to_its_lease(client: Client, run_id: str) -> None:
    expired = [e for e in client.events(run_id) if e.data.get("reason") == "lease_expired"]
    assert not expired, f"the worker forgot the run: {kinds(client.events(run_id))}"


@pytest.mark.parametrize("text", sorted(BAD_TEXT))
def test_a_step_error_no_store_can_hold_fails_the_step_after_its_one_attempt(
    app: App, client: Client, counts: Counts, text: str
) -> None:
    @app.workflow("test.errors.once.v1")
    async def body(payload: Any, ctx: Context) -> None:
        def fail() -> None:
            counts.note("step")
            raise ValueError(BAD_TEXT[text])

        await ctx.step("charge", fail, retry=ONCE)

    run_id = client.start("test.errors.once.v1").id
    with working(app):
        run = finished(client, run_id)
    assert counts["step"] == 1, "the step ran again as a retry of the run"
    assert run.status is RunStatus.FAILED and run.attempt == 1
    [failed] = [e for e in client.events(run_id) if e.event_type == "failed"]
    assert failed.data["error"]["type"] == "simpleworkflow.errors.StepFailed"
    escaped = {"nul": "bad\\x00byte", "surrogate": "bad\\udc80byte"}[text]
    assert escaped in failed.data["error"]["message"]
    assert_never_left_to_its_lease(client, run_id)


@pytest.mark.parametrize("text", sorted(BAD_TEXT))
def test_a_transient_step_error_no_store_can_hold_is_retried_as_a_step(
    app: App, client: Client, counts: Counts, text: str
) -> None:
    @app.workflow("test.errors.transient.v1")
    async def body(payload: Any, ctx: Context) -> str:
        def flaky() -> str:
            if counts.note("step") == 1:
                raise ValueError(BAD_TEXT[text])
            return "ok"

        return str(await ctx.step("charge", flaky, retry=QUICK))

    run_id = client.start("test.errors.transient.v1").id
    with working(app):
        run = finished(client, run_id)
    assert (run.status, run.result, run.attempt) == (RunStatus.SUCCEEDED, "ok", 0)
    assert counts["step"] == 2
    [suspended] = [e for e in client.events(run_id) if e.event_type == "step_failed"]
    escaped = {"nul": "bad\\x00byte", "surrogate": "bad\\udc80byte"}[text]
    assert suspended.data["error"]["message"] == escaped
    assert_never_left_to_its_lease(client, run_id)


def test_an_outcome_the_store_refuses_fails_the_run_instead_of_waiting_for_the_lease(
    store: Store, client: Client
) -> None:
    """No store can hold a wake-up 1e300 seconds away: the suspension is refused however
    its text is written, so the run fails, at once, with OutcomeRefused. (The engine
    refuses such a delay where a handler asks for it, as a ``RetryAfter`` say: see
    test_time_range.py; the outbox is handed one here.)"""
    run_id = client.start("test.errors.refused.v1").id
    backend = store.backend()
    try:
        claim = Claim(worker_id="w", types=("test.errors.refused.v1",), limit=1, lease_seconds=30)
        (lease,) = backend.execute(backend.claim(claim))
        events = [{"type": "step_deferred", "data": {"step": "charge"}}]
        suspension = Suspension(run_id, lease.token, events, delay=1e300, waiting_for=None)
        with outbox_of(backend) as (outbox, loop):
            assert loop.run_until_complete(outbox.deliver(suspension)) is True
    finally:
        backend.close()
    run = client.get(run_id)
    assert run.status is RunStatus.FAILED
    [failed] = [e for e in client.events(run_id) if e.event_type == "failed"]
    assert failed.data["error"]["type"] == "simpleworkflow.errors.OutcomeRefused"
    assert "refused to record this attempt's suspension" in failed.data["error"]["message"]
    assert failed.data["retryable"] is False
    assert run.last_error is not None and "OutcomeRefused" in run.last_error


@contextlib.contextmanager
def outbox_of(backend: Backend) -> Iterator[tuple[Outbox, asyncio.AbstractEventLoop]]:
    """An outbox with its writer task, on an event loop of its own; the backend's async
    side (its pool's tasks live on this loop) is closed on it before the loop is."""
    loop = asyncio.new_event_loop()
    outbox = loop.run_until_complete(_made(backend))
    writer = loop.create_task(outbox.run())
    try:
        yield outbox, loop
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(writer)
        loop.run_until_complete(backend.aclose())
        loop.close()


async def _made(backend: Backend) -> Outbox:
    return Outbox(backend, "w")


def test_an_outcome_whose_text_the_store_refuses_is_recorded_made_storable(
    store: Store, client: Client
) -> None:
    """Postgres refuses NUL in the suspension's data; the outbox writes it again escaped.
    SQLite takes it as it is."""
    run_id = client.start("test.errors.outbox.v1").id
    backend = store.backend()
    try:
        claim = Claim(worker_id="w", types=("test.errors.outbox.v1",), limit=1, lease_seconds=30)
        (lease,) = backend.execute(backend.claim(claim))
        suspension = Suspension(
            run_id,
            lease.token,
            [{"type": "sleeping", "data": {"note": "a\x00b"}}],
            delay=60.0,
            waiting_for=None,
        )
        with outbox_of(backend) as (outbox, loop):
            assert loop.run_until_complete(outbox.deliver(suspension)) is True
    finally:
        backend.close()
    assert client.get(run_id).status is RunStatus.PENDING
    [sleeping] = [e for e in client.events(run_id) if e.event_type == "sleeping"]
    stored = "a\x00b" if store.kind == "sqlite" else "a\\x00b"
    assert sleeping.data["note"] == stored


# -- names and keys are checked at the call ----------------------------------------------


CALLS = (
    "step", "sleep", "sleep_until", "wait_for_event", "start_child", "wait_child",
    "now", "uuid", "random",
)  # fmt: skip


def _durable_calls(ctx: Context, name: str) -> dict[str, Any]:
    """Every durable call that takes a name, made with ``name``."""
    child = "01a21669-0000-7000-8000-000000000000"
    return {
        "step": lambda: ctx.step(name, lambda: None),
        "sleep": lambda: ctx.sleep(name, 1),
        "sleep_until": lambda: ctx.sleep_until(name, ctx.run.created_at),
        "wait_for_event": lambda: ctx.wait_for_event(name, event="approve"),
        "start_child": lambda: ctx.start_child("test.errors.child.v1", name=name),
        "wait_child": lambda: ctx.wait_child(child, name=name),
        "now": lambda: ctx.now(name),
        "uuid": lambda: ctx.uuid(name),
        "random": lambda: ctx.random(name),
    }


@pytest.mark.parametrize("text", sorted(BAD_TEXT))
def test_a_durable_call_named_with_text_no_store_can_hold_is_refused_at_the_call(
    app: App, client: Client, store: Store, text: str
) -> None:
    @app.workflow("test.errors.names.v1")
    async def body(payload: Any, ctx: Context) -> dict[str, str]:
        refused = {}
        for call, make in _durable_calls(ctx, BAD_TEXT[text]).items():
            try:
                pending = make()  # raises here, before anything is awaited
            except errors.InvalidArgument as exc:
                refused[call] = str(exc)
            else:
                pending.close()
        return {call: "refused" for call in refused}

    run_id = client.start("test.errors.names.v1").id
    with working(app):
        run = finished(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == dict.fromkeys(CALLS, "refused")
    assert store.count("workflow_step") == 0


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"priority": "high"}, "priority"),
        ({"priority": 10**12}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
    ],
)
def test_a_child_started_with_an_option_no_start_takes_is_refused_at_the_call(
    app: App, client: Client, store: Store, options: dict[str, Any], named: str
) -> None:
    """The checks of ``client.start`` hold for children: the call says what was wrong,
    and nothing is written (no child, no journal row)."""

    @app.workflow("test.errors.child_options.v1")
    async def body(payload: Any, ctx: Context) -> str:
        try:
            ctx.start_child("test.errors.child.v1", **options).close()
        except errors.InvalidArgument as exc:
            return str(exc)
        return "accepted"

    run_id = client.start("test.errors.child_options.v1").id
    with working(app):
        run = finished(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert named in run.result
    assert store.count() == 1
    assert store.count("workflow_step") == 0


# -- a durable call's refusal fails the run in one attempt ------------------------------

#: Each durable call made with arguments it refuses (``other``: a run that is not a child
#: of the caller), and what its message says.
REFUSALS: dict[str, tuple[Callable[[Context, str], Any], str]] = {
    "step-nul": (
        lambda ctx, other: ctx.step("pay\x00ment", lambda: None),
        "step name 'pay\\x00ment' has a NUL character at position 3",
    ),
    "step-surrogate": (
        lambda ctx, other: ctx.step("pay\udc80ment", lambda: None),
        "step name 'pay\\udc80ment' has a lone surrogate (U+DC80) at position 3",
    ),
    "sleep-duration": (lambda ctx, other: ctx.sleep("nap", "soon"), "sleep duration"),
    "wait_for_event-match": (
        lambda ctx, other: ctx.wait_for_event("reply", event="reply", match={"n": float("nan")}),
        'match["n"] is NaN',
    ),
    "wait_child-not-a-child": (
        lambda ctx, other: ctx.wait_child(other),
        "is not a child of this run",
    ),
}


@pytest.mark.parametrize("body_kind", ["async", "def"])
@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_a_durable_call_that_refuses_its_arguments_fails_the_run_in_one_attempt(
    app: App, client: Client, refusal: str, body_kind: str
) -> None:
    """A programming error: every retry would make the same call. The run fails after its
    one attempt (of 3), not retried, with the refusal's message."""
    call, message = REFUSALS[refusal]
    if body_kind == "async":

        @app.workflow("test.errors.refused.v1")
        async def body(payload: Any, ctx: Context) -> None:
            await call(ctx, payload["other"])

    else:

        @app.workflow("test.errors.refused.v1")
        def sync_body(payload: Any, ctx: Context) -> None:
            call(ctx, payload["other"])

    other = client.start("idle.other.v1").id  # no worker here takes this type
    run_id = client.start("test.errors.refused.v1", {"other": other}).id
    with working(app):
        run = finished(client, run_id)
    assert (run.status, run.attempt, run.max_attempts) == (RunStatus.FAILED, 1, 3)
    assert message in (run.last_error or ""), run.last_error
    trail = kinds(client.events(run_id))
    assert "retried" not in trail, trail
    [failed] = [e for e in client.events(run_id) if e.event_type == "failed"]
    assert failed.data["retryable"] is False
    assert failed.data["error"]["type"].rsplit(".", 1)[-1] in ("InvalidArgument", "InvalidPayload")
    assert message in failed.data["error"]["message"]
    assert_never_left_to_its_lease(client, run_id)
