"""Retention on both stores: which runs a sweep deletes, which it never does, and how.

Runs are put in the states an operator meets (finished long ago, sleeping, waiting for a
signal or a child, leased by a live worker) and made old by rewriting their times with
plain SQL; what a sweep leaves is checked in the tables themselves. Sweeps run through
the admin facade, in processes of their own where the claim is about several at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from conftest import Store, poller_thread
from worker_app import wait_until

from simpleworkflow import App, Client, RunStatus, cli, config, errors, observe, retention
from simpleworkflow.admin import Admin
from simpleworkflow.backends import Backend
from simpleworkflow.backends.ops import ATOMIC, Op, Rows
from simpleworkflow.cli import worker as worker_command
from simpleworkflow.worker import WorkerOptions
from simpleworkflow.worker.sweeper import Sweeper

ORDER = "shop.order.v1"
AUDIT = "shop.audit.v1"
DAY = 86400.0


@pytest.fixture(autouse=True)
def _no_retention_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults, whatever the environment of the test run says."""
    monkeypatch.delenv(retention.DEFAULT_ENV, raising=False)
    monkeypatch.delenv(retention.MAX_ENV, raising=False)


@pytest.fixture
def admin(client: Client) -> Admin:
    return client.admin


def sql_time(store: Store, moment: datetime) -> str:
    """A time as each store keeps it, for arranging ages with plain SQL."""
    if store.kind == "sqlite":
        return moment.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "milliseconds")
    return moment.isoformat()


def finish(store: Store, run_id: str, *, ago: float, status: str = "succeeded") -> None:
    """Make a run look as if it finished (``status``) ``ago`` seconds ago."""
    then = sql_time(store, datetime.now(UTC) - timedelta(seconds=ago))
    store.sql(
        "update workflow_run set status = ?, updated_at = ?, created_at = ? where id = ?",
        status,
        then,
        then,
        run_id,
    )


def age(store: Store, run_id: str, *, ago: float) -> None:
    """Make a run of any status look unchanged for ``ago`` seconds (and created then)."""
    then = sql_time(store, datetime.now(UTC) - timedelta(seconds=ago))
    store.sql(
        "update workflow_run set updated_at = ?, created_at = ? where id = ?", then, then, run_id
    )


def left(store: Store) -> set[str]:
    return {str(row[0]) for row in store.sql("select id from workflow_run")}


# -- which retention applies ----------------------------------------------------------------


@pytest.mark.parametrize("level", ["run", "type", "default"])
def test_a_run_one_second_inside_its_retention_survives_and_one_outside_goes(
    store: Store, client: Client, admin: Admin, level: str
) -> None:
    keep = 7 * DAY
    options: dict[str, Any] = {"retention": "7d"} if level == "run" else {}
    if level == "type":
        admin.set_runtime(ORDER, "python")
        admin.set_retention(ORDER, timedelta(days=7))
    inside, outside = client.start(ORDER, **options), client.start(ORDER, **options)
    finish(store, inside.id, ago=keep - 1)
    finish(store, outside.id, ago=keep + 1)
    default = "7d" if level == "default" else None
    report = admin.sweep(default_retention=default)
    assert (report.runs, report.total, report.dry_run) == ({ORDER: 1}, 1, False)
    assert left(store) == {inside.id}


def test_the_runs_own_retention_beats_its_types_which_beats_the_default(
    store: Store, client: Client, admin: Admin
) -> None:
    admin.set_runtime(AUDIT, "python")
    admin.set_retention(AUDIT, "10d")
    runs = {
        # (type, its own retention, finished days ago): deleted?
        (AUDIT, "2d", 3): True,  # its own, shorter than its type's
        (AUDIT, "20d", 11): False,  # its own, longer than its type's
        (AUDIT, None, 11): True,  # its type's
        (AUDIT, None, 9): False,
        (ORDER, None, 31): True,  # the default (30 days)
        (ORDER, None, 29): False,
        (ORDER, "40d", 31): False,  # its own, longer than the default
    }
    ids = {}
    for key in runs:
        type_name, own, days = key
        run = client.start(type_name, retention=own)
        finish(store, run.id, ago=days * DAY)
        ids[key] = run.id
    report = admin.sweep()
    assert report.runs == {AUDIT: 2, ORDER: 1}
    assert left(store) == {ids[key] for key, goes in runs.items() if not goes}
    # The type back to the default: its runs keep the 10 days they started with.
    admin.set_retention(AUDIT, None)
    assert [e.retention for e in admin.registry()] == [None]
    assert admin.sweep(default_retention="5d").runs == {ORDER: 1}
    assert left(store) == {ids[(AUDIT, "20d", 11)], ids[(AUDIT, None, 9)], ids[(ORDER, "40d", 31)]}


def start_by(path: str, store: Store, client: Client) -> str:
    """A run of AUDIT started without a retention of its own, by ``path``."""
    if path == "start":
        return client.start(AUDIT).id
    if path == "start_many":
        return client.start_many([(AUDIT, {})])[0].id
    if path == "debounce":
        return client.start(AUDIT, debounce={"key": str(uuid4()), "window": "1h"}).id
    if path == "publish":
        return client.publish("audits.made").runs[0].id
    if path == "transaction":  # in the application's own transaction
        if store.kind == "sqlite":
            lite = sqlite3.connect(config.sqlite_path(store.url))
            with contextlib.closing(lite), lite:
                return client.start(AUDIT, connection=lite).id
        options = f"-c search_path={store.schema}"
        with psycopg.connect(store.url, options=options) as conn:
            return client.start(AUDIT, connection=conn).id
    # another runtime's producer, in plain SQL
    return str(store.sql("insert into workflow_run (type) values (?) returning id", AUDIT)[0][0])


@pytest.mark.parametrize(
    "path", ["start", "start_many", "debounce", "publish", "transaction", "sql"]
)
def test_a_run_keeps_the_retention_its_type_had_when_it_started(
    store: Store, client: Client, admin: Admin, path: str
) -> None:
    admin.set_runtime(AUDIT, "python")
    admin.subscribe("audits.*", AUDIT)
    unset = start_by(path, store, client)  # the type has none: the default
    admin.set_retention(AUDIT, "10d")
    ten = start_by(path, store, client)
    admin.set_retention(AUDIT, "2d")
    two = start_by(path, store, client)
    admin.set_retention(AUDIT, "30d")  # the type's retention now
    assert [client.get(i).retention for i in (unset, ten, two)] == [
        None,
        timedelta(days=10),
        timedelta(days=2),
    ]
    for run_id in (unset, ten, two):
        finish(store, run_id, ago=5 * DAY)
    # Each run by the retention it started with: neither sooner (unset and ten: 5 days
    # are more than the type's 1 now) nor later (two: 5 days are less than the 30 the
    # type had until now).
    admin.set_retention(AUDIT, "1d")
    assert admin.sweep(default_retention="7d").runs == {AUDIT: 1}
    assert left(store) == {unset, ten}
    finish(store, unset, ago=8 * DAY)  # past the default, whatever its type says
    finish(store, ten, ago=11 * DAY)
    assert admin.sweep(default_retention="7d").runs == {AUDIT: 2}
    assert left(store) == set()


def test_a_child_run_keeps_the_retention_its_type_had_when_its_parent_started_it(
    store: Store, client: Client, admin: Admin
) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow(AUDIT)
    def child(payload: Any) -> str:
        return "audited"

    @app.workflow(ORDER)
    async def parent(payload: Any, ctx: Any) -> str:
        return str(await ctx.wait_child(await ctx.start_child(AUDIT, {})))

    admin.set_runtime(AUDIT, "python")
    admin.set_retention(AUDIT, "10d")
    run = client.start(ORDER)
    with poller_thread(app, poll_interval=0.1):
        assert client.wait(run.id, timeout=30).status is RunStatus.SUCCEEDED
    admin.set_retention(AUDIT, "1d")
    (child_id,) = [
        str(row[0]) for row in store.sql("select id from workflow_run where type = ?", AUDIT)
    ]
    assert client.get(child_id).retention == timedelta(days=10)
    assert client.get(run.id).retention is None  # its type has none: the default


def test_runs_from_before_the_retention_was_fixed_follow_their_type_as_before(
    store: Store, client: Client, admin: Admin
) -> None:
    admin.set_runtime(AUDIT, "python")
    old, new = client.start(AUDIT), client.start(AUDIT)
    store.sql(  # as a run created before the migration is
        "update workflow_run set retention_fixed = ? where id = ?",
        False,
        old.id,
    )
    for run in (old, new):
        finish(store, run.id, ago=5 * DAY)
    admin.set_retention(AUDIT, "2d")  # after both started
    assert admin.sweep().runs == {AUDIT: 1}  # the old run follows its type, the new not
    assert left(store) == {new.id}


def test_the_retention_asked_at_start_is_stored_and_read_back(client: Client) -> None:
    run = client.start(ORDER, retention="90d")
    assert run.retention == timedelta(days=90) == client.get(run.id).retention
    assert run.to_dict()["retention"] == 90 * DAY
    assert client.get(client.start(ORDER).id).retention is None
    many = client.start_many([{"type": ORDER, "retention": 3600}, (ORDER, {})])
    assert [client.get(r.id).retention for r in many] == [timedelta(hours=1), None]


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("400d", errors.InvalidArgument, r"retention must be at most 365 days \(the ceiling"),
        ("soon", errors.InvalidArgument, "cannot read retention 'soon'"),
        (-1, errors.InvalidArgument, "retention must be a finite, non-negative duration"),
        (True, errors.InvalidArgument, "retention must be a duration, not a boolean"),
    ],
)
def test_a_bad_retention_at_start_is_refused_and_nothing_is_stored(
    store: Store, client: Client, value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        client.start(ORDER, retention=value)
    with pytest.raises(error, match=message):
        client.start_many([(ORDER, {}), {"type": ORDER, "retention": value}])
    assert store.count() == 0


def test_the_ceiling_refuses_longer_retentions_and_clamps_those_already_stored(
    store: Store, client: Client, admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin.set_runtime(AUDIT, "python")
    kept_long = client.start(ORDER, retention="300d")  # under the 365 days of then
    admin.set_retention(AUDIT, "300d")
    audited = client.start(AUDIT)
    monkeypatch.setenv(retention.MAX_ENV, "10")
    with pytest.raises(errors.InvalidArgument, match=r"at most 10 days .* not 11 days"):
        client.start(ORDER, retention="11d")
    with pytest.raises(errors.InvalidArgument, match="at most 10 days"):
        admin.set_retention(AUDIT, "11d")
    with pytest.raises(errors.InvalidArgument, match="the default retention must be at most"):
        admin.sweep(default_retention="11d")
    monkeypatch.setenv(retention.DEFAULT_ENV, "30")
    with pytest.raises(errors.ConfigurationError, match="longer than the ceiling"):
        admin.sweep()
    monkeypatch.delenv(retention.DEFAULT_ENV)
    # What the tables hold already (a ceiling lowered since, plain SQL) is held to it.
    for run in (kept_long, audited):
        finish(store, run.id, ago=10 * DAY + 1)
    report = admin.sweep(default_retention="1d")
    assert (report.runs, report.max_retention) == ({ORDER: 1, AUDIT: 1}, 10 * DAY)
    assert left(store) == set()


@pytest.mark.parametrize("value", ["ten", "-1", "nan", "0", "40000"])
def test_a_bad_ceiling_in_the_environment_is_a_configuration_error(
    admin: Admin, client: Client, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(retention.MAX_ENV, value)
    with pytest.raises(errors.ConfigurationError, match=retention.MAX_ENV):
        admin.sweep()
    with pytest.raises(errors.ConfigurationError, match=retention.MAX_ENV):
        client.start(ORDER, retention="1d")


def test_setting_the_retention_of_an_unregistered_type_is_refused(admin: Admin) -> None:
    with pytest.raises(errors.TypeNotRegistered):
        admin.set_retention(ORDER, "30d")
    assert admin.registry() == []


# -- what a sweep never deletes ---------------------------------------------------------


def durable_app(store: Store, release: threading.Event) -> App:
    app = App(store.url, schema=store.schema)

    @app.workflow("keep.nap.v1")
    async def nap(payload: dict[str, Any], ctx: Any) -> None:
        await ctx.sleep("nap", "1d")

    @app.workflow("keep.listen.v1")
    async def listen(payload: dict[str, Any], ctx: Any) -> Any:
        return await ctx.wait_for_event("hear", event="go")

    @app.workflow("keep.parent.v1")
    async def parent(payload: dict[str, Any], ctx: Any) -> Any:
        child = await ctx.start_child(payload["child"])
        if payload["wait"]:
            return await ctx.wait_child(child)
        await ctx.sleep("after", "1d")  # the child finishes meanwhile
        return None

    @app.workflow("keep.quick.v1")
    def quick(payload: dict[str, Any]) -> str:
        return "done"

    @app.workflow("keep.block.v1")
    def block(payload: dict[str, Any]) -> str:
        release.wait(30)
        return "released"

    return app


def test_pending_leased_sleeping_and_waiting_runs_never_go_however_old(
    store: Store, client: Client, admin: Admin
) -> None:
    release = threading.Event()
    app = durable_app(store, release)
    runs = {
        "sleeping": client.start("keep.nap.v1"),
        "waiting-signal": client.start("keep.listen.v1"),
        "waiting-child": client.start(
            "keep.parent.v1", {"child": "keep.unhandled.v1", "wait": True}
        ),
        "sleeping parent": client.start(
            "keep.parent.v1", {"child": "keep.quick.v1", "wait": False}
        ),
        "leased": client.start("keep.block.v1"),
    }
    pending, deleted_pending = client.start("keep.unhandled.v1"), client.start("keep.unhandled.v1")
    client.delete(deleted_pending.id)
    done = client.start("keep.quick.v1")
    with poller_thread(app, poll_interval=0.1):

        def settled() -> bool:
            now = {name: client.get(run.id) for name, run in runs.items()}
            waits = [name.split()[0] in now[name].waiting_states for name in runs if name[0] != "l"]
            return (
                all(waits)
                and now["leased"].status is RunStatus.LEASED
                and client.get(done.id).status is RunStatus.SUCCEEDED
            )

        wait_until(settled, 30, lambda: str([client.get(r.id) for r in runs.values()]))
        rows = store.sql("select id from workflow_run where parent_id is not null")
        children = {str(row[0]) for row in rows}
        quick_child = next(i for i in children if client.get(i).type == "keep.quick.v1")
        wait_until(lambda: client.get(quick_child).is_terminal, 30, "the child never finished")
        for run_id in left(store):
            age(store, run_id, ago=20 * 365 * DAY)
        # Everything finished is past a retention of 0; the rest stays, the finished child
        # of a parent that still runs too.
        assert admin.sweep(default_retention=0).runs == {"keep.quick.v1": 1}
        release.set()
    kept = {run.id for run in runs.values()} | {pending.id, deleted_pending.id, *children}
    assert left(store) == kept
    assert client.get(runs["leased"].id).status is RunStatus.SUCCEEDED
    # Once the trees end, one sweep takes parents and then their children.
    for run in (*runs.values(), pending, deleted_pending):
        client.cancel(run.id)
    for run_id in left(store):
        age(store, run_id, ago=1)
    assert admin.sweep(default_retention=0).total == len(kept)
    assert store.count() == store.count("workflow_event") == store.count("workflow_step") == 0


def test_a_sweep_deletes_runs_with_their_events_journal_and_signals(
    store: Store, client: Client, admin: Admin
) -> None:
    run, kept = client.start(ORDER), client.start(ORDER)
    for one in (run, kept):
        client.signal(one.id, "approved", {"by": "ada"})
        store.sql(
            "insert into workflow_step (run_id, step_name, position) values (?, 'charge', 0)",
            one.id,
        )
        client.cancel(one.id)
    finish(store, run.id, ago=31 * DAY, status="cancelled")
    assert admin.sweep().runs == {ORDER: 1}
    assert {str(r[0]) for r in store.sql("select distinct workflow_id from workflow_event")} == {
        kept.id
    }
    for table in ("workflow_step", "workflow_signal"):
        assert {str(r[0]) for r in store.sql(f"select run_id from {table}")} == {kept.id}


def test_a_dry_run_counts_by_type_and_deletes_nothing(
    store: Store, client: Client, admin: Admin
) -> None:
    for type_name, count in ((ORDER, 3), (AUDIT, 2)):
        for run in client.start_many([(type_name, {})] * count):
            finish(store, run.id, ago=31 * DAY, status="failed")
    client.start(ORDER)
    report = admin.sweep(dry_run=True)
    assert report.to_dict() == {
        "dry_run": True,
        "runs": {AUDIT: 2, ORDER: 3},
        "total": 5,
        "default_retention_seconds": 30 * DAY,
        "max_retention_seconds": 365 * DAY,
    }
    assert store.count() == 6
    assert admin.sweep().runs == report.runs
    assert admin.sweep(dry_run=True).total == 0


def test_observers_hear_of_each_batch_by_type(store: Store, client: Client) -> None:
    for run in client.start_many([(ORDER, {})] * 3 + [(AUDIT, {})] * 2):
        finish(store, run.id, ago=31 * DAY)
    seen: list[tuple[str, int]] = []

    class Deletions(observe.Observer):
        def runs_deleted(self, event: observe.RunsDeleted) -> None:
            seen.append((event.type, event.count))

    with Admin(store.url, schema=store.schema, observers=[Deletions()]) as admin:
        assert admin.sweep(batch_size=2).total == 5
        with pytest.raises(errors.InvalidArgument, match="batch_size must be an integer from 1"):
            admin.sweep(batch_size=1001)
    assert sum(n for _, n in seen) == 5 and all(n <= 2 for _, n in seen)
    assert Counter(t for t, n in seen for _ in range(n)) == {ORDER: 3, AUDIT: 2}


def test_the_async_admin_sets_retention_and_sweeps_the_same(store: Store) -> None:
    async def main() -> None:
        async with store.async_client() as client:
            admin = client.admin
            await admin.set_runtime(AUDIT, "python")
            entry = await admin.set_retention(AUDIT, timedelta(days=2))
            assert entry.retention == timedelta(days=2)
            runs = [await client.start(AUDIT), await client.start(ORDER, retention="1d")]
            for run in runs:
                finish(store, run.id, ago=3 * DAY)
            assert (await admin.sweep(dry_run=True)).runs == {AUDIT: 1, ORDER: 1}
            assert store.count() == 2
            assert (await admin.sweep(batch_size=1)).total == 2
            with pytest.raises(errors.TypeNotRegistered):
                await admin.set_retention(ORDER, "1d")

    asyncio.run(main())


def test_a_key_reused_after_its_run_was_swept_starts_a_fresh_run(
    store: Store, client: Client, admin: Admin
) -> None:
    app = App(store.url, schema=store.schema)
    charged: list[int] = []

    def charge(n: int) -> int:
        charged.append(n)
        return len(charged)

    @app.workflow(ORDER)
    async def order(payload: dict[str, Any], ctx: Any) -> dict[str, int]:
        return {"charges": await ctx.step("charge", charge, payload["n"])}

    first = client.start(ORDER, {"n": 1}, idempotency_key="order:7")
    with poller_thread(app, poll_interval=0.1):
        wait_until(lambda: client.get(first.id).is_terminal, 30, "the first run never ended")
    assert store.count("workflow_step") == 1
    age(store, first.id, ago=31 * DAY)
    assert admin.sweep().runs == {ORDER: 1}
    assert store.count("workflow_step") == store.count("workflow_event") == 0
    again = client.start(ORDER, {"n": 2}, idempotency_key="order:7")
    assert again.created and again.id != first.id
    with poller_thread(app, poll_interval=0.1):
        wait_until(lambda: client.get(again.id).is_terminal, 30, "the new run never ended")
    # The step ran again: nothing of the old run's journal was replayed.
    assert (client.get(again.id).result, charged) == ({"charges": 2}, [1, 2])


# -- bounded batches, several sweepers ------------------------------------------------------


def expired_runs(store: Store, client: Client, count: int, type_name: str = ORDER) -> None:
    """``count`` runs of ``type_name`` that failed 40 days ago (10,000 per transaction)."""
    for start in range(0, count, 10_000):
        client.start_many([(type_name, {})] * min(10_000, count - start))
    then = sql_time(store, datetime.now(UTC) - timedelta(days=40))
    store.sql(
        "update workflow_run set status = 'failed', updated_at = ? where type = ?",
        then,
        type_name,
    )


def counting(backend: Backend, transactions: list[list[tuple[str, int]]]) -> None:
    """Have ``backend`` note each transaction's statements (their SQL, and the rows each
    returned), in ``transactions``; the database still runs every one."""
    execute = backend.execute

    def watched(op: Op[Any], seen: list[tuple[str, int]]) -> Op[Any]:
        statement = next(op)
        while True:
            rows: Rows = yield statement
            if statement is not ATOMIC:
                seen.append((statement.sql, len(rows)))
            try:
                statement = op.send(rows)
            except StopIteration as stop:
                return stop.value

    def execute_counted(op: Op[Any], *, readonly: bool = False) -> Any:
        seen: list[tuple[str, int]] = []
        try:
            return execute(watched(op, seen), readonly=readonly)
        finally:
            transactions.append(seen)

    backend.execute = execute_counted  # type: ignore[method-assign]


def test_a_sweep_batch_stays_bounded_with_20000_expired_runs(store: Store, client: Client) -> None:
    expired_runs(store, client, 20_000)
    kept = client.start(ORDER)
    backend = store.backend()
    transactions: list[list[tuple[str, int]]] = []
    counting(backend, transactions)
    with Admin(backend=backend) as admin:
        assert admin.sweep().total == 20_000
    backend.close()
    sweep_sql = backend.q["sweep_runs"]
    batches = [t for t in transactions if any(sql == sweep_sql for sql, _ in t)]
    # One statement per transaction, at most 1,000 runs each; the last finds nothing,
    # and deletes the rows of workers long gone (a second statement).
    assert [len(t) for t in batches] == [1] * 20 + [2]
    assert [rows for t in batches for sql, rows in t if sql == sweep_sql] == [1000] * 20 + [0]
    assert left(store) == {kept.id}
    assert store.count("workflow_event") == 1  # the kept run's created event


SWEEP_PROCESS = """
import json, sys, time
from pathlib import Path
from simpleworkflow.admin import Admin

go = Path(sys.argv[1])
with Admin() as admin:  # the store named by the environment
    admin.registry()  # connected, schema checked: ready
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.001)
    print(json.dumps(admin.sweep(batch_size=100).to_dict()), flush=True)
"""


def test_two_sweepers_in_two_processes_delete_each_run_once(
    store: Store, client: Client, tmp_path: Path
) -> None:
    # Trees too: a parent's delete touches its child, which no sweep has taken.
    parents = client.start_many([(AUDIT, {})] * 50)
    children = client.start_many([(ORDER, {})] * 50)
    for parent, child in zip(parents, children, strict=True):
        store.sql("update workflow_run set parent_id = ? where id = ?", parent.id, child.id)
    expired_runs(store, client, 3000)
    expired_runs(store, client, 1000, type_name=AUDIT)
    kept = client.start(ORDER)
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SWEEP_PROCESS, str(go)],
            env=store.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stderr is not None
            ready = proc.stdout.readline().strip()
            assert ready == "ready", proc.stderr.read()
        go.touch()
        outputs = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    reports = [json.loads(out) for out, _ in outputs]
    total = Counter[str]()
    for report in reports:
        total.update(report["runs"])
    assert total == {ORDER: 3050, AUDIT: 1050}
    assert left(store) == {kept.id}


# -- the worker's service -------------------------------------------------------------------


def test_one_sweeper_of_a_fleet_sweeps_and_hands_over_when_it_stops(
    store: Store, client: Client
) -> None:
    policy = retention.Policy.from_env()

    async def main() -> None:
        backends = [store.backend(), store.backend()]
        first, second = (
            Sweeper(backend, name, 3600.0, policy, observe.Observers())
            for backend, name in zip(backends, ("w1", "w2"), strict=True)
        )
        expired_runs(store, client, 3)
        assert (await first.sweep_once()).total == 3
        assert lease_holder(store) == "w1"
        expired_runs(store, client, 2, type_name=AUDIT)
        losing = await second.sweep_once()  # w1 holds the lease: w2 deletes nothing
        assert (losing.total, losing.batches) == (0, 1)
        assert store.count() == 2
        running = asyncio.create_task(first.run())  # renews, sweeps; stops on cancel
        await asyncio.to_thread(wait_until, lambda: store.count() == 0, 20, "w1 never swept")
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        assert lease_holder(store) is None  # given back when it stopped
        expired_runs(store, client, 1)
        assert (await second.sweep_once()).total == 1
        assert lease_holder(store) == "w2"
        # w2 stalls past its lease: w1 takes over, and w2's next batch deletes nothing.
        store.sql(
            "update workflow_service_lease set lease_until = ?",
            sql_time(store, datetime.now(UTC) - timedelta(seconds=1)),
        )
        assert (await first.sweep_once()).batches == 1
        expired_runs(store, client, 1, type_name=AUDIT)
        assert (await second.sweep_once()).total == 0
        assert lease_holder(store) == "w1"
        for backend in backends:
            await backend.aclose()

    asyncio.run(main())


def lease_holder(store: Store) -> str | None:
    rows = store.sql("select holder from workflow_service_lease where name = 'sweeper'")
    return str(rows[0][0]) if rows else None


WORKER_MODULE = """
from simpleworkflow import App

app = App()

@app.workflow("shop.order.v1")
def order(payload):
    return "done"
"""
SCRIPT = Path(sys.executable).with_name("simpleworkflow")


def sweeper_lines(log: str) -> int:
    """How many runs a worker's log says its sweeper deleted."""
    found = re.findall(r"sweeper deleted (\d+) run\(s\) past their retention", log)
    return sum(int(n) for n in found)


def test_worker_processes_with_sweep_take_turns_through_the_lease(
    store: Store, client: Client, tmp_path: Path
) -> None:
    (tmp_path / "shop.py").write_text(WORKER_MODULE)
    expired_runs(store, client, 1500, type_name=AUDIT)

    def worker(name: str) -> subprocess.Popen[str]:
        options = ["--sweep-every", "1s", "--worker-id", name, "--poll-interval", "0.2"]
        return subprocess.Popen(
            [str(SCRIPT), "worker", "shop:app", *options],
            cwd=tmp_path,
            env=store.env,
            stderr=subprocess.PIPE,
            text=True,
        )

    first = worker("w1")
    procs = [first]
    try:
        wait_until(lambda: store.count() == 0, 30, "the sweeper never swept")
        assert lease_holder(store) == "w1"
        second = worker("w2")
        procs.append(second)
        time.sleep(2)  # a few rounds of w2's sweeper: the lease is w1's
        expired_runs(store, client, 10, type_name=AUDIT)  # a type the workers do not run
        wait_until(lambda: store.count() == 0, 30, "w1 never swept the new runs")
        first.send_signal(signal.SIGTERM)
        assert first.wait(20) == 0
        expired_runs(store, client, 5, type_name=AUDIT)  # w1 gave the lease back: w2 sweeps
        wait_until(lambda: store.count() == 0, 30, "w2 never took over")
        assert lease_holder(store) == "w2"
        second.send_signal(signal.SIGTERM)
        assert second.wait(20) == 0
    finally:
        for proc in procs:
            proc.kill()
    logs = [proc.communicate()[1] for proc in procs]
    assert [sweeper_lines(log) for log in logs] == [1510, 5], logs
    assert all("Traceback" not in log for log in logs), logs


def test_worker_options_for_the_sweeper(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(retention.SWEEP_ENV)  # the suite turns the default off
    assert WorkerOptions().sweep_every == retention.SWEEP_EVERY == 300.0  # on by default
    options = WorkerOptions(sweep_every="5m", default_retention="7d")
    assert (options.sweep_every, options.default_retention) == (300.0, 7 * DAY)
    assert options.policy() == retention.Policy(default=7 * DAY, ceiling=365 * DAY)
    assert WorkerOptions(sweep=False).sweep_every is None
    assert WorkerOptions(sweep=False, sweep_every="1m").sweep_every is None  # off wins
    with pytest.raises(errors.InvalidArgument, match="sweep_every must be at least one second"):
        WorkerOptions(sweep_every=0.5)
    with pytest.raises(errors.InvalidArgument, match="sweep must be True or False"):
        WorkerOptions(sweep="no")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument, match=r"default_retention .* runs none"):
        WorkerOptions(sweep=False, default_retention="7d")
    with pytest.raises(errors.InvalidArgument, match="default_retention must be at most"):
        WorkerOptions(sweep_every=60, default_retention="400d")
    # The interval from the environment, read when the options are made.
    for text, every in (("10m", 600.0), ("90", 90.0), (" 1h ", 3600.0), ("off", None), ("0", None)):
        monkeypatch.setenv(retention.SWEEP_ENV, text)
        assert WorkerOptions().sweep_every == every, text
    assert WorkerOptions(sweep_every="1m").sweep_every == 60.0  # given beats the environment
    for bad in ("soon", "0.5", "-5m"):
        monkeypatch.setenv(retention.SWEEP_ENV, bad)
        with pytest.raises(errors.ConfigurationError, match=retention.SWEEP_ENV):
            WorkerOptions()
    assert WorkerOptions(sweep=False).sweep_every is None  # no sweeper, no reading of it
    monkeypatch.delenv(retention.SWEEP_ENV)
    monkeypatch.setenv(retention.DEFAULT_ENV, "many")
    with pytest.raises(errors.ConfigurationError, match=retention.DEFAULT_ENV):
        WorkerOptions()  # when the worker is made, not when it first sweeps
    assert WorkerOptions(sweep=False).sweep_every is None  # no sweeper, no reading of its settings


def test_a_worker_sweeps_by_default_and_not_when_told_not_to(
    store: Store, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(retention.SWEEP_ENV)  # the suite turns the default off
    app = App(store.url, schema=store.schema)
    app.register(ORDER, lambda payload: "done")
    expired_runs(store, client, 3, type_name=AUDIT)
    kept = client.start(AUDIT)
    finish(store, kept.id, ago=29 * DAY)
    with poller_thread(app, sweep=False, poll_interval=0.1) as poller:
        assert poller.options.sweep_every is None
        ran = client.start(ORDER)
        assert client.wait(ran.id, timeout=20).status is RunStatus.SUCCEEDED
        time.sleep(0.5)
    assert store.count() == 5 and lease_holder(store) is None  # nothing swept
    with poller_thread(app, poll_interval=0.1) as poller:
        assert poller.options.sweep_every == retention.SWEEP_EVERY
        wait_until(lambda: store.count() == 2, 20, "the default sweeper never swept")
        assert lease_holder(store) == poller.worker_id
    assert left(store) == {kept.id, ran.id}
    assert lease_holder(store) is None  # given back when the worker stopped


# -- the command line ------------------------------------------------------------------------


def run_cli(store: Store, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["-d", store.url, "--schema", store.schema, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_sweep_dry_run_counts_and_deletes_nothing_then_sweep_deletes(
    store: Store, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    expired_runs(store, client, 3)
    expired_runs(store, client, 2, type_name=AUDIT)
    kept = client.start(ORDER)
    code, out, err = run_cli(store, capsys, "sweep", "--dry-run", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["runs"] == {AUDIT: 2, ORDER: 3}
    code, out, _ = run_cli(store, capsys, "sweep", "--dry-run")
    assert out.splitlines() == [
        "would delete 5 run(s) past their retention (default 30 days, ceiling 365 days); "
        "nothing was deleted",
        "TYPE           RUNS",
        f"{AUDIT}  2",
        f"{ORDER}  3",
    ]
    assert store.count() == 6
    code, out, _ = run_cli(store, capsys, "sweep", "--default-retention", "45d")
    assert out == "no run is past its retention (default 45 days, ceiling 365 days)\n"
    code, out, _ = run_cli(store, capsys, "sweep", "--json")
    assert (code, json.loads(out)["total"]) == (0, 5)
    assert left(store) == {kept.id}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("sweep", "--default-retention", "soon"), "cannot read --default-retention 'soon'"),
        (("sweep", "--default-retention", "2y"), "cannot read --default-retention '2y'"),
        (("sweep", "--default-retention", "400d"), "--default-retention must be at most 365"),
        (("registry", "set-retention", ORDER, "30d"), f"{ORDER} is not in the registry"),
        (("registry", "set-retention", AUDIT, "400d"), "DURATION must be at most 365 days"),
        (("registry", "set-retention", AUDIT, "forever"), "cannot read DURATION 'forever'"),
        (("start", ORDER, "--retention", "400d"), "retention must be at most 365 days"),
    ],
)
def test_retention_errors_on_the_command_line_are_one_line_and_change_nothing(
    store: Store,
    client: Client,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    message: str,
) -> None:
    client.admin.set_runtime(AUDIT, "python")
    code, out, err = run_cli(store, capsys, *argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"simpleworkflow: error: {message}"), err
    assert err.count("\n") == 1
    assert store.count() == 0
    assert [e.retention for e in client.admin.registry()] == [None]


def test_registry_retention_on_the_command_line(
    store: Store, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(
        store, capsys, "registry", "set", AUDIT, "--runtime", "go", "--retention", "90d"
    )
    assert code == 0
    code, out, _ = run_cli(store, capsys, "registry", "set-retention", AUDIT, "36h")
    assert out == f"{AUDIT}: finished runs kept 36 hours after they finish\n"
    code, out, _ = run_cli(store, capsys, "registry", "list", "--json")
    assert json.loads(out)["registry"][0]["retention"] == 36 * 3600
    code, out, _ = run_cli(store, capsys, "registry", "list")
    assert out.splitlines()[1].split()[:4] == [AUDIT, "go", "enabled", "36"]
    code, out, _ = run_cli(store, capsys, "registry", "set-retention", AUDIT, "default")
    assert out == f"{AUDIT}: finished runs kept for the sweeper's default retention\n"
    code, out, _ = run_cli(store, capsys, "start", ORDER, "--retention", "12h", "--json")
    assert json.loads(out)["retention"] == 12 * 3600


def test_worker_command_line_options_for_the_sweeper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "shop_cli.py").write_text(WORKER_MODULE)
    monkeypatch.chdir(tmp_path)

    def options(*argv: str) -> WorkerOptions:
        args = cli.build_parser().parse_args(["worker", "shop_cli:app", *argv])
        return worker_command.build_poller(worker_command.load_target(args.target), args).options

    monkeypatch.delenv(retention.SWEEP_ENV)  # the suite turns the default off
    assert options().sweep_every == retention.SWEEP_EVERY  # on by default
    assert options("--sweep").sweep_every == retention.SWEEP_EVERY  # the same, still accepted
    assert options("--no-sweep").sweep_every is None
    assert options("--sweep-every", "5m").sweep_every == 300.0
    swept = options("--sweep", "--default-retention", "7d")
    assert (swept.sweep_every, swept.default_retention) == (300.0, 7 * DAY)
    monkeypatch.setenv(retention.SWEEP_ENV, "1h")
    assert options().sweep_every == 3600.0
    for argv in (
        ["--no-sweep", "--sweep-every", "5m"],
        ["--no-sweep", "--default-retention", "7d"],
    ):
        code = cli.main(["worker", "shop_cli:app", *argv])
        err = capsys.readouterr().err
        assert code == 2 and "and --no-sweep runs none: give one or the other" in err, err
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["worker", "shop_cli:app", "--sweep", "--no-sweep"])
    monkeypatch.setenv(retention.SWEEP_ENV, "off")
    code = cli.main(["worker", "shop_cli:app", "--default-retention", "7d"])
    err = capsys.readouterr().err
    assert code == 2 and "is the sweeper's, and this worker runs none" in err, err


# -- plans ------------------------------------------------------------------------------------


def test_the_postgres_sweep_reads_its_indexes_at_scale(store: Store, client: Client) -> None:
    """Many finished runs kept (long retentions of their type and of their own), a few
    expired, many pending: the sweep and its dry run read index ranges of expired runs."""
    if store.kind != "postgres":
        pytest.skip("a Postgres plan")
    client.admin.set_runtime(AUDIT, "python")
    client.admin.set_retention(AUDIT, "365d")
    old = "now() - interval '100 days'"
    for type_name, status, own, fixed, count in (
        (AUDIT, "succeeded", "null", "null", 40_000),  # as plain SQL: its type's 365 days
        (AUDIT, "succeeded", "null", "false", 20_000),  # from before 0022: its type's now
        (ORDER, "succeeded", "interval '300 days'", "true", 20_000),
        (ORDER, "failed", "null", "true", 2_000),  # the default
        (ORDER, "failed", "null", "false", 500),  # from before 0022: the default
        (ORDER, "succeeded", "interval '7 days'", "true", 1_000),
        (ORDER, "pending", "null", "true", 20_000),
    ):
        store.sql(
            "insert into workflow_run "
            "(type, status, updated_at, created_at, retention, retention_fixed) "
            f"select '{type_name}', '{status}', {old}, {old}, {own}, {fixed} "
            f"from generate_series(1, {count})"
        )
    backend = store.backend()
    params = {"default": 30 * DAY, "ceiling": 365 * DAY, "limit": 1000}
    with psycopg.connect(store.url) as conn:
        conn.execute(f'analyze "{store.schema}".workflow_run'.encode())
        plans = {}
        for name in ("sweep_runs", "count_expired"):
            rows = conn.execute(("explain " + backend.q[name]).encode(), params).fetchall()
            plans[name] = "\n".join(row[0] for row in rows)
        conn.rollback()
    backend.close()
    ranges = {  # each index read as a range of expired runs, one type (or retention) at a time
        "idx_workflow_run_expiry_by_type": "(type = k",
        "idx_workflow_run_expiry_own": "(retention = s",
        "idx_workflow_run_expiry_default": "",
    }
    for name, plan in plans.items():
        for index, condition in ranges.items():
            # any kind of index scan (an index-only one when a count needs no row), with
            # the range of this type or retention as its condition
            scans = re.finditer(
                rf"(Index Scan using|Index Only Scan using|Bitmap Index Scan on) {index}.*\n.*",
                plan,
            )
            assert any(condition in m[0] and "updated_at <=" in m[0] for m in scans), (
                f"{name}:\n{plan}"
            )
        assert "Seq Scan on workflow_run" not in plan, f"{name}:\n{plan}"
    assert client.admin.sweep(dry_run=True).runs == {ORDER: 3500}
    assert client.admin.sweep().runs == {ORDER: 3500}


def test_the_sqlite_sweep_reads_no_run_outside_its_index_ranges(
    store: Store, client: Client
) -> None:
    if store.kind != "sqlite":
        pytest.skip("a SQLite plan")
    expired_runs(store, client, 2000)
    # half of them as created before 0017 (they follow their type's retention as it is)
    store.sql("update workflow_run set retention_fixed = 0 where rowid % 2 = 0")
    client.start_many([{"type": AUDIT, "retention": "1d"}] * 100)
    backend = store.backend()
    lite = sqlite3.connect(config.sqlite_path(store.url))
    try:
        for analyzed in (False, True):
            if analyzed:
                lite.execute("analyze")
            for name in ("sweep_runs", "count_expired"):
                params = {"default": 30 * DAY, "ceiling": 365 * DAY, "limit": 1000}
                rows = lite.execute("explain query plan " + backend.q[name], params).fetchall()
                plan = [str(row[3]) for row in rows]
                assert not [s for s in plan if re.match(r"SCAN (workflow_run|r)\b", s)], plan
                assert any("idx_workflow_run_expiry_by_type (type=?" in s for s in plan), plan
                assert any("idx_workflow_run_expiry_own (retention=?" in s for s in plan), plan
                assert any("idx_workflow_run_expiry_default (updated_at<?" in s for s in plan), plan
    finally:
        lite.close()
        backend.close()


# -- the HTTP API ----------------------------------------------------------------------------


def test_the_api_starts_runs_with_a_retention_and_refuses_one_above_the_ceiling(
    store: Store,
) -> None:
    from api_helpers import PREFIX, Api

    api = Api(store)
    try:
        run = api.start(ORDER, retention="90d")
        assert run["retention"] == 90 * DAY
        assert api.get(f"{PREFIX}/runs/{run['id']}").json()["retention"] == 90 * DAY
        assert api.start(ORDER)["retention"] is None
        refused = api.post(f"{PREFIX}/runs", json={"type": ORDER, "retention": "400d"})
        assert 400 <= refused.status_code < 500, refused.text
        assert "retention must be at most 365 days" in refused.text
        assert store.count() == 2
    finally:
        api.close()
