"""One measurement of ``python -m benchmarks.start_cpu``, run by the interpreter of the
side being measured: ``python benchmarks/start_cpu_case.py URL SCHEMA [STARTS]``.

Like ``compare_case.py`` it runs as a script, so that the ``simpleworkflow`` it imports is
the side's, and it touches only the public API every version has had. It prints one JSON
line: for ``start``, ``start_many`` (per run of batches of 100) and ``async_start``
(``AsyncClient.start`` on uvloop, as ``simpleworkflow serve`` runs it), the client's CPU
(this process's ``time.process_time``) and the Postgres server's (every other backend's
``/proc/<pid>/schedstat``, so only for a server on this machine), in µs per run.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
import uvloop

from simpleworkflow import AsyncClient, Client

TYPE = "bench.start.v1"
#: Timed ``Client.start`` calls by default; ``start_many`` starts as many runs in batches
#: of 100, and ``AsyncClient.start`` is called three quarters as often.
STARTS = 4000


def _server_ns(admin: psycopg.Connection[Any]) -> int:
    """CPU nanoseconds every other backend of the server has run so far."""
    total = 0
    pids = admin.execute("select pid from pg_stat_activity where pid <> pg_backend_pid()")
    for (pid,) in pids.fetchall():
        try:
            with open(f"/proc/{pid}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except OSError:  # a backend that ended meanwhile
            pass
    return total


def _per_run(admin: psycopg.Connection[Any], call: Callable[[], None], runs: int) -> list[float]:
    server, client = _server_ns(admin), time.process_time()
    call()
    client_us = (time.process_time() - client) / runs * 1e6
    return [round(client_us, 1), round((_server_ns(admin) - server) / runs / 1e3, 1)]


async def _async_starts(
    url: str, schema: str, admin: psycopg.Connection[Any], calls: int
) -> list[float]:
    async with AsyncClient(url, schema=schema) as client:
        for number in range(300):  # the pool's connections, prepared statements
            await client.start(TYPE, {"n": number})
        server, began = _server_ns(admin), time.process_time()
        for number in range(calls):
            await client.start(TYPE, {"n": number})
        client_us = (time.process_time() - began) / calls * 1e6
        server_us = (_server_ns(admin) - server) / calls / 1e3
        return [round(client_us, 1), round(server_us, 1)]


def measure(url: str, schema: str, starts: int = STARTS) -> dict[str, list[float]]:
    figures = {}
    batches_timed = max(1, starts // 100)
    with psycopg.connect(url, autocommit=True) as admin, Client(url, schema=schema) as client:
        (getattr(client, "migrate", None) or client.admin.migrate)()
        for number in range(500):
            client.start(TYPE, {"n": number})

        def timed_starts() -> None:
            for number in range(starts):
                client.start(TYPE, {"n": number})

        figures["start"] = _per_run(admin, timed_starts, starts)
        batches = [
            [(TYPE, {"n": b * 100 + i}) for i in range(100)] for b in range(batches_timed + 10)
        ]
        for batch in batches[:10]:
            client.start_many(batch)

        def many() -> None:
            for batch in batches[10:]:
                client.start_many(batch)

        figures["start_many"] = _per_run(admin, many, batches_timed * 100)
        runner: Any = getattr(uvloop, "run", None) or asyncio.run
        figures["async_start"] = runner(_async_starts(url, schema, admin, max(1, starts * 3 // 4)))
    return figures


if __name__ == "__main__":
    starts = int(sys.argv[3]) if len(sys.argv) > 3 else STARTS
    print(json.dumps(measure(sys.argv[1], sys.argv[2], starts)))
