"""Chaos: worker processes killed, frozen and stopped at random while they run multi-step
runs; then a check that nothing was lost, stuck, duplicated or run twice at once.

``python -m benchmarks.chaos [--stores postgres,sqlite] [--seconds 60] [--runs 300]
[--workers 3] [--lease 3] [--json]``

A first version: the faults are SIGKILL, SIGSTOP past the lease then SIGCONT, and SIGTERM,
each followed (like a supervisor would) by a fresh worker where one died. Each step body
writes a line to a witness ledger (a file outside the engine, ``O_APPEND``) every 50 ms
while it runs. At the end the checker compares ledger, journal, runs and audit trail and
reports, per store: runs accepted, succeeded, failed, lost, stuck; duplicate journal rows;
events after a terminal event; overlapping executions of one run (two attempts writing
ledger lines in intersecting intervals); step re-executions not explained by a fault of
the process that ran the step before; and the recovery time from a fault to the run's next
ledger line elsewhere. Every count's target is zero; the exit status is 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import os
import random
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.stores import BenchStore, each_store
from benchmarks.workers import WorkerProcess
from simpleworkflow import App, Client, Context, errors

ASYNC_TYPE, SYNC_TYPE = "chaos.async.v1", "chaos.sync.v1"
TERMINAL = {"succeeded", "failed", "cancelled"}
TICK = 0.05
COUNTS = (
    "lost",
    "stuck",
    "failed",
    "duplicate_journal_rows",
    "events_after_terminal",
    "overlapping_executions",
    "unexplained_reexecutions",
)


# -- the worker side --------------------------------------------------------------------


class Witness:
    """The ledger: one JSON line per ``os.write``, so concurrent writers never interleave."""

    def __init__(self, path: str) -> None:
        self.path = path

    def tick(self, ctx: Context, step: str, execution: str) -> None:
        """Note that ``step`` runs now; raise ``Cancelled`` instead if asked to stop."""
        ctx.raise_if_cancelled()
        line = {
            "run": ctx.run_id,
            "step": step,
            "exec": execution,
            "attempt": f"{os.getpid()}:{id(ctx)}",
            "pid": os.getpid(),
            "at": time.time(),
        }
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)


async def work(witness: Witness, ctx: Context, step: str, ticks: int) -> str:
    execution = uuid.uuid4().hex
    for _ in range(ticks):
        witness.tick(ctx, step, execution)
        await asyncio.sleep(TICK)
    return execution


def work_sync(witness: Witness, ctx: Context, step: str, ticks: int) -> str:
    execution = uuid.uuid4().hex
    for _ in range(ticks):
        witness.tick(ctx, step, execution)
        time.sleep(TICK)
    return execution


def build_app(url: str, schema: str, witness: Witness) -> App:
    """Two multi-step types, an ``async def`` one and a ``def`` one, with a durable nap."""
    app = App(url, schema=schema)

    @app.workflow(ASYNC_TYPE)
    async def async_steps(payload: dict[str, Any], ctx: Context) -> list[str]:
        done = []
        for n, ticks in enumerate(payload["ticks"]):
            done.append(await ctx.step(f"s{n}", work, witness, ctx, f"s{n}", ticks))
            if n == 0 and payload["nap"]:
                await ctx.sleep("nap", payload["nap"])
        return done

    @app.workflow(SYNC_TYPE)
    def sync_steps(payload: dict[str, Any], ctx: Context) -> list[str]:
        done = []
        for n, ticks in enumerate(payload["ticks"]):
            done.append(ctx.step(f"s{n}", work_sync, witness, ctx, f"s{n}", ticks))
            if n == 0 and payload["nap"]:
                ctx.sleep("nap", payload["nap"])
        return done

    return app


def worker_main(url: str, schema: str, worker_id: str, ledger: str, lease: float) -> None:
    app = build_app(url, schema, Witness(ledger))
    poller = app.poller(
        type_prefixes=["chaos.%"],
        worker_id=worker_id,
        lease_duration=lease,
        concurrency=8,
        poll_interval=0.5,
        shutdown_grace=lease,
    )
    print("ready", flush=True)
    poller.run()


# -- the driver -------------------------------------------------------------------------


class Worker(WorkerProcess):
    def __init__(self, store: BenchStore, worker_id: str, ledger: Path, lease: float, log: Path):
        args = [store.url, store.schema, worker_id, str(ledger), str(lease)]
        super().__init__("benchmarks.chaos", args, worker_id, log)
        self.frozen = False

    def end(self) -> None:
        self.stop(30)


class Chaos:
    """One store's run: workers, runs, faults; :meth:`check` compares what each saw."""

    def __init__(self, store: BenchStore, options: argparse.Namespace, tmp: Path) -> None:
        self.store, self.options, self.tmp = store, options, tmp
        self.ledger = tmp / f"{store.kind}-ledger.jsonl"
        self.workers: list[Worker] = []
        self.faults: list[tuple[float, str, int]] = []  # (epoch, kind, pid)
        self._count = 0

    def spawn(self) -> None:
        self._count += 1
        log = self.tmp / f"{self.store.kind}-workers.log"
        name = f"chaos-{self.store.kind}-{self._count}"
        self.workers.append(Worker(self.store, name, self.ledger, self.options.lease, log))

    def run(self) -> dict[str, Any]:
        try:
            for _ in range(self.options.workers):
                self.spawn()
            with self.store.client() as client:
                ids = self._start(client)
                self._inject(client, ids)
                self._settle(client, ids)
                return self.check(client, ids)
        finally:
            for worker in self.workers:
                worker.end()

    def _start(self, client: Client) -> list[str]:
        rand = random.Random(self.options.seed)
        requests = [
            (
                ASYNC_TYPE if n % 2 else SYNC_TYPE,
                {
                    "ticks": [rand.randint(1, 6) for _ in range(rand.randint(2, 4))],
                    "nap": rand.choice([0, 0, 0.2]),
                },
            )
            for n in range(self.options.runs)
        ]
        return [run.id for run in client.start_many(requests)]

    def _inject(self, client: Client, ids: list[str]) -> None:
        """A fault every second or two until the time is up or every run has ended."""
        deadline = time.monotonic() + self.options.seconds
        thaw: list[tuple[float, Worker]] = []
        while time.monotonic() < deadline and _open(client, ids):
            time.sleep(random.uniform(0.5, 1.5))
            for when, worker in [t for t in thaw if t[0] <= time.monotonic()]:
                worker.proc.send_signal(signal.SIGCONT)
                worker.frozen = False
                thaw.remove((when, worker))
            live = [w for w in self.workers if w.proc.poll() is None and not w.frozen]
            if len(live) < 2:
                continue
            victim = random.choice(live)
            kind = random.choice(["kill", "stop", "term"])
            self.faults.append((time.time(), kind, victim.proc.pid))
            if kind == "stop":
                victim.proc.send_signal(signal.SIGSTOP)
                victim.frozen = True
                thaw.append((time.monotonic() + self.options.lease + 1, victim))
                continue
            victim.proc.send_signal(signal.SIGKILL if kind == "kill" else signal.SIGTERM)
            self.spawn()
        for _, worker in thaw:
            worker.proc.send_signal(signal.SIGCONT)
            worker.frozen = False

    def _settle(self, client: Client, ids: list[str]) -> None:
        deadline = time.monotonic() + 2 * self.options.lease + 30
        while _open(client, ids) and time.monotonic() < deadline:
            time.sleep(0.5)

    def check(self, client: Client, ids: list[str]) -> dict[str, Any]:
        ticks = _read(self.ledger)
        statuses: collections.Counter[str] = collections.Counter()
        counts = dict.fromkeys(COUNTS, 0)
        for run_id in ids:
            try:
                status = client.get(run_id).status.value
            except errors.RunNotFound:
                counts["lost"] += 1
                continue
            statuses[status] += 1
            counts["stuck"] += status not in TERMINAL
            counts["failed"] += status == "failed"
            names = [entry.step_name for entry in client.steps(run_id)]
            counts["duplicate_journal_rows"] += len(names) - len(set(names))
            kinds = [event.event_type for event in client.events(run_id)]
            ends = [n for n, kind in enumerate(kinds) if kind in TERMINAL]
            counts["events_after_terminal"] += bool(ends) and ends[0] < len(kinds) - 1
        counts["overlapping_executions"] = _overlaps(ticks)
        counts["unexplained_reexecutions"] = _unexplained(ticks, self.faults)
        return {
            "runs": len(ids),
            "succeeded": statuses["succeeded"],
            "faults": dict(collections.Counter(kind for _, kind, _ in self.faults)),
            **counts,
            **_recovery(ticks, self.faults),
        }


def _open(client: Client, ids: list[str]) -> bool:
    return any(client.get(run_id).status.value not in TERMINAL for run_id in ids)


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _spans(ticks: list[dict[str, Any]]) -> dict[str, dict[str, tuple[float, float, int]]]:
    """By run, by attempt: the first and last ledger line's time, and the process."""
    spans: dict[str, dict[str, tuple[float, float, int]]] = collections.defaultdict(dict)
    for tick in ticks:
        first, last, _ = spans[tick["run"]].get(tick["attempt"], (tick["at"], tick["at"], 0))
        spans[tick["run"]][tick["attempt"]] = (
            min(first, tick["at"]),
            max(last, tick["at"]),
            tick["pid"],
        )
    return spans


def _overlaps(ticks: list[dict[str, Any]]) -> int:
    """Runs two attempts of which wrote ledger lines in intersecting intervals."""
    overlapping = 0
    for attempts in _spans(ticks).values():
        ordered = sorted(attempts.values())
        overlapping += any(b[0] < a[1] for a, b in itertools.pairwise(ordered))
    return overlapping


def _unexplained(ticks: list[dict[str, Any]], faults: list[tuple[float, str, int]]) -> int:
    """Steps executed again although the process that executed them before had no fault
    after it began them."""
    struck: dict[int, list[float]] = collections.defaultdict(list)
    for at, _, pid in faults:
        struck[pid].append(at)
    executions: dict[tuple[str, str], dict[str, tuple[float, int]]] = collections.defaultdict(dict)
    for tick in ticks:
        key = (tick["run"], tick["step"])
        executions[key].setdefault(tick["exec"], (tick["at"], tick["pid"]))
    unexplained = 0
    for runs in executions.values():
        ordered = sorted(runs.values())
        for began, pid in ordered[:-1]:
            unexplained += not any(at >= began for at in struck[pid])
    return unexplained


def _recovery(ticks: list[dict[str, Any]], faults: list[tuple[float, str, int]]) -> dict[str, Any]:
    """Seconds from a fault to the next ledger line, by another process, of each run that
    the struck process was executing then."""
    by_run: dict[str, list[tuple[float, int]]] = collections.defaultdict(list)
    for tick in ticks:
        by_run[tick["run"]].append((tick["at"], tick["pid"]))
    samples = []
    for at, _, pid in faults:
        for lines in by_run.values():
            before = [t for t in lines if t[0] <= at]
            if not before or max(before)[1] != pid or at - max(before)[0] > 2 * TICK + 0.5:
                continue
            after = [t for t in lines if t[0] > at and t[1] != pid]
            if after:
                samples.append(min(after)[0] - at)
    if not samples:
        return {"recoveries": 0}
    cuts = (
        statistics.quantiles(samples, n=100, method="inclusive")
        if len(samples) > 1
        else samples * 99
    )
    return {
        "recoveries": len(samples),
        "recovery_p50_s": round(statistics.median(samples), 2),
        "recovery_p99_s": round(cuts[98], 2),
        "recovery_max_s": round(max(samples), 2),
    }


def run(options: argparse.Namespace) -> dict[str, Any]:
    return each_store(
        options.stores.split(","),
        options.postgres_url,
        "chaos-",
        lambda store, tmp: Chaos(store, options, tmp).run(),
    )


def main(argv: list[str]) -> None:
    if argv[:1] == ["--worker"]:
        url, schema, worker_id, ledger, lease = argv[1:]
        worker_main(url, schema, worker_id, ledger, float(lease))
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__)
    parser.add_argument("--stores", default="postgres,sqlite", help="comma-separated")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long faults come")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=None, help="for the runs' shapes")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    options = parser.parse_args(argv)
    results = run(options)
    if options.json:
        print(json.dumps(results, indent=2))
    else:
        for kind, figures in results.items():
            print(f"{kind}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    if any(figures[count] for figures in results.values() for count in COUNTS):
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
