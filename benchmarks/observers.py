"""What an observer costs a worker: ``python -m benchmarks.observers [options]``.

One worker process (as in the suite's drain) drains ``--runs`` no-op runs for each
variant in turn, ``--repeat`` times, interleaved so that the machine's other load falls on
every variant alike: ``off`` (no observer), ``api`` (the tracing observer, with the
OpenTelemetry API and no SDK configured: what an application gets that installs the
``tracing`` extra and exports nothing), ``sdk`` (the SDK records every span, into a
batch exported nowhere), ``metrics`` (Prometheus metrics counted and served, as
``worker --metrics-port`` does) and ``metrics+sdk`` (both). Reported per variant: the
median drain rate (runs/s, by the database's clock) and the median CPU time the worker
process spent per run, read from ``/proc``, which other processes on a shared machine
disturb far less than the rate.
"""

from __future__ import annotations

import sys

from benchmarks import stores, variants
from benchmarks.stores import BenchStore
from benchmarks.worker import METRICS_ENV, TRACING_ENV

VARIANTS = ("off", "api", "sdk", "metrics", "metrics+sdk")


def drain_once(store: BenchStore, runs: int, concurrency: int, variant: str) -> tuple[float, float]:
    """(runs/s, worker CPU microseconds per run) of one drain."""
    store.load_runs(runs, stores.NOOP)
    parts = variant.split("+")
    tracing = next((part for part in parts if part in ("api", "sdk")), "")
    env = {TRACING_ENV: tracing, METRICS_ENV: "on" if "metrics" in parts else ""}
    return variants.timed_drain(store, runs, concurrency, f"drain, {variant}", env)


if __name__ == "__main__":
    variants.main(
        sys.argv[1:], "python -m benchmarks.observers", __doc__, lambda kind: VARIANTS, drain_once
    )
