"""What flow control costs a worker when it does not bind: ``python -m benchmarks.limits``.

One worker process (as in the suite's drain) drains ``--runs`` no-op runs, each started
with one of 100 concurrency keys, for each variant in turn, ``--repeat`` times,
interleaved so that the machine's other load falls on every variant alike:

- ``none``: no limit declared for the type (the claim's limit steps find nothing to do;
  the lease-counting trigger probes an empty counter table);
- ``declared``: a concurrency limit of 1,000,000 for the type and a rate limit of
  1,000,000 a second: every claim locks and reads the type's counter and the rate window,
  every lease end is counted, and nothing is ever held back;
- ``keyed``: ``declared`` and a limit of 1,000,000 per key as well: about a hundred
  counters (one per key) locked and counted per claim of a hundred runs, and counted per
  batch of outcomes (under the type's own counter, locked);
- ``untriggered`` (Postgres): ``none`` with the lease-counting trigger disabled, the drain
  as it was before limits existed, to price the trigger itself (since Postgres 0020 the
  worker's own outcome statements count their lease ends and never call it: this
  variant should match ``none``).

Reported per variant: the median drain rate (runs/s, by the database's clock) and the
median CPU time the worker process spent per run (from ``/proc``).
"""

from __future__ import annotations

import sys

from benchmarks import stores, variants
from benchmarks.stores import BenchStore

KEYS = 100
NOT_BINDING = 1_000_000


def names(kind: str) -> list[str]:
    found = ["none", "declared", "keyed"]
    return [*found, "untriggered"] if kind == "postgres" else found


def declare(store: BenchStore, variant: str) -> None:
    """Set (or clear) the limits of the benchmark's type for ``variant``."""
    with store.client() as client:
        admin = client.admin
        admin.set_runtime(stores.NOOP, "python")
        if variant in ("declared", "keyed"):
            per_key = NOT_BINDING if variant == "keyed" else None
            admin.set_concurrency(stores.NOOP, NOT_BINDING, per_key=per_key)
            admin.set_rate_limit("bench", f"{NOT_BINDING}/s")
            admin.limit_rate(stores.NOOP, "bench")
        else:
            admin.set_concurrency(stores.NOOP, None)
            admin.limit_rate(stores.NOOP, None)
    if store.kind == "postgres":
        store.execute("count_leases_off" if variant == "untriggered" else "count_leases_on")


def load(store: BenchStore, runs: int) -> None:
    with store.client() as client:
        for start in range(0, runs, stores.LOAD_BATCH):
            size = min(stores.LOAD_BATCH, runs - start)
            client.start_many(
                [{"type": stores.NOOP, "concurrency_key": f"k{n % KEYS}"} for n in range(size)]
            )


def drain_once(store: BenchStore, runs: int, concurrency: int, variant: str) -> tuple[float, float]:
    """(runs/s, worker CPU microseconds per run) of one drain."""
    declare(store, variant)
    load(store, runs)
    return variants.timed_drain(store, runs, concurrency, f"drain, limits {variant}")


if __name__ == "__main__":
    variants.main(sys.argv[1:], "python -m benchmarks.limits", __doc__, names, drain_once)
