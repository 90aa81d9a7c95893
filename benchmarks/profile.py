"""Where the time goes: ``python -m benchmarks.profile start|drain [options]``.

``start`` runs ``Client.start`` in a loop under cProfile in this process. ``drain`` runs
one worker process under cProfile (see ``benchmarks.worker``) while it drains runs, and
adds what a profile of one process cannot show: the CPU seconds the worker and the
Postgres server each spent (read from ``/proc``, so only for a server on this machine),
how the worker's CPU splits between its event loop's thread and the others (the handler
threads of plain ``def`` handlers, the pools'), its threads' context switches, and how
many claim and completion transactions the drain took. cProfile slows Python
down, so read its output for the ranking of costs, not for the rates.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks import server, stores, workers
from benchmarks.stores import BenchStore
from benchmarks.worker import PROFILE_ENV


def profile_start(store: BenchStore, runs: int, top: int) -> None:
    with store.client() as client:
        for _ in range(20):
            client.start(stores.NOOP, {})
        # First without the profiler, for the CPU each side spends on a start.
        servers = _server_pids(store)
        cpu_before, own_before, began = _cpu(servers), time.process_time(), time.perf_counter()
        for _ in range(runs):
            client.start(stores.NOOP, {})
        elapsed, own = time.perf_counter() - began, time.process_time() - own_before
        server = sum(cpu - cpu_before.get(pid, 0.0) for pid, cpu in _cpu(servers).items())
        print(f"{runs} starts in {elapsed:.2f}s ({runs / elapsed:,.0f}/s); CPU per start: "
              f"client {own / runs * 1e6:.0f} µs", end="")  # fmt: skip
        print(f", Postgres server {server / runs * 1e6:.0f} µs" if servers else "")
        profiler = cProfile.Profile()
        began = time.perf_counter()
        profiler.enable()
        for _ in range(runs):
            client.start(stores.NOOP, {})
        profiler.disable()
        elapsed = time.perf_counter() - began
    print(f"{runs} starts in {elapsed:.2f}s under cProfile ({runs / elapsed:,.0f}/s)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def profile_drain(
    store: BenchStore,
    runs: int,
    concurrency: int,
    steps: int,
    top: int,
    save: str | None = None,
    sync: bool = False,
    plain: bool = False,
) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        stats_path = Path(tmp) / "worker.prof"
        if steps:
            store.load_runs(runs, stores.STEPS, f'{{"steps": {steps}}}')
        else:
            store.load_runs(runs, stores.SYNC if sync else stores.NOOP)
        if store.kind == "postgres":
            store.execute("analyze")  # as autovacuum would: plans as in production
        after = store.last_event()
        env = {} if plain else {PROFILE_ENV: str(stats_path)}
        pool = workers.WorkerPool(store, 1, concurrency, env=env)
        with pool:
            pids = [proc.pid for proc in pool.procs] + _server_pids(store)
            cpu_before, began = _cpu(pids), time.monotonic()
            switched = _switches(pool.procs[0].pid)
            threads_before = _thread_cpu(pool.procs[0].pid)
            pool.go()
            workers.wait_for(store, pool, after, runs, "drain")
            wall = time.monotonic() - began
            threads_after = _thread_cpu(pool.procs[0].pid)
            switches = [n - m for n, m in zip(_switches(pool.procs[0].pid), switched, strict=True)]
            # Backends that connected during the drain count in full.
            cpu_after = _cpu([proc.pid for proc in pool.procs] + _server_pids(store))
        rate = runs / store.window(after, runs)
        claims, completions = store.execute("batches", after=after)[0]
        worker_pid = pool.procs[0].pid
        under = "" if plain else " under cProfile"
        print(f"{runs} runs ({steps} steps each) drained at {rate:,.0f}/s{under}")
        print(
            f"wall {wall:.2f}s; CPU: worker {cpu_after[worker_pid] - cpu_before[worker_pid]:.2f}s",
            end="",
        )
        if store.kind == "postgres":
            server_cpu = sum(
                cpu_after[p] - cpu_before.get(p, 0.0) for p in cpu_after if p != worker_pid
            )
            print(f", Postgres server {server_cpu:.2f}s", end="")
        print(f"\n{claims} claim transactions, {completions} completion transactions")
        print(f"worker context switches: {switches[0]} voluntary, {switches[1]} involuntary")
        loop, others = (a - b for a, b in zip(threads_after, threads_before, strict=True))
        print(f"worker CPU by thread: event loop {loop:.2f}s, other threads {others:.2f}s")
        if plain:
            return
        pstats.Stats(str(stats_path)).sort_stats("tottime").print_stats(top)
        if save is not None:  # for pstats' callers and callees
            shutil.copyfile(stats_path, save)


def _server_pids(store: BenchStore) -> list[int]:
    if store.kind != "postgres":
        return []
    return [int(row[0]) for row in store.execute("server_pids")]


def _cpu(pids: list[int]) -> dict[int, float]:
    """User plus system CPU seconds of each process still alive."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            found[pid] = (int(fields[11]) + int(fields[12])) / tick
    return found


def _thread_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of ``pid``'s main thread (a worker's event loop), and of its other
    threads now (one that ended is not counted, as in :func:`_switches`); from
    ``schedstat``, in nanoseconds: ``stat``'s clock ticks would round each of ten
    handler threads' few milliseconds down to nothing."""
    found = [0.0, 0.0]
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            ran = int((task / "schedstat").read_text().split()[0]) / 1e9
            found[task.name != str(pid)] += ran
    return found[0], found[1]


def _switches(pid: int) -> tuple[int, int]:
    """Voluntary and involuntary context switches of every thread ``pid`` has now (a
    thread that ended is not counted: the worker's pools keep theirs until it stops)."""
    found = [0, 0]
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        with contextlib.suppress(OSError):
            for line in status.read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    found[0] += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    found[1] += int(line.split()[1])
    return found[0], found[1]


@contextlib.contextmanager
def _store(kind: str, url: str | None) -> Iterator[BenchStore]:
    with contextlib.ExitStack() as stack:
        if kind == "postgres" and url is None:
            url = stack.enter_context(server.private_postgres())
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-profile-"))
        store = BenchStore.fresh(kind, url, Path(workdir))
        stack.callback(store.close)
        yield store


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    parser.add_argument("what", choices=["start", "drain"])
    parser.add_argument("--store", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--steps", type=int, default=0, help="journaled steps per run (drain)")
    parser.add_argument("--top", type=int, default=20, help="functions to list")
    parser.add_argument("--postgres-url")
    parser.add_argument("--save", help="keep the worker's profile (drain) in this file")
    parser.add_argument(
        "--sync", action="store_true", help="plain def handlers (drain; cProfile sees the loop)"
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="no cProfile (drain): the transactions and CPU as its timing really batches them",
    )
    args = parser.parse_args(argv)
    with _store(args.store, args.postgres_url) as store:
        if args.what == "start":
            profile_start(store, args.runs, args.top)
        else:
            profile_drain(
                store,
                args.runs,
                args.concurrency,
                args.steps,
                args.top,
                args.save,
                args.sync,
                args.plain,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
