"""Latency cases: an idle worker picking up a new run, and a waiting run resuming on a signal.

One worker process, idle between samples. A sample is the time from just before the
producer's call to the handler's start, which the handler stamps with ``time.time()``
(same machine, same clock) and prints on the worker's stdout for the producer to read
(so that no polling of the store competes with the pick-up). On Postgres the worker is
woken by ``LISTEN/NOTIFY``; SQLite has no notifications across processes, so there the
worker notices the producer's commit by checking the file's ``data_version`` every
``watch_interval`` (5 ms by default). The random pause between samples lands each one
at a random point of that cycle.

``python -m benchmarks.latency`` measures the idle pick-up on Postgres beside its floor,
a hand-written LISTEN loop in psycopg (``benchmarks.listen_loop``), beside the same
loop doing the contract's work on the project's tables (seed 000's insert and claim, the
events, the lease: the machine's ceiling for that work), and optionally beside another
git ref's worker (``--against main``), samples interleaved in random order on one
server, and prints each side's percentiles and the ratios to both loops.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import queue
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg.types.json import Jsonb
from tqdm import tqdm

from benchmarks import report, server, stores
from benchmarks.stores import BenchStore
from benchmarks.worker import ECHO_ENV
from benchmarks.workers import WorkerPool
from simpleworkflow.worker.options import WorkerOptions

SETTLE = 1.0  # seconds for a released worker to reach its idle wait
ROOT = Path(__file__).resolve().parent.parent
FLOOR = "LISTEN loop"
SAME_WORK = "LISTEN loop, same work"
#: The columns of ratios: to the bare loop, and to the loop doing the contract's work.
REFERENCES = {FLOOR: "ratio", SAME_WORK: "ratio_same_work"}


def _pause() -> None:
    """Let the worker go idle again before the next sample."""
    time.sleep(random.uniform(0.02, 0.06))


class Echoes:
    """The ``started <n> <time>`` lines a process prints, read by a thread of ours."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)

    def started(self, number: int, timeout: float = 30.0) -> float:
        """When the handler of sample ``number`` started (``time.time()``)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise RuntimeError(f"sample {number} was not picked up in {timeout:g}s") from None
            word, n, stamp = line.split()
            if word == "started" and n == str(number):
                return float(stamp)


@dataclasses.dataclass
class Side:
    """One consumer under measurement: how to produce sample ``n``, and what it printed."""

    name: str
    produce: Callable[[int], object]
    echoes: Echoes
    check: Callable[[], None] = lambda: None
    #: Per sample: seconds from before the producer's call, and from its return.
    before: list[float] = dataclasses.field(default_factory=list)
    after: list[float] = dataclasses.field(default_factory=list)
    call: list[float] = dataclasses.field(default_factory=list)

    def sample(self, number: int) -> None:
        began = time.time()
        self.produce(number)
        returned = time.time()
        try:
            started = self.echoes.started(number)
        except RuntimeError as exc:
            self.check()
            raise RuntimeError(f"{self.name}: {exc}") from None
        self.before.append(started - began)
        self.after.append(started - returned)
        self.call.append(returned - began)


def interleave(sides: list[Side], samples: int, desc: str = "idle pick-up") -> None:
    """``samples`` of each side, in a new random order each round, each after a pause."""
    number = 0
    for _ in tqdm(range(samples), desc=desc, leave=False, disable=None):
        for side in random.sample(sides, len(sides)):
            _pause()
            number += 1
            side.sample(number)


@contextlib.contextmanager
def worker_side(
    store: BenchStore, concurrency: int, name: str = "simple-workflow", path: str | None = None
) -> Iterator[Side]:
    """A worker process on ``store`` and a client that starts runs there; ``path``, when
    given, is put first on the worker's ``PYTHONPATH`` (another version's package)."""
    env = {ECHO_ENV: "on"}
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([path, str(ROOT)])
    with WorkerPool(store, 1, concurrency, env) as pool, store.client() as client:
        assert pool.procs[0].stdout is not None
        echoes = Echoes(pool.procs[0].stdout)
        pool.go()

        def produce(number: int) -> object:
            return client.start(stores.LATENCY, {"n": number})

        yield Side(name, produce, echoes, pool.check)


@contextlib.contextmanager
def _loop_process(store: BenchStore, *args: str) -> Iterator[Echoes]:
    """``benchmarks.listen_loop`` on ``store``'s schema, once it is listening."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.listen_loop", store.url, store.schema, *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the LISTEN loop failed to start")
        yield Echoes(proc.stdout)
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def listen_loop_side(store: BenchStore) -> Iterator[Side]:
    """The floor: the bare loop on its own table, and a psycopg producer whose one
    statement inserts the row and notifies."""
    with _loop_process(store) as echoes, psycopg.connect(store.url, autocommit=True) as conn:
        insert = store.q["listen_ref_insert"].encode()

        def produce(number: int) -> object:
            return conn.execute(insert, {"payload": Jsonb({"n": number}), "channel": store.schema})

        yield Side(FLOOR, produce, echoes)


@contextlib.contextmanager
def same_work_side(store: BenchStore) -> Iterator[Side]:
    """The ceiling for the contract's work: the same-work loop on ``store``'s migrated
    tables, and a psycopg producer running seed 000's plain insert."""
    with (
        _loop_process(store, "--same-work", stores.LATENCY) as echoes,
        psycopg.connect(store.url, autocommit=True) as conn,
    ):
        insert = store.q["same_work_insert"].encode()

        def produce(number: int) -> object:
            params = {"type": stores.LATENCY, "payload": Jsonb({"n": number})}
            return conn.execute(insert, {**params, "idempotency_key": None})

        yield Side(SAME_WORK, produce, echoes)


def idle_pickup(store: BenchStore, samples: int, concurrency: int) -> dict[str, float]:
    """Insert to handler start with the worker idle before each insert."""
    with worker_side(store, concurrency) as side:
        time.sleep(SETTLE)
        interleave([side], samples)
    return _percentiles("idle", side.before)


def signal_resume(store: BenchStore, samples: int, concurrency: int) -> dict[str, float]:
    """``Client.signal`` to the body continuing after its ``wait_for_event``."""
    latencies = []
    with WorkerPool(store, 1, concurrency) as pool, store.client() as client:
        runs = client.start_many([(stores.SIGNAL, {})] * samples)
        pool.go()
        _wait_until(lambda: store.scalar("waiting", type=stores.SIGNAL) == samples, pool)
        for run in tqdm(runs, desc="signal to resume", leave=False, disable=None):
            _pause()
            began = time.time()
            client.signal(run.id, "go", {})
            result = _result(client, run.id, pool)
            latencies.append(result["resumed"] - began)
    return _percentiles("signal", latencies)


def _result(client: Any, run_id: str, pool: WorkerPool, timeout: float = 30.0) -> Any:
    """Poll the run until it has finished: gently, so polling does not slow the worker."""
    deadline = time.monotonic() + timeout
    pause = 0.002
    time.sleep(0.005)
    while time.monotonic() < deadline:
        run = client.get(run_id)
        if run.is_terminal:
            if run.status.value != "succeeded":
                raise RuntimeError(f"run {run_id} ended {run.status.value}: {run.last_error}")
            return run.result
        time.sleep(pause)
        pause = min(pause * 1.5, 0.02)
        pool.check()
    raise RuntimeError(f"run {run_id} did not finish within {timeout:g}s:\n{pool.logs()}")


def _wait_until(ready: Callable[[], bool], pool: WorkerPool, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for the worker:\n{pool.logs()}")
        pool.check()
        time.sleep(0.05)


def _percentiles(name: str, seconds: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(seconds, n=100, method="inclusive")
    return {
        f"{name}_p50_ms": statistics.median(seconds) * 1000,
        f"{name}_p99_ms": cuts[98] * 1000,
    }


# -- python -m benchmarks.latency: the idle pick-up beside its floor ---------------------


@contextlib.contextmanager
def _package_of(ref: str) -> Iterator[str]:
    """A directory holding the ``simpleworkflow`` package of git ref ``ref``."""
    with tempfile.TemporaryDirectory(prefix="bench-ref-") as tmp:
        archive = subprocess.run(
            ["git", "archive", ref, "simpleworkflow"], cwd=ROOT, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        yield tmp


def _summary(side: Side, references: list[Side]) -> dict[str, float]:
    figures = {
        **_percentiles("before", side.before),
        **_percentiles("after", side.after),
        "call_p50_ms": statistics.median(side.call) * 1000,
    }
    for reference in references:
        if side is reference:
            continue
        suffix = REFERENCES[reference.name]
        for start in ("before", "after"):
            base = _percentiles(start, getattr(reference, start))
            for p in ("p50", "p99"):
                figures[f"{start}_{p}_{suffix}"] = (
                    figures[f"{start}_{p}_ms"] / base[f"{start}_{p}_ms"]
                )
    return figures


def compare(url: str, samples: int, concurrency: int, against: str | None) -> dict[str, Any]:
    """Every side on its own schema of one server, samples interleaved."""
    load_before = report.load_average()
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-pickup-")))

        def fresh() -> BenchStore:
            store = BenchStore.fresh("postgres", url, workdir)
            stack.callback(store.close)
            return store

        sides = [stack.enter_context(worker_side(fresh(), concurrency))]
        if against is not None:
            package = stack.enter_context(_package_of(against))
            sides.append(stack.enter_context(worker_side(fresh(), concurrency, against, package)))
        references = [
            stack.enter_context(same_work_side(fresh())),
            stack.enter_context(listen_loop_side(fresh())),
        ]
        sides += references
        time.sleep(SETTLE)
        interleave(sides, samples)
        results = {side.name: _summary(side, references) for side in sides}
    return {
        "samples": samples,
        "concurrency": concurrency,
        "load_average": {"before": load_before, "after": report.load_average()},
        "results": results,
    }


def table(doc: dict[str, Any]) -> str:
    """The sides as rows: p50/p99 from before the call and from its return, each with its
    ratios to the bare loop's and to the same-work loop's, and the producer's call."""
    rows = [
        f"{'':22} {'from before the call':>20} {'/ loop':>13} {'/ same work':>13} "
        f"{'from its return':>18} {'/ loop':>13} {'/ same work':>13} {'call p50':>9}"
    ]
    for name, figures in doc["results"].items():
        cells = [f"{name:22}"]
        for start, width in (("before", 20), ("after", 18)):
            p50, p99 = figures[f"{start}_p50_ms"], figures[f"{start}_p99_ms"]
            cells.append(f"{f'{p50:.2f} / {p99:.2f} ms':>{width}}")
            for suffix in REFERENCES.values():
                ratio = figures.get(f"{start}_p50_{suffix}")
                both = f"{ratio:.2f}x / {figures[f'{start}_p99_{suffix}']:.2f}x" if ratio else "-"
                cells.append(f"{both:>13}")
        cells.append(f"{figures['call_p50_ms']:>6.2f} ms")
        rows.append(" ".join(cells))
    load = doc["load_average"]
    rows.append(
        f"{doc['samples']} samples per side; load average {load['before']} -> {load['after']}"
    )
    return "\n".join(rows)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=__doc__)
    parser.add_argument("--samples", type=int, default=300, help="samples per side (300)")
    default = WorkerOptions().concurrency
    parser.add_argument(
        "--concurrency", type=int, default=default, help=f"the worker's slots ({default})"
    )
    parser.add_argument("--against", help="also measure this git ref's worker (e.g. main)")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        url = args.postgres_url or stack.enter_context(server.private_postgres())
        doc = compare(url, args.samples, args.concurrency, args.against)
    print(table(doc))
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
