"""Durable calls that write directly, a signal taken and a child started, ride through a
connection broken in the middle of the call.

The test holds a lock the call's statement must wait for (the signal's row; the child's
idempotency key, inserted and not committed), ends the worker's connection while the
statement waits, then lets go. The call is tried again on a fresh connection: the run
succeeds at its first attempt (an outage is not the handler's failure), the signal
taken is the first one and only it, and there is one child. Postgres only: SQLite has
no connection to end (its locked file is covered by test_self_fencing.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Store, make_store, poller_thread
from worker_app import wait_until

from simpleworkflow import App, Client, Context, RunStatus

WAITS, PARENT, CHILD = "outage.waits.v1", "outage.parent.v1", "outage.child.v1"
WORKER = "durable-outage"


@pytest.fixture
def pg_store(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    return make_store("postgres", tmp_path, request).migrate()


def app_for(store: Store) -> App:
    app = App(store.url, schema=store.schema)

    @app.workflow(WAITS)
    async def waits(payload: Any, ctx: Context) -> Any:
        return await ctx.wait_for_event("go", event="go")

    @app.workflow(PARENT)
    async def parent(payload: Any, ctx: Context) -> Any:
        child = await ctx.start_child(CHILD)
        return await ctx.wait_child(child)

    @app.workflow(CHILD)
    async def child(payload: Any, ctx: Context) -> str:
        return "done"

    return app


@contextlib.contextmanager
def holding(store: Store, statement: str, *params: Any) -> Iterator[None]:
    """Run ``statement`` in a transaction kept open (its locks held) until the block ends,
    then roll it back."""
    with psycopg.connect(store.url) as conn:
        conn.execute(f'set search_path to "{store.schema}"'.encode())
        conn.execute(statement.replace("?", "%s").encode(), params)
        try:
            yield
        finally:
            conn.rollback()


def end_the_waiting_connection(store: Store) -> None:
    """Wait until the worker's statement waits for the test's lock; end its connection."""

    def ended() -> bool:
        rows = store.sql(
            "select pg_terminate_backend(pid) from pg_stat_activity"
            " where application_name = ? and wait_event_type = 'Lock'",
            WORKER,
        )
        return bool(rows)

    wait_until(ended, 30, "the worker's call never waited for the lock")


def finished(client: Client, run_id: str) -> Any:
    wait_until(lambda: client.get(run_id).is_terminal, 60, "the run did not finish")
    return client.get(run_id)


def test_a_signal_taken_over_a_broken_connection_is_taken_once_uncharged(
    pg_store: Store,
) -> None:
    with pg_store.client() as client:
        run_id = client.start(WAITS).id
        client.signal(run_id, "go", {"n": 1})
        client.signal(run_id, "go", {"n": 2})
        lock = "select id from workflow_signal where run_id = ? for update"
        with poller_thread(app_for(pg_store), worker_id=WORKER):
            with holding(pg_store, lock, run_id):
                end_the_waiting_connection(pg_store)
            run = finished(client, run_id)
        signals = client.signals(run_id)
        steps = client.steps(run_id)
    assert run.status == RunStatus.SUCCEEDED and run.result == {"n": 1}
    assert run.attempt == 0, "an attempt was charged for the broken connection"
    assert [s.consumed_at is not None for s in signals] == [True, False]
    assert [(s.step_name, s.status) for s in steps] == [("go", "completed")]


def test_a_child_started_over_a_broken_connection_is_started_once_uncharged(
    pg_store: Store,
) -> None:
    with pg_store.client() as client:
        run_id = client.start(PARENT).id
        key = f"child:{run_id}:child:{CHILD}"  # the key the parent's start_child uses
        lock = "insert into workflow_run (type, idempotency_key) values ('blocker.v1', ?)"
        with poller_thread(app_for(pg_store), worker_id=WORKER):
            with holding(pg_store, lock, key):
                end_the_waiting_connection(pg_store)
            run = finished(client, run_id)
    children = pg_store.sql("select type, status from workflow_run where parent_id = ?", run_id)
    assert run.status == RunStatus.SUCCEEDED and run.result == "done"
    assert run.attempt == 0, "an attempt was charged for the broken connection"
    assert children == [(CHILD, "succeeded")]
