"""A stored row this library cannot read, written by plain SQL or another runtime: a
time outside Python's range (Postgres holds years 4713 BC to 294276 AD), text that is no
time in SQLite's encoding, a journal entry of a kind it does not know. Workers fail that
run alone, for good, with an event naming the column; listings, the run page and the API
show what they can read and mark the rest (docs/workers.md#rows-a-worker-cannot-read)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from api_helpers import PREFIX, Api
from cli_workers import CliWorkers
from conftest import Store, make_store, poller_thread
from test_cli import run_cli
from test_dashboard import Dash
from test_schedules import one_pass
from worker_app import wait_until

from simpleworkflow import App, Client, Context, RunStatus, config

TYPE = "test.rows.work.v1"
JOURNALED = "test.rows.journaled.v1"
WAITER = "test.rows.waiter.v1"

#: Per store: a lease end that cannot be read, which has passed by the store's order.
EXPIRED = {"postgres": "0001-01-01 00:00+14", "sqlite": "0000-00-00 soon"}
#: Per store: a due time that cannot be read and sorts before the current time.
DUE_NOW = {"postgres": "0001-01-01 00:00+14", "sqlite": "0000-00-00 soon"}
#: Per store: a due time that cannot be read and sorts after the current time.
NEVER = {"postgres": "294000-01-01 00:00+00", "sqlite": "later, perhaps"}
#: Per store: a time long past, a time that cannot be read, a retention that cannot be.
OLD = {"postgres": "2020-01-01 00:00+00", "sqlite": "2020-01-01 00:00:00.000"}
SPOILED_TIME = {"postgres": "0001-01-01 00:00+14", "sqlite": "garbage"}
SPOILED_SPAN = {"postgres": "100000000 years", "sqlite": "forever"}
#: Per store: a column of workflow_run, and a value for it that cannot be read.
SPOILED = {
    "postgres": [
        ("run_at", "0001-01-01 00:00+14"),  # year 0 in UTC
        ("deadline", "294000-01-01 00:00+00"),
        ("created_at", "0001-01-01 00:00+14"),
        ("retention", "100000000 years"),
    ],
    "sqlite": [
        ("run_at", 12345),
        ("run_at", "0000-01-01 00:00:00"),
        ("deadline", "garbage"),
        ("created_at", "yesterday"),
        ("retention", "forever"),
    ],
}


def spoil(store: Store, table: str, column: str, value: Any, where: str, *params: Any) -> None:
    """Write ``value`` into ``column`` by plain SQL, as another runtime might."""
    store.sql(f"update {table} set {column} = ? where {where}", value, *params)


def spoil_unchecked(store: Store, statement: str, *params: Any) -> None:
    """Run ``statement`` on SQLite with its CHECK constraints off (a row the schema
    refuses, as a tool that turns them off may leave)."""
    lite = sqlite3.connect(config.sqlite_path(store.url))
    lite.execute("pragma ignore_check_constraints = on")
    with lite:
        lite.execute(statement, params)
    lite.close()


def failed_events(client: Client, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in client.events(run_id) if e.event_type == "failed"]


def test_a_worker_fails_each_run_it_cannot_read_and_runs_the_others(store: Store) -> None:
    app = App(store.url, schema=store.schema)
    ran: list[str] = []

    @app.workflow(TYPE)
    def work(payload: Any, ctx: Context) -> str:
        ran.append(ctx.run_id)
        return "done"

    with store.client() as client:
        runs = [client.start(TYPE, {"n": n}).id for n in range(20)]
        spoiled = dict(zip(runs[1::3], SPOILED[store.kind], strict=False))
        for run_id, (column, value) in spoiled.items():
            spoil(store, "workflow_run", column, value, "id = ?", run_id)
        healthy = [run_id for run_id in runs if run_id not in spoiled]
        # Due at a time that sorts after every other: never due, so never claimed (the
        # notification of its update carries that time, and wakes nobody early).
        never = healthy.pop()
        spoil(store, "workflow_run", "run_at", NEVER[store.kind], "id = ?", never)
        # Leased by a worker gone for good, its lease's end unreadable: the reaper
        # recovers it (it reads no time of it) and the claim writes a new one.
        orphan = runs[0]
        store.sql(
            "update workflow_run set status = 'leased', leased_by = 'gone', "
            "lease_token = ?, lease_until = ? where id = ?",
            "00000000-0000-4000-8000-000000000001",
            EXPIRED[store.kind],
            orphan,
        )
        with poller_thread(app, type_prefixes=["test.rows.%"], poll_interval=0.2, concurrency=4):
            done = lambda: all(client.get(r).is_terminal for r in runs if r != never)  # noqa: E731
            wait_until(done, 30, lambda: str([client.get(r).status for r in runs]))
            # The worker is still up and claiming: a run started now runs too.
            later = client.start(TYPE, {"n": "later"}).id
            wait_until(lambda: client.get(later).is_terminal, 15, "the later run never ran")
        for run_id in [*healthy, later]:
            assert client.get(run_id).status is RunStatus.SUCCEEDED
        assert client.get(never).status is RunStatus.PENDING
        assert "run_at" in client.get(never).unreadable
        assert set(ran) == {*healthy, later}  # no handler ran for a spoiled run
        for run_id, (column, _) in spoiled.items():
            run = client.get(run_id)
            assert run.status is RunStatus.FAILED and column in run.unreadable
            assert run.last_error is not None and "UnreadableRow" in run.last_error
            [event] = failed_events(client, run_id)
            assert event["error"]["type"] == "simpleworkflow.errors.UnreadableRow"
            assert column in event["unreadable"] and event["retryable"] is False
            assert f"{column} holds" in event["error"]["message"]


#: Per store: a journal column of step "a", and a value for it that cannot be replayed.
SPOILED_STEP = {
    "postgres": [("started_at", "0001-01-01 00:00+14"), ("kind", "mystery")],
    # The status only with the checks off: the schema allows completed and retrying.
    "sqlite": [("started_at", "garbage"), ("kind", "mystery"), ("status", "paused")],
}


def test_a_journal_the_worker_cannot_replay_fails_its_run_whatever_the_body_does(
    store: Store,
) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow(JOURNALED)
    def journaled(payload: Any, ctx: Context) -> str:
        try:
            return str(ctx.step("a", lambda: "fresh"))
        except Exception:  # a body that swallows every error cannot hide this one
            return "swallowed"

    with store.client() as client:
        runs = [client.start(JOURNALED, {"n": n}).id for n in range(9)]
        spoiled = dict(zip(runs[::3], SPOILED_STEP[store.kind], strict=False))
        for run_id in runs:
            store.sql(
                "insert into workflow_step (run_id, step_name, kind, position, status, "
                "output, attempts) values (?, 'a', 'step', 0, 'completed', '\"replayed\"', 1)",
                run_id,
            )
        for run_id, (column, value) in spoiled.items():
            if store.kind == "sqlite":
                spoil_unchecked(
                    store, f"update workflow_step set {column} = ? where run_id = ?", value, run_id
                )
            else:
                spoil(store, "workflow_step", column, value, "run_id = ?", run_id)
        with poller_thread(app, type_prefixes=["test.rows.%"], poll_interval=0.2):
            done = lambda: all(client.get(r).is_terminal for r in runs)  # noqa: E731
            wait_until(done, 30, lambda: str([client.get(r).status for r in runs]))
        for run_id in runs:
            run = client.get(run_id)
            if run_id not in spoiled:
                assert (run.status, run.result) == (RunStatus.SUCCEEDED, "replayed")
                continue
            column = spoiled[run_id][0]
            assert run.status is RunStatus.FAILED, run
            [event] = failed_events(client, run_id)
            assert event["error"]["type"] == "simpleworkflow.errors.UnreadableRow"
            assert set(event["unreadable"]) == {f"step 'a' {column}"}
            assert "cannot be replayed" in event["error"]["message"]


def spoil_a_run_its_step_and_event(store: Store, run_id: str) -> str:
    """Write unreadable times into a run, its journal and its audit trail; return the
    raw text a listing shows for the run's ``created_at``."""
    bad = {"postgres": "0001-01-01 00:00+14", "sqlite": "garbage"}[store.kind]
    store.sql(
        "insert into workflow_step (run_id, step_name, kind, position, status, output, "
        "attempts, started_at) values (?, 'a', 'step', 0, 'completed', '1', 1, ?)",
        run_id,
        bad,
    )
    spoil(store, "workflow_event", "created_at", bad, "workflow_id = ?", run_id)
    spoil(store, "workflow_run", "created_at", bad, "id = ?", run_id)
    spoil(store, "workflow_run", "deadline", bad, "id = ?", run_id)
    spoil(store, "workflow_run", "run_at", DUE_NOW[store.kind], "id = ?", run_id)
    # Another runtime's worker, its presence written with times out of range.
    store.sql(
        "insert into workflow_worker (worker_id, host, pid, started_at, seen_until) "
        "values ('other-runtime', 'h', 1, ?, ?)",
        bad,
        NEVER[store.kind],
    )
    return {"postgres": "0001-12-31 10:00:00+00 BC", "sqlite": "garbage"}[store.kind]


def test_the_api_cli_and_dashboard_show_a_run_they_cannot_fully_read(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    with store.client() as client:
        runs = [client.start(TYPE, {"n": n}).id for n in range(3)]
        bad = runs[1]
        raw = spoil_a_run_its_step_and_event(store, bad)

        page = client.list()
        assert sorted(run.id for run in page.runs) == sorted(runs)
        [spoiled] = [run for run in page.runs if run.id == bad]
        assert set(spoiled.unreadable) == {"created_at", "deadline", "run_at"}
        assert spoiled.unreadable["created_at"].raw == raw
        # Paged one at a time, the cursor passes the run it cannot read too.
        paged, cursor = [], None
        for _ in range(5):
            one = client.list(limit=1, cursor=cursor)
            paged += [run.id for run in one.runs]
            if (cursor := one.next_cursor) is None:
                break
        assert sorted(paged) == sorted(runs)

    api = Api(store)
    try:
        check_the_api(api, runs, bad, raw)
    finally:
        api.close()

    listed = run_cli(store, capsys, "runs", "list", "--json")
    assert listed.code == 0, listed.err
    assert {run["id"] for run in json.loads(listed.out)["runs"]} == set(runs)
    for command in (
        ["stats"],
        ["workers"],
        ["runs", "steps", bad],
        ["runs", "steps", bad, "--json"],
        ["runs", "show", bad, "--json"],
    ):
        result = run_cli(store, capsys, *command)
        assert result.code == 0, (command, result.err)
    table = run_cli(store, capsys, "runs", "list")
    assert table.code == 0 and all(run_id in table.out for run_id in runs), table.err
    shown = run_cli(store, capsys, "runs", "show", bad)
    assert shown.code == 0, shown.err
    assert raw in shown.out and "unreadable" in shown.out

    dash = Dash(store)
    try:
        runs_page = dash.get("/runs")
        assert runs_page.status_code == 200, runs_page.text
        assert all(run_id in runs_page.text for run_id in runs)
        run_page = dash.get(f"/runs/{bad}")
        assert run_page.status_code == 200, run_page.text
        assert raw in run_page.text and "unreadable" in run_page.text
        for page in ("/", "/types", "/workers"):
            assert dash.get(page).status_code == 200, page
    finally:
        dash.close()


def check_the_api(api: Api, runs: list[str], bad: str, raw: str) -> None:
    listing = api.get(f"{PREFIX}/runs")
    assert listing.status_code == 200, listing.text
    bodies = {body["id"]: body for body in listing.json()["runs"]}
    assert set(bodies) == set(runs)
    assert bodies[bad]["created_at"] == f"unreadable: {raw}"
    assert bodies[bad]["unreadable"]["deadline"]["raw"] == raw
    assert "unreadable" not in bodies[runs[0]]
    for path in ("", "/events", "/steps"):
        response = api.get(f"{PREFIX}/runs/{bad}{path}")
        assert response.status_code == 200, (path, response.text)
        assert raw in response.text
    for path in ("/types", "/workers", "/throughput"):
        response = api.get(f"{PREFIX}{path}")
        assert response.status_code == 200, (path, response.text)


def test_the_scheduler_pauses_a_schedule_it_cannot_read_and_starts_the_others(
    store: Store,
) -> None:
    bad_time = {"postgres": "0001-01-01 00:00+14", "sqlite": "0000-00-00 soon"}[store.kind]
    insert = (
        "insert into workflow_schedule (name, workflow_type, cron, payload, next_tick_at) "
        "values (?, ?, '* * * * *', ?, ?)"
    )
    store.sql(insert, "broken.tick", TYPE, "{}", bad_time)
    past = {"postgres": "2020-01-01 00:00+00", "sqlite": "2020-01-01 00:00:00.000"}[store.kind]
    store.sql(insert, "healthy.one", TYPE, "{}", past)
    if store.kind == "sqlite":  # the one JSON column SQLite does not check
        store.sql(insert, "broken.payload", TYPE, "{not json", past)
    for _ in range(5):
        if one_pass(store) > 0:
            break
    with store.client() as client:
        listed = {schedule.name: schedule for schedule in client.schedules.list()}
        broken = listed["broken.tick"]
        assert broken.paused and broken.error is not None
        assert "next_tick_at holds" in broken.error
        assert broken.to_dict()["next_tick_at"].startswith("unreadable: ")
        if store.kind == "sqlite":
            payload = listed["broken.payload"]
            assert payload.paused and payload.error is not None
            assert "payload holds '{not json'" in payload.error
        assert not listed["healthy.one"].paused
    started = store.sql("select idempotency_key from workflow_run")
    assert started and all(key.startswith("schedule:healthy.one:") for (key,) in started)


def test_worker_processes_stay_up_among_runs_they_cannot_read(store: Store, tmp_path: Path) -> None:
    """Two ``simpleworkflow worker`` processes, as users start them, over a queue where
    every fourth run holds a value they cannot read."""
    quick = "alpha.x.v1"  # worker_app's: notes the run, returns at once
    with store.client() as client:
        runs = [client.start(quick, {"n": n}).id for n in range(24)]
        spoiled = dict(zip(runs[::4], SPOILED[store.kind] * 2, strict=False))
        for run_id, (column, value) in spoiled.items():
            spoil(store, "workflow_run", column, value, "id = ?", run_id)
        with CliWorkers("worker_app:app", tmp_path) as workers:
            for n in range(2):
                workers.start(store, f"rows-{n}")
            workers.wait_for(lambda: all(client.get(r).is_terminal for r in runs))
            later = client.start(quick, {"n": "later"}).id  # both still claim
            workers.wait_for(lambda: client.get(later).is_terminal)
            assert all(proc.poll() is None for proc in workers.procs), workers.tail()
            logs = workers.tail(100_000)
        for run_id in [*runs, later]:
            run = client.get(run_id)
            if run_id not in spoiled:
                assert run.status is RunStatus.SUCCEEDED, run
                continue
            column = spoiled[run_id][0]
            assert run.status is RunStatus.FAILED and column in run.unreadable
            [event] = failed_events(client, run_id)
            assert f"{column} holds" in event["error"]["message"]
            assert f"run {run_id} cannot be read: {column} holds" in logs


def test_a_signal_sent_at_a_time_it_cannot_read_is_consumed_all_the_same(store: Store) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow(WAITER)
    def waiter(payload: Any, ctx: Context) -> Any:
        return ctx.wait_for_event("go", event="go")

    bad = {"postgres": "294000-01-01 00:00+00", "sqlite": "not a time"}[store.kind]
    with store.client() as client:
        run_id = client.start(WAITER).id
        client.signal(run_id, "go", {"ok": True})
        spoil(store, "workflow_signal", "created_at", bad, "run_id = ?", run_id)
        [signal] = client.signals(run_id)
        assert str(signal.created_at).startswith("unreadable: ")
        with poller_thread(app, type_prefixes=["test.rows.%"], poll_interval=0.2):
            run = wait_until(lambda: client.get(run_id).is_terminal and client.get(run_id), 15, "")
        assert (run.status, run.result) == (RunStatus.SUCCEEDED, {"ok": True})
        api = Api(store)
        try:
            response = api.get(f"{PREFIX}/runs/{run_id}/signals")
        finally:
            api.close()
        assert response.status_code == 200 and "unreadable: " in response.text


def test_the_sweep_deletes_what_is_due_around_rows_it_cannot_read(store: Store) -> None:
    with store.client() as client:
        runs = [client.start(TYPE, {"n": n}).id for n in range(4)]
        store.sql("update workflow_run set status = 'succeeded', updated_at = ?", OLD[store.kind])
        odd, far = runs[0], runs[1]
        spoil(store, "workflow_run", "updated_at", SPOILED_TIME[store.kind], "id = ?", odd)
        spoil(store, "workflow_run", "retention", SPOILED_SPAN[store.kind], "id = ?", far)
        for dry_run in (True, False):
            report = client.admin.sweep(default_retention=60, dry_run=dry_run)
            assert report.total >= 2, report
        left = {run.id for run in client.list(include_deleted=True).runs}
        assert not left & set(runs[2:])  # the healthy ones are gone


def test_sqlite_fails_runs_whose_json_breaks_its_checks_which_no_claim_can_lease(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """SQLite checks a whole row at every update: a run whose JSON was written with the
    checks off fails every claim that meets it. The worker fails such runs after such a
    claim, keeping each text as a JSON string, and the others run."""
    store = make_store("sqlite", tmp_path, request).migrate()
    app = App(store.url, schema=store.schema)

    @app.workflow(TYPE)
    def work(payload: Any, ctx: Context) -> str:
        return "done"

    with store.client() as client:
        runs = [client.start(TYPE, {"n": n}).id for n in range(8)]
        broken = {runs[2]: "payload", runs[5]: "waiting_for"}
        for run_id, column in broken.items():
            spoil_unchecked(
                store, f"update workflow_run set {column} = '{{not json' where id = ?", run_id
            )
        with poller_thread(app, type_prefixes=["test.rows.%"], poll_interval=0.2):
            done = lambda: all(client.get(r).is_terminal for r in runs)  # noqa: E731
            wait_until(done, 30, lambda: str([client.get(r).status for r in runs]))
        for run_id in runs:
            run = client.get(run_id)
            if run_id not in broken:
                assert run.status is RunStatus.SUCCEEDED, run
                continue
            column = broken[run_id]
            assert run.status is RunStatus.FAILED
            assert getattr(run, column) == "{not json"  # kept, as a JSON string
            [event] = failed_events(client, run_id)
            assert event["error"]["type"] == "simpleworkflow.errors.UnreadableRow"
            assert f"cannot be read: {column} not JSON" in event["error"]["message"]
