"""The worker in-process, on both stores: retries, failures, timeouts, cancellation, heartbeats.

Each test runs one or two :class:`IntentPoller` s on threads of their own, against a real
store, with handlers defined in the test that note what they did in a list (the ledger).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import threading
import time
import weakref
from typing import Any

import psycopg
import pytest
from conftest import Store, poller_thread
from worker_app import wait_until

from simpleworkflow import Client, Context, RunStatus, errors
from simpleworkflow.app import App
from simpleworkflow.backends import Backend
from simpleworkflow.backends.base import LOST, Claim, Outcomes, Success
from simpleworkflow.retry import RetryPolicy
from simpleworkflow.worker import IntentPoller

QUICK_RETRY = RetryPolicy(backoff="fixed", base=0.2, jitter=0)


class Ledger:
    """What handlers did, as they tell it: ``(event, run id, attempt)`` tuples."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.lines: list[tuple[str, str, int]] = []

    def note(self, event: str, ctx: Context) -> None:
        with self._lock:
            self.lines.append((event, ctx.run_id, ctx.attempt))

    def events(self, run_id: str) -> list[str]:
        with self._lock:
            return [event for event, run, _ in self.lines if run == run_id]

    def attempts(self, event: str, run_id: str) -> list[int]:
        with self._lock:
            return [n for e, run, n in self.lines if e == event and run == run_id]


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema, retry=QUICK_RETRY)


def working(app: App, **options: Any) -> contextlib.AbstractContextManager[IntentPoller]:
    """A poller for ``app`` on a thread for the length of a ``with`` block."""
    return poller_thread(app, **{"type_prefixes": ["test.%"], "poll_interval": 0.2, **options})


def lifecycle(client: Client, run_id: str) -> list[str]:
    return [e.event_type for e in client.events(run_id) if e.event_type != "heartbeat"]


def wait_terminal(client: Client, run_id: str, timeout: float = 15) -> Any:
    def describe() -> str:
        run = client.get(run_id)
        return f"run is {run.status} after events {lifecycle(client, run_id)}"

    wait_until(lambda: client.get(run_id).is_terminal, timeout, describe)
    return client.get(run_id)


def held_for(seconds: float, client: Client, run_id: str) -> Any:
    """Check, for ``seconds``, that the run stays as it is now; return it."""
    before = client.get(run_id)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = client.get(run_id)
        assert (now.status, now.result, now.attempt) == (
            before.status,
            before.result,
            before.attempt,
        )
        time.sleep(0.1)
    return before


# -- registration ------------------------------------------------------------------------


def _no_payload() -> None: ...


def _three(payload: Any, ctx: Any, extra: Any) -> None: ...


def _keyword_only(*, payload: Any) -> None: ...


async def _async_no_payload() -> None: ...


@pytest.mark.parametrize(
    "handler", [_no_payload, _three, _keyword_only, _async_no_payload, lambda: None, 42]
)
def test_a_handler_that_cannot_take_the_payload_is_refused_when_registered(
    handler: Any,
) -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        App().register("test.refused.v1", handler)
    message = str(caught.value)
    assert message.startswith("the handler of 'test.refused.v1'")
    assert "`def handler(payload)` or `def handler(payload, ctx)`" in message or (
        "must be a function" in message
    )
    if callable(handler) and hasattr(handler, "__code__"):
        assert f"{__file__}, line {handler.__code__.co_firstlineno}" in message


def _payload_only(payload: Any) -> None: ...


def _optional_ctx(payload: Any, ctx: Any = None) -> None: ...


def _star(*args: Any) -> None: ...


@pytest.mark.parametrize(
    ("handler", "takes_context"),
    [(_payload_only, False), (_optional_ctx, True), (_star, True), (dataclasses.asdict, False)],
)
def test_handlers_that_take_the_payload_are_accepted(handler: Any, takes_context: bool) -> None:
    assert App().register("test.accepted.v1", handler).takes_context is takes_context


# -- retries and failures ----------------------------------------------------------------


def test_a_failing_handler_is_retried_until_it_succeeds(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.flaky.v1")
    def flaky(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        ledger.note("start", ctx)
        if ctx.attempt < 3:
            raise ValueError(f"flaky failure {ctx.attempt}")
        return {"attempt": ctx.attempt}

    run_id = client.start("test.flaky.v1", {"n": 1}).id
    with working(app):
        run = wait_terminal(client, run_id)

    assert (run.status, run.attempt, run.result) == (RunStatus.SUCCEEDED, 2, {"attempt": 3})
    assert ledger.attempts("start", run_id) == [1, 2, 3]
    assert lifecycle(client, run_id) == [
        "created",
        *["leased", "started", "retried"] * 2,
        "leased",
        "started",
        "succeeded",
    ]
    retried = [e for e in client.events(run_id) if e.event_type == "retried"]
    assert [e.data["error"] for e in retried] == [
        {"type": "ValueError", "message": "flaky failure 1"},
        {"type": "ValueError", "message": "flaky failure 2"},
    ]
    assert [e.data["attempt"] for e in retried] == [1, 2]
    assert all(e.data["retry_at"] for e in retried)
    assert "flaky failure 2" in (run.last_error or "")  # the last failure stays on record


def test_a_def_handlers_context_is_freed_when_its_run_ends_not_by_the_garbage_collector(
    app: App, client: Client
) -> None:
    # A def handler's call and its future referred to each other: what the call held (the
    # handler's arguments) lived on, for every run, until the cyclic collector came by.
    contexts: list[weakref.ref[Context]] = []

    @app.workflow("test.plain.v1")
    def plain(payload: Any, ctx: Context) -> None:
        contexts.append(weakref.ref(ctx))

    assert_freed_without_the_collector(app, client, "test.plain.v1", contexts)
    assert len(contexts) == 5


@pytest.mark.parametrize("kind", ["def", "async def"])
def test_an_attempts_state_is_freed_when_its_run_ends_not_by_the_garbage_collector(
    app: App, client: Client, kind: str
) -> None:
    # The attempt's state and its journal referred to each other (its stop request, the
    # journal's clock): every run, of either kind of handler, left them and all they held
    # (the lease, the task, its context) to the cyclic collector.
    held: list[weakref.ref[Any]] = []

    def note(ctx: Context) -> None:
        held.extend([weakref.ref(ctx), weakref.ref(ctx._state)])

    if kind == "def":

        @app.workflow("test.freed.v1")
        def plain(payload: Any, ctx: Context) -> None:
            note(ctx)

    else:

        @app.workflow("test.freed.v1")
        async def coroutine(payload: Any, ctx: Context) -> None:
            note(ctx)

    assert_freed_without_the_collector(app, client, "test.freed.v1", held)
    assert len(held) == 10


def assert_freed_without_the_collector(
    app: App, client: Client, run_type: str, refs: list[weakref.ref[Any]]
) -> None:
    """Five runs of ``run_type`` succeed with the cyclic collector off, and every object
    their handlers noted in ``refs`` is freed soon after: by reference counts alone."""

    def alive() -> int:
        return sum(ref() is not None for ref in refs)

    gc.collect()
    gc.disable()
    try:
        with working(app):
            run_ids = [client.start(run_type).id for _ in range(5)]
            for run_id in run_ids:
                assert wait_terminal(client, run_id).status is RunStatus.SUCCEEDED
            wait_until(lambda: alive() == 0, 5, lambda: f"{alive()} of {len(refs)} alive")
    finally:
        gc.enable()


def test_a_run_fails_once_its_attempts_are_used_up(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.broken.v1")
    def broken_handler(payload: Any, ctx: Context) -> None:
        ledger.note("start", ctx)
        raise ValueError("the widget is broken")

    run_id = client.start("test.broken.v1", max_attempts=2).id
    with working(app):
        run = wait_terminal(client, run_id)
        held_for(0.5, client, run_id)

    assert (run.status, run.attempt) == (RunStatus.FAILED, 2)
    assert ledger.attempts("start", run_id) == [1, 2]
    assert lifecycle(client, run_id)[-4:] == ["retried", "leased", "started", "failed"]
    error = run.last_error or ""
    assert "Traceback (most recent call last)" in error
    assert "broken_handler" in error  # the frame that raised
    assert "ValueError: the widget is broken" in error
    failed = client.events(run_id)[-1].data
    assert failed["error"]["type"] == "ValueError"
    assert "broken_handler" in failed["error"]["traceback"]


class QuotaExceeded(Exception):
    pass


@pytest.mark.parametrize(
    ("error", "type_name"),
    [
        (errors.PermanentError("card declined"), "simpleworkflow.errors.PermanentError"),
        (QuotaExceeded("card declined"), f"{__name__}.QuotaExceeded"),
    ],
    ids=["PermanentError", "non_retryable"],
)
def test_a_non_retryable_error_fails_the_run_at_once(
    app: App, client: Client, ledger: Ledger, error: Exception, type_name: str
) -> None:
    @app.workflow("test.charge.v1", retry=RetryPolicy(base=0.1, non_retryable=(QuotaExceeded,)))
    def charge(payload: Any, ctx: Context) -> None:
        ledger.note("start", ctx)
        raise error

    run_id = client.start("test.charge.v1", max_attempts=5).id
    with working(app):
        run = wait_terminal(client, run_id)
        held_for(0.5, client, run_id)

    assert (run.status, run.attempt) == (RunStatus.FAILED, 1)
    assert ledger.attempts("start", run_id) == [1]
    assert lifecycle(client, run_id) == ["created", "leased", "started", "failed"]
    failed = client.events(run_id)[-1].data
    assert failed["retryable"] is False
    assert failed["error"]["type"] == type_name
    assert "card declined" in (run.last_error or "")


def test_a_def_handler_that_raises_stop_iteration_fails_its_attempt(
    app: App, client: Client
) -> None:
    """An asyncio future refuses StopIteration; the attempt must fail, not hang."""

    @app.workflow("test.exhausted.v1")
    def exhausted(payload: Any) -> Any:
        return next(iter(()))

    run_id = client.start("test.exhausted.v1", max_attempts=1).id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.FAILED
    assert "StopIteration" in (run.last_error or "")


@pytest.mark.parametrize(
    ("message", "stored"),
    [("bad \x00 byte", "bad \\x00 byte"), ("caf\udce9.txt", "caf\\udce9.txt")],
    ids=["nul", "lone_surrogate"],
)
def test_an_error_message_no_store_accepts_is_stored_escaped(
    app: App, client: Client, message: str, stored: str
) -> None:
    @app.workflow("test.binary.v1")
    def binary(payload: Any) -> None:
        raise ValueError(message)

    @app.workflow("test.after.v1")
    def after(payload: Any) -> str:
        return "still working"

    run_id = client.start("test.binary.v1", max_attempts=2).id
    with working(app):
        run = wait_terminal(client, run_id)
        later = client.start("test.after.v1").id
        assert wait_terminal(client, later).result == "still working"

    assert (run.status, run.attempt) == (RunStatus.FAILED, 2)
    assert f"ValueError: {stored}" in (run.last_error or "")
    retried = next(e for e in client.events(run_id) if e.event_type == "retried")
    assert retried.data["error"]["message"] == stored


def test_a_result_that_is_not_json_fails_the_run_at_once(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.tags.v1")
    def tags(payload: Any, ctx: Context) -> dict[str, Any]:
        ledger.note("start", ctx)
        return {"tags": {"a", "b"}}

    run_id = client.start("test.tags.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert (run.status, run.attempt, run.result) == (RunStatus.FAILED, 1, None)
    assert ledger.attempts("start", run_id) == [1]
    assert 'result["tags"]: a value of type set is not JSON' in (run.last_error or "")
    assert "use a list instead" in (run.last_error or "")


def test_a_handler_past_its_timeout_fails_and_is_told_to_stop(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.slow.v1", timeout=0.3)
    def slow(payload: Any, ctx: Context) -> None:
        ledger.note("start", ctx)
        deadline = time.monotonic() + 30
        while not ctx.is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.02)
        ledger.note("stopped" if ctx.is_cancelled() else "ran on", ctx)

    @app.workflow("test.slow.async.v1", timeout=0.3)
    async def slow_async(payload: Any, ctx: Context) -> None:
        ledger.note("start", ctx)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            ledger.note("cancelled", ctx)
            raise

    sync_id = client.start("test.slow.v1", max_attempts=2).id
    async_id = client.start("test.slow.async.v1", max_attempts=1).id
    with working(app):
        sync_run = wait_terminal(client, sync_id)
        async_run = wait_terminal(client, async_id)
        wait_until(
            lambda: ledger.events(sync_id) == ["start", "stopped"] * 2,
            5,
            lambda: f"the timed-out sync handler was not asked to stop: {ledger.events(sync_id)}",
        )

    assert (sync_run.status, sync_run.attempt) == (RunStatus.FAILED, 2)
    assert (async_run.status, async_run.attempt) == (RunStatus.FAILED, 1)
    assert ledger.events(async_id) == ["start", "cancelled"]
    for run in (sync_run, async_run):
        assert "HandlerTimeout" in (run.last_error or "")
        assert "longer than its 0.3s timeout" in (run.last_error or "")
    assert lifecycle(client, sync_id)[-4:] == ["retried", "leased", "started", "failed"]


def test_the_next_claim_does_not_wait_for_the_last_outcome_to_be_written(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    """A returned handler frees its slot while its outcome is still being written."""
    if store.kind != "postgres":
        pytest.skip("holds a row lock from another connection, which SQLite does not have")
    release_first = threading.Event()

    @app.workflow("test.slot.v1")
    def handler(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        ledger.note("start", ctx)
        if payload["n"] == 1:
            assert release_first.wait(15)
        return payload

    first = client.start("test.slot.v1", {"n": 1}).id
    with working(app, concurrency=1):
        wait_until(lambda: ledger.events(first) == ["start"], 15, lambda: "first never started")
        with psycopg.connect(store.url) as blocker:
            # The first run's outcome cannot be written while this lock is held.
            blocker.execute(
                f'select 1 from "{store.schema}".workflow_run where id = %s for update', (first,)
            )
            second = client.start("test.slot.v1", {"n": 2}).id
            release_first.set()
            wait_until(
                lambda: ledger.events(second) == ["start"],
                15,
                lambda: "the second run waited for the first one's outcome to be written",
            )
            assert client.get(first).status is RunStatus.LEASED  # still being written
        assert wait_terminal(client, first).status is RunStatus.SUCCEEDED
        assert wait_terminal(client, second).status is RunStatus.SUCCEEDED


# -- cancellation ------------------------------------------------------------------------


def test_cancel_stops_running_handlers_and_the_run_stays_cancelled(
    app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.loop.v1")
    def loop(payload: Any, ctx: Context) -> str:
        ledger.note("start", ctx)
        deadline = time.monotonic() + 30
        while not ctx.is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.02)
        ledger.note("stopped", ctx)
        return "finished anyway"  # returned after the cancel: must not be recorded

    @app.workflow("test.wait.v1")
    async def wait(payload: Any, ctx: Context) -> str:
        ledger.note("start", ctx)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            ledger.note("cancelled", ctx)
            raise
        return "slept"

    sync_id = client.start("test.loop.v1").id
    async_id = client.start("test.wait.v1").id
    with working(app):
        wait_until(
            lambda: ledger.events(sync_id) and ledger.events(async_id),
            10,
            "the handlers never started",
        )
        assert client.cancel(sync_id, reason="no longer needed")
        assert client.cancel(async_id)
        wait_until(
            lambda: (
                ledger.events(sync_id) == ["start", "stopped"]
                and ledger.events(async_id) == ["start", "cancelled"]
            ),
            5,
            lambda: f"handlers did not stop: {ledger.lines}",
        )
        for run_id in (sync_id, async_id):
            run = held_for(2.0, client, run_id)
            assert run.status is RunStatus.CANCELLED
            assert run.result is None
            assert lifecycle(client, run_id) == ["created", "leased", "started", "cancelled"]
    assert client.events(sync_id)[-1].data == {"reason": "no longer needed"}


# -- leases ------------------------------------------------------------------------------


def test_heartbeats_keep_long_handlers_from_being_taken_over(
    app: App, client: Client, ledger: Ledger
) -> None:
    lease = 1.5

    @app.workflow("test.long.v1")
    def long_sync(payload: Any, ctx: Context) -> str:
        ledger.note("start", ctx)
        time.sleep(4 * lease)
        return "sync done"

    @app.workflow("test.long.async.v1")
    async def long_async(payload: Any, ctx: Context) -> str:
        ledger.note("start", ctx)
        await asyncio.sleep(4 * lease)
        return "async done"

    sync_id = client.start("test.long.v1").id
    async_id = client.start("test.long.async.v1").id
    # Two workers: either would reap and retake a lease that was allowed to expire.
    with (
        working(app, lease_duration=lease, worker_id="w-one"),
        working(app, lease_duration=lease, worker_id="w-two"),
    ):
        sync_run = wait_terminal(client, sync_id, timeout=20)
        async_run = wait_terminal(client, async_id, timeout=20)

    assert (sync_run.status, sync_run.result) == (RunStatus.SUCCEEDED, "sync done")
    assert (async_run.status, async_run.result) == (RunStatus.SUCCEEDED, "async done")
    for run in (sync_run, async_run):
        assert run.attempt == 0
        assert ledger.events(run.id) == ["start"]
        assert lifecycle(client, run.id) == ["created", "leased", "started", "succeeded"]
        heartbeats = [e for e in client.events(run.id) if e.event_type == "heartbeat"]
        assert len(heartbeats) >= 4, f"only {len(heartbeats)} heartbeats in {4 * lease}s"
        assert {e.data["worker_id"] for e in heartbeats} == {run.leased_by}


def test_an_outcome_the_store_refuses_fails_alone_and_fails_its_run_at_once(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    """The refused outcome is written alone, so the others of its batch count; its run is
    failed with OutcomeRefused rather than left leased until the lease expires."""

    @app.workflow("test.batch.v1")
    def batch(payload: Any, ctx: Context) -> int:
        ledger.note("start", ctx)
        time.sleep(0.2)  # finish together, so that outcomes share a write
        return ctx.attempt

    runs = [client.start("test.batch.v1", {"n": n}).id for n in range(5)]
    poison = runs[2]
    backend = store.backend()
    finish = backend.finish

    def refusing(outcomes: Outcomes, worker_id: str, reason: str = "shutdown") -> Any:
        if any(s.run_id == poison and s.result == "1" for s in outcomes.succeeded):
            raise ValueError("the store refused this outcome")
        return finish(outcomes, worker_id, reason)

    backend.finish = refusing  # type: ignore[method-assign]
    with working(app, backend=backend, concurrency=5, lease_duration=1):
        finished = [wait_terminal(client, run_id) for run_id in runs]

    assert [(r.status, r.result) for r in finished] == [(RunStatus.SUCCEEDED, 1)] * 2 + [
        (RunStatus.FAILED, None)
    ] + [(RunStatus.SUCCEEDED, 1)] * 2
    assert ledger.attempts("start", poison) == [1]
    events = client.events(poison)
    [failed] = [e for e in events if e.event_type == "failed"]
    assert failed.data["error"]["type"] == "simpleworkflow.errors.OutcomeRefused"
    assert "the store refused this outcome" in failed.data["error"]["message"]
    assert not [e for e in events if e.data.get("reason") == "lease_expired"]


def test_writes_with_a_stale_lease_token_are_rejected(store: Store, client: Client) -> None:
    """The fence itself: once a run is reclaimed, the old token changes nothing."""
    run_id = client.start("test.fenced.v1").id
    backend: Backend = store.backend()
    try:
        claim = Claim(worker_id="w-old", types=("test.fenced.v1",), limit=1, lease_seconds=30)
        (old,) = backend.execute(backend.claim(claim))
        store.sql("update workflow_run set status = 'pending' where id = ?", run_id)
        (new,) = backend.execute(backend.claim(dataclasses.replace(claim, worker_id="w-new")))
        assert new.token != old.token

        stale = Outcomes(succeeded=[Success(run_id, old.token, '"stale"')])
        assert backend.execute(backend.finish(stale, "w-old")) == set()
        states = backend.execute(backend.heartbeat("w-old", [(run_id, old.token)], 30, True))
        assert states == {run_id: LOST}
        fresh = Outcomes(succeeded=[Success(run_id, new.token, '"fresh"')])
        assert backend.execute(backend.finish(fresh, "w-new")) == {run_id}
    finally:
        backend.close()
    run = client.get(run_id)
    assert (run.status, run.result, run.leased_by) == (RunStatus.SUCCEEDED, "fresh", "w-new")
    assert [e.event_type for e in client.events(run_id)].count("heartbeat") == 0
