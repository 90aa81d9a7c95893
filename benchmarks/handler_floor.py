"""The machine's ceiling for a drain of plain ``def`` handlers against ``async def`` ones:
``python -m benchmarks.handler_floor [--runs 20000] [--rounds 5]``.

A hand-written drain with nothing of the worker in it runs in a process of its own, on
one asyncio event loop (``asyncio.run``, the loop the worker runs on), beside the real
worker (``benchmarks.worker`` at its defaults), rounds interleaved on one migrated
Postgres store. The hand-written drain claims with the backend's own claim (the op the
worker sends: the project's claim statement, 100 runs at a time, its commit not waiting
for the disk), one claim in flight at a time, the next sent while no more than one
claim's runs are in hand and two claims' outcomes unwritten; it calls each run's no-op
handler and writes each claim's outcomes in one transaction with the backend's own
completion (``finish``). Its variants differ only in how a handler is called:

- ``hand, async``: an ``async def`` no-op awaited inline;
- ``hand, def``: a plain ``def`` no-op in a ``ThreadPoolExecutor`` of 10 threads (the
  worker's default slots) through ``loop.run_in_executor``, every result back on the
  loop by its own ``call_soon_threadsafe``;
- ``hand, def, batched``: the same threads, the claim's results handed back together by
  one ``call_soon_threadsafe`` from the thread that finished the claim's last call.

``worker, async`` and ``worker, def`` are the worker's own drains of the same handlers
(``benchmarks.concurrency``'s ``async`` and ``def``). Printed per variant: the median
rate (runs/s, by the database's clock) and the draining process's CPU per run (from
``/proc``: its event loop's thread and its other threads), voluntary context switches
and the Postgres server's CPU per run, and the claim and completion transactions; then
the hand-written ``def`` over ``async def`` (the ceiling of handler threads on this
machine), the worker's, and the worker over the hand-written drain for each kind of
handler: each a ratio of the medians, and the median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import os
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from benchmarks import profile, stores, variants, workers
from benchmarks.stores import BenchStore
from simpleworkflow.backends import Backend, open_backend
from simpleworkflow.backends.base import Claim, Lease, Outcomes, Success

ROOT = Path(__file__).resolve().parent.parent
#: The worker's defaults: runs a claim asks for, handlers at once, lease seconds.
BATCH, SLOTS, LEASE = 100, 10, 30.0
#: Seconds a hand-written drain may take, and one more for every 100 runs, before it is
#: killed as stalled.
STALL_SECONDS = 60.0
#: The types ``benchmarks.worker`` registers, each at version 1: the claim asks for the
#: same as the worker's, so that the two send the same statement.
TYPES = (stores.NOOP, stores.SYNC, stores.STEPS, stores.LATENCY, stores.SIGNAL)
CALLS = {"hand, async": "async", "hand, def": "executor", "hand, def, batched": "batched"}
VARIANTS = (*CALLS, "worker, async", "worker, def")
#: Each ratio: (name, variant, its reference).
RATIOS = (
    ("hand-written def / async", "hand, def", "hand, async"),
    ("hand-written def, batched / async", "hand, def, batched", "hand, async"),
    ("worker def / async", "worker, def", "worker, async"),
    ("worker / hand-written, async", "worker, async", "hand, async"),
    ("worker / hand-written, def", "worker, def", "hand, def"),
    ("worker / hand-written, def batched", "worker, def", "hand, def, batched"),
)


async def _nothing_async(payload: Any) -> Any:
    return None


def _nothing(payload: Any) -> Any:
    return None


@dataclasses.dataclass
class _Batch:
    """One claim's runs and, as they come back, their handlers' values."""

    leases: list[Lease]
    values: list[Any]
    left: int
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class FloorDrain:
    """Claims, calls and writes ``runs`` runs, handlers called as ``call`` says."""

    def __init__(self, backend: Backend, worker_id: str, call: str, runs: int) -> None:
        self.backend = backend
        self.worker_id = worker_id
        self.call = call
        self.runs = runs
        self.threads = concurrent.futures.ThreadPoolExecutor(SLOTS, thread_name_prefix="floor")
        self.claimed = 0
        self.in_hand = 0  # claimed runs whose handler's value is not back on the loop
        self.written = 0
        self.writes: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.room = asyncio.Event()
        self.done: asyncio.Future[None] = self.loop.create_future()
        claim = Claim(
            worker_id=self.worker_id,
            types=TYPES,
            limit=BATCH,
            lease_seconds=LEASE,
            versions=dict.fromkeys(TYPES, "1"),
            known=tuple(f"{type}@1" for type in TYPES),
            wait_for_disk=False,  # the worker's default (synchronous_claims off)
        )
        while self.claimed < self.runs and not self.done.done():
            while self.full() and not self.done.done():
                self.room.clear()
                await self.room.wait()
            limit = min(BATCH, self.runs - self.claimed)
            asked = dataclasses.replace(claim, limit=limit, alone=self.claimed == self.written)
            got = await self.backend.execute_async(self.backend.claim_runs(asked))
            claim = dataclasses.replace(claim, limited=got.limited)
            if not got.leases:
                await asyncio.sleep(0.001)
                continue
            self.claimed += len(got.leases)
            self.in_hand += len(got.leases)
            await self.start(got.leases)
        await self.done

    def full(self) -> bool:
        """Whether the next claim waits: a claim's runs are in hand beside the one whose
        handlers run, or two claims' outcomes are not written yet."""
        return self.in_hand > BATCH or self.claimed - self.written > 2 * BATCH

    async def start(self, leases: list[Lease]) -> None:
        batch = _Batch(leases, [None] * len(leases), len(leases))
        if self.call == "async":
            batch.values = [await _nothing_async(lease.run.payload) for lease in leases]
            batch.left = 0
            self.returned(batch, len(leases))
        elif self.call == "executor":
            for number, lease in enumerate(leases):
                future = self.loop.run_in_executor(self.threads, _nothing, lease.run.payload)
                future.add_done_callback(functools.partial(self.one_back, batch, number))
        else:
            for number in range(len(leases)):
                self.threads.submit(self.in_thread, batch, number)

    def one_back(self, batch: _Batch, number: int, future: asyncio.Future[Any]) -> None:
        """On the loop: one handler's value (``hand, def``)."""
        try:
            batch.values[number] = future.result()
        except BaseException as exc:
            self.failed(exc)
            return
        batch.left -= 1
        self.returned(batch, 1)

    def in_thread(self, batch: _Batch, number: int) -> None:
        """In a handler thread: the call; the claim's last hands them all back
        (``hand, def, batched``)."""
        try:
            batch.values[number] = _nothing(batch.leases[number].run.payload)
        except BaseException as exc:
            self.loop.call_soon_threadsafe(self.failed, exc)
            return
        with batch.lock:
            batch.left -= 1
            last = batch.left == 0
        if last:
            self.loop.call_soon_threadsafe(self.returned, batch, len(batch.leases))

    def returned(self, batch: _Batch, count: int) -> None:
        """On the loop: ``count`` values are back; a claim's last writes its outcomes."""
        self.in_hand -= count
        if not self.full():
            self.room.set()
        if batch.left > 0:
            return
        write = self.loop.create_task(self.write(batch))
        self.writes.add(write)
        write.add_done_callback(self.written_out)

    async def write(self, batch: _Batch) -> None:
        items = [
            Success(lease.run.id, lease.token, json.dumps(value), counted=lease.counted)
            for lease, value in zip(batch.leases, batch.values, strict=True)
        ]
        op = self.backend.finish(Outcomes(succeeded=items), self.worker_id)
        accepted = await self.backend.execute_async(op)
        if len(accepted) != len(items):
            raise RuntimeError(f"{len(items) - len(accepted)} leases lost before their outcome")
        self.written += len(items)

    def written_out(self, write: asyncio.Task[None]) -> None:
        self.writes.discard(write)
        exc = None if write.cancelled() else write.exception()
        if exc is not None:
            self.failed(exc)
        elif self.written >= self.runs and not self.done.done():
            self.done.set_result(None)
        elif not self.full():
            self.room.set()

    def failed(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)
        self.room.set()  # a claim loop waiting for room sees the failure


def drain_main(argv: list[str]) -> None:
    """The drain's process: ``--drain URL SCHEMA CALL RUNS``; ``ready``, then a line on
    stdin starts it; ``done`` when the last outcome is written; it exits at stdin's end."""
    url, schema, call, runs = argv[0], argv[1], argv[2], int(argv[3])
    backend = open_backend(url, schema=schema)
    drain = FloorDrain(backend, f"floor-{schema}", call, runs)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return

    async def drained() -> None:
        await drain.run()
        print("done", flush=True)
        # The parent reads our CPU meanwhile, then closes our stdin.
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await backend.aclose()

    asyncio.run(drained())
    drain.threads.shutdown()
    backend.close()


#: Per variant, each drain's figures beside its rate and CPU (``FIGURES``).
SPLITS: dict[str, list[tuple[float, ...]]] = collections.defaultdict(list)
FIGURES = ("loop_us", "others_us", "switches", "postgres_us", "claims", "completions")
_Reading = tuple[float, float, float, dict[int, float]]


def _reading(store: BenchStore, pid: int) -> _Reading:
    """CPU seconds of ``pid``'s main thread and of its others, its voluntary context
    switches (``schedstat`` and ``status`` of each thread, as ``profile``), and the CPU
    seconds of each process of the Postgres server."""
    loop, others = profile._thread_cpu(pid)
    return loop, others, float(profile._switches(pid)[0]), _server_cpu(store)


def _server_cpu(store: BenchStore) -> dict[int, float]:
    """CPU seconds of each process of the Postgres server, from ``schedstat`` (to the
    nanosecond): ``profile._cpu``'s clock ticks of 10 ms round a short drain's share of a
    backend down to nothing."""
    found = {}
    for pid in profile._server_pids(store):
        with contextlib.suppress(OSError):  # a backend that ended meanwhile
            found[pid] = sum(profile._thread_cpu(pid))
    return found


def _spent(
    store: BenchStore, pid: int, variant: str, runs: int, after: int, began: _Reading
) -> float:
    """Note the drain's figures in ``SPLITS``: per run, CPU µs of the event loop's thread
    and of the others, voluntary switches, the Postgres server's CPU µs (a backend that
    connected meanwhile counts in full); its claim and completion transactions. Its
    CPU µs per run."""
    ended = _reading(store, pid)
    loop, others, switches = (b - a for a, b in zip(began[:3], ended[:3], strict=True))
    server = sum(cpu - began[3].get(other, 0.0) for other, cpu in ended[3].items())
    claims, completions = store.execute("batches", after=after)[0]
    per_run = [loop / runs * 1e6, others / runs * 1e6, switches / runs, server / runs * 1e6]
    SPLITS[variant].append((*per_run, float(claims), float(completions)))
    return (loop + others) / runs * 1e6


def hand_drain(store: BenchStore, runs: int, variant: str) -> tuple[float, float]:
    """(runs/s by the database's clock, CPU µs per run) of one hand-written drain."""
    call = CALLS[variant]
    store.load_runs(runs, stores.NOOP if call == "async" else stores.SYNC)
    after = store.last_event()
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "benchmarks.handler_floor", "--drain"]
    with subprocess.Popen(
        [*command, store.url, store.schema, call, str(runs)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        cwd=ROOT,
    ) as proc:
        stalled = threading.Timer(STALL_SECONDS + runs / 100, proc.kill)  # its reads end
        stalled.start()
        try:
            assert proc.stdin is not None and proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the {call} drain did not start")
            before = _reading(store, proc.pid)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            if proc.stdout.readline().strip() != "done":
                raise RuntimeError(f"the {call} drain failed or stalled (its stderr is above)")
            spent = _spent(store, proc.pid, variant, runs, after, before)
            proc.stdin.close()
            if proc.wait() != 0:
                raise RuntimeError(f"the {call} drain exited with {proc.returncode}")
        finally:
            stalled.cancel()
    return runs / store.window(after, runs), spent


def worker_drain(store: BenchStore, runs: int, variant: str) -> tuple[float, float]:
    """The same of one worker process at its defaults (``variants.timed_drain``, its CPU
    read by thread)."""
    store.load_runs(runs, stores.SYNC if variant == "worker, def" else stores.NOOP)
    after = store.last_event()
    with workers.WorkerPool(store, 1, 0) as pool:
        pid = pool.procs[0].pid
        before = _reading(store, pid)
        pool.go()
        workers.wait_for(store, pool, after, runs, f"drain, {variant}")
        spent = _spent(store, pid, variant, runs, after, before)
    return runs / store.window(after, runs), spent


def drain_once(store: BenchStore, runs: int, _: int, variant: str) -> tuple[float, float]:
    drain = hand_drain if variant in CALLS else worker_drain
    return drain(store, runs, variant)


def ratios(found: dict[str, Any], figure: str) -> dict[str, tuple[float, float]]:
    """Each of ``RATIOS`` of ``figure`` (``rate`` or ``cpu_us``): the ratio of the
    medians, and the median of the rounds' ratios (a round drains every variant)."""
    result = {}
    for name, variant, reference in RATIOS:
        ours, theirs = found[variant]["runs"][figure], found[reference]["runs"][figure]
        paired = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
        result[name] = (statistics.median(ours) / statistics.median(theirs), paired)
    return result


def main(argv: list[str]) -> None:
    if argv[:1] == ["--drain"]:
        drain_main(argv[1:])
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.handler_floor", description=__doc__)
    parser.add_argument("--runs", type=int, default=20000, help="runs per drain (20000)")
    parser.add_argument("--rounds", type=int, default=5, help="drains of each variant (5)")
    parser.add_argument("--postgres-url")
    parser.add_argument("--out", type=Path, help="also write the figures here, as JSON")
    args = parser.parse_args(argv)
    found = variants.measure(
        "postgres", args.postgres_url, args.runs, args.rounds, 0, VARIANTS, drain_once
    )
    SPLITS[VARIANTS[0]].pop(0)  # the warm-up drain's, which ``measure`` leaves out
    for variant, figures in found.items():
        columns = zip(*SPLITS[variant], strict=True)
        figures.update(zip(FIGURES, map(statistics.median, columns), strict=True))
        print(
            f"{variant:18} {figures['rate']:>8,.0f} runs/s  "
            f"CPU {figures['cpu_us_per_run']:5.1f} µs/run (loop {figures['loop_us']:4.1f}, "
            f"other threads {figures['others_us']:4.1f})  "
            f"{figures['switches']:.2f} voluntary switches/run  "
            f"Postgres {figures['postgres_us']:4.1f} µs/run  "
            f"{figures['claims']:.0f} claims, {figures['completions']:.0f} completions"
        )
    rates, cpu = ratios(found, "rate"), ratios(found, "cpu_us")
    for name, _variant, _reference in RATIOS:
        print(
            f"{name:34} rate {rates[name][0]:.2f} (rounds {rates[name][1]:.2f})  "
            f"CPU {cpu[name][0]:.2f} (rounds {cpu[name][1]:.2f})"
        )
    if args.out:
        found["ratios"] = {"rate": rates, "cpu_us": cpu}
        args.out.write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
