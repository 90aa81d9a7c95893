"""``python -m benchmarks.api_cpu REF``: the server's CPU per ``POST /api/v1/runs``, the
working tree against another git ref, paired round by round.

A rate through HTTP wakes three processes per request (client, server, Postgres) and
moves by a third while other work shares the machine; the server's own CPU per request
moves much less, and pairing each round of one side with the next round of the other
takes the drift out. So: one ``simpleworkflow serve`` of each side (each installed as
``benchmarks.compare`` installs it) on one fresh store of each kind, and ``--rounds``
rounds of ``--requests`` no-op starts, one at a time over a keep-alive ``http.client``
connection, alternating which side goes first; the server's CPU from ``/proc``. Prints
each side's median, the median of the paired differences (REF minus the working tree)
and in how many rounds the working tree was lower, and the rates' median ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks import compare
from benchmarks.api import WARM_UP, Poster, Server, api_start
from benchmarks.stores import BenchStore, each_store


@contextlib.contextmanager
def serving(side: compare.Side, store: BenchStore) -> Iterator[Server]:
    """``simpleworkflow serve`` of ``side`` on ``store``, on a free port."""
    env = {
        **side.env,
        "SIMPLEWORKFLOW_DATABASE_URL": store.url,
        "SIMPLEWORKFLOW_SCHEMA": store.schema,
    }
    env = {k: v for k, v in env.items() if not k.startswith("SIMPLEWORKFLOW_API_")}
    command = [
        side.python, "-m", "simpleworkflow", "serve", "--port", "0",
        "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip
    # Not from this checkout's folder: ``-m`` would import its package before the ref's.
    neutral = tempfile.gettempdir()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True, cwd=neutral)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("serving the API on "):
            raise RuntimeError(f"{side.name}: the server did not start: {line!r}")
        yield Server(line.split()[4].removesuffix("/api/v1"), proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def measure(
    sides: list[compare.Side], store: BenchStore, rounds: int, requests: int
) -> dict[str, float]:
    """Each side's median server CPU (µs) per request and rate, and the paired figures."""
    found: list[list[tuple[float, float]]] = [[], []]
    with contextlib.ExitStack() as stack:
        posters = [
            stack.enter_context(contextlib.closing(Poster(stack.enter_context(serving(s, store)))))
            for s in sides
        ]
        for poster in posters:
            _ready(poster)
            api_start(poster, WARM_UP)
        for number in range(rounds):
            for which in (0, 1) if number % 2 == 0 else (1, 0):
                rate, cpu = api_start(posters[which], requests)
                found[which].append((cpu * 1e6, rate))
            print(f"round {number + 1}/{rounds} {store.kind}", file=sys.stderr)
    (ref, tree) = found
    differences = [a[0] - b[0] for a, b in zip(ref, tree, strict=True)]
    return {
        "ref_cpu_us": statistics.median(cpu for cpu, _ in ref),
        "tree_cpu_us": statistics.median(cpu for cpu, _ in tree),
        "ref_rate": statistics.median(rate for _, rate in ref),
        "tree_rate": statistics.median(rate for _, rate in tree),
        "paired_cpu_us_less": statistics.median(differences),
        "tree_lower_in": sum(1 for d in differences if d > 0),
        "rounds": rounds,
        "rate_ratio": statistics.median(b[1] / a[1] for a, b in zip(ref, tree, strict=True)),
        "load_average": os.getloadavg()[0],
    }


def _ready(poster: Poster) -> None:
    """Wait until the server answers (it has read its schema and opened its pool)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            poster.fresh()
            poster.post()
            return
        except (OSError, RuntimeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.api_cpu", description=__doc__)
    parser.add_argument("ref", help="the git ref to compare the working tree against")
    parser.add_argument("--stores", default="postgres", help="comma-separated (postgres)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds of each side (30)")
    parser.add_argument("--requests", type=int, default=500, help="starts per round (500)")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="simpleworkflow-api-cpu-") as tmp:
        sides = [compare.installed(args.ref, Path(tmp, "ref")), compare.working_tree()]
        results = each_store(
            [kind for kind in args.stores.split(",") if kind],
            args.postgres_url,
            "simpleworkflow-bench-api-cpu-",
            lambda store, _: measure(sides, store, args.rounds, args.requests),
        )
    print(
        f"| store | server µs, {sides[0].name} | server µs, working tree | paired, less "
        "| rounds lower | rate ratio | load |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for kind, f in results.items():
        print(
            f"| {kind} | {f['ref_cpu_us']:.1f} | {f['tree_cpu_us']:.1f} "
            f"| {f['paired_cpu_us_less']:.1f} | {f['tree_lower_in']}/{f['rounds']} "
            f"| {f['rate_ratio']:.3f} | {f['load_average']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
