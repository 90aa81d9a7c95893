"""simple-workflow driven like the peers: its public API only (``Client``, ``App``).

Run with this project's interpreter and the working tree on ``PYTHONPATH``. Modes of the
worker: ``default`` (the worker's out-of-the-box settings, ``async def`` handlers),
``tuned`` (100 slots) and ``sync`` (defaults, plain ``def`` handlers).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

from simpleworkflow import App, Client, Context
from simpleworkflow.backends import open_backend

NOOP = "peers.noop.v1"
STEPS = "peers.steps.v1"
STEP_COUNT = 10


def setup(url: str) -> None:
    backend = open_backend(url)
    try:
        backend.migrate()
    finally:
        backend.close()


def start_one(url: str, count: str) -> dict[str, float]:
    with Client(url) as client:
        return _common.timed_rate(
            int(count), lambda: [client.start(NOOP, {}) for _ in range(int(count))]
        )


def start_batch(url: str, count: str) -> dict[str, float]:
    sizes = _common.batches(int(count))
    with Client(url) as client:
        return _common.timed_rate(
            int(count), lambda: [client.start_many([(NOOP, {})] * n) for n in sizes]
        )


def load(url: str, count: str, kind: str) -> None:
    with Client(url) as client:
        for size in _common.batches(int(count)):
            client.start_many([(STEPS if kind == "steps" else NOOP, {})] * size)


async def _nothing() -> None:
    return None


def _app(url: str, mode: str) -> App:
    app = App(url)
    if mode == "sync":

        @app.workflow(NOOP)
        def noop_sync(payload: Any) -> None:
            _common.mark()

    else:

        @app.workflow(NOOP)
        async def noop(payload: Any) -> None:
            _common.mark()

    @app.workflow(STEPS)
    async def steps(payload: Any, ctx: Context) -> None:
        for number in range(STEP_COUNT):
            await ctx.step(f"s{number}", _nothing)
        _common.mark()

    return app


def worker(url: str, mode: str, kind: str) -> None:
    options: dict[str, Any] = {"concurrency": 100} if mode == "tuned" else {}
    poller = _app(url, mode).poller(type_prefixes=["peers.%"], **options)
    _common.serve_worker(poller.run)


def pickup(url: str, samples: str) -> dict[str, float]:
    with Client(url) as client:
        return _common.pickup(__file__, url, int(samples), lambda: client.start(NOOP, {}))


if __name__ == "__main__":
    _common.main(
        {"setup": setup, "start_one": start_one, "start_batch": start_batch, "load": load,
         "worker": worker, "pickup": pickup}
    )  # fmt: skip
