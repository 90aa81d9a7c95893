"""DBOS Transact through its public API: ``DBOS``, a registered queue, ``DBOSClient``.

Workers launch DBOS with a queue of ``@DBOS.workflow()`` functions (plain ``def``, its
usual style); producers enqueue with ``DBOSClient.enqueue`` one at a time, and 100 per
transaction with ``enqueue_in_transaction`` (it has no batch call). Defaults: the queue
as ``register_queue`` makes it (polled every second); tuned: polled every 0.1 s.
The 10-step case is a workflow of ten ``@DBOS.step()`` calls.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common
from dbos import DBOS, DBOSClient, DBOSConfig

QUEUE = "bench"
STEP_COUNT = 10


@DBOS.workflow(name="noop")
def noop() -> None:
    _common.mark()


@DBOS.step(name="nothing")
def nothing() -> None:
    return None


@DBOS.workflow(name="steps")
def steps() -> None:
    for _ in range(STEP_COUNT):
        nothing()
    _common.mark()


def _launch(url: str, polling: float | None = None) -> None:
    # An executor id of its own per process, as for any two workers of one application.
    config: DBOSConfig = {
        "name": "peers",
        "system_database_url": url,
        "executor_id": f"peers-{os.getpid()}",
    }
    DBOS(config=config)
    options: dict[str, Any] = {} if polling is None else {"polling_interval_sec": polling}
    DBOS.launch()
    DBOS.register_queue(QUEUE, **options)


def setup(url: str) -> None:
    _launch(url)
    DBOS.destroy()


def _options(name: str = "noop") -> Any:
    return {"workflow_name": name, "queue_name": QUEUE}


def _enqueue_many(client: DBOSClient, url: str, count: int, name: str = "noop") -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    for size in _common.batches(count):
        with engine.begin() as connection:
            for _ in range(size):
                client.enqueue_in_transaction(connection, _options(name))
    engine.dispose()


def start_one(url: str, count: str) -> dict[str, float]:
    client = DBOSClient(system_database_url=url)
    try:
        return _common.timed_rate(
            int(count), lambda: [client.enqueue(_options()) for _ in range(int(count))]
        )
    finally:
        client.destroy()


def start_batch(url: str, count: str) -> dict[str, float]:
    client = DBOSClient(system_database_url=url)
    try:
        return _common.timed_rate(int(count), lambda: _enqueue_many(client, url, int(count)))
    finally:
        client.destroy()


def load(url: str, count: str, kind: str) -> None:
    client = DBOSClient(system_database_url=url)
    try:
        _enqueue_many(client, url, int(count), "steps" if kind == "steps" else "noop")
    finally:
        client.destroy()


def worker(url: str, mode: str, kind: str) -> None:
    _common.serve_worker(lambda: _launch(url, 0.1 if mode == "tuned" else None))


def pickup(url: str, samples: str) -> dict[str, float]:
    client = DBOSClient(system_database_url=url)
    try:
        return _common.pickup(__file__, url, int(samples), lambda: client.enqueue(_options()))
    finally:
        client.destroy()


if __name__ == "__main__":
    _common.main(
        {"setup": setup, "start_one": start_one, "start_batch": start_batch, "load": load,
         "worker": worker, "pickup": pickup},
        hard_exit=True,
    )  # fmt: skip
