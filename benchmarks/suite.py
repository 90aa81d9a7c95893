"""The whole run: a server, the ceilings, every case on every store, with repeats.

Each case runs ``repeat`` times on a fresh store and reports the median; the backlog
curve loads each size once and drains it ``repeat`` times, topping it up in between.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from benchmarks import backlog, cases, latency, pgbench, report, server, stores
from benchmarks.metrics import BACKLOG_KEPT, backlog_metric
from benchmarks.options import Options
from benchmarks.stores import BenchStore

Case = Callable[[BenchStore, Options], dict[str, float]]
CASES: list[tuple[str, Case]] = [
    ("start one at a time", lambda s, o: cases.start_one(s, o.sizes)),
    ("start_many", lambda s, o: cases.start_many(s, o.sizes)),
    ("drain, 1 process", lambda s, o: cases.drain(s, o.sizes, 1)),
    ("drain, 2 processes", lambda s, o: cases.drain(s, o.sizes, 2)),
    ("drain, 4 processes", lambda s, o: cases.drain(s, o.sizes, 4)),
    ("drain, default concurrency", lambda s, o: cases.drain_default(s, o.sizes)),
    ("drain, 1 process, metrics", lambda s, o: cases.drain_metrics(s, o.sizes)),
    ("steps", lambda s, o: cases.steps(s, o.sizes)),
    ("idle pick-up", lambda s, o: latency.idle_pickup(s, o.samples, o.concurrency)),
    ("signal to resume", lambda s, o: latency.signal_resume(s, o.samples, o.concurrency)),
]


def run(options: Options) -> dict[str, Any]:
    """Run everything and return the results document (see ``report.document``)."""
    started = time.time()
    load_before = report.load_average()
    with _postgres(options) as url, tempfile.TemporaryDirectory(prefix="bench-sqlite-") as tmp:
        ceilings = (
            pgbench.measure(url, server.pgbench_path(), options.pgbench_seconds)
            if url and options.pgbench_seconds > 0
            else None
        )
        versions = {"postgres": stores.postgres_version(url) if url else None}
        results: dict[str, dict[str, list[float]]] = {}
        plans: dict[str, dict[str, str]] = {}
        for kind in options.stores:
            results[kind], plans[kind] = _one_store(kind, url, Path(tmp), options)
        if ceilings is not None and "postgres" in results:
            results["postgres"].update(_pgbench_rows(ceilings))
    return report.document(
        options=options,
        ceilings=ceilings,
        results=results,
        plans=plans,
        versions=versions,
        seconds=time.time() - started,
        load=(load_before, report.load_average()),
    )


def _pgbench_rows(ceilings: pgbench.Ceilings) -> dict[str, list[float]]:
    """The table's pgbench rows, shown in the Postgres column: what the server does with
    the same work when the client is pgbench."""
    rows = {
        "pgbench_start": ceilings.start_tps,
        "pgbench_start_many": ceilings.start_many_tps,
        "pgbench_idle_p50_ms": ceilings.idle_insert_p50_ms,
        "pgbench_idle_p99_ms": ceilings.idle_insert_p99_ms,
    }
    return {name: [value] for name, value in rows.items() if value is not None}


@contextlib.contextmanager
def _postgres(options: Options) -> Iterator[str | None]:
    if options.postgres_url or "postgres" not in options.stores:
        yield options.postgres_url
        return
    with server.private_postgres() as url:
        yield url


def _one_store(
    kind: str, url: str | None, workdir: Path, options: Options
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Every case ``repeat`` times, then the backlog curve with the claim plan at each size."""
    figures: dict[str, list[float]] = defaultdict(list)
    chosen = [(name, case) for name, case in CASES if _chosen(name, options.cases)]
    steps = [(r, name, case) for r in range(options.repeat) for name, case in chosen]
    bar = tqdm(steps, desc=kind, unit="case", disable=None)
    for repeat, name, case in bar:
        bar.set_postfix_str(name)
        store = BenchStore.fresh(kind, url, workdir, options.sqlite_synchronous)
        try:
            found = case(store, options)
        finally:
            store.close()
        for metric, value in found.items():
            figures[metric].append(value)
            tqdm.write(f"{kind:8} {metric:18} {value:12,.3f}   (run {repeat + 1})")
    plans = {}
    # Every size is loaded first, then the sizes are drained in turn, once per repeat:
    # a slow spell of the machine then hits every size alike, not one of them.
    backlogs: dict[int, BenchStore] = {}
    try:
        for size in options.backlogs:
            store = backlogs[size] = BenchStore.fresh(
                kind, url, workdir, options.sqlite_synchronous
            )
            backlog.load_backlog(store, size)
            plans[str(size)] = backlog.claim_plan(store, options.concurrency)
        for repeat in range(options.repeat):
            for size, store in backlogs.items():
                rate = backlog.drain_with_backlog(store, size, options.sizes)
                figures[backlog_metric(size).name].append(rate)
                tqdm.write(f"{kind:8} backlog {size:<10,} {rate:12,.3f}   (run {repeat + 1})")
    finally:
        for store in backlogs.values():
            store.close()
    if len(options.backlogs) > 1:
        medians = [statistics.median(figures[f"backlog_{size}"]) for size in options.backlogs]
        figures[BACKLOG_KEPT.name].append(min(medians) / medians[0])
    return dict(figures), plans


def _chosen(name: str, words: list[str]) -> bool:
    """Whether case ``name`` is among those asked for (every case when none is named)."""
    return not words or any(word in name for word in words)
