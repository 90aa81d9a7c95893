"""Values a run publishes: what one ``ctx.set_value`` costs the store next to a journaled
step, and how soon a reader waiting in ``client.wait_value`` has it.

Per store, on one leased run: ``--sets`` journaled steps, then as many sets (ten keys in
turn, so most sets replace a row), each its own transaction as a body's call is, timed
one by one (median µs). Then a reader thread follows one key with ``wait_value(after=
last version)`` while the writer sets it ``--wakes`` times, a pause apart: the time from
the set's call to the reader's return (p50/p99; on Postgres the reader LISTENs, on
SQLite it polls).

    python -m benchmarks.values                 # SQLite and Postgres
    python -m benchmarks.values --store postgres --sets 500 --wakes 50

``--readers N`` measures instead N readers of one client waiting at once, each on a run
of its own: how soon each has its set, and how many connections the client holds (on
Postgres, one listening connection for all of them, plus its pool).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.stores import BenchStore, each_store
from simpleworkflow import Client
from simpleworkflow.backends.records import Claim, StepRecord

TYPE = "bench.values.run.v1"


def _record(lease: Any, name: str, kind: str, output: str, events: list[Any]) -> StepRecord:
    return StepRecord(lease.run.id, lease.token, name, kind, 0, output, 1, events=events)


def measure(sets: int, wakes: int) -> Any:
    def run(store: BenchStore, _tmp: Path) -> dict[str, Any]:
        backend = store.backend()
        client = store.client()
        try:
            run_id = client.start(TYPE).id
            (lease,) = backend.execute(backend.claim(Claim("bench", (TYPE,), 1, 600)))
            steps, values = [], []
            for n in range(sets):
                began = time.perf_counter()
                backend.execute(backend.record_step(_record(lease, f"s{n}", "step", "1", [])))
                steps.append(time.perf_counter() - began)
            for n in range(sets):
                key = f"k{n % 10}"
                event = {"type": "value_set", "data": {"key": key, "value": n, "step": f"v{n}"}}
                record = _record(lease, f"v{n}", "value", json.dumps({"key": key}), [event])
                began = time.perf_counter()
                backend.execute(backend.set_value(record, key, str(n)))
                values.append(time.perf_counter() - began)
            latencies = _wakes(store, backend, lease, run_id, wakes)
            return {
                "step_us_p50": round(statistics.median(steps) * 1e6),
                "set_value_us_p50": round(statistics.median(values) * 1e6),
                "wake_ms_p50": round(statistics.median(latencies) * 1e3, 2),
                "wake_ms_p99": round(_p99(latencies) * 1e3, 2),
            }
        finally:
            client.close()
            backend.close()

    return run


def _wakes(store: BenchStore, backend: Any, lease: Any, run_id: str, wakes: int) -> list[float]:
    set_at: dict[int, float] = {}
    latencies: list[float] = []
    ready = threading.Event()

    def follow() -> None:
        with store.client() as reader:
            after = 0
            ready.set()
            while after < wakes:
                got = reader.wait_value(run_id, "wake", timeout=30, after=after)
                latencies.append(time.perf_counter() - set_at[got.version])
                after = got.version

    thread = threading.Thread(target=follow)
    thread.start()
    ready.wait()
    for n in range(1, wakes + 1):
        time.sleep(0.05)  # the reader is waiting again
        record = _record(lease, f"wake{n}", "value", json.dumps({"key": "wake"}), [])
        set_at[n] = time.perf_counter()
        backend.execute(backend.set_value(record, "wake", str(n)))
    thread.join()
    return latencies


def measure_readers(readers: int) -> Any:
    """``readers`` threads of one client, each waiting in ``wait_value`` on a run of its
    own while the writer sets the runs' keys one after the other: the set-to-return time
    (p50/p99) and, on Postgres, the connections the client holds while they wait."""

    def run(store: BenchStore, _tmp: Path) -> dict[str, Any]:
        backend = store.backend()
        client = Client(store.url, schema=store.schema, application_name="bench-readers")
        try:
            for _ in range(readers):
                client.start(TYPE)
            leases = backend.execute(backend.claim(Claim("bench", (TYPE,), readers, 600)))
            set_at: dict[str, float] = {}

            def wait(run_id: str) -> float:
                client.wait_value(run_id, "fan", timeout=120)
                return time.perf_counter() - set_at[run_id]

            with concurrent.futures.ThreadPoolExecutor(readers) as pool:
                waits = [pool.submit(wait, lease.run.id) for lease in leases]
                time.sleep(2.0)  # every reader waits
                held = _connections(store, "bench-readers")
                for lease in leases:
                    record = _record(lease, "value:fan", "value", json.dumps({"key": "fan"}), [])
                    set_at[lease.run.id] = time.perf_counter()
                    backend.execute(backend.set_value(record, "fan", "1"))
                    time.sleep(0.01)
                latencies = [w.result(120) for w in waits]
            return {
                "readers": readers,
                "client_connections_while_waiting": held,
                "wake_ms_p50": round(statistics.median(latencies) * 1e3, 2),
                "wake_ms_p99": round(_p99(latencies) * 1e3, 2),
            }
        finally:
            client.close()
            backend.close()

    return run


def _connections(store: BenchStore, name: str) -> int | None:
    if store.kind != "postgres":
        return None
    with psycopg.connect(store.url, autocommit=True) as conn:
        row = conn.execute(
            "select count(*) from pg_stat_activity where application_name = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.values")
    parser.add_argument("--sets", type=int, default=1000)
    parser.add_argument("--wakes", type=int, default=100)
    parser.add_argument("--store", default="sqlite,postgres", help="comma-separated")
    parser.add_argument("--postgres-url", help="Postgres: this server, not a private one")
    parser.add_argument(
        "--readers", type=int, default=0, help="instead: this many readers of one client"
    )
    args = parser.parse_args(argv)
    if args.readers:
        fanned = each_store(
            args.store.split(","), args.postgres_url, "bench-values-", measure_readers(args.readers)
        )
        print(json.dumps({"readers": args.readers, "results": fanned}, indent=2))
        return
    results = each_store(
        args.store.split(","), args.postgres_url, "bench-values-", measure(args.sets, args.wakes)
    )
    print(json.dumps({"sets": args.sets, "wakes": args.wakes, "results": results}, indent=2))


if __name__ == "__main__":
    main()
