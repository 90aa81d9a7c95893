"""Variants of one drain, measured side by side: the shared part of
``python -m benchmarks.observers`` and ``python -m benchmarks.limits``.

Each benchmark says what its variants are and how to drain once under one; this module
drains them interleaved, in an order that turns each round (so that the machine's other
load and the order itself fall on every variant alike), takes medians, and prints each
variant relative to the first, its baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import profile, workers
from benchmarks.stores import BenchStore

#: One drain of ``runs`` runs at ``concurrency`` under a variant: (runs/s, µs CPU per run).
Drain = Callable[[BenchStore, int, int, str], tuple[float, float]]


def timed_drain(
    store: BenchStore,
    runs: int,
    concurrency: int,
    label: str,
    env: Mapping[str, str] | None = None,
) -> tuple[float, float]:
    """Drain the runs already loaded with one worker process: (runs/s by the database's
    clock, the worker's CPU microseconds per run, read from ``/proc``)."""
    after = store.last_event()
    with workers.WorkerPool(store, 1, concurrency, env=dict(env or {})) as pool:
        pid = pool.procs[0].pid
        before = profile._cpu([pid])[pid]
        pool.go()
        workers.wait_for(store, pool, after, runs, label)
        spent = profile._cpu([pid])[pid] - before
    return runs / store.window(after, runs), spent / runs * 1e6


def measure(
    kind: str,
    url: str | None,
    runs: int,
    repeat: int,
    concurrency: int,
    names: Sequence[str],
    drain: Drain,
) -> dict[str, Any]:
    """Medians per variant of ``repeat`` interleaved drains, after one warm-up drain; the
    order turns by one variant each round."""
    found: dict[str, dict[str, list[float]]] = {v: {"rate": [], "cpu_us": []} for v in names}
    with profile._store(kind, url) as store:
        drain(store, min(runs, 1000), concurrency, names[0])  # warm the store and the caches
        for round_ in range(repeat):
            # Each round starts at the next variant: none is always first (or always
            # after a given other), so an effect of the order falls on every one alike.
            shift = round_ % len(names)
            for variant in [*names[shift:], *names[:shift]]:
                rate, cpu = drain(store, runs, concurrency, variant)
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


def main(
    argv: list[str],
    prog: str,
    description: str | None,
    variants: Callable[[str], Sequence[str]],
    drain: Drain,
) -> None:
    """The command line of a variants benchmark; ``variants(kind)`` names a store's."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--stores", default="postgres,sqlite")
    parser.add_argument("--runs", type=int, default=5000, help="runs per drain (5000)")
    parser.add_argument("--repeat", type=int, default=3, help="drains of each variant (3)")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--postgres-url")
    parser.add_argument("--out", type=Path, help="also write the figures here, as JSON")
    args = parser.parse_args(argv)
    results = {}
    for kind in [s.strip() for s in args.stores.split(",") if s.strip()]:
        names = variants(kind)
        results[kind] = measure(
            kind, args.postgres_url, args.runs, args.repeat, args.concurrency, names, drain
        )
        base = results[kind][names[0]]
        for variant, figures in results[kind].items():
            print(
                f"{kind:8} {variant:11}  {figures['rate']:>8,.0f} runs/s "
                f"({figures['rate'] / base['rate']:.0%})  "
                f"worker CPU {figures['cpu_us_per_run']:6.1f} µs/run "
                f"({figures['cpu_us_per_run'] / base['cpu_us_per_run']:.0%})"
            )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
