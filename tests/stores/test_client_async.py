"""What only the asyncio client can show: concurrent calls on one loop, and a loop that
keeps running while the client waits. (Every producer behaviour is also checked through
``AsyncClient`` in test_client.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from conftest import Store
from psycopg import pq
from psycopg_pool import AsyncConnectionPool

from simpleworkflow import AsyncClient, RunStatus, errors
from simpleworkflow.backends.postgres import driving

T = TypeVar("T")
TYPE = "notify.email.v1"


def run_with_client(store: Store, body: Callable[[AsyncClient], Awaitable[T]]) -> T:
    async def main() -> T:
        async with store.async_client() as client:
            return await body(client)

    return asyncio.run(main())


def test_concurrent_starts_on_one_client(store: Store) -> None:
    async def body(client: AsyncClient) -> list[str]:
        runs = await asyncio.gather(*(client.start(TYPE, {"n": n}) for n in range(40)))
        return [run.id for run in runs]

    ids = run_with_client(store, body)
    assert len(set(ids)) == 40
    assert store.count("workflow_run") == 40
    assert store.count("workflow_event") == 40


def test_concurrent_starts_with_one_key_make_one_run(store: Store) -> None:
    async def body(client: AsyncClient) -> set[str]:
        runs = await asyncio.gather(
            *(client.start(TYPE, {"n": n}, idempotency_key="once") for n in range(20))
        )
        return {run.id for run in runs}

    assert len(run_with_client(store, body)) == 1
    assert store.count("workflow_run") == 1
    assert store.count("workflow_event") == 1


def test_the_loop_keeps_running_while_the_client_waits(store: Store) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    async def body(client: AsyncClient) -> None:
        run = await client.start(TYPE)
        task = asyncio.create_task(ticker())
        try:
            await client.wait(run.id, timeout=0.5)
        except errors.WaitTimeout:
            pass
        finally:
            task.cancel()

    run_with_client(store, body)
    assert ticks >= 5  # ~50 if nothing blocks; 5 means the loop was not held


def test_wait_returns_when_another_task_cancels(store: Store) -> None:
    async def body(client: AsyncClient) -> Any:
        run = await client.start(TYPE)

        async def cancel_soon() -> bool:
            await asyncio.sleep(0.1)
            return await client.cancel(run.id)

        return await asyncio.gather(client.wait(run.id, timeout=30), cancel_soon())

    waited, cancelled = run_with_client(store, body)
    assert cancelled is True
    assert waited.status is RunStatus.CANCELLED


def test_a_client_can_be_reopened_on_a_new_loop(store: Store) -> None:
    """Scripts call asyncio.run more than once; each loop gets a working client."""

    async def start(client: AsyncClient) -> str:
        return (await client.start(TYPE)).id

    first = run_with_client(store, start)
    second = run_with_client(store, start)
    assert first != second

    async def get_both(client: AsyncClient) -> list[str]:
        return [(await client.get(first)).id, (await client.get(second)).id]

    assert run_with_client(store, get_both) == [first, second]


def test_a_pooled_call_gives_its_connection_back_idle(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The async Postgres calls take a pooled connection with ``getconn`` and give it back
    with ``putconn``: a call that left a transaction open has it committed, one that
    failed inside it has it rolled back, as the pool's ``connection()`` would, so the pool
    logs nothing and the next call finds the connection idle."""
    if store.kind != "postgres":
        pytest.skip("SQLite has no connection pool")
    table = f'"{store.schema}".pooled_probe'
    store.sql(f"create table {table} (n int)")

    async def left_open(conn: Any, op: Any) -> str:
        await conn.execute("begin")
        await conn.execute(f"insert into {table} values (1)")
        return "written"

    async def failing(conn: Any, op: Any) -> str:
        await conn.execute("begin")
        await conn.execute(f"insert into {table} values (2)")
        raise errors.InvalidArgument("the op failed")

    async def main() -> tuple[str, list[Any]]:
        pool = AsyncConnectionPool(
            store.url, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
        )
        async with pool:
            kwargs: dict[str, Any] = {"watching": lambda conn: contextlib.nullcontext()}
            kwargs["broke"] = lambda: None
            written = await driving.execute_pooled(pool, iter(()), left_open, **kwargs)
            with pytest.raises(errors.InvalidArgument, match="the op failed"):
                await driving.execute_pooled(pool, iter(()), failing, **kwargs)
            async with pool.connection() as conn:
                states = [conn.info.transaction_status]
                states.append(await (await conn.execute(f"select n from {table}")).fetchall())
            return written, states

    with caplog.at_level(logging.WARNING, logger="psycopg"):
        written, (status, rows) = asyncio.run(main())
    assert written == "written"
    assert status == pq.TransactionStatus.IDLE
    assert rows == [(1,)]  # the open transaction committed, the failed one rolled back
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
