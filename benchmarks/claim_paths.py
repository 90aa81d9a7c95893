"""What one idle pick-up's claim costs, by the path it takes.

``python -m benchmarks.claim_paths [--samples N] [--postgres-url URL]`` starts one run
of ``stores.LATENCY`` (seed 000's plain insert) and claims it after a 30 ms pause, on
three connections of one server, in a new random order each round:

- ``pool``: the worker's claim as the claim loop sends it through the pool (the
  settings and the claim in one pipeline, ``driving.execute_async``);
- ``listener``: the same op through the listening connection's runner
  (``backends/postgres/listening.py``), whose session holds the settings;
- ``same work``: ``listen_loop``'s same-work claim (seed 000's claim, the lease and its
  events), on a session with ``synchronous_commit = off``.

Per claim it prints the medians of the server process's CPU (``/proc/<pid>/schedstat``:
the server must run on this machine), of this process's CPU and of the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from benchmarks import server, stores
from benchmarks.listen_loop import LEASE_SECONDS
from benchmarks.stores import BenchStore
from simpleworkflow.backends.postgres import PostgresBackend, driving, listening
from simpleworkflow.backends.records import Claim

#: The types the benchmark's worker claims (``benchmarks.worker``).
TYPES = (stores.NOOP, stores.SYNC, stores.STEPS, stores.LATENCY, stores.SIGNAL)
PAUSE = 0.03


def _server_cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as stat:
        return int(stat.read().split()[0])


async def measure(url: str, samples: int) -> dict[str, dict[str, float]]:
    """Per path: medians of server CPU (µs), client CPU (µs) and wall time (ms)."""
    with tempfile.TemporaryDirectory(prefix="bench-claims-") as workdir:
        store = BenchStore.fresh("postgres", url, Path(workdir))
        backend = store.backend()
        assert isinstance(backend, PostgresBackend)
        try:
            return await _measure(url, store, backend, samples)
        finally:
            await backend.aclose()
            backend.close()
            store.close()


async def _measure(
    url: str, store: BenchStore, backend: PostgresBackend, samples: int
) -> dict[str, dict[str, float]]:
    async with contextlib.AsyncExitStack() as stack:

        async def connect() -> psycopg.AsyncConnection[Any]:
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
            stack.push_async_callback(conn.close)
            return conn

        pool, listener, same = await connect(), await connect(), await connect()
        await same.execute(b"set synchronous_commit = off")
        runner = listening._Runner(listener, backend._liveness, 10.0)
        claim = Claim(
            "bench-claims", TYPES, 10, LEASE_SECONDS, alone=True, limited=False,
            versions={t: "1" for t in TYPES}, wait_for_disk=False,
        )  # fmt: skip
        same_claim = store.q["same_work_claim"].encode()
        same_params = {"types": [stores.LATENCY], "worker_id": "w", "lease": LEASE_SECONDS}

        async def by_pool() -> int:
            return len((await driving.execute_async(pool, backend.claim_runs(claim))).leases)

        async def by_listener() -> int:
            return len((await runner(backend.claim_runs(claim))).leases)

        async def by_same_work() -> int:
            return len(await (await same.execute(same_claim, same_params)).fetchall())

        paths: dict[str, tuple[psycopg.AsyncConnection[Any], Callable[[], Awaitable[int]]]] = {
            "pool": (pool, by_pool),
            "listener": (listener, by_listener),
            "same work": (same, by_same_work),
        }
        pids = {}
        for name, (conn, _) in paths.items():
            row = await (await conn.execute(b"select pg_backend_pid()")).fetchone()
            assert row is not None
            pids[name] = int(row[0])
        figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in paths}
        insert = store.q["same_work_insert"].encode()
        with psycopg.connect(url, autocommit=True) as producer:
            for number in range(samples):
                for name in random.sample(list(paths), len(paths)):
                    payload = Jsonb({"n": number})
                    producer.execute(insert, {"type": stores.LATENCY, "payload": payload,
                                              "idempotency_key": None})  # fmt: skip
                    await asyncio.sleep(PAUSE)
                    server_before, cpu, wall = (
                        _server_cpu_ns(pids[name]), time.process_time(), time.perf_counter()
                    )  # fmt: skip
                    if await paths[name][1]() != 1:
                        raise RuntimeError(f"{name}: the claim did not lease the one run")
                    figures[name].append((
                        (_server_cpu_ns(pids[name]) - server_before) / 1000,
                        (time.process_time() - cpu) * 1e6,
                        (time.perf_counter() - wall) * 1000,
                    ))  # fmt: skip
    return {
        name: {
            "server_cpu_us": statistics.median(f[0] for f in rows),
            "client_cpu_us": statistics.median(f[1] for f in rows),
            "wall_ms": statistics.median(f[2] for f in rows),
        }
        for name, rows in figures.items()
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.claim_paths", description=__doc__)
    parser.add_argument("--samples", type=int, default=300, help="claims per path (300)")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    args = parser.parse_args(argv)
    with server.given_or_private(args.postgres_url) as url:
        results = asyncio.run(measure(url, args.samples))
    print(f"{'':10} {'server CPU':>11} {'client CPU':>11} {'wall':>9}  (medians per claim)")
    for name, f in results.items():
        print(
            f"{name:10} {f['server_cpu_us']:>8.0f} µs {f['client_cpu_us']:>8.0f} µs "
            f"{f['wall_ms']:>6.3f} ms"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
