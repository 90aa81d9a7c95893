"""What the payload index costs each run on Postgres: ``python -m benchmarks.payload_index``.

Every write of a run's row that is not a HOT update adds the row's payload to every index
of the table again: the insert of a start, and the claim's and the completion's updates
(they change `status`, which the claim index reads). A GIN index adds one entry per
path of the payload. This prices it in two figures load hardly moves, per run and per
statement kind: the CPU time of the Postgres backend that runs the statement (from
``/proc/<pid>/schedstat``) and the WAL it writes. Five variants take turns in one
schema, each round on an emptied table: ``none`` (no index, as
by default), ``gin`` (as ``simpleworkflow payload-index create`` makes it; the pending
list it fills is merged into the index at the end of the round by
``gin_clean_pending_list``, whose cost is counted as ``merge``, which autovacuum or an
unlucky insert would pay otherwise), ``gin, no fastupdate``
(every entry goes into the index at once), with payloads the size of an order (about
400 bytes, 40 values: a customer, five lines, tags), and ``none, one value`` and
``gin, one value`` with payloads of one value (``{"n": 17}``, as the benchmarks start).
Autovacuum is off for the table meanwhile, so nothing else does the work. Each round
starts ``--runs`` runs one at a time, as many in ``start_many`` calls of 100, then
claims and completes them all in batches of 100. Prints medians of ``--repeat`` rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from benchmarks import profile, stores
from benchmarks.stores import BenchStore
from simpleworkflow import Client
from simpleworkflow.backends import Backend
from simpleworkflow.backends.base import Claim
from simpleworkflow.backends.records import Outcomes, Success

VARIANTS = ("none", "gin", "gin, no fastupdate", "none, one value", "gin, one value")
PHASES = ("start", "start_many", "claim", "succeed", "merge")
BATCH = 100
T = TypeVar("T")


def order(n: int) -> dict[str, Any]:
    """A payload of the size and shape of an order: about 400 bytes, 40 values."""
    return {
        "order_id": f"ord_{n:08d}",
        "customer": {"id": f"c_{n % 10_000}", "email": f"buyer{n % 10_000}@example.com"},
        "lines": [
            {"sku": f"sku-{(n + i) % 500}", "qty": i + 1, "price": 9.5 + i} for i in range(5)
        ],
        "currency": "EUR",
        "total": 57.5 + n % 100,
        "tags": ["gift"] if n % 3 else ["gift", "priority"],
    }


def one_value(n: int) -> dict[str, Any]:
    return {"n": n}


class Meter:
    """CPU seconds and WAL bytes of the backend behind one connection."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        row = conn.execute(b"select pg_backend_pid()").fetchone()
        assert row is not None
        self.pid = int(row[0])

    def cpu(self) -> float:
        return int(Path(f"/proc/{self.pid}/schedstat").read_text().split()[0]) / 1e9

    def wal(self) -> int:
        # pg_wal_lsn_diff from 0/0: the insert position in bytes; read in the
        # transaction that is about to be measured, so it adds no commit of its own
        row = self.conn.execute(b"select pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')")
        found = row.fetchone()
        assert found is not None
        return int(found[0])

    def measure(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float, int]:
        """What ``work(...)`` returned, and the CPU seconds and WAL bytes it cost the
        backend, its commit included."""
        cpu, wal = self.cpu(), self.wal()
        found = work(*args, **kwargs)
        self.conn.commit()
        spent, written = self.cpu() - cpu, self.wal() - wal
        self.conn.commit()
        return found, spent, written


def _index(store: BenchStore, conn: psycopg.Connection[Any], variant: str) -> None:
    schema = f'"{store.schema}"'
    conn.execute(f"truncate {schema}.workflow_run, {schema}.workflow_event cascade".encode())
    conn.execute(f"drop index if exists {schema}.idx_workflow_run_payload".encode())
    if variant.startswith("gin"):
        fastupdate = "off" if "fastupdate" in variant else "on"
        conn.execute(
            f"create index idx_workflow_run_payload on {schema}.workflow_run "
            f"using gin (payload jsonb_path_ops) with (fastupdate = {fastupdate})".encode()
        )
    conn.commit()


def one_round(
    store: BenchStore, backend: Backend, client: Client, variant: str, runs: int
) -> dict[str, tuple[float, float]]:
    """{phase: (backend CPU µs per run, WAL bytes per run)} for one variant."""
    payload = one_value if "one value" in variant else order
    claim = Claim(
        worker_id="bench",
        types=(stores.NOOP,),
        limit=BATCH,
        lease_seconds=30.0,
        runtime="python",
        versions={stores.NOOP: "1"},
        known=(f"{stores.NOOP}@1",),
    )
    spent: dict[str, tuple[float, int]] = {}

    def add(phase: str, figures: tuple[Any, float, int]) -> Any:
        cpu, wal = spent.get(phase, (0.0, 0))
        spent[phase] = (cpu + figures[1], wal + figures[2])
        return figures[0]

    with psycopg.connect(store.url) as conn:
        _index(store, conn, variant)
        meter = Meter(conn)
        for n in range(runs):
            add("start", meter.measure(client.start, stores.NOOP, payload(n), connection=conn))
        for first in range(runs, 2 * runs, BATCH):
            batch = [(stores.NOOP, payload(n)) for n in range(first, first + BATCH)]
            add("start_many", meter.measure(client.start_many, batch, connection=conn))
        while leases := add("claim", meter.measure(backend.execute_on, conn, backend.claim(claim))):
            outcomes = Outcomes(succeeded=[Success(le.run.id, le.token, "{}") for le in leases])
            add(
                "succeed",
                meter.measure(backend.execute_on, conn, backend.finish(outcomes, "bench")),
            )
        if variant.startswith("gin"):
            add("merge", meter.measure(_merge, store, conn))
    per = {"start": runs, "start_many": runs}
    return {
        phase: (cpu / per.get(phase, 2 * runs) * 1e6, wal / per.get(phase, 2 * runs))
        for phase, (cpu, wal) in spent.items()
    }


def _merge(store: BenchStore, conn: psycopg.Connection[Any]) -> None:
    index = f'"{store.schema}".idx_workflow_run_payload'
    conn.execute(f"select gin_clean_pending_list('{index}'::regclass)".encode())


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.payload_index", description=__doc__)
    parser.add_argument("--runs", type=int, default=2000, help="runs per way of starting (2000)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds of each variant (5)")
    parser.add_argument("--postgres-url")
    args = parser.parse_args(argv)
    found: dict[str, list[dict[str, tuple[float, float]]]] = {v: [] for v in VARIANTS}
    with profile._store("postgres", args.postgres_url) as store:
        store.execute("autovacuum_off")
        backend, client = store.backend(), store.client()
        try:
            one_round(store, backend, client, VARIANTS[1], min(args.runs, 500))  # warm up
            for repeat in range(args.repeat):
                for k in range(len(VARIANTS)):  # each round starts at the next variant
                    variant = VARIANTS[(repeat + k) % len(VARIANTS)]
                    found[variant].append(one_round(store, backend, client, variant, args.runs))
        finally:
            client.close()
            backend.close()
    print(f"{'postgres, per run':22}" + "".join(f"{phase:>20}" for phase in PHASES))
    for variant, rounds in found.items():
        cells = []
        for phase in PHASES:
            figures = [r[phase] for r in rounds if phase in r]
            if not figures:
                cells.append(f"{'-':>20}")
                continue
            cpu = statistics.median(f[0] for f in figures)
            wal = statistics.median(f[1] for f in figures)
            cells.append(f"{cpu:8.1f} µs {wal:6.0f} B")
        print(f"{variant:22}" + "".join(f"{cell:>20}" for cell in cells))


if __name__ == "__main__":
    main(sys.argv[1:])
