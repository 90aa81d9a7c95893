"""pgqrs through its public Python API: ``connect_with``, ``produce``, ``consume_iter``.

Its enqueue rate limiter is lifted (``max_enqueue_per_second`` and ``max_enqueue_burst``
set to ``None``): at its defaults (1,000/s, bursts of 50) it caps every start case and
refuses a batch of 100 outright. Everything else is at its defaults. The default worker
is the ``consume_iter`` loop, archiving each message; tuned: ``dequeue`` batches of 10
from a consumer and ``archive_many``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common
import pgqrs

QUEUE = "bench"
#: One loop for the whole process: the bindings' futures need a running loop, and the
#: connection pool must not outlive it (the process ends with ``os._exit``, see main).
LOOP = asyncio.new_event_loop()


def _run(work: Any) -> Any:
    return LOOP.run_until_complete(work)


async def _store(url: str) -> Any:
    config = pgqrs.Config.from_dsn(url)
    config.max_enqueue_per_second = None
    config.max_enqueue_burst = None
    return await pgqrs.connect_with(config)


def setup(url: str) -> None:
    async def go() -> None:
        store = await _store(url)
        await pgqrs.admin(store).install()
        await store.queue(QUEUE)

    _run(go())


def _timed(url: str, count: int, batch: bool) -> dict[str, float]:
    async def go() -> dict[str, float]:
        store = await _store(url)
        began = asyncio.get_running_loop().time()
        if batch:
            for size in _common.batches(count):
                await pgqrs.produce_batch(store, QUEUE, [{}] * size)
        else:
            for _ in range(count):
                await pgqrs.produce(store, QUEUE, {})
        return {"rate": count / (asyncio.get_running_loop().time() - began)}

    return _run(go())


def start_one(url: str, count: str) -> dict[str, float]:
    return _timed(url, int(count), batch=False)


def start_batch(url: str, count: str) -> dict[str, float]:
    return _timed(url, int(count), batch=True)


def load(url: str, count: str, kind: str) -> None:
    _timed(url, int(count), batch=True)


async def _iterate(url: str) -> None:
    store = await _store(url)
    async with store.consume_iter(QUEUE) as messages:
        async for message in messages:
            _common.mark()
            await messages.archive(message.id)


async def _batches(url: str, size: int) -> None:
    store = await _store(url)
    consumer = await store.consumer(QUEUE)
    while True:
        messages = await pgqrs.dequeue(consumer, size)
        if not messages:
            await asyncio.sleep(0.05)
            continue
        for _ in messages:
            _common.mark()
        await consumer.archive_many([message.id for message in messages])


def worker(url: str, mode: str, kind: str) -> None:
    loop = _batches(url, 10) if mode == "tuned" else _iterate(url)
    _common.serve_worker(lambda: _run(loop))


def pickup(url: str, samples: str) -> dict[str, float]:
    store = _run(_store(url))

    async def produce() -> None:
        await pgqrs.produce(store, QUEUE, {})

    return _common.pickup(__file__, url, int(samples), lambda: _run(produce()))


if __name__ == "__main__":
    _common.main(
        {"setup": setup, "start_one": start_one, "start_batch": start_batch, "load": load,
         "worker": worker, "pickup": pickup},
        hard_exit=True,
    )  # fmt: skip
