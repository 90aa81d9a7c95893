"""What an observer costs a worker: ``python -m benchmarks.observers [options]``.

One worker process (as in the suite's drain) drains ``--runs`` no-op runs for each
variant in turn, ``--repeat`` times, interleaved so that the machine's other load falls on
every variant alike: ``off`` (no observer), ``api`` (the tracing observer, with the
OpenTelemetry API and no SDK configured: what an application gets that installs the
``tracing`` extra and exports nothing) and ``sdk`` (the SDK records every span, into a
batch exported nowhere). Reported per variant: the median drain rate (runs/s, by the
database's clock) and the median CPU time the worker process spent per run, read from
``/proc``, which other processes on a shared machine disturb far less than the rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks import profile, stores, workers
from benchmarks.stores import BenchStore
from benchmarks.worker import TRACING_ENV

VARIANTS = ("off", "api", "sdk")


def drain_once(store: BenchStore, runs: int, concurrency: int, variant: str) -> tuple[float, float]:
    """(runs/s, worker CPU microseconds per run) of one drain."""
    store.load_runs(runs, stores.NOOP)
    after = store.last_event()
    env = {TRACING_ENV: "" if variant == "off" else variant}
    with workers.WorkerPool(store, 1, concurrency, env=env) as pool:
        pid = pool.procs[0].pid
        before = profile._cpu([pid])[pid]
        pool.go()
        workers.wait_for(store, pool, after, runs, f"drain, {variant}")
        spent = profile._cpu([pid])[pid] - before
    return runs / store.window(after, runs), spent / runs * 1e6


def measure(kind: str, url: str | None, runs: int, repeat: int, concurrency: int) -> dict[str, Any]:
    found: dict[str, dict[str, list[float]]] = {v: {"rate": [], "cpu_us": []} for v in VARIANTS}
    with profile._store(kind, url) as store:
        drain_once(store, min(runs, 1000), concurrency, "off")  # warm the store and the caches
        for _ in range(repeat):
            for variant in VARIANTS:
                rate, cpu = drain_once(store, runs, concurrency, variant)
                found[variant]["rate"].append(round(rate))
                found[variant]["cpu_us"].append(round(cpu, 1))
    return {
        variant: {
            "rate": statistics.median(values["rate"]),
            "cpu_us_per_run": statistics.median(values["cpu_us"]),
            "runs": values,
        }
        for variant, values in found.items()
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.observers", description=__doc__)
    parser.add_argument("--stores", default="postgres,sqlite")
    parser.add_argument("--runs", type=int, default=5000, help="runs per drain (5000)")
    parser.add_argument("--repeat", type=int, default=3, help="drains of each variant (3)")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--postgres-url")
    parser.add_argument("--out", type=Path, help="also write the figures here, as JSON")
    args = parser.parse_args(argv)
    results = {}
    for kind in [s.strip() for s in args.stores.split(",") if s.strip()]:
        results[kind] = measure(kind, args.postgres_url, args.runs, args.repeat, args.concurrency)
        base = results[kind]["off"]
        for variant, figures in results[kind].items():
            print(
                f"{kind:8} {variant:3}  {figures['rate']:>8,.0f} runs/s "
                f"({figures['rate'] / base['rate']:.0%})  "
                f"worker CPU {figures['cpu_us_per_run']:6.1f} µs/run "
                f"({figures['cpu_us_per_run'] / base['cpu_us_per_run']:.0%})"
            )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
