"""What every driver shares; standard library only, as it runs inside each peer's venv.

A driver is ``python drive_X.py COMMAND URL ARG...``; it prints one JSON line as its last
line. Commands:

- ``setup URL``: install the system's schema in the (new, empty) database;
- ``start_one URL N`` / ``start_batch URL N``: start ``N`` no-op jobs one call at a time,
  or 100 per call; prints ``{"rate": jobs per second}``;
- ``load URL N KIND``: start ``N`` jobs of ``KIND`` (``noop`` or ``steps``) for a drain;
- ``worker URL MODE KIND``: a worker (``MODE`` is ``default``, ``tuned`` or ``sync``);
  it prints ``ready``, starts working on a ``go`` line, and reports progress (see
  :func:`mark`) until its standard input closes;
- ``pickup URL SAMPLES``: idle pick-up latency, through a worker process of its own;
  prints ``{"p50_ms": ..., "p99_ms": ...}``.

Progress is measured the same way for every system: each handler calls :func:`mark` when
it runs, and a thread prints ``count first_time last_time`` whenever the count moved, so
the runner reads completions without querying anybody's tables.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

BATCH = 100
_lock = threading.Lock()
_count = 0
_first = 0.0
_last = 0.0


def mark() -> None:
    """Called by a handler as it runs: one more job picked up, at this instant."""
    global _count, _first, _last
    now = time.time()
    with _lock:
        _count += 1
        _first = _first or now
        _last = now


def _report() -> None:
    shown = 0
    while True:
        with _lock:
            count, first, last = _count, _first, _last
        if count != shown:
            sys.stdout.write(f"{count} {first!r} {last!r}\n")
            sys.stdout.flush()
            shown = count
        time.sleep(0.002)


def _exit_when_told() -> None:
    sys.stdin.readline()  # "stop", or end of input when the runner has gone
    sys.stdout.flush()
    os._exit(0)


def serve_worker(run: Callable[[], Any]) -> None:
    """Announce readiness, wait for ``go``, then ``run()`` the system's worker loop while
    progress is reported; the process ends when the runner says ``stop``."""
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    threading.Thread(target=_report, daemon=True).start()
    threading.Thread(target=_exit_when_told, daemon=True).start()
    run()
    threading.Event().wait()  # a loop that returns (queue empty) waits to be stopped


def timed_rate(count: int, start: Callable[[], Any]) -> dict[str, float]:
    """Call ``start()`` (which starts ``count`` jobs) and report jobs per second."""
    began = time.perf_counter()
    start()
    return {"rate": count / (time.perf_counter() - began)}


def batches(count: int) -> list[int]:
    return [min(BATCH, count - done) for done in range(0, count, BATCH)]


def pickup(
    script: str, url: str, samples: int, produce: Callable[[], Any], mode: str = "default"
) -> dict[str, float]:
    """Idle pick-up: a worker process of this driver waits; each sample starts one job
    (``produce``) after a random pause and times it to the handler's :func:`mark`."""
    worker = subprocess.Popen(
        [sys.executable, script, "worker", url, mode, "noop"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert worker.stdin is not None and worker.stdout is not None
    try:
        if worker.stdout.readline().strip() != "ready":
            raise RuntimeError("the pick-up worker did not start")
        worker.stdin.write("go\n")
        worker.stdin.flush()
        time.sleep(1.0)  # let it reach its idle wait
        latencies = []
        for number in range(1, samples + 1):
            time.sleep(random.uniform(0.02, 0.06))
            began = time.time()
            produce()
            while True:
                line = worker.stdout.readline()
                if not line:
                    raise RuntimeError("the pick-up worker stopped")
                count, _, stamp = line.split()
                if int(count) >= number:
                    break
            latencies.append(float(stamp) - began)
    finally:
        worker.stdin.close()
        worker.wait(30)
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"p50_ms": statistics.median(latencies) * 1000, "p99_ms": cuts[98] * 1000}


def main(commands: dict[str, Callable[..., Any]], hard_exit: bool = False) -> None:
    """Dispatch ``argv`` to the driver's commands; print what the command returns.
    ``hard_exit`` skips the interpreter's teardown (for a library that crashes in it)."""
    command, *args = sys.argv[1:]
    result = commands[command](*args)
    if result is not None:
        print(json.dumps(result), flush=True)
    if hard_exit:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
