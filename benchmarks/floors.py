"""``python -m benchmarks.floors``: the start path against its floor, what psycopg alone
does on the same table, measured side by side in one sitting on one Postgres.

- ``start``: ``Client.start``, one run per call, beside one single-row ``insert`` per
  run on a psycopg connection in autocommit mode;
- ``start_many``: ``Client.start_many`` in batches of 100, beside one multi-row
  ``insert`` of the same 100 rows.

Both insert into ``workflow_run`` of a migrated schema (its triggers fire for both: the
``created`` event, the wake-up), the columns a plain producer gives: the type and the
payload (JSON text, ``{"n": number}`` as the client's case sends); psycopg prepares the
statement after five runs, as it does the client's. Every measurement gets a new schema;
rounds alternate which side goes first. It prints the medians, the ratio (client over
floor) and issue 30's target for it, and the process CPU per run of each side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import psycopg

from benchmarks import compare, compare_case, server
from simpleworkflow import Client

#: What the client must reach of its floor (issue 30).
TARGETS = {"start": 0.8, "start_many": 0.9}


def _migrated(url: str, schema: str) -> None:
    with Client(url, schema=schema) as client:
        client.admin.migrate()


def plain_inserts(url: str, schema: str, runs: int) -> float:
    """Single-row inserts on one autocommit connection, per second."""
    _migrated(url, schema)
    sql = f"insert into {schema}.workflow_run (type, payload) values (%s, %s::jsonb)".encode()
    with psycopg.connect(url, autocommit=True) as conn:
        began = time.perf_counter()
        for number in range(runs):
            conn.execute(sql, (compare_case.NOOP, json.dumps({"n": number})))
        return runs / (time.perf_counter() - began)


def plain_batches(url: str, schema: str, runs: int) -> float:
    """Multi-row inserts of ``compare_case.START_BATCH`` rows, per second."""
    _migrated(url, schema)
    size = compare_case.START_BATCH
    rows = ", ".join(["(%s, %s::jsonb)"] * size)
    sql = f"insert into {schema}.workflow_run (type, payload) values {rows}".encode()
    with psycopg.connect(url, autocommit=True) as conn:
        began = time.perf_counter()
        for start in range(0, runs - size + 1, size):
            params = []
            for number in range(start, start + size):
                params += [compare_case.NOOP, json.dumps({"n": number})]
            conn.execute(sql, params)
        return (runs - runs % size) / (time.perf_counter() - began)


Measure = Callable[[str, str, int], float]
#: Each case: the client's side and its floor.
CASES: dict[str, tuple[Measure, Measure]] = {
    "start": (compare_case.start_one, plain_inserts),
    "start_many": (compare_case.start_many, plain_batches),
}


def run(
    cases: list[str], runs: int, rounds: int, url: str | None
) -> dict[str, dict[str, list[float]]]:
    """Rates and process CPU seconds per run: ``{case: {"client": [...], "floor": [...],
    "client_cpu": [...], "floor_cpu": [...]}}``."""
    figures: dict[str, dict[str, list[float]]] = {case: {} for case in cases}
    number = 0
    with server.given_or_private(url) as pg:
        for round_number in range(rounds):
            for case in cases:
                sides = list(zip(("client", "floor"), CASES[case], strict=True))
                for side, measure in sides if round_number % 2 == 0 else sides[::-1]:
                    number += 1
                    schema = f"floors_{os.getpid()}_{number}"
                    _migrated(pg, schema)  # before the clock: the side's own check is quick
                    cpu = time.process_time()
                    rate = measure(pg, schema, runs)
                    figures[case].setdefault(side, []).append(rate)
                    figures[case].setdefault(f"{side}_cpu", []).append(
                        (time.process_time() - cpu) / runs
                    )
                    compare._drop(pg, schema)
                    print(
                        f"round {round_number + 1}/{rounds} {case:<10} {side}: {rate:,.0f} runs/s",
                        file=sys.stderr,
                    )
    return figures


def table(figures: dict[str, dict[str, list[float]]]) -> str:
    lines = [
        "| case (runs/s, medians) | client | psycopg floor | ratio | target "
        "| client CPU/run | floor CPU/run |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case, found in figures.items():
        client, floor = statistics.median(found["client"]), statistics.median(found["floor"])
        ratio, target = client / floor, TARGETS[case]
        mark = "✓" if ratio >= target else "✗"
        cpu = [statistics.median(found[f"{side}_cpu"]) * 1e6 for side in ("client", "floor")]
        lines.append(
            f"| {case} | {client:,.0f} | {floor:,.0f} | {ratio:.2f}x {mark} | ≥ {target}x "
            f"| {cpu[0]:.0f} µs | {cpu[1]:.0f} µs |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floors", description=__doc__)
    parser.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated: start, start_many"
    )
    parser.add_argument("--runs", type=int, default=5000, help="runs per measurement (5000)")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each side (3)")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    args = parser.parse_args(argv)
    cases = [case.strip() for case in args.cases.split(",") if case.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {', '.join(CASES)}")
    print(table(run(cases, args.runs, args.rounds, args.postgres_url)))


if __name__ == "__main__":
    main()
