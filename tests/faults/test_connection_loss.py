"""Postgres going away under a client or a worker: a clear error, nothing half-written,
and work that carries on once the server answers again.

Each test has a database of its own, so that it can end every other connection to it
(``pg_terminate_backend``), as a restart or a failover would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from conftest import Store, poller_thread
from worker_app import wait_until

from simpleworkflow import App, Client, RunStatus, errors

TYPE = "test.lost.v1"


@pytest.fixture
def pg_store(make_database: Callable[[], str]) -> Store:
    return Store("postgres", make_database(), schema="workflow").migrate()


def end_other_connections(url: str) -> int:
    """End every other session on the database, as a server restart would."""
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity "
            "where datname = current_database() and pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def test_start_many_that_loses_its_connection_mid_batch_stores_nothing(pg_store: Store) -> None:
    def requests() -> Iterator[tuple[str, Any]]:
        for n in range(1000):
            if n == 600:  # three chunks are already written in the open transaction
                assert end_other_connections(pg_store.url) >= 1
            yield TYPE, {"n": n}

    with pg_store.client() as client:
        with pytest.raises(errors.StoreUnavailable, match="lost or could not open"):
            client.start_many(requests())
        assert pg_store.count() == 0
        assert pg_store.count("workflow_event") == 0
        # The broken connection is not handed out again: the next call works.
        assert len(client.start_many([(TYPE, {"n": n}) for n in range(300)])) == 300
    assert pg_store.count() == 300


def test_a_worker_carries_on_after_losing_every_connection(pg_store: Store) -> None:
    handled: list[int] = []
    lock = threading.Lock()
    app = App(pg_store.url, schema=pg_store.schema)

    @app.workflow(TYPE)
    def handler(payload: dict[str, Any]) -> int:
        time.sleep(0.005)
        with lock:
            handled.append(payload["n"])
        return int(payload["n"])

    with pg_store.client() as client:
        ids = [run.id for run in client.start_many([(TYPE, {"n": n}) for n in range(300)])]

    with poller_thread(app, type_prefixes=["test.%"], concurrency=10, lease_duration=5):
        wait_until(lambda: len(handled) >= 50, 30, lambda: f"{len(handled)} handled")
        assert end_other_connections(pg_store.url) >= 2  # the pool's and the listener's
        with lock:
            assert len(handled) < len(ids), "the drain ended before the connections did"
        with pg_store.client() as client:
            wait_until(
                lambda: _finished(client, ids) == len(ids),
                60,
                lambda: f"{_finished(client, ids)} of {len(ids)} finished",
            )
            runs = [client.get(run_id) for run_id in ids]

    assert all(run.status is RunStatus.SUCCEEDED for run in runs)
    assert [run.result for run in runs] == list(range(300))
    assert set(handled) == set(range(300))  # at least once each; a retry may repeat one
    succeeded = pg_store.sql("select count(*) from workflow_event where event_type = 'succeeded'")
    assert succeeded[0][0] == 300  # and each outcome recorded once


def _finished(client: Client, ids: list[str]) -> int:
    try:
        return sum(client.get(run_id).is_terminal for run_id in ids)
    except errors.StoreUnavailable:  # this client's own connection may be one that was ended
        return 0
