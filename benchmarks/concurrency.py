"""A worker's defaults against its tuned self: ``python -m benchmarks.concurrency [options]``.

One worker process (as in the suite's drain) drains ``--runs`` runs for each variant in
turn, ``--repeat`` times, interleaved so that the machine's other load falls on every
variant alike:

- ``async``: an ``async def`` handler, the worker at its default settings;
- ``async, 100``: the same with 100 handler slots (``concurrency=100``);
- ``def``: a plain ``def`` handler, the worker at its default settings;
- ``def, 100``: the same with 100 handler slots.

Handlers do nothing, or wait ``--handler-ms`` milliseconds each (``asyncio.sleep`` and
``time.sleep``), standing in for I/O. Reported per variant: the median drain rate (runs/s,
by the database's clock) and the worker's CPU time per run (from ``/proc``); then the two
ratios the issue sets targets for: defaults over 100 slots, and ``def`` over ``async def``
at the defaults.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks import stores, variants
from benchmarks.stores import BenchStore
from benchmarks.worker import HANDLER_MS_ENV

VARIANTS = ("async", "async, 100", "def", "def, 100")
#: Each ratio: (name, variant, its reference).
RATIOS = (
    ("defaults / 100 slots (async)", "async", "async, 100"),
    ("defaults / 100 slots (def)", "def", "def, 100"),
    ("def / async, defaults", "def", "async"),
    ("def / async, 100 slots", "def, 100", "async, 100"),
)


def drainer(handler_ms: float) -> variants.Drain:
    env = {HANDLER_MS_ENV: str(handler_ms)} if handler_ms else {}

    def drain_once(store: BenchStore, runs: int, _: int, variant: str) -> tuple[float, float]:
        """(runs/s, worker CPU microseconds per run) of one drain; concurrency 0 is the
        worker's default."""
        kind, _sep, slots = variant.partition(", ")
        store.load_runs(runs, stores.SYNC if kind == "def" else stores.NOOP)
        return variants.timed_drain(store, runs, int(slots or 0), f"drain, {variant}", env)

    return drain_once


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.concurrency", description=__doc__)
    parser.add_argument("--stores", default="postgres")
    parser.add_argument("--runs", type=int, default=5000, help="runs per drain (5000)")
    parser.add_argument("--repeat", type=int, default=3, help="drains of each variant (3)")
    parser.add_argument("--handler-ms", type=float, default=0.0, help="each handler waits (0)")
    parser.add_argument("--postgres-url")
    parser.add_argument("--out", type=Path, help="also write the figures here, as JSON")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    drain = drainer(args.handler_ms)
    for kind in [s.strip() for s in args.stores.split(",") if s.strip()]:
        found = variants.measure(
            kind, args.postgres_url, args.runs, args.repeat, 0, VARIANTS, drain
        )
        results[kind] = found
        for variant, figures in found.items():
            print(
                f"{kind:8} {variant:11} {figures['rate']:>8,.0f} runs/s  "
                f"worker CPU {figures['cpu_us_per_run']:6.1f} µs/run"
            )
        for name, variant, reference in RATIOS:
            ratio = found[variant]["rate"] / found[reference]["rate"]
            results[kind][name] = ratio
            print(f"{kind:8} {name:30} {ratio:.2f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
