"""Readers waiting on runs (``wait_value``, ``read_stream``) share one listening connection
per client on Postgres (``backends/postgres/run_wakeups.py``): many readers on threads and
on an event loop each hear their own run; the connection closes with the client; killed,
it fails the value waiters (StoreUnavailable), lets stream readers poll on, and opens
again for the next reader. The readers' behaviour is checked on both stores."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Store
from test_values import claim, set_record
from worker_app import wait_until

from simpleworkflow import Client, errors
from simpleworkflow.backends import Backend
from simpleworkflow.backends.records import Lease

TYPE = "test.wakeups.v1"


def listeners(store: Store, name: str) -> list[int]:
    """The pids of the listening connections of clients named ``name`` (Postgres)."""
    rows = store.sql(
        "select pid from pg_stat_activity where application_name = ?"
        " and query like 'listen simpleworkflow_value%%'",
        name,
    )
    return [pid for (pid,) in rows]


def claimed(client: Client, backend: Backend, count: int) -> list[Lease]:
    ids = [client.start(TYPE).id for _ in range(count)]
    leases = [claim(backend, TYPE) for _ in ids]
    assert sorted(lease.run.id for lease in leases) == sorted(ids)
    return leases


def set_value(backend: Backend, lease: Lease, value: Any) -> None:
    record = set_record(lease, "value:k", "k")
    assert backend.execute(backend.set_value(record, "k", str(value)))


def append(backend: Backend, lease: Lease, origin: str, value: Any, close: bool = False) -> None:
    item = (0, None if close else str(value), close)
    assert backend.execute(backend.append_stream(lease.run.id, lease.token, "s", origin, [item]))


def read_all(client: Client, run_id: str) -> list[Any]:
    return [item.value for item in client.read_stream(run_id, "s")]


@contextlib.contextmanager
def readers(client: Client, leases: list[Lease]) -> Iterator[concurrent.futures.Executor]:
    """Threads for readers of the runs; a test that fails ends the runs, and so its
    readers (a reader of an ended run stops), rather than hang."""
    pool = concurrent.futures.ThreadPoolExecutor(len(leases) + 1)
    try:
        yield pool
    finally:
        for lease in leases:
            client.cancel(lease.run.id)
        pool.shutdown()


def test_many_readers_of_a_client_share_one_connection_and_each_hears_its_own_run(
    store: Store, backend: Backend
) -> None:
    sync_name, async_name = f"wakeups-{uuid.uuid4().hex[:8]}", f"wakeups-{uuid.uuid4().hex[:8]}"
    client = store.client(application_name=sync_name)
    reader = store.async_client(application_name=async_name)
    leases = claimed(client, backend, 10)
    threaded, looped, streamed = leases[:6], leases[6:8], leases[8:]

    async def wait_on_loop() -> list[int]:
        waits = [reader.wait_value(lease.run.id, "k") for lease in looped]
        try:
            return [got.value for got in await asyncio.gather(*waits)]
        finally:
            await reader.aclose()

    with client, readers(client, leases) as pool:
        values = [pool.submit(client.wait_value, lease.run.id, "k") for lease in threaded]
        items = [pool.submit(read_all, client, lease.run.id) for lease in streamed]
        on_loop = pool.submit(asyncio.run, wait_on_loop())
        time.sleep(0.5)  # every reader waits (none can answer yet)
        if store.kind == "postgres":
            assert len(listeners(store, sync_name)) == 1
            assert len(listeners(store, async_name)) == 1
        assert not any(f.done() for f in [*values, *items, on_loop])
        for n, lease in enumerate(threaded + looped):
            set_value(backend, lease, 100 + n)
        for lease in streamed:
            append(backend, lease, "a", f'"{lease.run.id}"')
            append(backend, lease, "b", None, close=True)
        assert [f.result(30).value for f in values] == [100 + n for n in range(len(threaded))]
        assert on_loop.result(30) == [106, 107]
        assert [f.result(30) for f in items] == [[lease.run.id] for lease in streamed]
    if store.kind == "postgres":  # closed with its client
        wait_until(lambda: not listeners(store, sync_name), 10, "the listener closes")
        wait_until(lambda: not listeners(store, async_name), 10, "the async one closes")


def test_a_killed_listening_connection_fails_value_waiters_and_stream_readers_poll_on(
    store: Store, backend: Backend
) -> None:
    if store.kind != "postgres":
        pytest.skip("SQLite's readers poll: there is no listening connection")
    name = f"wakeups-{uuid.uuid4().hex[:8]}"
    client = store.client(application_name=name)
    reader = store.async_client(application_name=name)
    leases = claimed(client, backend, 4)
    valued, looped, streamed, later = leases

    async def wait_on_loop() -> Any:
        try:
            return await reader.wait_value(looped.run.id, "k")
        finally:
            await reader.aclose()

    with client, readers(client, leases) as pool:
        value = pool.submit(client.wait_value, valued.run.id, "k")
        on_loop = pool.submit(asyncio.run, wait_on_loop())
        items = pool.submit(read_all, client, streamed.run.id)
        wait_until(lambda: len(listeners(store, name)) == 2, 10, "both clients listen")
        time.sleep(0.3)
        assert not any(f.done() for f in (value, on_loop, items))
        killed = listeners(store, name)
        for pid in killed:
            store.sql("select pg_terminate_backend(?)", pid)
        with pytest.raises(errors.StoreUnavailable, match="waits for a run's values"):
            value.result(30)
        with pytest.raises(errors.StoreUnavailable, match="waits for a run's values"):
            on_loop.result(30)
        append(backend, streamed, "a", '"after the kill"')  # the reader polls: it gets it
        append(backend, streamed, "b", None, close=True)
        assert items.result(30) == ["after the kill"]
        # The next reader listens on a new connection, and is woken by its run's set.
        again = pool.submit(client.wait_value, later.run.id, "k")
        wait_until(lambda: listeners(store, name), 10, "the next reader listens again")
        assert set(listeners(store, name)).isdisjoint(killed)
        set_value(backend, later, 7)
        assert again.result(30).value == 7
