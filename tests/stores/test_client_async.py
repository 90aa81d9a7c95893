"""What only the asyncio client can show: concurrent calls on one loop, and a loop that
keeps running while the client waits. (Every producer behaviour is also checked through
``AsyncClient`` in test_client.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from conftest import Store

from simpleworkflow import AsyncClient, RunStatus, errors

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
