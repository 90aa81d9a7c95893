"""Absurd through its Python SDK (``absurd_sdk.Absurd``); the schema from ``absurdctl``.

The schema is the SQL that ``absurdctl init`` installs (the copy bundled in the
``absurdctl`` package, run here with psycopg as ``psql`` may be absent), and a queue made
with ``create_queue``. Handlers are plain ``def`` (the synchronous client). Defaults:
``start_worker()`` as it comes (one task at a time, polling every 0.25 s); tuned:
``concurrency=10`` (a thread pool, claims of 10). Starts are ``spawn`` one at a time, and
100 spawns in one transaction of a caller's connection (it has no batch call). The
10-step case is a task of ten ``ctx.step`` calls.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common
import absurdctl
import psycopg
from absurd_sdk import Absurd

QUEUE = "bench"
STEP_COUNT = 10


def _client(url: str, conn: Any = None) -> Absurd:
    client = Absurd(conn or url, queue_name=QUEUE)

    @client.register_task("noop")
    def noop(params: Any, ctx: Any) -> None:
        _common.mark()

    @client.register_task("steps")
    def steps(params: Any, ctx: Any) -> None:
        for number in range(STEP_COUNT):
            ctx.step(f"s{number}", lambda: None)
        _common.mark()

    return client


def setup(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(absurdctl.BUNDLED_SCHEMA_SQL)
    client = _client(url)
    client.create_queue()
    client.close()


def start_one(url: str, count: str) -> dict[str, float]:
    client = _client(url)
    try:
        return _common.timed_rate(
            int(count), lambda: [client.spawn("noop", {}) for _ in range(int(count))]
        )
    finally:
        client.close()


def _spawn_many(url: str, count: int, name: str = "noop") -> None:
    with psycopg.connect(url) as conn:
        client = _client(url, conn)
        for size in _common.batches(count):
            with conn.transaction():
                for _ in range(size):
                    client.spawn(name, {})


def start_batch(url: str, count: str) -> dict[str, float]:
    return _common.timed_rate(int(count), lambda: _spawn_many(url, int(count)))


def load(url: str, count: str, kind: str) -> None:
    _spawn_many(url, int(count), "steps" if kind == "steps" else "noop")


def worker(url: str, mode: str, kind: str) -> None:
    client = _client(url)
    options = {"concurrency": 10} if mode == "tuned" else {}
    _common.serve_worker(lambda: client.start_worker(**options))


def pickup(url: str, samples: str) -> dict[str, float]:
    client = _client(url)
    try:
        return _common.pickup(__file__, url, int(samples), lambda: client.spawn("noop", {}))
    finally:
        client.close()


if __name__ == "__main__":
    _common.main(
        {"setup": setup, "start_one": start_one, "start_batch": start_batch, "load": load,
         "worker": worker, "pickup": pickup}
    )  # fmt: skip
