"""Chaos: worker processes killed, frozen and stopped, their connections ended, the
database restarted and the network cut while they run multi-step runs; then a check
that nothing was lost, stuck, duplicated, run twice at once or woken early.

``python -m benchmarks.chaos [--stores postgres,sqlite] [--seconds 60] [--runs 300]
[--workers 3] [--lease 3] [--faults kill,stop,...] [--json] [--samples PATH]``

The runs are of three shapes: ``async def`` steps with a durable sleep and sometimes a
wait for a signal the benchmark sends; ``def`` steps with a durable sleep and sometimes
a child run waited for; and the child's one step. A fault comes every second or so (see
``chaos_faults`` for each kind; the database faults need Postgres, ``restart`` the
benchmark's own server, so it is left out with ``--postgres-url``). Each step body writes
a line to a witness ledger (a file outside the engine, ``O_APPEND``) every 50 ms while it
runs, and each durable sleep a line when it returns. At the end ``chaos_check`` compares
ledger, journal, runs and audit trail and reports, per store, the counts whose target is
zero (lost, stuck, failed, duplicate journal rows, events after the end, overlapping
executions, unexplained re-executions, writes accepted from a fenced worker, early
wake-ups: the exit status is 1 unless all are); beside them the lease lapses (a worker
struck by no fault that did not renew a lease in time, by cause) and the re-executions
they explain (``chaos_check.reexecutions``); and, per fault, the times: from a fault
to the next claim of each run a struck worker held (``recovery``; ``database_up``: less
the time a restart of the database overlapped it; ``healthy_worker``: less the time no
other worker was healthy; ``over_target``: the slow ones by cause, see
``chaos_recovery``), and from the database being back to the struck worker's next new
step (``resumed``). ``--samples PATH`` keeps the evidence: each recovery sample, each
lapse, re-execution and stuck run, and the workers' log of warnings.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import json
import logging
import os
import random
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from benchmarks import chaos_check as check
from benchmarks import chaos_recovery as recovery
from benchmarks.chaos_faults import PROCESS, Faults, load_proxy
from benchmarks.server import PrivateServer, private_server
from benchmarks.stores import BenchStore, each_store
from benchmarks.workers import WorkerProcess
from simpleworkflow import App, Client, Context, errors
from simpleworkflow.models import Event

ASYNC_TYPE, SYNC_TYPE, CHILD_TYPE = "chaos.async.v1", "chaos.sync.v1", "chaos.child.v1"
TICK = 0.05
NAPS = (0, 0, 0.2, 1.0, 3.0)  # seconds of the durable sleep after the first step
DATABASE_FAULTS = ("terminate", "restart", "silence", "half_open")
POLL = 0.5  # the workers' poll interval: the recovery target is lease + poll + 1 s
T = TypeVar("T")


# -- the worker side --------------------------------------------------------------------


class Witness:
    """The ledger: one JSON line per ``os.write``, so concurrent writers never interleave."""

    def __init__(self, path: str) -> None:
        self.path = path

    def tick(self, ctx: Context, step: str, execution: str) -> None:
        """Note that ``step`` runs now; raise ``Cancelled`` instead if asked to stop."""
        ctx.raise_if_cancelled()
        attempt = f"{os.getpid()}:{id(ctx)}"
        self._write({"run": ctx.run_id, "step": step, "exec": execution, "attempt": attempt})

    def woke(self, ctx: Context, sleep: str) -> None:
        """Note that the durable sleep ``sleep`` returned now."""
        self._write({"run": ctx.run_id, "woke": sleep})

    def _write(self, line: dict[str, Any]) -> None:
        line.update(pid=os.getpid(), at=time.time())
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
    """The three types: see the module's docstring."""
    app = App(url, schema=schema)

    @app.workflow(ASYNC_TYPE)
    async def async_steps(payload: dict[str, Any], ctx: Context) -> list[Any]:
        done: list[Any] = []
        for n, ticks in enumerate(payload["ticks"]):
            done.append(await ctx.step(f"s{n}", work, witness, ctx, f"s{n}", ticks))
            if n == 0 and payload["nap"]:
                await ctx.sleep("nap", payload["nap"])
                witness.woke(ctx, "nap")
            if n == 0 and payload.get("signal"):
                done.append(await ctx.wait_for_event("go", event="go"))
        return done

    @app.workflow(SYNC_TYPE)
    def sync_steps(payload: dict[str, Any], ctx: Context) -> list[Any]:
        done: list[Any] = []
        for n, ticks in enumerate(payload["ticks"]):
            done.append(ctx.step(f"s{n}", work_sync, witness, ctx, f"s{n}", ticks))
            if n == 0 and payload["nap"]:
                ctx.sleep("nap", payload["nap"])
                witness.woke(ctx, "nap")
            if n == 0 and payload.get("child"):
                child = ctx.start_child(CHILD_TYPE, {"ticks": [3]})
                done.append(ctx.wait_child(child))
        return done

    @app.workflow(CHILD_TYPE)
    async def child(payload: dict[str, Any], ctx: Context) -> str:
        return str(await ctx.step("c0", work, witness, ctx, "c0", payload["ticks"][0]))

    return app


def worker_main(url: str, schema: str, worker_id: str, ledger: str, lease: float) -> None:
    # The library's warnings (a lease given up, an outage) are the evidence for whoever
    # follows a re-execution: with the time and the process, into the workers' log.
    logging.basicConfig(
        level=logging.WARNING,
        format=f"%(created).3f {worker_id} pid %(process)d %(name)s: %(message)s",
    )
    app = build_app(url, schema, Witness(ledger))
    poller = app.poller(
        type_prefixes=["chaos.%"],
        worker_id=worker_id,
        lease_duration=lease,
        concurrency=8,
        poll_interval=POLL,
        shutdown_grace=lease,
    )
    print("ready", flush=True)
    poller.run()


# -- the driver -------------------------------------------------------------------------


class Worker(WorkerProcess):
    def __init__(
        self, store: BenchStore, url: str, name: str, ledger: Path, lease: float, log: Path
    ):
        spawned = time.time()
        super().__init__(
            "benchmarks.chaos", [url, store.schema, name, str(ledger), str(lease)], name, log
        )
        self.life = recovery.Life(name, spawned, time.time())
        self.proxied = url != store.url
        self.frozen = False


class Chaos:
    """One store's run: workers, runs, faults; :meth:`check` compares what each saw."""

    def __init__(
        self,
        store: BenchStore,
        options: argparse.Namespace,
        tmp: Path,
        server: PrivateServer | None,
        proxy: Any,
    ) -> None:
        self.store, self.options, self.tmp, self.proxy = store, options, tmp, proxy
        self.ledger = tmp / f"{store.kind}-ledger.jsonl"
        self.workers: list[Worker] = []
        self.rand = random.Random(options.seed)
        kinds = [k for k in options.faults.split(",") if k]
        if store.kind != "postgres":
            kinds = [k for k in kinds if k in PROCESS]
        if server is None:
            kinds = [k for k in kinds if k != "restart"]
        self.faults = Faults(kinds, options.lease, self.spawn, server, proxy, store.url)

    def spawn(self) -> None:
        number = len(self.workers) + 1
        proxied = self.proxy is not None and self.store.kind == "postgres" and number % 2 == 0
        url = self.proxy.url if proxied else self.store.url
        log = self.tmp / f"{self.store.kind}-workers.log"
        name = f"chaos-{self.store.kind}-{number}"
        self.workers.append(Worker(self.store, url, name, self.ledger, self.options.lease, log))

    def run(self) -> dict[str, Any]:
        try:
            for _ in range(self.options.workers):
                self.spawn()
            with self.store.client() as client:
                ids, signals = self._start(client)
                self._inject(client, ids, signals)
                deadline = time.monotonic() + 2 * self.options.lease + 60
                while _open(client) and time.monotonic() < deadline:
                    time.sleep(0.5)
                return self.check(client, ids)
        finally:
            self.faults.finish()
            for worker in self.workers:
                worker.stop(30)

    def _start(self, client: Client) -> tuple[list[str], list[str]]:
        """Start the runs; the ids of those that wait for a signal, in a random order."""
        rand = random.Random(self.options.seed)
        requests = []
        for n in range(self.options.runs):
            ticks = [rand.randint(1, 6) for _ in range(rand.randint(2, 4))]
            payload: dict[str, Any] = {"ticks": ticks, "nap": rand.choice(NAPS)}
            extra = rand.random() < 0.25
            payload["signal" if n % 2 else "child"] = extra
            requests.append((ASYNC_TYPE if n % 2 else SYNC_TYPE, payload))
        runs = client.start_many(requests)
        signals = [r.id for r, (_, p) in zip(runs, requests, strict=True) if p.get("signal")]
        rand.shuffle(signals)
        return [run.id for run in runs], signals

    def _inject(self, client: Client, ids: list[str], signals: list[str]) -> None:
        """A fault every second or so, and a few signals, until the time is up or every
        run has ended."""
        deadline = time.monotonic() + self.options.seconds
        per_tick = max(1, len(signals) // max(1, int(self.options.seconds)))
        while time.monotonic() < deadline and _open(client):
            time.sleep(self.rand.uniform(0.5, 1.5))
            for run_id in signals[-per_tick:]:
                with contextlib.suppress(errors.StoreUnavailable):  # next time, then
                    client.signal(run_id, "go")
                    signals.remove(run_id)
            self.faults.tick(self.workers, self.rand)
        self.faults.finish()
        for run_id in signals:
            _retrying(functools.partial(client.signal, run_id, "go"))

    def check(self, client: Client, ids: list[str]) -> dict[str, Any]:
        ticks = check.read(self.ledger)
        statuses: collections.Counter[str] = collections.Counter()
        counts = dict.fromkeys(check.COUNTS, 0)
        journals, events, statuses_of = {}, {}, {}
        for run_id in _with_children(client, ids):
            try:
                status = client.get(run_id).status.value
            except errors.RunNotFound:
                counts["lost"] += 1
                continue
            statuses[status] += 1
            statuses_of[run_id] = status
            if status not in check.TERMINAL:
                counts["stuck"] += 1
                print(f"{self.store.kind}: run {run_id} is {status}", file=sys.stderr)
            counts["failed"] += status == "failed"
            if status == "failed":  # for whoever looks into one
                error = client.get(run_id).last_error
                print(f"{self.store.kind}: run {run_id} failed: {error}", file=sys.stderr)
            journals[run_id] = client.steps(run_id)
            names = [entry.step_name for entry in journals[run_id]]
            counts["duplicate_journal_rows"] += len(names) - len(set(names))
            events[run_id] = client.events(run_id)
            kinds = [event.event_type for event in events[run_id]]
            ends = [n for n, kind in enumerate(kinds) if kind in check.TERMINAL]
            counts["events_after_terminal"] += bool(ends) and ends[0] < len(kinds) - 1
        dealt = self.faults.dealt
        counts["overlapping_executions"] = check.overlaps(ticks)
        lapsed = self._reexecutions(ticks, events, statuses_of, counts)
        counts["fenced_writes_accepted"] = check.fenced_writes(ticks, journals)
        counts["early_wakeups"] = check.early_wakeups(ticks, journals)
        survivors = {w.proc.pid for w in self.workers if w.proc.poll() is None}
        resumed, never = check.resumptions(dealt, ticks, survivors)
        figures: dict[str, Any] = {
            "runs": len(ids),
            "children": len(journals) - len(ids) + counts["lost"],
            "succeeded": statuses["succeeded"],
            "faults": dict(collections.Counter(fault.kind for fault in dealt)),
            **counts,
            **lapsed,
        }
        found = recovery.samples(dealt, events, self.options.lease)
        lives = [w.life for w in self.workers]
        proxied = {w.name for w in self.workers if w.proxied}
        lines = [
            {**recovery.describe(s, lives, dealt, proxied), **queue}
            for s, queue in zip(found, recovery.contention(found, events), strict=True)
        ]
        self._keep(lines)
        for kind, parts in sorted(check.recoveries(found, dealt, lines).items()):
            samples, waits, up, healthy = parts
            figures[f"recovery_{kind}"] = check.summary(samples)
            figures[f"recovery_{kind}"]["given_up_to_claim"] = check.summary(waits)
            figures[f"recovery_{kind}"]["database_up"] = check.summary(up)
            figures[f"recovery_{kind}"]["healthy_worker"] = check.summary(healthy)
            target = self.options.lease + POLL + 1.0
            slow = [line for line in lines if line["fault"] == kind and line["total_s"] > target]
            causes = collections.Counter(recovery.cause(line, target) for line in slow)
            figures[f"recovery_{kind}"]["over_target"] = dict(sorted(causes.items()))
        for kind, samples in sorted(resumed.items()):
            figures[f"resumed_{kind}"] = check.summary(samples)
        figures["never_resumed"] = never
        return figures

    def _reexecutions(
        self,
        ticks: list[dict[str, Any]],
        events: dict[str, list[Event]],
        statuses: dict[str, str],
        counts: dict[str, int],
    ) -> dict[str, Any]:
        """Count the unexplained re-executions into ``counts``; return the lease lapses
        and the re-executions they explain. Each is named on stderr and, with
        ``--samples``, its evidence kept, as is that of each run stuck at the end."""
        dealt = self.faults.dealt
        by_pid = {w.proc.pid: w.name for w in self.workers}
        lapsed, again = check.reexecutions(ticks, dealt, events, by_pid)
        lapses = check.lapses(dealt, events)
        counts["unexplained_reexecutions"] = len(again)
        kind = self.store.kind
        for run_id, step in again:
            print(f"{kind}: step {step} of run {run_id} ran again", file=sys.stderr)
        for lapse in lapses:
            holder = lapse.data["worker_id"]
            print(f"{kind}: run {lapse.workflow_id}: {holder}'s lease lapsed", file=sys.stderr)
        stuck = [
            (run_id, "") for run_id, status in statuses.items() if status not in check.TERMINAL
        ]
        found = [
            *(("unexplained", key) for key in again),
            *(("lapsed", key) for key in lapsed),
            *(("lapse", (lapse.workflow_id, "")) for lapse in lapses),
            *(("stuck", key) for key in stuck),
        ]
        self._keep_evidence(
            [check.evidence(key, ticks, dealt, events[key[0]], why) for why, key in found]
        )
        return {
            "lease_lapses": len(lapses),
            "lease_lapse_causes": check.lapse_causes(lapses, dealt, events, self.options.lease),
            "lapsed_reexecutions": len(lapsed),
        }

    def _keep_evidence(self, found: list[dict[str, Any]]) -> None:
        """With ``--samples``: each re-execution not explained by a fault, each lapse and
        each run stuck at the end as a JSON line (``<path>.<store>.evidence.jsonl``, see
        ``chaos_check.evidence``), and the workers' log (``<path>.<store>.log``)."""
        if self.options.samples is None:
            return
        prefix = f"{self.options.samples}.{self.store.kind}"
        Path(f"{prefix}.evidence.jsonl").write_text("".join(json.dumps(f) + "\n" for f in found))
        log = self.tmp / f"{self.store.kind}-workers.log"
        if log.exists():
            shutil.copyfile(log, f"{prefix}.log")

    def _keep(self, lines: list[dict[str, Any]]) -> None:
        """Write each recovery sample as a JSON line to ``--samples`` (one file per store:
        ``<path>.<store>.jsonl``), for whoever looks into the slow ones."""
        if self.options.samples is None:
            return
        path = Path(f"{self.options.samples}.{self.store.kind}.jsonl")
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _with_children(client: Client, ids: list[str]) -> list[str]:
    """The runs started, and the children their journals name."""
    children = [
        str(entry.output["child_id"])
        for run_id in ids
        for entry in client.steps(run_id)
        if entry.kind == "child"
    ]
    return ids + children


def _retrying(call: Callable[[], T]) -> T:
    """``call()`` again while the store is away (the benchmark restarts it). Never while
    a fault is to be undone: a worker frozen inside a SQLite write transaction keeps
    every writer out until it is thawed."""
    while True:
        try:
            return call()
        except errors.StoreUnavailable:
            time.sleep(0.2)


def _open(client: Client) -> bool:
    """Whether a run of the benchmark (or a child) has not ended: one indexed read."""
    page = _retrying(
        functools.partial(client.list, type_prefix="chaos.", status=("pending", "leased"), limit=1)
    )
    return bool(page.runs)


@contextlib.contextmanager
def _network(kinds: list[str], options: argparse.Namespace) -> Iterator[tuple[Any, Any]]:
    """The private server (unless a URL is given) and the proxy, as the faults need."""
    with contextlib.ExitStack() as stack:
        server = None
        url = options.postgres_url
        if url is None and "postgres" in kinds:
            server = stack.enter_context(private_server())
            url = server.url
        proxy = None
        if url is not None and {"silence", "half_open"} & set(options.faults.split(",")):
            proxy = stack.enter_context(load_proxy().silentable_proxy(url))
        yield server, proxy


def run(options: argparse.Namespace) -> dict[str, Any]:
    kinds = options.stores.split(",")
    with _network(kinds, options) as (server, proxy):
        url = options.postgres_url or (server.url if server is not None else None)
        return each_store(
            kinds, url, "chaos-", lambda store, tmp: Chaos(store, options, tmp, server, proxy).run()
        )


def main(argv: list[str]) -> None:
    if argv[:1] == ["--worker"]:
        url, schema, worker_id, ledger, lease = argv[1:]
        worker_main(url, schema, worker_id, ledger, float(lease))
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__)
    parser.add_argument("--stores", default="postgres,sqlite", help="comma-separated")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long faults come")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument(
        "--faults",
        default=",".join(PROCESS + DATABASE_FAULTS),
        help="comma-separated, of: " + ", ".join(PROCESS + DATABASE_FAULTS),
    )
    parser.add_argument("--seed", type=int, default=None, help="for the runs and the faults")
    parser.add_argument("--postgres-url", help="use this server instead (no restarts then)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--samples", help="write each recovery sample to PATH.<store>.jsonl (see chaos_recovery)"
    )
    options = parser.parse_args(argv)
    unknown = set(options.faults.split(",")) - set(PROCESS + DATABASE_FAULTS) - {""}
    if unknown:
        parser.error(f"unknown faults: {', '.join(sorted(unknown))}")
    results = run(options)
    if options.json:
        print(json.dumps(results, indent=2))
    else:
        for kind, figures in results.items():
            print(f"{kind}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    if any(figures[count] for figures in results.values() for count in check.COUNTS):
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
