"""Idempotency under real concurrency: separate processes, released together by a barrier,
start runs with one shared idempotency key (and some keys of their own)."""

from __future__ import annotations

import multiprocessing
from typing import Any

from conftest import Store

PROCESSES = 8
CALLS = 100
OWN_KEY_EVERY = 10  # every tenth call also starts a run with a key of its own
SHARED_KEY = "invoice:2024-0001:send"
TYPE = "billing.invoice.send.v1"


def _producer(index: int, url: str, schema: str, barrier: Any, results: Any) -> None:
    from simpleworkflow import Client

    try:
        with Client(url, schema=schema) as client:
            client.list(limit=1)  # connect (and check the schema) before the race begins
            barrier.wait(timeout=60)
            shared, own = [], []
            for call in range(CALLS):
                shared.append(client.start(TYPE, {"from": index}, idempotency_key=SHARED_KEY).id)
                if call % OWN_KEY_EVERY == 0:
                    own.append(client.start(TYPE, idempotency_key=f"own:{index}:{call}").id)
        results.put(("ok", index, shared, own))
    except BaseException as exc:  # report it to the test instead of dying silently
        results.put(("error", index, f"{type(exc).__name__}: {exc}", []))


def test_one_key_makes_one_run_across_processes(store: Store) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
    processes = [
        ctx.Process(target=_producer, args=(i, store.url, store.schema, barrier, results))
        for i in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=240) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    errors = [outcome for outcome in outcomes if outcome[0] != "ok"]
    assert not errors, errors

    shared_ids = {run_id for _, _, shared, _ in outcomes for run_id in shared}
    assert sum(len(shared) for _, _, shared, _ in outcomes) == PROCESSES * CALLS
    assert len(shared_ids) == 1  # every call got the same run back
    (run_id,) = shared_ids

    rows = store.sql("select id, payload from workflow_run where idempotency_key = ?", SHARED_KEY)
    assert len(rows) == 1 and str(rows[0][0]) == run_id
    created = store.sql(
        "select count(*) from workflow_event where workflow_id = ? and event_type = 'created'",
        run_id,
    )
    assert created[0][0] == 1

    own_ids = [run_id for _, _, _, own in outcomes for run_id in own]
    per_process = CALLS // OWN_KEY_EVERY
    assert len(own_ids) == len(set(own_ids)) == PROCESSES * per_process
    assert store.count("workflow_run") == 1 + PROCESSES * per_process
    assert store.count("workflow_event") == 1 + PROCESSES * per_process
