"""Back to work after a Postgres restart: how soon every worker claims again.

``python -m benchmarks.restart [--workers 3] [--restarts 5] [--json]``

Worker processes with the default settings each claim a type of their own and keep their
connections pooled. The private server is then stopped as a crash would stop it
(``pg_ctl stop -m immediate``: every session cut, no checkpoint) and started again. Once
it accepts connections, one run per worker is started; a sample is the time from the
server accepting connections to that worker's handler starting its run (the handler's
``time.time()``; same machine, same clock). The target is a p100 within 2 s: every
worker, every restart.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.server import private_server
from simpleworkflow import App, Client

_ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "bench_restart"


def worker_main(url: str, worker_id: str) -> None:
    """A worker process: its handler says when it started."""
    app = App(url, schema=SCHEMA)

    @app.workflow(f"bench.restart.{worker_id}.v1")
    def handler(payload: Any) -> dict[str, float]:
        return {"started": time.time()}

    poller = app.poller(worker_id=worker_id)
    print("ready", flush=True)
    poller.run()


@contextlib.contextmanager
def workers(url: str, count: int, logs: Path) -> Iterator[list[str]]:
    """``count`` worker processes; SIGTERMed (or killed) at the end."""
    path = os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])
    procs: list[subprocess.Popen[str]] = []
    ids = [f"w{n}" for n in range(count)]
    try:
        for worker_id in ids:
            err_path = logs / f"{worker_id}.log"
            with err_path.open("w") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "benchmarks.restart", "--worker", url, worker_id],
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    env={**os.environ, "PYTHONPATH": path},
                    cwd=_ROOT,
                )
            procs.append(proc)
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{worker_id} failed to start:\n{err_path.read_text()}")
        yield ids
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def one_round(url: str, ids: list[str], back: float) -> list[float]:
    """Start a run per worker; seconds from ``back`` to each handler's start."""
    with Client(url, schema=SCHEMA) as client:
        runs = [client.start(f"bench.restart.{worker_id}.v1").id for worker_id in ids]
        deadline = time.monotonic() + 120
        while not all(client.get(r).is_terminal for r in runs):
            if time.monotonic() > deadline:
                raise RuntimeError("runs not claimed within 120 s of the restart")
            time.sleep(0.01)
        return [client.get(r).result["started"] - back for r in runs]


def measure(worker_count: int, restarts: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp, private_server() as server:
        with Client(server.url, schema=SCHEMA) as client:
            client.migrate()
        with workers(server.url, worker_count, Path(tmp)) as ids:
            one_round(server.url, ids, time.time())  # every worker has pooled conns
            samples: list[float] = []
            for _ in range(restarts):
                samples += one_round(server.url, ids, server.restart())
                time.sleep(0.5)
    return {
        "samples": len(samples),
        "back_to_claim_p50_s": statistics.median(samples),
        "back_to_claim_p100_s": max(samples),
    }


def main(argv: list[str]) -> None:
    if argv[:1] == ["--worker"]:
        worker_main(argv[1], argv[2])
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.restart", description=__doc__)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(args.workers, args.restarts)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{figures['samples']} samples ({args.workers} workers x {args.restarts} restarts)")
    print(f"database back to work claimed: p50 {figures['back_to_claim_p50_s']:.2f}s, ", end="")
    print(f"p100 {figures['back_to_claim_p100_s']:.2f}s (target: p100 <= 2 s)")


if __name__ == "__main__":
    main(sys.argv[1:])
