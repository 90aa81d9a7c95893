"""Transactional steps (``ctx.transaction``) in-process, on both stores: a step's writes
to the application's table and its journal entry commit together, a failed attempt rolls
back what it wrote, a replay does not call the function, and a lost lease rolls the step
back. (The same under SIGKILL, with worker processes: test_transactions_processes.py.)
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest
from conftest import Store
from test_durable import QUICK, journal, lifecycle, wait_terminal, working

from simpleworkflow import Client, Context, RunStatus, observe
from simpleworkflow.app import App
from simpleworkflow.retry import RetryPolicy


@pytest.fixture
def app(store: Store) -> App:
    store.sql("create table business (run_id text not null, step text not null, n integer)")
    return App(store.url, schema=store.schema, retry=QUICK)


def insert_sql(store: Store) -> Any:
    """The application's insert, as its step functions write it: the store's connection
    has its default search path, so a Postgres table is named with its schema."""
    if store.kind == "sqlite":
        return "insert into business (run_id, step, n) values (?, ?, ?)"
    return f'insert into "{store.schema}".business (run_id, step, n) values (%s, %s, %s)'.encode()


def business(store: Store, run_id: str) -> list[tuple[str, int]]:
    rows = store.sql("select step, n from business where run_id = ? order by n", run_id)
    return [(str(step), int(n)) for step, n in rows]


def test_a_def_body_writes_and_journals_each_step_together_and_replays_without_calling(
    store: Store, app: App, client: Client
) -> None:
    calls: list[str] = []
    insert = insert_sql(store)

    def book(conn: Any, run_id: str, n: int) -> int:
        calls.append(f"book-{n}")
        conn.execute(insert, (run_id, f"book-{n}", n))
        return n * 10

    @app.workflow("test.tx.sync.v1")
    def body(payload: Any, ctx: Context) -> Any:
        first = ctx.transaction("book", book, ctx.run_id, 1)
        ctx.sleep("pause", 0.1)  # the body runs again from the top after it
        second = ctx.transaction("book", book, ctx.run_id, 2)
        return [first, second]

    run_id = client.start("test.tx.sync.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == [10, 20]
    assert calls == ["book-1", "book-2"], "the replay answered book-1 from the journal"
    assert business(store, run_id) == [("book-1", 1), ("book-2", 2)]
    steps = [(s["name"], s["kind"], s["status"], s["output"]) for s in journal(store, run_id)]
    assert steps == [
        ("book", "step", "completed", 10),
        ("pause", "sleep", "completed", steps[1][3]),
        ("book#2", "step", "completed", 20),
    ]
    events = [e for e in lifecycle(client, run_id) if e.startswith("step_")]
    assert events == ["step_started", "step_completed"] * 2


def test_an_async_body_runs_def_functions_on_a_thread_and_async_ones_on_the_loop(
    store: Store, app: App, client: Client
) -> None:
    insert = insert_sql(store)

    def plain(conn: Any, run_id: str) -> str:
        conn.execute(insert, (run_id, "plain", 1))
        return threading.current_thread().name

    async def awaited(conn: Any, run_id: str) -> str:
        await conn.execute(insert, (run_id, "awaited", 2))
        return "loop"

    @app.workflow("test.tx.async.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        thread = await ctx.transaction("plain", plain, ctx.run_id)
        if store.kind == "postgres":
            await ctx.transaction("awaited", awaited, ctx.run_id)
        return thread

    run_id = client.start("test.tx.async.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result != threading.current_thread().name
    expected = [("plain", 1)] + ([("awaited", 2)] if store.kind == "postgres" else [])
    assert business(store, run_id) == expected
    assert [s["name"] for s in journal(store, run_id)] == [step for step, _ in expected]


def test_a_failed_attempt_rolls_back_what_it_wrote_and_is_retried(
    store: Store, app: App, client: Client
) -> None:
    insert = insert_sql(store)
    tries: list[int] = []

    def charge(conn: Any, run_id: str) -> str:
        tries.append(len(tries) + 1)
        conn.execute(insert, (run_id, "charge", len(tries)))
        if len(tries) < 3:
            raise ConnectionError(f"gateway timeout {len(tries)}")
        return "charged"

    policy = RetryPolicy(backoff="fixed", base=0.1, jitter=0, max_attempts=3)

    @app.workflow("test.tx.flaky.v1")
    def body(payload: Any, ctx: Context) -> Any:
        return ctx.transaction("charge", charge, ctx.run_id, retry=policy)

    run_id = client.start("test.tx.flaky.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert (run.status, run.result) == (RunStatus.SUCCEEDED, "charged"), run.last_error
    assert tries == [1, 2, 3]
    assert business(store, run_id) == [("charge", 3)], "the failed attempts' rows rolled back"
    [entry] = journal(store, run_id)
    assert (entry["status"], entry["attempts"]) == ("completed", 3)
    failed = [
        e.data["error"]["message"] for e in client.events(run_id) if e.event_type == "step_failed"
    ]
    assert failed == ["gateway timeout 1", "gateway timeout 2"]


def test_a_step_out_of_attempts_leaves_nothing_of_its_writes(
    store: Store, app: App, client: Client
) -> None:
    insert = insert_sql(store)

    def refuse(conn: Any, run_id: str) -> None:
        conn.execute(insert, (run_id, "refuse", 1))
        raise ValueError("card declined")

    @app.workflow("test.tx.declined.v1")
    def body(payload: Any, ctx: Context) -> Any:
        ctx.transaction("refuse", refuse, ctx.run_id, retry=RetryPolicy(max_attempts=1))

    run_id = client.start("test.tx.declined.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.FAILED
    assert "card declined" in (run.last_error or "")
    assert business(store, run_id) == []


def test_a_step_whose_lease_is_lost_meanwhile_rolls_back_and_runs_again_once(
    store: Store, app: App, client: Client
) -> None:
    if store.kind == "sqlite":
        pytest.skip("on SQLite the step holds the only write lock: no one can take the lease")
    insert = insert_sql(store)
    steals: list[str] = []

    def transfer(conn: Any, run_id: str) -> str:
        conn.execute(insert, (run_id, "transfer", len(steals) + 1))
        if not steals:  # the first time, another connection takes the lease away
            steals.append(run_id)
            with psycopg.connect(store.url, autocommit=True) as other:
                other.execute(
                    f'update "{store.schema}".workflow_run set lease_token = %s, '
                    "lease_until = now() where id = %s".encode(),
                    (str(uuid.uuid4()), run_id),
                )
        return "done"

    @app.workflow("test.tx.fenced.v1")
    def body(payload: Any, ctx: Context) -> Any:
        return ctx.transaction("transfer", transfer, ctx.run_id)

    run_id = client.start("test.tx.fenced.v1").id
    with working(app, lease_duration=1.0):
        run = wait_terminal(client, run_id, timeout=30)

    assert (run.status, run.result) == (RunStatus.SUCCEEDED, "done"), run.last_error
    assert business(store, run_id) == [("transfer", 2)], "the fenced attempt's row rolled back"
    assert [s["attempts"] for s in journal(store, run_id)] == [1]


def test_an_async_function_on_sqlite_is_refused_clearly(
    store: Store, app: App, client: Client
) -> None:
    if store.kind != "sqlite":
        pytest.skip("Postgres has asynchronous connections")

    async def awaited(conn: Any) -> None:
        raise AssertionError("never called")

    @app.workflow("test.tx.sqlite.async.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.transaction("awaited", awaited)

    run_id = client.start("test.tx.sqlite.async.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    # The code's shape, which no retry can mend: one attempt of 3.
    assert (run.status, run.attempt, run.max_attempts) == (RunStatus.FAILED, 1, 3)
    assert "SQLite has no asynchronous connection" in (run.last_error or "")
    assert journal(store, run_id) == []


def test_observers_see_a_transactional_step_as_a_step(
    store: Store, app: App, client: Client
) -> None:
    seen: list[str] = []

    class Watcher(observe.Observer):
        def step_started(self, event: observe.StepStarted) -> None:
            seen.append(f"started {event.step} {event.attempt}")

        def step_completed(self, event: observe.StepCompleted) -> None:
            seen.append(f"completed {event.step} {event.attempt}")

        def step_failed(self, event: observe.StepFailed) -> None:
            seen.append(f"failed {event.step} {event.attempt}")

    app.observe(Watcher())
    tries: list[int] = []

    def once_flaky(conn: Any) -> int:
        tries.append(1)
        if len(tries) == 1:
            raise TimeoutError("lock timeout")
        return len(tries)

    @app.workflow("test.tx.observed.v1")
    def body(payload: Any, ctx: Context) -> Any:
        return ctx.transaction("save", once_flaky)

    run_id = client.start("test.tx.observed.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert seen == ["started save 1", "failed save 1", "started save 2", "completed save 2"]
