"""Workers wake when a run becomes due, not at their next poll.

Every worker here polls only every 60 s, so a run finished within a few seconds proves
it was woken by a notification or by the worker's own timer for a run it gave back.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any

import psycopg
import pytest
from conftest import Store

from simpleworkflow import App, Client, RetryPolicy, RunStatus
from simpleworkflow.backends import open_backend
from simpleworkflow.backends.base import Claim, OpRunner
from simpleworkflow.backends.ops import Op, Rows, Statement, Stream

SLOW_POLL = 60.0


async def run_until_done(app: App, store: Store, *run_ids: str, timeout: float = 15.0) -> float:
    """Run a worker until the runs end; return how long that took."""
    poller = app.poller(lease_duration=10, poll_interval=SLOW_POLL, concurrency=2)
    task = asyncio.create_task(poller.run_async())
    client = store.async_client()
    started = time.monotonic()
    try:
        while time.monotonic() - started < timeout:
            if all([(await client.get(run_id)).is_terminal for run_id in run_ids]):
                return time.monotonic() - started
            await asyncio.sleep(0.05)
        raise AssertionError(f"runs {run_ids} did not finish within {timeout}s")
    finally:
        poller.stop()
        await task
        await client.aclose()


def test_a_retry_runs_when_due_not_at_the_next_poll(store: Store) -> None:
    app = App(
        store.url, schema=store.schema, retry=RetryPolicy(backoff="fixed", base=1.0, jitter=0)
    )
    attempts: list[int] = []

    @app.workflow("wake.retry.v1")
    def flaky(payload: Any, ctx: Any) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        return "ok"

    run = store.client().start("wake.retry.v1")
    took = asyncio.run(run_until_done(app, store, run.id))
    assert attempts == [1, 2]
    assert store.client().get(run.id).status is RunStatus.SUCCEEDED
    assert took < 10, took


def test_a_durable_sleep_resumes_when_due_not_at_the_next_poll(store: Store) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow("wake.sleep.v1")
    async def sleepy(payload: Any, ctx: Any) -> str:
        await ctx.sleep("nap", 1.0)
        return "rested"

    run = store.client().start("wake.sleep.v1")
    took = asyncio.run(run_until_done(app, store, run.id))
    assert store.client().get(run.id).result == "rested"
    assert took < 10, took


def test_a_delayed_start_runs_when_due_not_at_the_next_poll(store: Store) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow("wake.later.v1")
    def later(payload: Any) -> str:
        return "done"

    async def scenario() -> float:
        poller = app.poller(lease_duration=10, poll_interval=SLOW_POLL)
        task = asyncio.create_task(poller.run_async())
        await asyncio.sleep(0.5)  # the worker is idle when the run arrives
        client = store.async_client()
        run = await client.start("wake.later.v1", delay=1.5)
        started = time.monotonic()
        try:
            while not (await client.get(run.id)).is_terminal:
                assert time.monotonic() - started < 10, "the delayed run was not woken"
                await asyncio.sleep(0.05)
            return time.monotonic() - started
        finally:
            poller.stop()
            await task
            await client.aclose()

    took = asyncio.run(scenario())
    assert 1.0 < took < 10, took  # never before it is due


def test_wake_ups_name_a_due_time_only_for_runs_due_later(store: Store) -> None:
    """A worker never compares its clock with the database's for work that is due now."""
    if store.kind != "postgres":
        pytest.skip("SQLite has no notifications; its workers watch the file instead")

    with psycopg.connect(store.url, autocommit=True) as listener:
        listener.execute("listen simpleworkflow")
        with store.client() as client:
            client.start("test.wake.now.v1")
            client.start("test.wake.later.v1", delay=3600)
            client.start_many([("test.wake.many.v1", {})])
        payloads = [note.payload for note in listener.notifies(timeout=2, stop_after=3)]
    assert payloads[0] == f"wake {store.schema} test.wake.now.v1"
    kind, schema, type_name, due = payloads[1].split(" ")
    assert (kind, schema, type_name) == ("wake", store.schema, "test.wake.later.v1")
    assert 3590 < float(due) - time.time() < 3610
    assert payloads[2] == f"wake {store.schema} test.wake.many.v1"


def event_types(client: Client, run_id: str) -> list[str]:
    return [e.event_type for e in client.events(run_id)]


def test_a_run_held_back_by_a_rate_limit_runs_when_its_window_opens(store: Store) -> None:
    """With a 1/s limit one of two runs is pushed to the next window; the worker's timer
    claims it then, not at its poll a minute later. (Which of the two gets the window's
    token is the claim's order, and two runs of one statement may tie on it.)"""
    app = App(store.url, schema=store.schema)
    app.rate_limit("wake-api", "1/s")

    @app.workflow("wake.rated.v1", rate_limit="wake-api")
    def rated(payload: Any) -> str:
        return "ok"

    client = store.client()
    first, second = client.start_many([("wake.rated.v1", {}), ("wake.rated.v1", {})])
    took = asyncio.run(run_until_done(app, store, first.id, second.id))
    assert {client.get(r.id).status for r in (first, second)} == {RunStatus.SUCCEEDED}
    throttled = [r.id for r in (first, second) if "throttled" in event_types(client, r.id)]
    assert len(throttled) == 1, throttled
    assert took < 10, took


def test_runs_arriving_while_the_worker_claims_never_exceed_its_concurrency(store: Store) -> None:
    """Each start's notification may come while the worker is claiming already (after a
    slot freed) or while the listener claims on its own connection (Postgres): one claim
    at a time, so no more handlers run at once than the worker has slots."""
    app = App(store.url, schema=store.schema)
    running: list[int] = [0, 0]  # now, most at once

    @app.workflow("wake.burst.v1")
    async def burst(payload: Any) -> None:
        running[0] += 1
        running[1] = max(running)
        await asyncio.sleep(random.uniform(0, 0.02))
        running[0] -= 1

    async def scenario() -> list[RunStatus]:
        poller = app.poller(lease_duration=10, poll_interval=SLOW_POLL, concurrency=2)
        task = asyncio.create_task(poller.run_async())
        client = store.async_client()
        try:
            await asyncio.sleep(0.3)
            runs = []
            for _ in range(40):
                runs.append(await client.start("wake.burst.v1"))
                await asyncio.sleep(random.uniform(0, 0.015))
            deadline = time.monotonic() + 30
            while True:
                statuses = [(await client.get(run.id)).status for run in runs]
                if all(s.is_terminal for s in statuses) or time.monotonic() > deadline:
                    return statuses
                await asyncio.sleep(0.05)
        finally:
            poller.stop()
            await task
            await client.aclose()

    statuses = asyncio.run(scenario())
    assert statuses == [RunStatus.SUCCEEDED] * 40
    assert running[1] <= 2, running


def test_the_listening_connection_keeps_the_claims_settings_to_its_claims(store: Store) -> None:
    """A worker claims on its listening connection after a wake-up, with that
    connection's session holding the claim's settings (its commit does not wait for the
    disk unless the worker says so). The settings follow what each claim asks, and any
    other statement on that connection runs with the server's own."""
    if store.kind != "postgres":
        pytest.skip("a SQLite worker has no listening connection")
    # Sessions that wait for the disk (the test server's default does not).
    waits = "&" if "?" in store.url else "?"
    backend = open_backend(
        f"{store.url}{waits}options=-c%20synchronous_commit%3Don", schema=store.schema
    )
    seen: dict[str, Any] = {}

    def setting(session: bool | None) -> Op[Rows]:
        """What the connection's session holds, read in a stream that carries the
        claim's session settings (``session``: the claim's wait for the disk), or alone."""
        rows: list[Rows] = []
        read = Statement(
            "select current_setting('synchronous_commit') as commit,"
            " current_setting('plan_cache_mode') as plans"
        )
        if session is None:
            got = yield read
            return got
        wait = None if session else "off"
        settings = backend.stmt("claim_settings", synchronous_commit=wait)
        held = backend.stmt("claim_settings_session", synchronous_commit=wait)
        yield Stream("-- read", statements=iter([settings, read]), take=rows.append, session=held)
        return rows[-1]

    async def after(execute: OpRunner) -> None:
        claim = Claim("w1", ("wake.settings.v1",), 1, 30.0, limited=False, wait_for_disk=False)
        seen["leases"] = await execute(backend.claim(claim))
        seen["held"] = await execute(setting(False))
        seen["waiting"] = await execute(setting(True))
        await execute(setting(False))
        seen["other"] = await execute(setting(None))
        raise asyncio.CancelledError

    async def scenario() -> str:
        listening = asyncio.create_task(backend.listen(lambda kind, value: None, after))
        await asyncio.sleep(0.3)  # listening: the start's notification wakes it
        client = store.async_client()
        run = await client.start("wake.settings.v1")
        await client.aclose()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(listening, 10)
        await backend.aclose()
        return run.id

    run_id = asyncio.run(scenario())
    backend.close()
    assert [lease.run.id for lease in seen["leases"]] == [run_id]
    assert store.client().get(run_id).status == RunStatus.LEASED
    assert seen["held"] == [{"commit": "off", "plans": "force_generic_plan"}]
    assert seen["waiting"] == [{"commit": "on", "plans": "force_generic_plan"}]
    assert seen["other"] == [{"commit": "on", "plans": "auto"}]
