"""The claim walks its partial index, however many runs wait (Postgres)."""

from __future__ import annotations

import json

import psycopg
import pytest
from conftest import Store

TYPE = "bench.noop.v1"


@pytest.mark.parametrize("registered", [False, True])
def test_the_claim_reads_the_claim_index_not_every_pending_run(
    store: Store, registered: bool
) -> None:
    if store.kind != "postgres":
        pytest.skip("a Postgres plan")
    backend = store.backend()
    with store.client() as client:
        for _ in range(20):
            client.start_many([(TYPE, {}) for _ in range(1000)])
    if registered:  # what a worker does at start; it once misled the planner
        backend.execute(backend.register_types([TYPE], "python"))
    params = {
        "worker_id": "w",
        "types": [TYPE],
        "runtime": "python",
        "limit": 100,
        "lease": 30.0,
        "versions": json.dumps({TYPE: "1"}),
        "known": [f"{TYPE}@1"],
    }
    with psycopg.connect(store.url) as conn:
        conn.execute(f'analyze "{store.schema}".workflow_run'.encode())
        rows = conn.execute(("explain " + backend.q["claim"]).encode(), params).fetchall()
        conn.rollback()
    backend.close()
    plan = "\n".join(row[0] for row in rows)
    assert "Index Scan using idx_workflow_run_claim" in plan, plan
    assert "Seq Scan on workflow_run" not in plan, plan
