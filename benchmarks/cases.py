"""Throughput cases: starting runs, draining them with 1-4 worker processes, and steps.

Each case gets a fresh store and returns its figures by metric name (see ``metrics``).
Handlers do no work, so what is measured is the engine: its round trips, commits and
Python overhead per run or per step.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass

from tqdm import tqdm

from benchmarks import stores, workers
from benchmarks.stores import BenchStore
from benchmarks.worker import METRICS_ENV
from simpleworkflow.worker import WorkerOptions

DEFAULT_CONCURRENCY: int = WorkerOptions.concurrency
WARM_UP = 20  # starts before the clock runs: connections opened, statements prepared
BATCH = 1000
STEPS_PER_RUN = 10


@dataclass(frozen=True)
class Sizes:
    """How much work each case does."""

    items: int
    concurrency: int

    @property
    def step_runs(self) -> int:
        """Runs per step case: a fifth of ``items``, so the 10-step case writes 2x items steps."""
        return max(10, self.items // 5)


def start_one(store: BenchStore, sizes: Sizes) -> dict[str, float]:
    """One producer calling ``Client.start`` in a loop, each start its own transaction."""
    with store.client() as client:
        for _ in range(WARM_UP):
            client.start(stores.NOOP, {})
        began = time.perf_counter()
        for _ in tqdm(range(sizes.items), desc="start one by one", leave=False, disable=None):
            client.start(stores.NOOP, {})
        elapsed = time.perf_counter() - began
    return {"start_one": sizes.items / elapsed}


def start_many(store: BenchStore, sizes: Sizes) -> dict[str, float]:
    """One producer calling ``Client.start_many`` with batches of ``BATCH`` runs."""
    with store.client() as client:
        client.start_many([(stores.NOOP, {})] * WARM_UP)
        batches = [min(BATCH, sizes.items - i) for i in range(0, sizes.items, BATCH)]
        began = time.perf_counter()
        for size in tqdm(batches, desc="start_many", leave=False, disable=None):
            client.start_many([(stores.NOOP, {})] * size)
        elapsed = time.perf_counter() - began
    return {"start_many": sizes.items / elapsed}


def drain(store: BenchStore, sizes: Sizes, processes: int) -> dict[str, float]:
    """``items`` no-op runs drained by ``processes`` worker processes, audit trail and all."""
    rate = workers.drain(
        store,
        runs=sizes.items,
        processes=processes,
        concurrency=sizes.concurrency,
        load=lambda: store.load_runs(sizes.items),
        label=f"drain, {processes} process{'es' if processes > 1 else ''}",
    )
    return {f"drain_{processes}": rate}


def drain_default(store: BenchStore, sizes: Sizes) -> dict[str, float]:
    """The 1-process drain with the worker's out-of-the-box concurrency.

    Runs are claimed and completed in batches of up to ``concurrency``, so this one
    setting moves the drain rate more than anything else; both figures are reported.
    """
    rate = workers.drain(
        store,
        runs=sizes.items,
        processes=1,
        concurrency=DEFAULT_CONCURRENCY,
        load=lambda: store.load_runs(sizes.items),
        label=f"drain, concurrency {DEFAULT_CONCURRENCY}",
    )
    return {"drain_1_default": rate}


def drain_metrics(store: BenchStore, sizes: Sizes) -> dict[str, float]:
    """The 1-process drain with Prometheus metrics on, as ``--metrics-port`` turns them
    on: the observer counts every claim, attempt and run, and the worker serves them.
    Against ``drain_1``, what the metrics cost (the target: under 10 % of the rate)."""
    rate = workers.drain(
        store,
        runs=sizes.items,
        processes=1,
        concurrency=sizes.concurrency,
        load=lambda: store.load_runs(sizes.items),
        label="drain, 1 process, metrics",
        env={METRICS_ENV: "on"},
    )
    return {"drain_1_metrics": rate}


def steps(store: BenchStore, sizes: Sizes) -> dict[str, float]:
    """Durable workflows of 0 and of 10 journaled no-op steps, one worker process.

    The per-step overhead is the extra worker time a step costs at full throughput:
    (seconds per 10-step run - seconds per 0-step run) / 10.
    """
    rates = {}
    for count in (0, STEPS_PER_RUN):
        payload = json.dumps({"steps": count})
        rates[count] = workers.drain(
            store,
            runs=sizes.step_runs,
            processes=1,
            concurrency=sizes.concurrency,
            load=functools.partial(store.load_runs, sizes.step_runs, stores.STEPS, payload),
            label=f"{count}-step workflows",
        )
    per_step = (1 / rates[STEPS_PER_RUN] - 1 / rates[0]) / STEPS_PER_RUN
    return {
        "ten_step": rates[STEPS_PER_RUN],
        "step_overhead_ms": per_step * 1000,
    }
