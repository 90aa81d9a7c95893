"""Procrastinate through its public API: ``App``, ``PsycopgConnector``, tasks, the worker.

Defaults: ``run_worker_async()`` as it comes (concurrency 1, LISTEN/NOTIFY on); tuned:
``concurrency=10``, the knob its documentation gives for asynchronous jobs. Starts are
``defer_async`` one at a time, and ``batch_defer_async`` of 100.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common
import procrastinate

# Every command's first argument is the database URL.
app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=sys.argv[2]))


@app.task(name="noop")
async def noop() -> None:
    _common.mark()


def _open(url: str) -> Any:
    return app.open_async()


def setup(url: str) -> None:
    async def go() -> None:
        async with _open(url) as opened:
            await opened.schema_manager.apply_schema_async()

    asyncio.run(go())


def _timed(url: str, count: int, batch: bool) -> dict[str, float]:
    async def go() -> dict[str, float]:
        async with _open(url) as opened:
            task = opened.tasks["noop"]
            began = asyncio.get_running_loop().time()
            if batch:
                for size in _common.batches(count):
                    await task.batch_defer_async(*([{}] * size))
            else:
                for _ in range(count):
                    await task.defer_async()
            return {"rate": count / (asyncio.get_running_loop().time() - began)}

    return asyncio.run(go())


def start_one(url: str, count: str) -> dict[str, float]:
    return _timed(url, int(count), batch=False)


def start_batch(url: str, count: str) -> dict[str, float]:
    return _timed(url, int(count), batch=True)


def load(url: str, count: str, kind: str) -> None:
    _timed(url, int(count), batch=True)


def worker(url: str, mode: str, kind: str) -> None:
    options = {"concurrency": 10} if mode == "tuned" else {}

    async def go() -> None:
        async with _open(url) as opened:
            await opened.run_worker_async(**options)

    _common.serve_worker(lambda: asyncio.run(go()))


def pickup(url: str, samples: str) -> dict[str, float]:
    loop = asyncio.new_event_loop()
    context = _open(url)
    opened = loop.run_until_complete(context.__aenter__())
    task = opened.tasks["noop"]
    try:
        return _common.pickup(
            __file__, url, int(samples), lambda: loop.run_until_complete(task.defer_async())
        )
    finally:
        loop.run_until_complete(context.__aexit__(None, None, None))


if __name__ == "__main__":
    _common.main(
        {"setup": setup, "start_one": start_one, "start_batch": start_batch, "load": load,
         "worker": worker, "pickup": pickup}
    )  # fmt: skip
