"""How long one transaction of the retention sweep takes, beside many runs it must keep.

``python -m benchmarks.sweep [--expired 20000] [--kept 200000] [--stores postgres,sqlite]``

A fresh store gets ``kept`` finished runs it must keep (a type whose registry retention
is a year, finished 100 days ago: old, not expired), ``expired`` runs finished 40 days
ago (past the 30-day default), and a tenth of ``kept`` pending runs, each finished run
with the history a real one leaves (three events, two journal steps). The sweep then
runs through the admin facade, and each of its transactions is timed: the target is at
most 1,000 runs and well under a second per transaction, however many runs are kept.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from benchmarks import stores
from benchmarks.stores import BenchStore
from simpleworkflow.admin import Admin
from simpleworkflow.backends.ops import Op

KEPT = "bench.kept.v1"
EXPIRED = "bench.expired.v1"
PENDING = "bench.pending.v1"


def load(store: BenchStore, kept: int, expired: int) -> None:
    """The runs described above, then ANALYZE."""
    with store.client() as client:
        client.admin.set_runtime(KEPT, "python")
        client.admin.set_retention(KEPT, "365d")
    for type_name, count, days in ((KEPT, kept, 100), (EXPIRED, expired, 40)):
        store.load_runs(count, type=type_name)
        if store.kind == "sqlite":
            store.execute("finish_runs_events", type=type_name)
            store.execute("finish_runs_steps", type=type_name)
        store.execute("finish_runs", type=type_name, days=days)
    store.load_runs(kept // 10, type=PENDING)
    store.execute("analyze")


def timed_sweep(store: BenchStore) -> dict[str, Any]:
    """Sweep, timing each transaction and counting the runs it deleted."""
    backend = store.backend()
    execute = backend.execute
    batches: list[tuple[float, int]] = []

    def execute_timed(op: Op[Any], *, readonly: bool = False, wait_for_disk: bool = True) -> Any:
        started = time.perf_counter()
        result = execute(op, readonly=readonly, wait_for_disk=wait_for_disk)
        if isinstance(result, dict):  # a Counter of runs by type: a batch of the sweep
            batches.append((time.perf_counter() - started, sum(result.values())))
        return result

    backend.execute = execute_timed  # type: ignore[method-assign]
    started = time.perf_counter()
    with Admin(backend=backend) as admin:
        report = admin.sweep()
    elapsed = time.perf_counter() - started
    backend.close()
    seconds = [s for s, _ in batches]
    return {
        "deleted": report.total,
        "transactions": len(batches),
        "max_runs_per_transaction": max(n for _, n in batches),
        "median_ms": round(statistics.median(seconds) * 1000, 1),
        "max_ms": round(max(seconds) * 1000, 1),
        "runs_per_second": round(report.total / elapsed),
    }


def measure(store: BenchStore, kept: int, expired: int) -> dict[str, Any]:
    load(store, kept, expired)
    return timed_sweep(store)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep", description=__doc__)
    parser.add_argument("--expired", type=int, default=20_000)
    parser.add_argument("--kept", type=int, default=200_000)
    parser.add_argument("--stores", default="postgres,sqlite", help="comma-separated")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = stores.each_store(
        args.stores.split(","),
        args.postgres_url,
        "simpleworkflow-sweep-",
        lambda store, _tmp: measure(store, args.kept, args.expired),
    )
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"sweep of {args.expired:,} expired runs beside {args.kept:,} kept")
    for kind, row in results.items():
        print(
            f"{kind:9} {row['deleted']:>7,} deleted in {row['transactions']} transactions "
            f"(at most {row['max_runs_per_transaction']:,} runs each): "
            f"median {row['median_ms']} ms, max {row['max_ms']} ms per transaction, "
            f"{row['runs_per_second']:,} runs/s"
        )


if __name__ == "__main__":
    main()
