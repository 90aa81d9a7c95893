"""How long a slot sits idle between two handlers: ``python -m benchmarks.slot_gaps``.

A drain of no-op handlers, ``async def`` and plain ``def`` alternated, at a worker's
default settings unless ``--concurrency`` says otherwise. The worker notes when each
handler call began and returned (``benchmarks.worker``'s ``GAPS_ENV``); the calls are then
laid on the slots in order, each taking the slot that freed first (as ``Slots`` hands a
freed slot to the run that has waited longest), and a call's gap is the time from that
slot's previous call's return to its start. With no-op handlers nearly all of a drain's
time is gaps, so ``gap x runs / slots`` is about the drain's time: what the figures tell
is how the gaps of the two kinds of handler differ, and which gaps differ (the short
ones, a slot handed from a returned run to one already claimed, or the long ones, a slot
waiting for a claim). Each hand-over is split where the worker entered the observers'
``around_attempt`` for the next call (a benchmark observer notes it): before, the loop's
part (the returned call's result reaching the loop, the slot given back, the next run's
task resumed); after, the call's wait to begin (for a ``def`` handler, a handler thread
waking to take it).
"""

from __future__ import annotations

import argparse
import heapq
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import stores, workers
from benchmarks.profile import _store
from benchmarks.worker import GAPS_ENV

#: Gaps up to this (seconds) count as a hand-over to a run already claimed.
HAND_OVER = 0.002


def gaps(calls: list[tuple[float, float, float]], slots: int) -> list[tuple[float, float]]:
    """Each call's gap after the previous call of the slot it took (its first: none),
    split at the moment the worker entered ``around_attempt`` for it: the loop's part
    (from that return to the worker's reaching the call) and the call's wait to begin
    (for a ``def`` handler, the thread's taking it)."""
    free: list[float] = []
    found = []
    for began, entered, returned in sorted((b, e, r) for e, b, r in calls):
        if len(free) < slots:
            heapq.heappush(free, returned)
            continue
        freed = heapq.heapreplace(free, returned)
        found.append((entered - freed, began - entered))
    return found


def _quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.9)]


def describe(calls: list[tuple[float, float, float]], slots: int) -> dict[str, float]:
    """The figures of one drain (seconds, except counts and fractions)."""
    parts = gaps(calls, slots)
    found = [loop + wait for loop, wait in parts]
    wall = max(r for _, _, r in calls) - min(b for _, b, _ in calls)
    short = [(loop, wait) for loop, wait in parts if loop + wait <= HAND_OVER]
    figures = {
        "rate": len(calls) / wall,
        "wall": wall,
        "mean": statistics.fmean(found),
        "short": len(short) / len(found),
        "short_time": sum(loop + wait for loop, wait in short) / slots,
        "long_time": sum(gap for gap in found if gap > HAND_OVER) / slots,
        "occupancy": sum(r - b for _, b, r in calls) / (wall * slots),
    }
    figures["median"], figures["p90"] = _quantiles(found)
    short_gaps = [loop + wait for loop, wait in short] or [0.0]
    figures["short_median"], figures["short_p90"] = _quantiles(short_gaps)
    figures["loop_median"], figures["loop_p90"] = _quantiles([p[0] for p in short] or [0.0])
    figures["wait_median"], figures["wait_p90"] = _quantiles([p[1] for p in short] or [0.0])
    return figures


def drain(store: stores.BenchStore, runs: int, concurrency: int, sync: bool) -> dict[str, float]:
    store.load_runs(runs, stores.SYNC if sync else stores.NOOP)
    if store.kind == "postgres":
        store.execute("analyze")
    after = store.last_event()
    with tempfile.TemporaryDirectory(prefix="bench-gaps-") as tmp:
        path = Path(tmp) / "calls.json"
        with workers.WorkerPool(store, 1, concurrency, env={GAPS_ENV: str(path)}) as pool:
            pool.go()
            workers.wait_for(store, pool, after, runs, "drain")
        calls = [(e, b, r) for e, b, r in json.loads(path.read_text())]
    return describe(calls, concurrency or 10)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.slot_gaps", description=__doc__)
    parser.add_argument("--store", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=0, help="0: the worker's default (10)")
    parser.add_argument("--postgres-url")
    args = parser.parse_args(argv)
    with _store(args.store, args.postgres_url) as store:
        for round in range(args.rounds):
            for sync in (False, True):
                began = time.monotonic()
                found = drain(store, args.runs, args.concurrency, sync)
                kind = "def      " if sync else "async def"
                print(
                    f"round {round + 1} {kind}: {found['rate']:,.0f}/s, drain "
                    f"{found['wall']:.2f} s; gaps median {_us(found, 'median')}, mean "
                    f"{found['mean'] * 1e6:.0f} µs; hand-overs (<= {HAND_OVER * 1e3:g} ms) "
                    f"{found['short']:.0%} of gaps, {found['short_time']:.2f} s a slot, "
                    f"median {_us(found, 'short_median')}, of which the loop "
                    f"{_us(found, 'loop_median')} and the call's wait to begin "
                    f"{_us(found, 'wait_median')}; longer gaps {found['long_time']:.2f} s "
                    f"a slot; handlers' occupancy {found['occupancy']:.1%} "
                    f"({time.monotonic() - began:.0f} s)",
                    flush=True,
                )


def _us(found: dict[str, float], name: str) -> str:
    """A median and the p90 beside it, in µs."""
    p90 = name.replace("median", "p90")
    return f"{found[name] * 1e6:.0f} µs (p90 {found[p90] * 1e6:.0f})"


if __name__ == "__main__":
    main(sys.argv[1:])
