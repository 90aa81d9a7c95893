"""The Go runtime's drain beside the Python worker's, on the same Postgres, interleaved.

``python -m benchmarks.go_drain [--items 5000] [--rounds 3] [--concurrency 100]
[--postgres-url URL] [--json]``

Each round drains ``--items`` no-op runs once with one Go worker process
(``runtimes/go/cmd/swgo``, built first with Debian's Go and lib/pq, see docs/runtimes.md)
and once with one Python worker process (``benchmarks.worker``), each on a fresh schema,
in alternating order, so that both meet the same load on a shared machine. The rate comes
from the audit trail by the database clock (first claim to last success); the worker's CPU
per run from ``/proc`` (the CPU time of the worker process's threads over the drain), which
load disturbs far less than the rate. The report gives each runtime's median and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import profile, server
from benchmarks.stores import NOOP, BenchStore
from benchmarks.workers import WorkerPool, wait_for

ROOT = Path(__file__).resolve().parent.parent
GO_MODULE = ROOT / "runtimes" / "go"


def build_swgo(where: Path) -> Path:
    """The Go runtime's command, built offline against Debian's lib/pq."""
    binary = where / "swgo"
    env = {
        **os.environ,
        "GOWORK": str(GO_MODULE / "go.work.debian"),
        "GOPROXY": "off",
        "GOFLAGS": "",
        "CGO_ENABLED": "0",
    }
    subprocess.run(
        ["go", "build", "-o", str(binary), "./cmd/swgo"], cwd=GO_MODULE, env=env, check=True
    )
    return binary


def cpu_seconds(pid: int) -> float:
    """CPU time of the threads of process ``pid`` so far, in nanoseconds' precision (the
    scheduler's, ``/proc/<pid>/task/*/schedstat``), where ``/proc/<pid>/stat`` counts in
    ticks of 10 ms: a drain of a few thousand runs is a handful of ticks."""
    return sum(profile._thread_cpu(pid))


class GoPool(WorkerPool):
    """One Go worker process, started and released as the Python pool's are."""

    def __init__(self, store: BenchStore, concurrency: int, swgo: Path) -> None:
        super().__init__(store, 1, concurrency)
        self.swgo = swgo

    def __enter__(self) -> GoPool:
        log = Path(self._tmp.name) / "go-worker.log"
        self._logs.append(log)
        env = {
            **os.environ,
            "SIMPLEWORKFLOW_DATABASE_URL": self.store.url,
            "SIMPLEWORKFLOW_SCHEMA": self.store.schema,
        }
        args = ["-types", NOOP, "-concurrency", str(self.concurrency), "-quiet", "-wait-go"]
        with log.open("w") as err:
            proc = subprocess.Popen(
                [str(self.swgo), "worker", *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
            )
        self.procs.append(proc)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the Go worker failed to start:\n{self.logs()}")
        return self


def measure(
    runtime: str, url: str, workdir: Path, items: int, concurrency: int, swgo: Path
) -> dict[str, float]:
    """One drain of ``items`` runs by one worker process of ``runtime``."""
    store = BenchStore.fresh("postgres", url, workdir)
    try:
        store.load_runs(items)
        after = store.last_event()
        pool = (
            GoPool(store, concurrency, swgo)
            if runtime == "go"
            else WorkerPool(store, 1, concurrency)
        )
        with pool:
            pid = pool.procs[0].pid
            before = cpu_seconds(pid)
            pool.go()
            wait_for(store, pool, after, items, f"{runtime} drain")
            used = cpu_seconds(pid) - before
            pool.procs[0].send_signal(signal.SIGTERM)
        return {
            "runs_per_s": items / store.window(after, items),
            "cpu_us_per_run": used / items * 1e6,
        }
    finally:
        store.close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.go_drain", description=__doc__)
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--postgres-url")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    samples: dict[str, list[dict[str, float]]] = {"go": [], "python": []}
    with (
        tempfile.TemporaryDirectory(prefix="bench-go-") as tmp,
        server.given_or_private(args.postgres_url) as url,
    ):
        swgo = build_swgo(Path(tmp))
        for number in range(args.rounds):
            order = ["go", "python"] if number % 2 == 0 else ["python", "go"]
            for runtime in order:
                figures = measure(runtime, url, Path(tmp), args.items, args.concurrency, swgo)
                samples[runtime].append(figures)
    report: dict[str, Any] = {"items": args.items, "rounds": args.rounds}
    for runtime, runs in samples.items():
        for key in ("runs_per_s", "cpu_us_per_run"):
            report[f"{runtime}_{key}"] = statistics.median(r[key] for r in runs)
    report["drain_ratio_go_to_python"] = report["go_runs_per_s"] / report["python_runs_per_s"]
    report["cpu_ratio_python_to_go"] = report["python_cpu_us_per_run"] / report["go_cpu_us_per_run"]
    report["samples"] = samples
    if args.json:
        print(json.dumps(report))
    else:
        print(f"drain of {args.items} no-op runs, one worker process, median of {args.rounds}")
        for runtime in ("go", "python"):
            rate, cpu = report[f"{runtime}_runs_per_s"], report[f"{runtime}_cpu_us_per_run"]
            print(f"  {runtime:<7} {rate:8.0f} runs/s  {cpu:8.0f} µs worker CPU per run")
        print(
            f"  go/python drain: {report['drain_ratio_go_to_python']:.2f}x; "
            f"python/go worker CPU: {report['cpu_ratio_python_to_go']:.2f}x"
        )
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
