"""What flow control costs the database, per run: ``python -m benchmarks.limits_sql``.

The drain benchmark (``python -m benchmarks.limits``) times a worker; on a shared machine
its rates move with everyone else's load. This one prices the SQL alone, in a figure
that load hardly moves: the CPU time the Postgres backend spends (from
``/proc/<pid>/schedstat``, in nanoseconds) on the worker's two statements, ``claim`` (a
batch of ``--batch`` runs) and ``succeed_runs`` (that batch), per run, for the same
variants as the drain benchmark (``none``, ``declared``, ``keyed``), interleaved: medians
of ``--repeat`` rounds of ``--runs`` runs each (each run started with one of 100 keys),
and their sum.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import psycopg

from benchmarks import limits, profile, stores
from benchmarks.stores import BenchStore

VARIANTS = ("none", "declared", "keyed")


def backend_cpu(pid: int) -> float:
    """Seconds on the CPU of the process ``pid`` (the first field of schedstat)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def one_round(store: BenchStore, variant: str, runs: int, batch: int) -> tuple[float, float]:
    """(claim, succeed) backend CPU microseconds per run, draining ``runs`` runs."""
    limits.declare(store, variant)
    limits.load(store, runs)
    backend = store.backend()
    params = {
        "worker_id": "bench",
        "types": [stores.NOOP],
        "runtime": "python",
        "limit": batch,
        "lease": 30.0,
        "versions": json.dumps({stores.NOOP: "1"}),
        "known": [f"{stores.NOOP}@1"],
        "alone": False,
    }
    claim, succeed = backend.q["claim"].encode(), backend.q["succeed_runs"].encode()
    claiming = succeeding = 0.0
    try:
        with psycopg.connect(store.url, autocommit=True) as conn:
            conn.execute(f'set search_path to "{store.schema}"'.encode())
            row = conn.execute(b"select pg_backend_pid()").fetchone()
            assert row is not None
            pid = int(row[0])
            while True:
                before = backend_cpu(pid)
                cur = conn.execute(claim, params)
                names = [column.name for column in cur.description or []]
                leased = [dict(zip(names, values, strict=True)) for values in cur.fetchall()]
                claiming += backend_cpu(pid) - before
                if not leased:
                    break
                items = [{"id": str(r["id"]), "token": str(r["lease_token"])} for r in leased]
                before = backend_cpu(pid)
                conn.execute(succeed, {"items": json.dumps([{**i, "result": "{}"} for i in items])})
                succeeding += backend_cpu(pid) - before
    finally:
        backend.close()
    return claiming / runs * 1e6, succeeding / runs * 1e6


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.limits_sql", description=__doc__)
    parser.add_argument("--runs", type=int, default=5000, help="runs per round (5000)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds of each variant (5)")
    parser.add_argument("--batch", type=int, default=100, help="runs per claim (100)")
    parser.add_argument("--postgres-url")
    args = parser.parse_args(argv)
    found: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    with profile._store("postgres", args.postgres_url) as store:
        one_round(store, VARIANTS[0], min(args.runs, 1000), args.batch)  # warm up
        for _ in range(args.repeat):
            for variant in VARIANTS:
                found[variant].append(one_round(store, variant, args.runs, args.batch))
    medians = {
        variant: (statistics.median(c for c, _ in rounds), statistics.median(s for _, s in rounds))
        for variant, rounds in found.items()
    }
    base = sum(medians[VARIANTS[0]])
    for variant, (claim, succeed) in medians.items():
        total = claim + succeed  # the sum of the medians: one slow round moves neither
        print(
            f"postgres {variant:9} claim {claim:6.1f} µs/run  succeed_runs {succeed:6.1f} µs/run"
            f"  both {total:6.1f} µs/run ({total / base:.0%})"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
