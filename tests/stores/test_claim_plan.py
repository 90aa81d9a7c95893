"""The claim walks its partial index, however many runs wait; on SQLite no statement of
a batch reads every run."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from conftest import Store

from simpleworkflow import config
from simpleworkflow.backends.ops import Op, Rows, Statement, Stream
from simpleworkflow.backends.records import Claim
from simpleworkflow.backends.sqlite import matching
from simpleworkflow.models import RunStatus

TYPE = "bench.noop.v1"


def claim_params(type_: str, *, alone: bool = False) -> dict[str, Any]:
    """The parameters a worker's claim of ``type_`` passes to the ``claim`` statement, for
    tests that run it by hand (under EXPLAIN, or beside an uncommitted transaction)."""
    return {
        "worker_id": "w",
        "types": [type_],
        "runtime": "python",
        "limit": 100,
        "lease": 30.0,
        "versions": json.dumps({type_: "1"}),
        "known": [f"{type_}@1"],
        "alone": alone,
    }


@pytest.mark.parametrize("name", ["claim", "claim_plain"])
@pytest.mark.parametrize("alone", [False, True])
@pytest.mark.parametrize("registered", [False, True])
def test_the_claim_reads_the_claim_index_not_every_pending_run(
    store: Store, registered: bool, alone: bool, name: str
) -> None:
    if store.kind != "postgres":
        pytest.skip("a Postgres plan")
    backend = store.backend()
    with store.client() as client:
        for _ in range(20):
            client.start_many([(TYPE, {}) for _ in range(1000)])
    if registered:  # what a worker does at start; it once misled the planner
        backend.execute(backend.register_types([TYPE], "python"))
    params = claim_params(TYPE, alone=alone)
    with psycopg.connect(store.url) as conn:
        conn.execute(f'analyze "{store.schema}".workflow_run'.encode())
        rows = conn.execute(("explain " + backend.q[name]).encode(), params).fetchall()
        # The plan a worker's claim runs with (claim_settings): made for any parameters.
        numbered = re.sub(
            r"%\((\w+)\)s", lambda m: f"${list(params).index(m[1]) + 1}", backend.q[name]
        )
        generic = []  # EXPLAIN (GENERIC_PLAN) came with Postgres 16
        if conn.info.server_version >= 160000:
            generic = conn.execute(("explain (generic_plan) " + numbered).encode()).fetchall()
        conn.rollback()
    backend.close()
    for found in (rows, generic) if generic else (rows,):
        plan = "\n".join(row[0] for row in found)
        assert "Index Scan using idx_workflow_run_claim" in plan, plan
        # Suspects (runs rescued from dead workers) are looked for in their own small index.
        assert "Index Scan using idx_workflow_run_suspects" in plan, plan
        assert "Seq Scan on workflow_run" not in plan, plan


# Statements a worker runs for the batches it claims, extends and completes, with the
# follow-ups SQLite runs after them. Each must find its rows by index, not read through
# workflow_run: the parent wake-up once read every pending run (the drain slowed with the
# backlog), and succeed_runs every leased run against every outcome.
SQLITE_BATCH_STATEMENTS = [
    "claim",
    "claim_then_1_events",
    "claim_then_2_clear_waits",
    "heartbeat",
    "succeed_runs",
    "succeed_runs_then_1_events",
    "succeed_runs_then_2_wake_parents",
    "fail_runs",
    "fail_runs_then_1_events",
    "fail_runs_then_2_wake_parents",
    "release_runs",
    "suspend_runs",
    "suspend_runs_then_events",
    "cancel_run_then_2_wake_parents",
    "wake_suspended",
    "wake_for_signal",
    "get_runs_by_keys",  # not a worker's: start_many's look-up of keys already taken
]


@contextlib.contextmanager
def sqlite_with_runs(
    store: Store, analyzed: bool
) -> Iterator[tuple[dict[str, str], sqlite3.Connection]]:
    """The store's queries and a connection to its file, after 2,000 runs were started
    (and ANALYZE run, if ``analyzed``). SQLite only."""
    if store.kind != "sqlite":
        pytest.skip("a SQLite plan")
    backend = store.backend()
    with store.client() as client:
        client.start_many([(TYPE, {}) for _ in range(2000)])
    backend.close()
    lite = sqlite3.connect(config.sqlite_path(store.url))
    lite.create_function("json_contains", 2, matching.contains_json, deterministic=True)
    try:
        if analyzed:
            lite.execute("analyze")
        yield backend.q, lite
    finally:
        lite.close()


@pytest.mark.parametrize("analyzed", [False, True])
def test_no_sqlite_batch_statement_reads_every_run(store: Store, analyzed: bool) -> None:
    with sqlite_with_runs(store, analyzed) as (queries, lite):
        names = [name for name in SQLITE_BATCH_STATEMENTS if name in queries]
        assert names == SQLITE_BATCH_STATEMENTS, "a statement was renamed: update this list"
        for name in names:
            sql = queries[name]
            params = {param: "[]" for param in re.findall(r"(?<!:):(\w+)", sql)}
            rows = lite.execute("explain query plan " + sql, params).fetchall()
            plan = [str(row[3]) for row in rows]
            scans = [step for step in plan if re.match(r"SCAN (workflow_run|r|c)\b", step)]
            assert not scans, f"{name} reads through workflow_run:\n" + "\n".join(plan)
            if name == "claim":  # suspects: never by walking every due run
                assert "SCAN s USING INDEX idx_workflow_run_suspects" in plan, plan


@pytest.mark.parametrize("analyzed", [False, True])
def test_the_sqlite_version_report_reads_only_versioned_runs(store: Store, analyzed: bool) -> None:
    """unknown_versions holds the worker's one SQLite connection while it runs."""
    with sqlite_with_runs(store, analyzed) as (queries, lite):
        params = {"types": json.dumps([TYPE]), "known": json.dumps([f"{TYPE}@1"])}
        rows = lite.execute("explain query plan " + queries["unknown_versions"], params)
        plan = [str(row[3]) for row in rows.fetchall()]
    assert any("USING INDEX idx_workflow_run_versioned" in step for step in plan), plan


def test_the_postgres_version_report_reads_only_versioned_runs(store: Store) -> None:
    """unknown_versions runs beside the claims: it must not count every due run."""
    if store.kind != "postgres":
        pytest.skip("a Postgres plan")
    with store.client() as client:
        for _ in range(20):
            client.start_many([(TYPE, {}) for _ in range(1000)])
    backend = store.backend()
    params = {"types": [TYPE], "known": [f"{TYPE}@1"]}
    with psycopg.connect(store.url) as conn:
        conn.execute(f'analyze "{store.schema}".workflow_run'.encode())
        rows = conn.execute(("explain " + backend.q["unknown_versions"]).encode(), params)
        plan = "\n".join(row[0] for row in rows.fetchall())
    backend.close()
    assert "idx_workflow_run_versioned" in plan, plan
    assert "idx_workflow_run_claim" not in plan and "Seq Scan" not in plan, plan


RUN_ID = "0190f000-0000-7000-8000-000000000000"
# Statements that wake a suspended run read its waits (one, or the list of "any"): each
# must still find the run by its primary key or through parent_id, never by reading
# through workflow_run, however many runs wait.
POSTGRES_WAKE_STATEMENTS: dict[str, dict[str, object]] = {
    "wake_for_signal": {"id": RUN_ID, "event": "go", "payload": "{}"},
    "wake_suspended": {"ids": [RUN_ID]},
    "succeed_runs": {"items": json.dumps([{"id": RUN_ID, "token": RUN_ID, "result": "1"}])},
    "fail_runs": {
        "items": json.dumps(
            [{"id": RUN_ID, "token": RUN_ID, "final": True, "delay": 0, "error": "x", "data": {}}]
        )
    },
    "cancel_run": {"id": RUN_ID, "data": "{}"},
}


def test_postgres_wake_ups_find_runs_by_key_whatever_they_wait_for(store: Store) -> None:
    if store.kind != "postgres":
        pytest.skip("a Postgres plan")
    with store.client() as client:
        for _ in range(20):
            client.start_many([(TYPE, {}) for _ in range(1000)])
    waits = {"kind": "any", "waits": [{"kind": "signal", "event": "go"}, {"kind": "child"}]}
    store.sql("update workflow_run set waiting_for = ?", json.dumps(waits))
    backend = store.backend()
    with psycopg.connect(store.url) as conn:
        conn.execute(f'analyze "{store.schema}".workflow_run'.encode())
        plans = {}
        for name, params in POSTGRES_WAKE_STATEMENTS.items():
            rows = conn.execute(("explain " + backend.q[name]).encode(), params).fetchall()
            plans[name] = "\n".join(row[0] for row in rows)
        conn.rollback()
    backend.close()
    for name, plan in plans.items():
        assert "Seq Scan on workflow_run" not in plan, f"{name}:\n{plan}"


def test_a_claim_under_concurrency_limits_walks_the_claim_index_at_a_million_runs(
    store: Store,
) -> None:
    """1,000,000 pending runs over 1,000 keys of a type limited per key and in all, half
    the keys full: the claim still walks its index, stepping over the full keys by a
    hashed look-up, and reads its counters by key."""
    if store.kind != "postgres":
        pytest.skip("a Postgres plan")
    backend = store.backend()
    backend.execute(backend.register_types([TYPE], "python"))
    with psycopg.connect(store.url) as conn:
        schema = f'"{store.schema}".'
        conn.execute(  # no created events: the insert trigger is not what this measures
            b"set local session_replication_role = replica"
        )
        conn.execute(  # so retention_fixed is written here, as the library's inserts do
            (
                f"insert into {schema}workflow_run "
                "(type, concurrency_key, priority, retention_fixed) "
                f"select '{TYPE}', 'customer-' || (i % 1000), i % 3, true "
                "from generate_series(1, 1000000) as i"
            ).encode()
        )
        conn.execute(
            (
                f"insert into {schema}workflow_concurrency "
                "(workflow_name, concurrency_key, taken, capacity, is_full) "
                f"select '{TYPE}', 'customer-' || i, 2 + i, 2, true "
                "from generate_series(0, 999) as i"
            ).encode()
        )
        conn.execute(  # half of them full: their leases not returned
            (
                f"insert into {schema}workflow_concurrency_returned "
                "(workflow_name, concurrency_key, returned) "
                f"select '{TYPE}', 'customer-' || i, i + (i % 2) * 2 "
                "from generate_series(0, 999) as i"
            ).encode()
        )
    backend.execute(backend.set_registry_concurrency(TYPE, 1000, 2))
    params = claim_params(TYPE)
    with psycopg.connect(store.url) as conn:
        conn.execute(f'analyze "{store.schema}".workflow_run'.encode())
        conn.execute(f'analyze "{store.schema}".workflow_concurrency'.encode())
        conn.execute(f'analyze "{store.schema}".workflow_concurrency_returned'.encode())
        rows = conn.execute(("explain " + backend.q["claim"]).encode(), params).fetchall()
        conn.rollback()
    backend.close()
    plan = "\n".join(row[0] for row in rows)
    assert "Index Scan using idx_workflow_run_claim" in plan, plan
    assert "Seq Scan on workflow_run" not in plan, plan
    assert "hashed SubPlan" in plan, plan  # full keys and types: looked up, not probed per run


@pytest.mark.parametrize("count", [1, 2, 3, 7])
@pytest.mark.parametrize("wait_for_disk", [True, False])
def test_a_stream_gives_each_statement_s_rows_in_order_and_fails_as_a_whole(
    store: Store, count: int, wait_for_disk: bool
) -> None:
    """The pipelined driver reads the last statements' rows after the pipeline's Sync
    (one round trip for the claim and its settings): every statement's rows still reach
    ``take`` in order, and a statement that fails undoes those before it."""
    if store.kind != "postgres":
        pytest.skip("SQLite runs a stream's statements one at a time")
    table = f'"{store.schema}".stream_probe'
    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute(f"create table {table} (n int)".encode())

    def numbers(fail: bool) -> Op[list[Rows]]:
        taken: list[Rows] = []
        statements = [
            Statement(f"insert into {table} values (%(n)s) returning n, 'x' as tag", {"n": n})
            for n in range(count)
        ]
        if fail:
            statements.append(Statement("select 1 / (%(zero)s::int) as never", {"zero": 0}))
        yield Stream("-- numbers", statements=iter(statements), take=taken.append)
        return taken

    backend = store.backend()
    expected = [[{"n": n, "tag": "x"}] for n in range(count)]

    async def twice_async() -> list[Rows]:
        try:
            with pytest.raises(psycopg.errors.DivisionByZero):
                await backend.execute_async(numbers(True), wait_for_disk=wait_for_disk)
            return await backend.execute_async(numbers(False), wait_for_disk=wait_for_disk)
        finally:
            await backend.aclose()

    with pytest.raises(psycopg.errors.DivisionByZero):
        backend.execute(numbers(True), wait_for_disk=wait_for_disk)
    assert backend.execute(numbers(False), wait_for_disk=wait_for_disk) == expected
    assert asyncio.run(twice_async()) == expected
    backend.close()
    with psycopg.connect(store.url) as conn:
        kept = conn.execute(f"select n from {table} order by n".encode()).fetchall()
    assert kept == sorted([(n,) for n in range(count)] * 2)


@pytest.mark.parametrize("driven", ["sync", "async"])
def test_a_claimed_run_is_the_run_read_back_field_for_field(store: Store, driven: str) -> None:
    """The claim reads its rows its own way on Postgres (no dicts, times unguarded unless
    one cannot be read): every field of the leased run, ids and times included, and a
    time Python cannot hold, is what a read of the run gives."""
    with store.client() as client:
        parent = client.start(TYPE, {"parent": True})
        run = client.start(
            TYPE,
            {"n": [1, "two", {"three": None}], "text": "naïve ✓ \u00e9", "f": 1.5},
            idempotency_key="key-1",
            priority=7,
            max_attempts=5,
            deadline=timedelta(hours=1),
            retention=timedelta(days=2),
            concurrency_key="customer-9",
        )
        plain = client.start(TYPE)
        store.sql(
            "update workflow_run set parent_id = ?, continued_from = ?, forked_from = ?, "
            "forked_at_step = 'step-2', trace_context = ? where id = ?",
            parent.id,
            parent.id,
            parent.id,
            json.dumps({"traceparent": "00-abc-def-01"}),
            run.id,
        )
        # a time Python cannot hold, written by plain SQL: read, marked, not raised
        spoiled = {"postgres": "294000-01-01 00:00+00", "sqlite": "garbage"}[store.kind]
        store.sql("update workflow_run set deadline = ? where id = ?", spoiled, plain.id)
        backend = store.backend()
        request = Claim(
            worker_id="w-1",
            types=(TYPE,),
            limit=10,
            lease_seconds=30,
            versions={TYPE: "v1"},
            known=(f"{TYPE}@v1",),
        )
        if driven == "sync":
            leases = backend.execute(backend.claim(request))
        else:
            leases = asyncio.run(backend.execute_async(backend.claim(request)))
        assert {lease.run.id for lease in leases} == {parent.id, run.id, plain.id}
        for lease in leases:
            again = client.get(lease.run.id)
            assert dataclasses.asdict(lease.run) == dataclasses.asdict(again)
            assert lease.run == again and isinstance(lease.token, str)
            assert isinstance(lease.claimed_at, datetime)
            assert lease.claimed_at.utcoffset() == timedelta(0)
            assert lease.run.run_at.utcoffset() == timedelta(0)
            assert lease.run.code_version == "v1" and lease.run.status is RunStatus.LEASED
        unreadable = {lease.run.id: set(lease.run.unreadable) for lease in leases}
        assert unreadable == {parent.id: set(), run.id: set(), plain.id: {"deadline"}}
        leased = next(lease.run for lease in leases if lease.run.id == run.id)
        assert (leased.parent_id, leased.continued_from) == (parent.id, parent.id)
        assert leased.retention == timedelta(days=2) and leased.payload["n"][2] == {"three": None}
        assert leased.trace_context == {"traceparent": "00-abc-def-01"}
        assert leased.payload["text"] == "naïve ✓ é" and leased.payload["f"] == 1.5
        backend.close()
