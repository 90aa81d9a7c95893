"""``Admin.queues()`` on both stores: what is under way, read without a finished run.

It is what every metrics scrape reads (``simpleworkflow.metrics``), so besides its
answer its plan is pinned: index scans only, however many runs have finished.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from conftest import Store
from test_admin import sql_time

from simpleworkflow import Client, config
from simpleworkflow.admin import Queues, QueueStats

INVOICE = "billing.invoice.v1"
REFUND = "billing.refund.v1"


def lease(store: Store, run_id: str, worker: str, seconds: float) -> None:
    """Make a run leased by ``worker`` until ``seconds`` from now (negative: expired)."""
    until = sql_time(store, datetime.now(UTC) + timedelta(seconds=seconds))
    store.sql(
        "update workflow_run set status = 'leased', leased_by = ?, lease_until = ? where id = ?",
        worker,
        until,
        run_id,
    )


def arrange(store: Store, client: Client) -> None:
    """INVOICE: two due (one an hour late), one for tomorrow, one asleep, three leased by
    two workers (one lease expired), and one run finished, failed, cancelled or deleted
    each; REFUND: registered and paused, nothing under way."""
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    client.start(INVOICE, run_at=hour_ago)
    client.start(INVOICE)
    client.start(INVOICE, delay="1d")
    asleep = client.start(INVOICE).id
    store.sql(
        "update workflow_run set waiting_for = ?, run_at = ? where id = ?",
        json.dumps({"kind": "sleep", "step": "nap"}),
        sql_time(store, datetime.now(UTC) + timedelta(days=1)),
        asleep,
    )
    for worker, seconds in (("w1", 30), ("w1", -5), ("w2", 30)):
        lease(store, client.start(INVOICE).id, worker, seconds)
    for status in ("succeeded", "failed"):
        run = client.start(INVOICE)
        store.sql("update workflow_run set status = ? where id = ?", status, run.id)
    client.cancel(client.start(INVOICE).id)
    client.delete(client.start(INVOICE, run_at=hour_ago - timedelta(hours=1)).id)
    client.admin.set_runtime(REFUND, "go")
    client.admin.pause(REFUND)


def expected_invoice(oldest_due: float) -> QueueStats:
    return QueueStats(
        type=INVOICE,
        pending=4,
        due=2,
        oldest_due=oldest_due,
        leased=3,
        expired_leases=1,
        registered=False,
        paused=False,
    )


def check(queues: Queues) -> None:
    invoice, refund = queues.types
    assert invoice.oldest_due is not None and 3600 <= invoice.oldest_due < 3600 + 300
    assert invoice == expected_invoice(invoice.oldest_due)
    assert refund == QueueStats(REFUND, 0, 0, None, 0, 0, registered=True, paused=True)
    assert queues.holders == {"w1": 2, "w2": 1}
    assert queues.workers == 2
    shown = json.loads(json.dumps(queues.to_dict()))
    assert shown["workers"] == 2 and shown["types"][1]["paused"] is True


def test_queues_count_what_is_under_way_and_nothing_finished(store: Store, client: Client) -> None:
    arrange(store, client)
    check(client.admin.queues())


def test_the_async_admin_reads_the_same_queues(store: Store, client: Client) -> None:
    arrange(store, client)

    async def read() -> Queues:
        async with store.async_client() as aclient:
            return await aclient.admin.queues()

    check(asyncio.run(read()))


def test_an_empty_store_has_no_queues(client: Client) -> None:
    assert client.admin.queues() == Queues(types=(), holders={})


def test_queues_read_only_indexes_on_postgres(store: Store) -> None:
    """20,000 finished runs and a few hundred under way: no scan of the runs' table."""
    if store.kind != "postgres":
        pytest.skip("a Postgres plan")
    with store.client() as client:
        for n in range(20):
            client.start_many([(f"load.type{n % 4}.v1", {}) for _ in range(1000)])
        store.sql("update workflow_run set status = 'succeeded'")
        client.start_many([(f"load.type{n % 4}.v1", {}) for n in range(300)])
        for run in client.start_many([("load.type0.v1", {}) for _ in range(20)]):
            lease(store, run.id, "w1", 30)
        with psycopg.connect(store.url, autocommit=True) as conn:
            conn.execute(f'analyze "{store.schema}".workflow_run'.encode())
            rows = conn.execute(("explain " + client.backend.q["live_runs"]).encode()).fetchall()
        queues = client.admin.queues()
    assert [(s.pending, s.leased) for s in queues.types] == [(75, 20), (75, 0), (75, 0), (75, 0)]
    plan = "\n".join(row[0] for row in rows)
    scans = [line for line in plan.splitlines() if re.search(r"\bon workflow_run\b", line)]
    assert len(scans) == 2 and all("Index" in line for line in scans), plan
    assert "idx_workflow_run_lease_expiry" in plan, plan


def test_queues_read_only_indexes_on_sqlite(store: Store) -> None:
    if store.kind != "sqlite":
        pytest.skip("a SQLite plan")
    with store.client() as client:
        client.start_many([(INVOICE, {}) for _ in range(2000)])
        store.sql("update workflow_run set status = 'succeeded'")
        client.start_many([(INVOICE, {}) for _ in range(10)])
        queries = client.backend.q
    lite = sqlite3.connect(config.sqlite_path(store.url))
    try:
        lite.execute("analyze")
        rows = lite.execute("explain query plan " + queries["live_runs"]).fetchall()
    finally:
        lite.close()
    plan = [str(row[3]) for row in rows]
    runs = [step for step in plan if "workflow_run " in step or step.endswith("workflow_run")]
    assert runs and all("USING" in step and "INDEX" in step for step in runs), plan
