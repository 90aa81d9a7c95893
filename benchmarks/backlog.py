"""Drain rate against backlog size, and the plan of the claim at the largest backlog.

For each size a fresh store gets that many due runs of the drained type plus a tenth as
many sleeping ones (pending, due in a day, as ``ctx.sleep`` leaves them); one worker
process then drains ``items`` of them. A claim served by the partial index on claimable
rows should not care how many rows wait behind the ones it takes.
"""

from __future__ import annotations

from typing import Any

import psycopg
from tqdm import tqdm

from benchmarks import stores, workers
from benchmarks.cases import Sizes
from benchmarks.stores import BenchStore
from simpleworkflow.backends.base import Claim
from simpleworkflow.backends.ops import Stream

LOAD_CHUNK = 100_000


def load_backlog(store: BenchStore, size: int) -> None:
    """``size`` due runs and ``size // 10`` sleeping ones of the same type, then ANALYZE.

    ANALYZE stands for the autovacuum a long-lived table has had: the planner should see
    the table as it is, not as it was before the load.
    """
    with tqdm(
        total=size + size // 10, desc=f"load {size:,}", unit="run", leave=False, disable=None
    ) as bar:
        for start in range(0, size, LOAD_CHUNK):
            chunk = min(LOAD_CHUNK, size - start)
            store.load_runs(chunk)
            bar.update(chunk)
        sleeping = size // 10
        for start in range(0, sleeping, LOAD_CHUNK):
            chunk = min(LOAD_CHUNK, sleeping - start)
            store.execute("load_sleeping", type=stores.NOOP, count=chunk)
            bar.update(chunk)
    store.execute("analyze")


def drain_with_backlog(store: BenchStore, size: int, sizes: Sizes) -> float:
    """Drain ``items`` runs off the backlog, then top it up by what was drained."""
    after = store.last_event()
    rate = workers.drain(
        store,
        runs=sizes.items,
        processes=1,
        concurrency=sizes.concurrency,
        label=f"drain, backlog {size:,}",
    )
    store.load_runs(store.successes(after))
    return rate


def claim_plan(store: BenchStore, limit: int) -> str:
    """The plan of the worker's claim statement, as the backend would run it.

    On Postgres with ``EXPLAIN (ANALYZE, BUFFERS)`` inside a transaction that is rolled
    back, so the plan shows real row counts and timings but claims nothing.
    """
    backend = store.backend()
    try:
        claim = Claim(
            worker_id="explain",
            types=(stores.NOOP,),
            limit=limit,
            lease_seconds=30.0,
            runtime="python",
            versions={stores.NOOP: "1"},
            known=(f"{stores.NOOP}@1",),
        )
        statement = next(backend.claim(claim))
        if isinstance(statement, Stream):  # Postgres: claim_settings, then the claim
            statement = list(statement.statements)[-1]
    finally:
        backend.close()
    if store.kind == "postgres":
        with (
            psycopg.connect(store.url, autocommit=True) as conn,
            conn.transaction(force_rollback=True),
        ):
            rows: list[Any] = conn.execute(
                ("explain (analyze, buffers) " + statement.sql).encode(), statement.params
            ).fetchall()
        return "\n".join(str(row[0]) for row in rows)
    import sqlite3

    from simpleworkflow import config

    lite = sqlite3.connect(config.sqlite_path(store.url))
    try:
        rows = lite.execute("explain query plan " + statement.sql, statement.params).fetchall()
    finally:
        lite.close()
    return "\n".join(f"{'  ' * _depth(rows, row)}{row[3]}" for row in rows)


def _depth(rows: list[Any], row: Any) -> int:
    """How deep a row of SQLite's EXPLAIN QUERY PLAN sits (it gives parent ids)."""
    parents = {r[0]: r[1] for r in rows}
    depth, parent = 0, row[1]
    while parent in parents:
        depth, parent = depth + 1, parents[parent]
    return depth
