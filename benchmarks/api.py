"""Starting runs through the HTTP API against ``Client.start`` on the same store.

``python -m benchmarks.api [--stores postgres,sqlite] [--requests 2000] [--concurrency 8]
[--json]``

On a fresh store of each kind, four figures of runs started per second:

- ``client_start``: one ``Client.start`` after the other (the benchmark suite's
  ``start_one``);
- ``api_start``: one ``POST /api/v1/runs`` after the other, from one keep-alive
  connection, to a ``simpleworkflow serve`` process (access log off);
- ``async_client_start``: ``--concurrency`` tasks calling ``AsyncClient.start`` at once;
- ``api_start_concurrent``: as many connections posting at once to the server.

The server is one uvicorn process, as ``serve`` runs it; the client side runs in this
process, on the same machine. What the API costs over the client is HTTP, JSON parsing
and validation, and one event loop's worth of Python.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from benchmarks.stores import NOOP, BenchStore, each_store
from simpleworkflow import AsyncClient

WARM_UP = 50
_ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def server(store: BenchStore) -> Iterator[str]:
    """``simpleworkflow serve`` on ``store``, on a free port; yields its base URL."""
    env = {
        **os.environ,
        "SIMPLEWORKFLOW_DATABASE_URL": store.url,
        "SIMPLEWORKFLOW_SCHEMA": store.schema,
        "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env = {k: v for k, v in env.items() if not k.startswith("SIMPLEWORKFLOW_API_")}
    command = [
        sys.executable, "-m", "simpleworkflow", "serve", "--port", "0",
        "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("serving the API on "):
            raise RuntimeError(f"the server did not start: {line!r}")
        base = line.split()[4].removesuffix("/api/v1")
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not become ready within 30 s")
            time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def client_start(store: BenchStore, requests: int) -> float:
    with store.client() as client:
        for _ in range(WARM_UP):
            client.start(NOOP, {})
        began = time.perf_counter()
        for _ in range(requests):
            client.start(NOOP, {})
        return requests / (time.perf_counter() - began)


def api_start(base: str, requests: int) -> float:
    body = {"type": NOOP, "payload": {}}
    with httpx.Client(base_url=f"{base}/api/v1") as http:
        for _ in range(WARM_UP):
            http.post("/runs", json=body).raise_for_status()
        began = time.perf_counter()
        for _ in range(requests):
            http.post("/runs", json=body).raise_for_status()
        return requests / (time.perf_counter() - began)


async def _async_client_start(store: BenchStore, requests: int, concurrency: int) -> float:
    async with AsyncClient(store.url, schema=store.schema) as client:

        async def worker(count: int) -> None:
            for _ in range(count):
                await client.start(NOOP, {})

        await asyncio.gather(*(worker(WARM_UP // concurrency + 1) for _ in range(concurrency)))
        began = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in _shares(requests, concurrency)))
        return requests / (time.perf_counter() - began)


async def _api_start_concurrent(base: str, requests: int, concurrency: int) -> float:
    body = {"type": NOOP, "payload": {}}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=f"{base}/api/v1", limits=limits) as http:

        async def worker(count: int) -> None:
            for _ in range(count):
                (await http.post("/runs", json=body)).raise_for_status()

        await asyncio.gather(*(worker(WARM_UP // concurrency + 1) for _ in range(concurrency)))
        began = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in _shares(requests, concurrency)))
        return requests / (time.perf_counter() - began)


def _shares(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def measure(store: BenchStore, requests: int, concurrency: int) -> dict[str, float]:
    figures = {"client_start": client_start(store, requests)}
    figures["async_client_start"] = asyncio.run(_async_client_start(store, requests, concurrency))
    with server(store) as base:
        figures["api_start"] = api_start(base, requests)
        figures["api_start_concurrent"] = asyncio.run(
            _api_start_concurrent(base, requests, concurrency)
        )
    figures["api_vs_client"] = figures["api_start"] / figures["client_start"]
    figures["api_vs_async_client_concurrent"] = (
        figures["api_start_concurrent"] / figures["async_client_start"]
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.api", description=__doc__)
    parser.add_argument("--stores", default="postgres,sqlite", help="comma-separated")
    parser.add_argument("--requests", type=int, default=2000, help="starts per figure (2000)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent starts (8)")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    kinds = [kind for kind in args.stores.split(",") if kind]
    results = each_store(
        kinds,
        args.postgres_url,
        "simpleworkflow-bench-api-",
        lambda store, tmp: measure(store, args.requests, args.concurrency),
    )
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"runs started per second, {args.requests} each (concurrency {args.concurrency})")
    head = ("store", "Client", "API", "ratio", "Async x", "API x", "ratio")
    print("{:10} {:>9} {:>9} {:>6}   {:>9} {:>9} {:>6}".format(*head))
    for kind, f in results.items():
        print(
            f"{kind:10} {f['client_start']:9.0f} {f['api_start']:9.0f} {f['api_vs_client']:6.2f}"
            f"   {f['async_client_start']:9.0f} {f['api_start_concurrent']:9.0f}"
            f" {f['api_vs_async_client_concurrent']:6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
