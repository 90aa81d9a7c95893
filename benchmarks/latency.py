"""Latency cases: an idle worker picking up a new run, and a waiting run resuming on a signal.

One worker process, idle between samples. Handlers stamp ``time.time()`` into their
result; the sample is that stamp minus the producer's clock just before its call (same
machine, same clock). On Postgres the worker is woken by ``LISTEN/NOTIFY``; SQLite has no
notifications across processes, so there the worker notices the producer's commit by
checking the file's ``data_version`` every ``watch_interval`` (5 ms by default). The
random pause between samples lands each one at a random point of that cycle.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

from benchmarks import stores
from benchmarks.stores import BenchStore
from benchmarks.workers import WorkerPool

SETTLE = 1.0  # seconds for a released worker to reach its idle wait


def _pause() -> None:
    """Let the worker go idle again before the next sample."""
    time.sleep(random.uniform(0.02, 0.06))


def idle_pickup(store: BenchStore, samples: int, concurrency: int) -> dict[str, float]:
    """Insert to handler start with the worker idle before each insert."""
    latencies = []
    with WorkerPool(store, 1, concurrency) as pool, store.client() as client:
        pool.go()
        time.sleep(SETTLE)
        for _ in tqdm(range(samples), desc="idle pick-up", leave=False, disable=None):
            _pause()
            began = time.time()
            run = client.start(stores.LATENCY, {})
            result = _result(client, run.id, pool)
            latencies.append(result["started"] - began)
    return _percentiles("idle", latencies)


def signal_resume(store: BenchStore, samples: int, concurrency: int) -> dict[str, float]:
    """``Client.signal`` to the body continuing after its ``wait_for_event``."""
    latencies = []
    with WorkerPool(store, 1, concurrency) as pool, store.client() as client:
        runs = client.start_many([(stores.SIGNAL, {})] * samples)
        pool.go()
        _wait_until(lambda: store.scalar("waiting", type=stores.SIGNAL) == samples, pool)
        for run in tqdm(runs, desc="signal to resume", leave=False, disable=None):
            _pause()
            began = time.time()
            client.signal(run.id, "go", {})
            result = _result(client, run.id, pool)
            latencies.append(result["resumed"] - began)
    return _percentiles("signal", latencies)


def _result(client: Any, run_id: str, pool: WorkerPool, timeout: float = 30.0) -> Any:
    """Poll the run until it has finished: gently, so polling does not slow the worker."""
    deadline = time.monotonic() + timeout
    pause = 0.002
    time.sleep(0.005)
    while time.monotonic() < deadline:
        run = client.get(run_id)
        if run.is_terminal:
            if run.status.value != "succeeded":
                raise RuntimeError(f"run {run_id} ended {run.status.value}: {run.last_error}")
            return run.result
        time.sleep(pause)
        pause = min(pause * 1.5, 0.02)
        pool.check()
    raise RuntimeError(f"run {run_id} did not finish within {timeout:g}s:\n{pool.logs()}")


def _wait_until(ready: Callable[[], bool], pool: WorkerPool, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for the worker:\n{pool.logs()}")
        pool.check()
        time.sleep(0.05)


def _percentiles(name: str, seconds: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(seconds, n=100, method="inclusive")
    return {
        f"{name}_p50_ms": statistics.median(seconds) * 1000,
        f"{name}_p99_ms": cuts[98] * 1000,
    }
