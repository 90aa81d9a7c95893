"""Starting runs through the HTTP API against ``Client.start`` on the same store.

``python -m benchmarks.api [--stores postgres,sqlite] [--requests 1000] [--rounds 5]
[--warm-up 1000] [--concurrency 8] [--profile FILE] [--bare-client] [--json]``

On a fresh store of each kind, after a warm-up, ``--rounds`` rounds each measure, one
after the other (the order turns each round):

- ``client_start``: one ``Client.start`` after the other, runs started per second, and
  the CPU this process spent per start;
- ``api_start``: one ``POST /api/v1/runs`` after the other over one keep-alive
  connection of the standard library's ``http.client``, to a ``simpleworkflow serve``
  process (access log off, as docs/api.md advises for speed), and the CPU the server
  process spent per request;
- ``api_start_httpx``: the same from an ``httpx.Client``, a client that costs several
  times more CPU per request than ``http.client`` (which the figure includes: client,
  server and Postgres take their turns, one request at a time);
- ``api_start_bare`` (Postgres): the same posts to :mod:`benchmarks.api_bare`, the same
  insert under the same uvicorn with nothing else, and its server's CPU per request: the
  ceiling of a start over HTTP on this stack. Printed as bare over ``Client.start`` and
  ``serve`` over bare; ``--bare-client`` adds ``api_start_bare_client``, a bare server
  that starts through ``AsyncClient.start`` and answers as ``serve`` does (what is left
  between it and ``serve`` is the app's).

The table gives the medians and the median of the rounds' ratios (API over client): the
two are measured minutes, not days, apart, so the ratio holds while the machine's speed
drifts. Then, once, ``--concurrency`` tasks calling ``AsyncClient.start`` at once against
as many connections posting at once (``--concurrency 0`` skips it).

The server is one uvicorn process, as ``serve`` runs it; the client side runs in this
process, on the same machine. ``--profile FILE`` runs the server under a profiler:
pyinstrument for FILE ending ``.txt``, ``.html`` or ``.pyisession`` (it must be
installed), else cProfile; one file per store kind (``api.postgres.txt``). Its rates then
say little, its profile where the server's time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from benchmarks import profile
from benchmarks.stores import NOOP, BenchStore, each_store
from simpleworkflow import AsyncClient, Client

#: Starts through each path before the first round: a fresh Postgres writes its first WAL
#: segments slowly, and the server's first requests warm its caches.
WARM_UP = 1000
_ROOT = Path(__file__).resolve().parent.parent


class Server:
    """A ``simpleworkflow serve`` process: its base URL and the CPU it has spent."""

    def __init__(self, base: str, pid: int) -> None:
        self.base = base
        self.pid = pid

    def cpu(self) -> float:
        """Seconds the server process has spent on the CPU, all its threads."""
        return sum(profile._thread_cpu(self.pid))


@contextlib.contextmanager
def server(
    store: BenchStore, profile: str | None = None, *, bare: str | None = None
) -> Iterator[Server]:
    """``simpleworkflow serve`` on ``store``, on a free port (under cProfile writing to
    ``profile`` if given); ``bare``: :mod:`benchmarks.api_bare` instead, with these
    options (``""`` for none)."""
    env = {
        **os.environ,
        "SIMPLEWORKFLOW_DATABASE_URL": store.url,
        "SIMPLEWORKFLOW_SCHEMA": store.schema,
        "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env = {k: v for k, v in env.items() if not k.startswith("SIMPLEWORKFLOW_API_")}
    profiler = [] if profile is None else _profiler(profile)
    command = [
        sys.executable, *profiler, "-m", "simpleworkflow", "serve", "--port", "0",
        "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip
    if bare is not None:
        command = [sys.executable, *profiler, "-m", "benchmarks.api_bare", *bare.split()]
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
        yield Server(base, proc.pid)
    finally:
        # uvicorn stops on either, then raises the signal again: SIGINT, as a
        # KeyboardInterrupt, lets cProfile write its file first.
        proc.send_signal(signal.SIGTERM if profile is None else signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


#: pyinstrument's renderers by the profile file's suffix; any other suffix: cProfile.
_RENDERERS = {"txt": "text", "html": "html", "pyisession": "session"}


def _profiler(path: str) -> list[str]:
    """The interpreter's options that run the server under a profiler writing ``path``:
    pyinstrument (which must be installed) for a suffix it renders, else cProfile."""
    renderer = _RENDERERS.get(path.rpartition(".")[2])
    if renderer is not None:
        return ["-m", "pyinstrument", "-r", renderer, "-o", path, "-i", "0.0002"]
    return ["-m", "cProfile", "-o", path]


def client_start(client: Client, requests: int) -> tuple[float, float]:
    """(starts per second, CPU seconds of this process per start)."""
    cpu, began = time.process_time(), time.perf_counter()
    for _ in range(requests):
        client.start(NOOP, {})
    return requests / (time.perf_counter() - began), (time.process_time() - cpu) / requests


class Poster:
    """``POST /api/v1/runs`` of a no-op run, one at a time over one keep-alive connection
    of ``http.client``, or of ``httpx`` (``use_httpx``)."""

    def __init__(self, server: Server, *, use_httpx: bool = False) -> None:
        self.server = server
        self.body = json.dumps({"type": NOOP, "payload": {}}).encode()
        self.headers = {"content-type": "application/json"}
        self.httpx = httpx.Client(base_url=server.base) if use_httpx else None
        host, _, port = server.base.removeprefix("http://").rpartition(":")
        self.connection = http.client.HTTPConnection(host.strip("[]"), int(port))

    def post(self) -> None:
        if self.httpx is not None:
            sent = self.httpx.post("/api/v1/runs", content=self.body, headers=self.headers)
            sent.raise_for_status()
            return
        self.connection.request("POST", "/api/v1/runs", self.body, self.headers)
        answer = self.connection.getresponse()
        answer.read()
        if answer.status != 201:
            raise RuntimeError(f"POST /api/v1/runs answered {answer.status}")

    def fresh(self) -> None:
        """A new connection before a round: the server closes one idle for 5 s, and
        ``http.client`` would not open another by itself."""
        self.connection.close()

    def close(self) -> None:
        self.connection.close()
        if self.httpx is not None:
            self.httpx.close()


def api_start(poster: Poster, requests: int) -> tuple[float, float]:
    """(requests per second, CPU seconds of the server per request)."""
    poster.fresh()
    poster.post()  # opens the connection
    cpu, began = poster.server.cpu(), time.perf_counter()
    for _ in range(requests):
        poster.post()
    return requests / (time.perf_counter() - began), (poster.server.cpu() - cpu) / requests


async def _async_client_start(store: BenchStore, requests: int, concurrency: int) -> float:
    async with AsyncClient(store.url, schema=store.schema) as client:

        async def worker(count: int) -> None:
            for _ in range(count):
                await client.start(NOOP, {})

        await asyncio.gather(*(worker(50 // concurrency + 1) for _ in range(concurrency)))
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

        await asyncio.gather(*(worker(50 // concurrency + 1) for _ in range(concurrency)))
        began = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in _shares(requests, concurrency)))
        return requests / (time.perf_counter() - began)


def _shares(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def measure(
    store: BenchStore,
    requests: int,
    rounds: int,
    concurrency: int,
    profile: str | None,
    warm_up: int = WARM_UP,
    bare_client: bool = False,
) -> dict[str, float]:
    """The medians of ``rounds`` interleaved rounds, and the concurrent figures."""
    load_before = os.getloadavg()[0]
    names = ("client_start", "client_cpu_us", "api_start", "api_server_cpu_us")
    found: dict[str, list[float]] = {k: [] for k in (*names, "api_start_httpx", "unused")}
    # benchmarks.api_bare speaks to Postgres only
    bares = {"bare": "", "bare_client": "--through-client"} if store.kind == "postgres" else {}
    if not bare_client:
        bares.pop("bare_client", None)
    with contextlib.ExitStack() as stack:
        srv = stack.enter_context(server(store, profile))
        client = stack.enter_context(store.client())
        poster = stack.enter_context(contextlib.closing(Poster(srv)))
        httpx_poster = stack.enter_context(contextlib.closing(Poster(srv, use_httpx=True)))
        client_start(client, warm_up)
        api_start(poster, warm_up)
        api_start(httpx_poster, warm_up // 5)
        steps: list[Callable[[], None]] = [
            lambda: _add(found, "client_start", "client_cpu_us", client_start(client, requests)),
            lambda: _add(found, "api_start", "api_server_cpu_us", api_start(poster, requests)),
            lambda: _add(found, "api_start_httpx", "unused", api_start(httpx_poster, requests)),
        ]
        for name, options in bares.items():
            bare_srv = stack.enter_context(server(store, bare=options))
            bare_poster = stack.enter_context(contextlib.closing(Poster(bare_srv)))
            api_start(bare_poster, warm_up)
            rate, cpu = f"api_start_{name}", f"api_{name}_server_cpu_us"
            found[rate], found[cpu] = [], []
            steps.append(_posting(found, rate, cpu, bare_poster, requests))
        for number in range(rounds):
            turn = number % len(steps)
            for step in steps[turn:] + steps[:turn]:
                step()
        if concurrency:
            concurrent = asyncio.run(_api_start_concurrent(srv.base, requests, concurrency))
    del found["unused"]
    figures = {name: statistics.median(values) for name, values in found.items()}
    pairs = [
        ("api_start", "client_start", "api_vs_client"),
        ("api_start_httpx", "client_start", "httpx_vs_client"),
    ]
    for name in bares:
        pairs += [
            (f"api_start_{name}", "client_start", f"{name}_vs_client"),
            ("api_start", f"api_start_{name}", f"api_vs_{name}"),
        ]
    for api, over, ratio in pairs:
        ratios = [a / own for a, own in zip(found[api], found[over], strict=True)]
        figures[ratio] = statistics.median(ratios)
        figures[f"{ratio}_lowest"] = min(ratios)
        figures[f"{ratio}_highest"] = max(ratios)
    if concurrency:
        figures["async_client_start"] = asyncio.run(
            _async_client_start(store, requests, concurrency)
        )
        figures["api_start_concurrent"] = concurrent
        figures["api_vs_async_client_concurrent"] = concurrent / figures["async_client_start"]
    figures["load_average_before"] = load_before
    figures["load_average_after"] = os.getloadavg()[0]
    return figures


def _posting(
    found: dict[str, list[float]], rate: str, cpu: str, poster: Poster, requests: int
) -> Callable[[], None]:
    """A round of ``requests`` posts, its figures added to ``found`` under ``rate``, ``cpu``."""
    return lambda: _add(found, rate, cpu, api_start(poster, requests))


def _add(found: dict[str, list[float]], rate: str, cpu: str, got: tuple[float, float]) -> None:
    found[rate].append(got[0])
    found[cpu].append(got[1] * 1e6)


def show(results: dict[str, dict[str, float]], requests: int, rounds: int) -> None:
    print(f"runs started one at a time: medians of {rounds} interleaved rounds of {requests}")
    head = ("store", "Client /s", "CPU µs", "API /s", "server µs", "ratio", "range")
    print("{:10} {:>10} {:>7} {:>9} {:>10} {:>6} {:>10}".format(*head), "  httpx /s  ratio")
    for kind, f in results.items():
        spread = f"{f['api_vs_client_lowest']:.2f}-{f['api_vs_client_highest']:.2f}"
        print(
            f"{kind:10} {f['client_start']:10.0f} {f['client_cpu_us']:7.0f}"
            f" {f['api_start']:9.0f} {f['api_server_cpu_us']:10.0f}"
            f" {f['api_vs_client']:6.2f} {spread:>10}"
            f" {f['api_start_httpx']:9.0f} {f['httpx_vs_client']:6.2f}"
        )
    for kind, f in results.items():
        for name, what in (("bare", "bare"), ("bare_client", "bare + AsyncClient.start")):
            if f"api_start_{name}" not in f:
                continue
            print(
                f"{kind}: {what} (benchmarks.api_bare) {f[f'api_start_{name}']:.0f}/s, server "
                f"{f[f'api_{name}_server_cpu_us']:.0f} µs; serve / Client.start "
                f"{f['api_vs_client']:.2f}, {what} / Client.start {f[f'{name}_vs_client']:.2f} "
                f"({f[f'{name}_vs_client_lowest']:.2f}-{f[f'{name}_vs_client_highest']:.2f}), "
                f"serve / {what} {f[f'api_vs_{name}']:.2f} "
                f"({f[f'api_vs_{name}_lowest']:.2f}-{f[f'api_vs_{name}_highest']:.2f})"
            )
    for kind, f in results.items():
        if "api_start_concurrent" in f:
            print(
                f"{kind}: concurrently, AsyncClient {f['async_client_start']:.0f}/s, API "
                f"{f['api_start_concurrent']:.0f}/s, ratio "
                f"{f['api_vs_async_client_concurrent']:.2f}"
            )
        print(
            f"{kind}: load average {f['load_average_before']:.2f} before, "
            f"{f['load_average_after']:.2f} after"
        )


def _per_store(path: str, kind: str) -> str:
    stem, dot, suffix = path.rpartition(".")
    return f"{stem}.{kind}.{suffix}" if dot and suffix in _RENDERERS else f"{path}.{kind}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.api", description=__doc__)
    parser.add_argument("--stores", default="postgres,sqlite", help="comma-separated")
    parser.add_argument("--requests", type=int, default=1000, help="starts per round (1000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent starts (8; 0: none)")
    parser.add_argument(
        "--warm-up", type=int, default=WARM_UP, help=f"starts before the rounds ({WARM_UP})"
    )
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the server into FILE.<store>")
    parser.add_argument(
        "--bare-client",
        action="store_true",
        help="also a bare server that starts through AsyncClient.start (Postgres)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    kinds = [kind for kind in args.stores.split(",") if kind]
    results = each_store(
        kinds,
        args.postgres_url,
        "simpleworkflow-bench-api-",
        lambda store, tmp: measure(
            store,
            args.requests,
            args.rounds,
            args.concurrency,
            None if args.profile is None else _per_store(args.profile, store.kind),
            args.warm_up,
            args.bare_client,
        ),
    )
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        show(results, args.requests, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
