"""Transactional starts: ``connection=`` writes inside the caller's transaction, so a run
(a signal, a cancel, a published event) exists exactly when that transaction commits.

On both stores: the caller's own connection (psycopg, or ``sqlite3`` on the same file)
holds a business row and the run; another connection looks, as a user would.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Store

from simpleworkflow import AsyncClient, Client, RunStatus, config, errors, observe

TYPE = "shop.order.confirm.v1"


def connect(store: Store, **options: Any) -> Any:
    """A connection of the application's own to the store's database."""
    if store.kind == "sqlite":
        return sqlite3.connect(config.sqlite_path(store.url), **options)
    return psycopg.connect(store.url, options=f"-c search_path={store.schema}", **options)


@pytest.fixture
def shop(store: Store) -> Store:
    """The store, with the application's own table beside the workflow tables."""
    store.sql("create table orders (id integer primary key, item text not null)")
    return store


@pytest.fixture
def conn(shop: Store) -> Iterator[Any]:
    connection = connect(shop)
    yield connection
    connection.close()


def runs_and_orders(store: Store) -> tuple[int, int]:
    """What another connection sees: committed runs and orders."""
    return store.count("workflow_run"), store.count("orders")


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_run_exists_exactly_when_the_callers_transaction_commits(
    shop: Store, client: Client, conn: Any, outcome: str
) -> None:
    conn.execute("insert into orders (id, item) values (1, 'book')")
    run = client.start(TYPE, {"order": 1}, connection=conn)
    assert (run.created, run.status) == (True, RunStatus.PENDING)
    assert runs_and_orders(shop) == (0, 0)  # nothing committed by the client
    getattr(conn, outcome)()
    if outcome == "commit":
        assert runs_and_orders(shop) == (1, 1)
        assert client.get(run.id).payload == {"order": 1}
        assert [e.event_type for e in client.events(run.id)] == ["created"]
    else:
        assert runs_and_orders(shop) == (0, 0)
        with pytest.raises(errors.RunNotFound):
            client.get(run.id)


def test_the_other_writes_join_the_transaction_too(shop: Store, client: Client, conn: Any) -> None:
    client.admin.subscribe("orders.*", TYPE)
    target = client.start(TYPE, {"order": 0})
    doomed = client.start(TYPE, {"order": -1})
    conn.execute("insert into orders (id, item) values (2, 'pen')")
    runs = client.start_many([(TYPE, {"order": 2}), (TYPE, {"order": 3})], connection=conn)
    published = client.publish("orders.created", {"order": 2}, event_id="o-2", connection=conn)
    client.signal(target.id, "paid", {"order": 0}, connection=conn)
    assert client.cancel(doomed.id, reason="refunded", connection=conn) is True
    before = (shop.count("workflow_signal"), client.get(doomed.id).status)
    conn.rollback()
    assert runs_and_orders(shop) == (2, 0)
    assert (shop.count("workflow_signal"), client.get(doomed.id).status) == before
    assert before == (0, RunStatus.PENDING)

    conn.execute("insert into orders (id, item) values (2, 'pen')")
    runs = client.start_many([(TYPE, {"order": 2}), (TYPE, {"order": 3})], connection=conn)
    published = client.publish("orders.created", {"order": 2}, event_id="o-2", connection=conn)
    client.signal(target.id, "paid", {"order": 0}, connection=conn)
    client.cancel(doomed.id, reason="refunded", connection=conn)
    conn.commit()
    assert runs_and_orders(shop) == (5, 1)
    assert [client.get(run.id).payload for run in runs] == [{"order": 2}, {"order": 3}]
    assert [run.type for run in published.runs] == [TYPE]
    assert [s.event for s in client.signals(target.id)] == ["paid"]
    assert client.get(doomed.id).status is RunStatus.CANCELLED


def test_a_failed_call_leaves_the_callers_transaction_usable(
    shop: Store, client: Client, conn: Any
) -> None:
    client.start("shop.other.v1", idempotency_key="taken")
    conn.execute("insert into orders (id, item) values (3, 'ink')")
    with pytest.raises(errors.IdempotencyConflict):
        client.start(TYPE, idempotency_key="taken", connection=conn)  # inserts, then refuses
    with pytest.raises(errors.IdempotencyConflict):
        client.start_many([(TYPE, {}), {"type": TYPE, "idempotency_key": "taken"}], connection=conn)
    year_0 = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14)))  # issue 24
    with pytest.raises(errors.InvalidArgument, match="run_at must be a time from 0002"):
        client.start(TYPE, run_at=year_0, connection=conn)
    with pytest.raises(errors.InvalidArgument, match="deadline must be at most 100 years"):
        client.start_many([(TYPE, {}), {"type": TYPE, "deadline": "999999999d"}], connection=conn)
    conn.execute("insert into orders (id, item) values (4, 'nib')")
    conn.commit()
    assert runs_and_orders(shop) == (1, 2)  # the two orders; no run of ours


def test_an_autocommit_connection_outside_a_transaction_commits_the_call(
    shop: Store, client: Client
) -> None:
    options: dict[str, Any] = (
        {"isolation_level": None} if shop.kind == "sqlite" else {"autocommit": True}
    )
    conn = connect(shop, **options)
    try:
        run = client.start(TYPE, connection=conn)
        assert client.get(run.id).status is RunStatus.PENDING
    finally:
        conn.close()


def test_a_transaction_the_caller_opened_on_an_autocommit_connection_is_joined(
    shop: Store, client: Client
) -> None:
    if shop.kind == "sqlite":
        conn = connect(shop, isolation_level=None)
        conn.execute("begin")
    else:
        conn = connect(shop, autocommit=True)
        block = conn.transaction()
        block.__enter__()
    try:
        conn.execute("insert into orders (id, item) values (5, 'cap')")
        client.start(TYPE, connection=conn)
        assert runs_and_orders(shop) == (0, 0)
        if shop.kind == "sqlite":
            conn.execute("rollback")
        else:
            block.__exit__(RuntimeError, RuntimeError("changed my mind"), None)
        assert runs_and_orders(shop) == (0, 0)
    finally:
        conn.close()


def test_observers_are_told_the_run_is_not_committed_yet(
    shop: Store, client: Client, conn: Any
) -> None:
    seen: list[tuple[bool, bool]] = []

    class Watcher(observe.Observer):
        def run_created(self, event: observe.RunCreated) -> None:
            seen.append((event.created, event.committed))

    client.observe(Watcher())
    client.start(TYPE, connection=conn)
    conn.rollback()
    client.start(TYPE)
    assert seen == [(True, False), (True, True)]


def test_connections_it_cannot_join_are_refused_and_nothing_is_written(
    shop: Store, client: Client, tmp_path: Path, postgres_url: str
) -> None:
    other = (
        psycopg.connect(postgres_url)
        if shop.kind == "sqlite"
        else sqlite3.connect(tmp_path / "other.db")
    )
    cases: list[tuple[Any, str]] = [
        (other, "sqlite3.Connection" if shop.kind == "sqlite" else "psycopg.Connection"),
        (object(), "not builtins.object"),
    ]
    closed = connect(shop)
    closed.close()
    cases.append((closed, "closed"))
    if shop.kind == "sqlite":
        cases.append((sqlite3.connect(tmp_path / "other.db"), "not on this client's file"))
        cases.append((sqlite3.connect(":memory:"), "an in-memory database"))
    else:
        failed = connect(shop)
        with pytest.raises(psycopg.errors.UndefinedTable):
            failed.execute("select * from no_such_table")
        cases.append((failed, "failed transaction"))
    for connection, said in cases:
        with pytest.raises(errors.InvalidArgument, match=said):
            client.start(TYPE, connection=connection)
        if hasattr(connection, "close"):
            connection.close()
    assert runs_and_orders(shop) == (0, 0)


def test_a_call_with_a_connection_never_migrates(empty_store: Store) -> None:
    conn = connect(empty_store)
    try:
        with empty_store.client() as client, pytest.raises(errors.SchemaError, match="migrate"):
            client.start(TYPE, connection=conn)
    finally:
        conn.close()


def test_a_postgres_client_refuses_the_wrong_face_of_psycopg(store: Store) -> None:
    if store.kind == "sqlite":
        pytest.skip("psycopg's two faces are Postgres's")

    async def main() -> None:
        aconn = await psycopg.AsyncConnection.connect(store.url)
        try:
            with store.client() as client, pytest.raises(errors.InvalidArgument, match="Async"):
                client.start(TYPE, connection=aconn)
        finally:
            await aconn.close()
        sconn = psycopg.connect(store.url)
        try:
            async with store.async_client() as aclient:
                with pytest.raises(errors.InvalidArgument, match=r"takes a psycopg\.AsyncConn"):
                    await aclient.start(TYPE, connection=sconn)
        finally:
            sconn.close()

    asyncio.run(main())


def test_the_async_client_joins_the_callers_transaction(shop: Store) -> None:
    async def main() -> tuple[str, str]:
        async with shop.async_client() as client:
            kept = await _start_then(client, shop, "commit")
            dropped = await _start_then(client, shop, "rollback")
            return kept, dropped

    kept, dropped = asyncio.run(main())
    with shop.client() as client:
        assert client.get(kept).status is RunStatus.PENDING
        with pytest.raises(errors.RunNotFound):
            client.get(dropped)
    assert runs_and_orders(shop) == (1, 1)


async def _start_then(client: AsyncClient, store: Store, outcome: str) -> str:
    """Start a run on the application's connection (async for Postgres), then end its
    transaction with ``outcome``; return the run's id."""
    order = 1 if outcome == "commit" else 2
    if store.kind == "sqlite":  # sqlite3 has one face: the call runs on the loop's thread
        lite = connect(store)
        lite.execute("insert into orders (id, item) values (?, 'cup')", (order,))
        run = await client.start(TYPE, connection=lite)
        assert not store.sql("select id from workflow_run where id = ?", run.id)
        getattr(lite, outcome)()
        lite.close()
        return run.id
    conn = await psycopg.AsyncConnection.connect(
        store.url, options=f"-c search_path={store.schema}"
    )
    async with conn:
        await conn.execute("insert into orders (id, item) values (%s, 'cup')", (order,))
        run = await client.start(TYPE, connection=conn)
        assert not store.sql("select id from workflow_run where id = ?", run.id)
        await getattr(conn, outcome)()
    return run.id


def test_a_connection_that_loads_json_as_text_still_gives_parsed_runs(store: Store) -> None:
    if store.kind == "sqlite":
        pytest.skip("psycopg's loaders are Postgres's")
    from psycopg.types.string import TextLoader

    conn = connect(store)
    conn.adapters.register_loader("jsonb", TextLoader)  # as Django's connections do
    try:
        with store.client() as client:
            first = client.start(TYPE, {"order": 7}, idempotency_key="order:7")
            found = client.start(TYPE, {"order": 8}, idempotency_key="order:7", connection=conn)
            assert (found.id, found.created, found.payload) == (first.id, False, {"order": 7})
        assert conn.execute("select '{}'::jsonb").fetchone() == ("{}",), "the caller's as it was"
    finally:
        conn.close()


def test_two_transactions_starting_one_key_make_one_run(shop: Store, client: Client) -> None:
    shared = {"check_same_thread": False} if shop.kind == "sqlite" else {}
    first, second = connect(shop), connect(shop, **shared)
    try:
        run = client.start(TYPE, {"by": "first"}, idempotency_key="order:9", connection=first)
        found: list[Any] = []
        # The second waits for the first on the key's unique index (on SQLite, for the
        # write lock), then finds its run once it has committed.
        waiter = threading.Thread(
            target=lambda: found.append(
                client.start(TYPE, {"by": "second"}, idempotency_key="order:9", connection=second)
            )
        )
        waiter.start()
        waiter.join(0.5)
        assert not found, "the second start did not wait for the first transaction"
        first.commit()
        waiter.join(10)
        second.commit()
    finally:
        first.close()
        second.close()
    assert (found[0].id, found[0].created, found[0].payload) == (run.id, False, {"by": "first"})
    assert shop.count("workflow_run") == 1


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_debounced_start_joins_the_callers_transaction(
    shop: Store, client: Client, conn: Any, outcome: str
) -> None:
    """A debounced start inside a transaction: the collapsed run's new payload and due
    time exist exactly when the caller commits."""
    first = client.start(TYPE, {"order": 1}, debounce=("cart-7", "1h"))
    conn.execute("insert into orders (id, item) values (7, 'lamp')")
    joined = client.start(TYPE, {"order": 7}, debounce=("cart-7", "1h"), connection=conn)
    assert (joined.id, joined.created) == (first.id, False)
    assert client.get(first.id).payload == {"order": 1}  # not committed yet
    getattr(conn, outcome)()
    expected = {"order": 7} if outcome == "commit" else {"order": 1}
    assert client.get(first.id).payload == expected
    assert runs_and_orders(shop) == (1, 1 if outcome == "commit" else 0)
