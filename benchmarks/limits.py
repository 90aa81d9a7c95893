"""What flow control costs a worker when it does not bind: ``python -m benchmarks.limits``.

One worker process (as in the suite's drain) drains ``--runs`` no-op runs, each started
with one of 100 concurrency keys, for each variant in turn, ``--repeat`` times,
interleaved so that the machine's other load falls on every variant alike:

- ``none``: no limit declared for the type (the claim's limit steps find nothing to do;
  the lease-counting trigger probes an empty counter table);
- ``declared``: a concurrency limit of 1,000,000 for the type and a rate limit of
  1,000,000 a second: every claim locks and reads the type's counter and the rate window,
  the trigger counts every lease, and nothing is ever held back;
- ``keyed``: ``declared`` and a limit of 1,000,000 per key as well: about a hundred
  counters (one per key) locked and counted per claim of a hundred runs;
- ``untriggered`` (Postgres): ``none`` with the lease-counting trigger disabled, the drain
  as it was before limits existed, to price the trigger itself.

Reported per variant: the median drain rate (runs/s, by the database's clock) and the
median CPU time the worker process spent per run (from ``/proc``).
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

KEYS = 100
NOT_BINDING = 1_000_000


def variants(kind: str) -> list[str]:
    found = ["none", "declared", "keyed"]
    return [*found, "untriggered"] if kind == "postgres" else found


def declare(store: BenchStore, variant: str) -> None:
    """Set (or clear) the limits of the benchmark's type for ``variant``."""
    with store.client() as client:
        admin = client.admin
        admin.set_runtime(stores.NOOP, "python")
        if variant in ("declared", "keyed"):
            per_key = NOT_BINDING if variant == "keyed" else None
            admin.set_concurrency(stores.NOOP, NOT_BINDING, per_key=per_key)
            admin.set_rate_limit("bench", f"{NOT_BINDING}/s")
            admin.limit_rate(stores.NOOP, "bench")
        else:
            admin.set_concurrency(stores.NOOP, None)
            admin.limit_rate(stores.NOOP, None)
    if store.kind == "postgres":
        store.execute("count_leases_off" if variant == "untriggered" else "count_leases_on")


def load(store: BenchStore, runs: int) -> None:
    with store.client() as client:
        for start in range(0, runs, stores.LOAD_BATCH):
            size = min(stores.LOAD_BATCH, runs - start)
            client.start_many(
                [{"type": stores.NOOP, "concurrency_key": f"k{n % KEYS}"} for n in range(size)]
            )


def drain_once(store: BenchStore, runs: int, concurrency: int, variant: str) -> tuple[float, float]:
    """(runs/s, worker CPU microseconds per run) of one drain."""
    declare(store, variant)
    load(store, runs)
    after = store.last_event()
    with workers.WorkerPool(store, 1, concurrency) as pool:
        pid = pool.procs[0].pid
        before = profile._cpu([pid])[pid]
        pool.go()
        workers.wait_for(store, pool, after, runs, f"drain, limits {variant}")
        spent = profile._cpu([pid])[pid] - before
    return runs / store.window(after, runs), spent / runs * 1e6


def measure(kind: str, url: str | None, runs: int, repeat: int, concurrency: int) -> dict[str, Any]:
    names = variants(kind)
    found: dict[str, dict[str, list[float]]] = {v: {"rate": [], "cpu_us": []} for v in names}
    with profile._store(kind, url) as store:
        drain_once(store, min(runs, 1000), concurrency, "none")  # warm the store and caches
        for _ in range(repeat):
            for variant in names:
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
    parser = argparse.ArgumentParser(prog="python -m benchmarks.limits", description=__doc__)
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
        base = results[kind]["none"]
        for variant, figures in results[kind].items():
            print(
                f"{kind:8} {variant:11}  {figures['rate']:>8,.0f} runs/s "
                f"({figures['rate'] / base['rate']:.0%})  "
                f"worker CPU {figures['cpu_us_per_run']:6.1f} µs/run "
                f"({figures['cpu_us_per_run'] / base['cpu_us_per_run']:.0%})"
            )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
