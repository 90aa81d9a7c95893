"""``python -m benchmarks.commits``: what claims and heartbeats that do not wait for the
disk are worth, on a private Postgres with its defaults (``fsync`` and
``synchronous_commit`` on).

Two measurements, each side by side in one sitting:

- ``claims``: microseconds per claim of one run, by one connection, three ways: waiting
  for the disk; ``synchronous_commit`` off through ``set_config`` pipelined with the
  claim (one round trip, what the worker does); and off through an explicit transaction
  (``begin``, ``set_config``, the claim, ``commit``: three round trips more).
- ``drain``: runs of a handler that does nothing finished per second by one worker, at
  its default concurrency and at 100 slots, with ``synchronous_claims`` on and off,
  interleaved; timed by the database clock, from the first run finished to the last.

Beside each rate, the WAL flushes the server made per claim or per run (``wal_sync`` of
``pg_stat_wal``, whose server runs nothing else meanwhile): a count that the machine's
load does not move, where rates on a busy machine move by a third; and for the drains
the CPU microseconds per run of the worker (this process) and of the Postgres server (its
processes' ``/proc`` times, so a server on this machine).

See docs/performance.md, "Claims and heartbeats without waiting for the disk".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import statistics
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import psycopg

from benchmarks import compare_case, profile, server
from simpleworkflow import App, Client, IntentPoller
from simpleworkflow.backends import Backend, open_backend
from simpleworkflow.backends.base import ATOMIC, Claim, Lease, Op

NOOP = "commits.noop.v1"
_schemas = itertools.count()


def _fresh(url: str, runs: int) -> str:
    schema = f"commits_{next(_schemas)}"
    with Client(url, schema=schema) as client:
        client.migrate()
        for start in range(0, runs, 1000):
            client.start_many([(NOOP, {"n": n}) for n in range(start, min(start + 1000, runs))])
    return schema


def _drop(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"drop schema if exists {schema} cascade".encode())


def _wal_syncs(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(b"select wal_sync from pg_stat_wal").fetchone()
    return int(row[0]) if row else 0


def _in_transaction(op: Op[list[Lease]]) -> Op[list[Lease]]:
    yield ATOMIC
    return (yield from op)


CLAIM_WAYS = ("waits for the disk", "pipelined set_config", "explicit transaction")


def _claim_once(backend: Backend, way: str) -> int:
    claim = Claim(
        worker_id="bench", types=(NOOP,), limit=1, lease_seconds=60.0, versions={NOOP: "1"}
    )
    op = backend.claim(claim)
    if way == CLAIM_WAYS[0]:
        return len(backend.execute(op))
    if way == CLAIM_WAYS[1]:
        return len(backend.execute(op, wait_for_disk=False))
    return len(backend.execute(_in_transaction(op), wait_for_disk=False))


def claims(url: str, runs: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Microseconds and WAL flushes per claim of one run, each way, ``rounds`` times
    interleaved."""
    figures: dict[str, list[tuple[float, float]]] = {way: [] for way in CLAIM_WAYS}
    for round_number in range(rounds):
        ways = CLAIM_WAYS if round_number % 2 == 0 else CLAIM_WAYS[::-1]
        for way in ways:
            schema = _fresh(url, runs)
            backend = open_backend(url, schema=schema)
            try:
                _claim_once(backend, way)  # the pool's connection, outside the timing
                syncs = _wal_syncs(url)
                began = time.perf_counter()
                claimed = sum(_claim_once(backend, way) for _ in range(runs - 1))
                spent = time.perf_counter() - began
                syncs = _wal_syncs(url) - syncs
            finally:
                backend.close()
                _drop(url, schema)
            assert claimed == runs - 1, f"{way}: claimed {claimed} of {runs - 1}"
            figures[way].append((spent / claimed * 1e6, syncs / claimed))
            print(
                f"claims, {way}: {spent / claimed * 1e6:.0f} µs, "
                f"{syncs / claimed:.2f} WAL flushes per claim",
                flush=True,
            )
    return figures


class Drained(NamedTuple):
    rate: float  # runs per second
    syncs: float  # WAL flushes per run
    worker_cpu: float  # microseconds per run, this process
    server_cpu: float  # microseconds per run, the server's processes


def drain(url: str, runs: int, concurrency: int | None, synchronous: bool) -> Drained:
    """What one worker's drain of ``runs`` runs cost."""
    schema = _fresh(url, runs)
    app = App(url, schema=schema)

    @app.workflow(NOOP)
    async def noop(payload: Any) -> None:
        return None

    options: dict[str, Any] = {"synchronous_claims": synchronous}
    if concurrency is not None:
        options["concurrency"] = concurrency
    try:
        syncs, cpu, server_cpu = _wal_syncs(url), time.process_time(), _server_cpu(url)
        # Read before the worker stops, while its connections (opened during the drain,
        # so they count in full) are still there.
        cpu_after, server_after = asyncio.run(
            _work(IntentPoller(app, **options), url, schema, runs)
        )
        syncs, cpu = _wal_syncs(url) - syncs, cpu_after - cpu
        spent = {pid: t - server_cpu.get(pid, 0.0) for pid, t in server_after.items()}
        with psycopg.connect(url) as conn:
            row = conn.execute(
                f"select count(*), extract(epoch from max(updated_at) - min(updated_at)) "
                f"from {schema}.workflow_run where status = 'succeeded'".encode()
            ).fetchone()
    finally:
        _drop(url, schema)
    assert row is not None and int(row[0]) == runs, row
    per_run = 1e6 / runs
    return Drained(
        (runs - 1) / float(row[1]), syncs / runs, cpu * per_run, sum(spent.values()) * per_run
    )


def _server_cpu(url: str) -> dict[int, float]:
    """CPU seconds of each process of the server that is alive now (on this machine)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(_SERVER_PIDS).fetchall()
    return profile._cpu([int(row[0]) for row in rows])


_SERVER_PIDS = b"select pid from pg_stat_activity"


async def _work(
    poller: IntentPoller, url: str, schema: str, runs: int
) -> tuple[float, dict[int, float]]:
    """Run ``poller`` until ``runs`` runs succeeded; return the CPU seconds of this process
    and of each server process then."""
    worker = asyncio.create_task(poller.run_async())
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await compare_case.wait_succeeded(conn, schema, runs, worker)
        cpu = time.process_time()
        pids = [int(row[0]) for row in await (await conn.execute(_SERVER_PIDS)).fetchall()]
    server_cpu = profile._cpu(pids)
    poller.stop()
    await worker
    return cpu, server_cpu


def _drain_sides(concurrencies: list[int | None]) -> Iterator[tuple[int | None, bool]]:
    for concurrency in concurrencies:
        for synchronous in (True, False):
            yield concurrency, synchronous


Side = tuple[int | None, bool]


def drains(url: str, runs: int, rounds: int) -> dict[Side, list[Drained]]:
    sides = list(_drain_sides([None, 100]))
    figures: dict[Side, list[Drained]] = {side: [] for side in sides}
    for round_number in range(rounds):
        for concurrency, synchronous in sides if round_number % 2 == 0 else sides[::-1]:
            drained = drain(url, runs, concurrency, synchronous)
            figures[(concurrency, synchronous)].append(drained)
            print(
                f"drain, concurrency {concurrency or 'default'}, synchronous_claims="
                f"{synchronous}: {drained.rate:,.0f} runs/s, {drained.syncs:.3f} WAL flushes, "
                f"CPU {drained.worker_cpu:.0f} µs worker, {drained.server_cpu:.0f} µs server "
                "per run",
                flush=True,
            )
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.commits", description=__doc__)
    parser.add_argument("--runs", type=int, default=5000, help="runs per measurement (5000)")
    parser.add_argument("--claims", type=int, default=2000, help="claims per measurement")
    parser.add_argument("--rounds", type=int, default=5, help="measurements of each side (5)")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    parser.add_argument("--only", choices=("claims", "drain"), help="one measurement only")
    args = parser.parse_args(argv)
    with _postgres(args.postgres_url) as url:
        lines = []
        if args.only != "drain":
            for way, figures in claims(url, args.claims, args.rounds).items():
                micros, syncs = (statistics.median(f[n] for f in figures) for n in range(2))
                lines.append(f"| claim of one run, {way} | {micros:.0f} µs | {syncs:.2f} | | |")
        if args.only != "claims":
            for (concurrency, synchronous), drained in drains(url, args.runs, args.rounds).items():
                rate, syncs, worker, server_cpu = (
                    statistics.median(d[n] for d in drained) for n in range(4)
                )
                lines.append(
                    f"| drain, concurrency {concurrency or 'default'}, synchronous_claims="
                    f"{synchronous} | {rate:,.0f} runs/s | {syncs:.3f} | {worker:.0f} µs "
                    f"| {server_cpu:.0f} µs |"
                )
    print(
        "| measurement (medians) | figure | WAL flushes per claim or run "
        "| CPU per run, worker | CPU per run, server |"
    )
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(lines))


def _postgres(url: str | None) -> contextlib.AbstractContextManager[str]:
    return contextlib.nullcontext(url) if url else server.private_postgres()


if __name__ == "__main__":
    main()
