"""Stored values of the wrong type, beside those of test_unreadable_rows: text in an
integer column (SQLite keeps what it is given), a status this version does not know,
a registry row or an event written by hand. Workers fail such a run alone or skip such
a row, observers count it, and listings show it marked
(docs/workers.md#rows-a-worker-cannot-read)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from api_helpers import PREFIX, Api
from conftest import Store, make_store, poller_thread
from prometheus_client import CollectorRegistry
from test_cli import run_cli
from test_dashboard import Dash
from test_schedules import one_pass
from test_unreadable_rows import failed_events, spoil, spoil_unchecked
from worker_app import wait_until

from simpleworkflow import App, Context, RunStatus, observe
from simpleworkflow.metrics import MetricsObserver

TYPE = "test.values.work.v1"
LEASE = "00000000-0000-4000-8000-00000000000{}"

#: A column of workflow_run, and text SQLite keeps in it (integer affinity keeps text
#: that is no number as it is).
SPOILED_COUNTS = [
    ("priority", "high"),
    ("attempt", "two"),
    ("max_attempts", "many"),
    ("attempt", 1.5),
]
#: Columns only the reaper reads, of runs leased by a worker gone for good.
SPOILED_LEASES = [("crashes", "lots"), ("isolate", "maybe"), ("max_attempts", "x")]


class Finished(observe.Observer):
    """Every attempt_finished, in order."""

    def __init__(self) -> None:
        self.seen: list[observe.AttemptFinished] = []

    def attempt_finished(self, event: observe.AttemptFinished) -> None:
        self.seen.append(event)


def sqlite_store(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    return make_store("sqlite", tmp_path, request).migrate()


def test_a_worker_fails_runs_whose_counts_it_cannot_read_and_stays_up(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Text in an integer column made the reaper die at every pass, until the worker
    stopped; now each such run fails for good, with an event naming the column, and the
    observers count it as failed."""
    store = sqlite_store(tmp_path, request)
    app = App(store.url, schema=store.schema)
    finished = app.observe(Finished())
    registry = CollectorRegistry()
    app.observe(MetricsObserver(registry))

    @app.workflow(TYPE)
    def work(payload: Any, ctx: Context) -> str:
        return "done"

    with store.client() as client:
        runs = [client.start(TYPE, {"n": n}).id for n in range(16)]
        claimed = dict(zip(runs[1:5], SPOILED_COUNTS, strict=True))
        reaped = dict(zip(runs[5:8], SPOILED_LEASES, strict=True))
        for n, run_id in enumerate(reaped):
            store.sql(
                "update workflow_run set status = 'leased', leased_by = 'gone', "
                "lease_token = ?, lease_until = '2020-01-01 00:00:00.000' where id = ?",
                LEASE.format(n),
                run_id,
            )
        for run_id, (column, value) in {**claimed, **reaped}.items():
            spoil(store, "workflow_run", column, value, "id = ?", run_id)
        healthy = [run_id for run_id in runs if run_id not in claimed and run_id not in reaped]
        with poller_thread(app, type_prefixes=["test.values.%"], poll_interval=0.2) as poller:
            done = lambda: all(client.get(r).is_terminal for r in runs)  # noqa: E731
            wait_until(done, 30, lambda: str([client.get(r).status for r in runs]))
            # Several reaper passes later, the worker is still up and claiming.
            later = client.start(TYPE, {"n": "later"}).id
            wait_until(lambda: client.get(later).is_terminal, 15, "the later run never ran")
            assert poller._failure is None
        for run_id in [*healthy, later]:
            assert client.get(run_id).status is RunStatus.SUCCEEDED
        for run_id, (column, value) in {**claimed, **reaped}.items():
            run = client.get(run_id)
            assert run.status is RunStatus.FAILED, (column, run)
            assert run.last_error is not None and "UnreadableRow" in run.last_error
            [event] = failed_events(client, run_id)
            assert event["error"]["type"] == "simpleworkflow.errors.UnreadableRow"
            assert event["unreadable"][column]["raw"] == str(value)
            assert f"{column} holds {str(value)!r}" in event["error"]["message"]
            assert event["retryable"] is False
        assert len(client.list(limit=100).runs) == len(runs) + 1  # listed, every one
        # The claim's and the reaper's alike, though no handler ran.
        failed = lambda: {e.run.id for e in finished.seen if e.outcome == observe.FAILED}  # noqa: E731
        wait_until(lambda: failed() == {*claimed, *reaped}, 10, lambda: str(failed()))
        counted = registry.get_sample_value(
            "simpleworkflow_attempts_finished_total", {"type": TYPE, "outcome": "failed"}
        )
        assert counted == len(claimed) + len(reaped)
        reaped_count = registry.get_sample_value("simpleworkflow_leases_reaped_total")
        assert reaped_count == len(reaped)

        # Corrected by hand (or not: a retry writes the counts again), each runs again.
        retried = client.admin.retry(runs[3])  # max_attempts 'many'
        assert retried.status is RunStatus.PENDING and retried.max_attempts == 3


def test_observers_count_a_run_failed_as_unreadable(store: Store) -> None:
    """On both stores: a run whose time cannot be read fails through ``attempt_finished``
    like any attempt that failed for good, so metrics count it."""
    app = App(store.url, schema=store.schema)
    finished = app.observe(Finished())
    registry = CollectorRegistry()
    app.observe(MetricsObserver(registry))

    @app.workflow(TYPE)
    def work(payload: Any, ctx: Context) -> str:
        return "done"

    bad_time = {"postgres": "0001-01-01 00:00+14", "sqlite": "garbage"}[store.kind]
    with store.client() as client:
        runs = [client.start(TYPE, {"n": n}).id for n in range(4)]
        spoil(store, "workflow_run", "created_at", bad_time, "id = ?", runs[0])
        with poller_thread(app, type_prefixes=["test.values.%"], poll_interval=0.2):
            done = lambda: all(client.get(r).is_terminal for r in runs)  # noqa: E731
            wait_until(done, 30, lambda: str([client.get(r).status for r in runs]))
            wait_until(lambda: len(finished.seen) == 4, 10, lambda: str(finished.seen))
    by_run = {event.run.id: event for event in finished.seen}
    assert by_run[runs[0]].outcome == observe.FAILED
    assert "created_at holds" in (by_run[runs[0]].error or "")
    assert all(by_run[r].outcome == observe.SUCCEEDED for r in runs[1:])
    sample = registry.get_sample_value
    attempts = "simpleworkflow_attempts_finished_total"
    assert sample(attempts, {"type": TYPE, "outcome": "failed"}) == 1
    assert sample(attempts, {"type": TYPE, "outcome": "succeeded"}) == 3


def test_listings_show_a_status_this_version_does_not_know(
    tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite with its checks off (or a newer runtime) may hold a status outside the
    five; Postgres's CHECK constraint refuses one (tested in
    test_postgres_refuses_a_status_outside_its_check). Workers never claim it."""
    store = sqlite_store(tmp_path, request)
    with store.client() as client:
        runs = [client.start(TYPE, {"n": n}).id for n in range(3)]
        odd = runs[1]
        spoil_unchecked(store, "update workflow_run set status = 'paused' where id = ?", odd)
        listed = {run.id: run for run in client.list().runs}
        assert set(listed) == set(runs)
        run = client.get(odd)
        assert run.status_text == "unreadable: paused" and not run.is_terminal
        assert run.unreadable["status"].raw == "paused"
        assert run.to_dict()["status"] == "unreadable: paused"
        assert client.admin.stats()  # the counts leave it out, and answer
        with pytest.raises(Exception, match="paused"):
            client.admin.retry(odd)  # not retryable, said with its status

    api = Api(store)
    try:
        listing = api.get(f"{PREFIX}/runs")
        assert listing.status_code == 200, listing.text
        body = {one["id"]: one for one in listing.json()["runs"]}[odd]
        assert body["status"] == "unreadable: paused"
        assert body["unreadable"]["status"]["raw"] == "paused"
        one = api.get(f"{PREFIX}/runs/{odd}")
        assert one.status_code == 200 and one.json()["status"] == "unreadable: paused"
    finally:
        api.close()

    for command in (["runs", "list"], ["runs", "show", odd], ["runs", "list", "--json"]):
        result = run_cli(store, capsys, *command)
        assert result.code == 0, (command, result.err)
        assert "unreadable: paused" in result.out, command

    dash = Dash(store)
    try:
        for page in ("/runs", f"/runs/{odd}", "/"):
            response = dash.get(page)
            assert response.status_code == 200, (page, response.text)
        assert "unreadable: paused" in dash.get(f"/runs/{odd}").text
    finally:
        dash.close()


def test_postgres_refuses_a_status_outside_its_check(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = make_store("postgres", tmp_path, request).migrate()
    with store.client() as client:
        run_id = client.start(TYPE).id
    with pytest.raises(Exception, match="check"):
        store.sql("update workflow_run set status = 'paused' where id = ?", run_id)


def test_registry_rate_limits_and_subscriptions_written_by_hand_are_listed(
    tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    """A registry row whose retention or limit SQLite keeps as text, a rate limit with
    a period that is no number, a subscription with a time that is none: the listings
    answer, and a worker for those types starts and runs."""
    store = sqlite_store(tmp_path, request)
    app = App(store.url, schema=store.schema)
    app.rate_limit("declared", "100/s")

    @app.workflow(TYPE, rate_limit="declared")
    def work(payload: Any, ctx: Context) -> str:
        return "done"

    store.sql(
        "insert into workflow_rate_limit (name, max_runs, period) values ('declared', 5, 'y')"
    )
    store.sql(
        "insert into workflow_registry (workflow_name, runtime, retention, created_at) "
        "values (?, 'python', 'forever', 'long ago')",
        TYPE,
    )
    store.sql("insert into workflow_rate_limit (name, max_runs, period) values ('odd', 'ten', 'x')")
    store.sql(
        "insert into workflow_subscription (pattern, workflow_type, priority, created_at) "
        "values ('orders.*', ?, 'soon', 'yesterday')",
        TYPE,
    )
    with store.client() as client:
        [entry] = client.admin.registry()
        assert str(entry.retention) == "unreadable: forever"
        limits = {limit.name: limit for limit in client.admin.rate_limits()}
        assert str(limits["odd"].period) == "unreadable: x"
        [subscription] = client.admin.subscriptions()
        assert subscription.to_dict()["created_at"] == "unreadable: yesterday"
        run_id = client.start(TYPE).id
        with poller_thread(app, type_prefixes=["test.values.%"], poll_interval=0.2):
            wait_until(lambda: client.get(run_id).is_terminal, 15, "the run never ran")
        assert client.get(run_id).status is RunStatus.SUCCEEDED
        declared = {limit.name: limit for limit in client.admin.rate_limits()}["declared"]
        assert (declared.max_runs, declared.period) == (100, 1.0)  # the code's, written
    for command in (["registry", "list"], ["registry", "list", "--json"]):
        result = run_cli(store, capsys, *command)
        assert result.code == 0, (command, result.err)
        assert "unreadable: forever" in result.out
    api = Api(store)
    try:
        for path in ("/types", "/limits", "/subscriptions"):
            response = api.get(f"{PREFIX}{path}")
            assert response.status_code == 200, (path, response.text)
    finally:
        api.close()
    dash = Dash(store)
    try:
        assert dash.get("/types").status_code == 200
    finally:
        dash.close()


def test_events_whose_data_is_no_object_are_listed(store: Store) -> None:
    with store.client() as client:
        run_id = client.start(TYPE).id
        store.sql(
            "insert into workflow_event (workflow_id, event_type, data) values (?, 'note', ?)",
            run_id,
            json.dumps([1, "two"]),
        )
        store.sql(
            "insert into workflow_event (workflow_id, event_type, data) values (?, 'failed', ?)",
            run_id,
            json.dumps("just text"),
        )
        assert len(client.events(run_id)) == 3
    api = Api(store)
    try:
        response = api.get(f"{PREFIX}/runs/{run_id}/events")
        assert response.status_code == 200, response.text
    finally:
        api.close()
    dash = Dash(store)
    try:
        response = dash.get(f"/runs/{run_id}")
        assert response.status_code == 200, response.text
    finally:
        dash.close()


def test_a_schedule_whose_runs_the_store_refuses_is_paused(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A schedule written with SQLite's checks off, whose runs break them (max_attempts
    0), or whose priority is text: the scheduler pauses each with the reason, and the
    others start."""
    store = sqlite_store(tmp_path, request)
    insert = (
        "insert into workflow_schedule (name, workflow_type, cron, payload, next_tick_at, "
        "priority, max_attempts) values (?, ?, '* * * * *', '{}', '2020-01-01 00:00:00.000', ?, ?)"
    )
    spoil_unchecked(store, insert, "zero.attempts", TYPE, 100, 0)
    store.sql(insert, "text.priority", TYPE, "urgent", None)
    store.sql(insert, "healthy.one", TYPE, 100, None)
    for _ in range(5):
        if one_pass(store) > 0:
            break
    with store.client() as client:
        listed = {schedule.name: schedule for schedule in client.schedules.list()}
        assert listed["zero.attempts"].paused
        assert "cannot be started" in (listed["zero.attempts"].error or "")
        assert listed["text.priority"].paused
        assert "priority holds 'urgent'" in (listed["text.priority"].error or "")
        assert not listed["healthy.one"].paused
    started = store.sql("select idempotency_key from workflow_run")
    assert started and all(key.startswith("schedule:healthy.one:") for (key,) in started)


def test_a_trace_context_or_wait_that_is_no_object_neither_fails_its_run_nor_others(
    store: Store,
) -> None:
    """``trace_context`` is JSON any runtime may write; a scalar or a list there made
    Postgres refuse every outcome of the run (``jsonb - text`` on a scalar), and with it
    the other outcomes written in the same transaction."""
    app = App(store.url, schema=store.schema)

    @app.workflow(TYPE)
    def work(payload: Any, ctx: Context) -> str:
        if payload["n"] % 2:
            raise ValueError("once")  # a failure writes the trace context too
        return "done"

    with store.client() as client:
        runs = [client.start(TYPE, {"n": n}, max_attempts=1).id for n in range(8)]
        for run_id, odd in zip(runs, ["5", '"text"', "[1, 2]", "null"], strict=False):
            spoil(store, "workflow_run", "trace_context", odd, "id = ?", run_id)
        # And a wait that is no object, which the claim resumes from.
        for run_id, odd in zip(runs[4:], ["7", '"sleep"', "[]"], strict=False):
            spoil(store, "workflow_run", "waiting_for", odd, "id = ?", run_id)
        with poller_thread(app, type_prefixes=["test.values.%"], poll_interval=0.2):
            done = lambda: all(client.get(r).is_terminal for r in runs)  # noqa: E731
            wait_until(done, 30, lambda: str([client.get(r).status for r in runs]))
        for n, run_id in enumerate(runs):
            run = client.get(run_id)
            assert run.status is (RunStatus.FAILED if n % 2 else RunStatus.SUCCEEDED), run
            assert run.attempts_made == 1


def test_a_journal_written_by_hand_is_listed_and_fails_only_its_run(
    tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite: a journal row whose position or attempts is text, or whose output is not
    JSON (its checks off). The steps listings show it marked; the worker fails the run."""
    store = sqlite_store(tmp_path, request)
    app = App(store.url, schema=store.schema)

    @app.workflow(TYPE)
    def journaled(payload: Any, ctx: Context) -> str:
        return str(ctx.step("a", lambda: "fresh"))

    insert = (
        "insert into workflow_step (run_id, step_name, kind, position, status, output, "
        "attempts) values (?, 'a', 'step', ?, 'completed', ?, ?)"
    )
    spoiled = {"position": ("first", '"x"', 1), "attempts": (0, '"x"', "one")}
    spoiled["output"] = (0, "{not json", 1)
    with store.client() as client:
        runs = [client.start(TYPE, {"n": n}).id for n in range(5)]
        by_run = dict(zip(runs, spoiled, strict=False))
        for run_id, column in by_run.items():
            spoil_unchecked(store, insert, run_id, *spoiled[column])
        for run_id in runs[3:]:
            store.sql(insert, run_id, 0, '"replayed"', 1)
        for run_id, column in by_run.items():
            result = run_cli(store, capsys, "runs", "steps", run_id, "--json")
            assert result.code == 0, result.err
            [step] = json.loads(result.out)["steps"]
            assert str(step[column]).startswith("unreadable: "), step
        api = Api(store)
        try:
            for run_id in by_run:
                response = api.get(f"{PREFIX}/runs/{run_id}/steps")
                assert response.status_code == 200, response.text
                assert "unreadable: " in response.text
        finally:
            api.close()
        with poller_thread(app, type_prefixes=["test.values.%"], poll_interval=0.2):
            done = lambda: all(client.get(r).is_terminal for r in runs)  # noqa: E731
            wait_until(done, 30, lambda: str([client.get(r).status for r in runs]))
        for run_id in runs[3:]:
            assert client.get(run_id).result == "replayed"
        for run_id, column in by_run.items():
            assert client.get(run_id).status is RunStatus.FAILED
            [event] = failed_events(client, run_id)
            assert set(event["unreadable"]) == {f"step 'a' {column}"}
    dash = Dash(store)
    try:
        for run_id in runs:
            assert dash.get(f"/runs/{run_id}").status_code == 200
    finally:
        dash.close()


def test_a_registry_retention_out_of_range_is_listed(store: Store) -> None:
    """Postgres: an interval past timedelta's range; SQLite: text. The registry, the
    types page and the sweep answer."""
    spoiled = {"postgres": "100000000 years", "sqlite": "forever"}[store.kind]
    store.sql(
        "insert into workflow_registry (workflow_name, runtime, retention) values (?, 'python', ?)",
        TYPE,
        spoiled,
    )
    with store.client() as client:
        [entry] = client.admin.registry()
        assert str(entry.retention).startswith("unreadable: ")
        assert client.admin.sweep(default_retention=60, dry_run=True).total == 0
    api = Api(store)
    try:
        response = api.get(f"{PREFIX}/types")
        assert response.status_code == 200 and "unreadable: " in response.text, response.text
    finally:
        api.close()


def test_a_rate_limit_whose_period_is_no_number_holds_up_no_claim(
    tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite: a rate limit written by hand with a period that is text, named by a type
    the worker claims (in the registry, not in code). Its runs and the others run."""
    store = sqlite_store(tmp_path, request)
    app = App(store.url, schema=store.schema)
    other = "test.values.other.v1"

    @app.workflow(TYPE)
    def work(payload: Any, ctx: Context) -> str:
        return "done"

    @app.workflow(other)
    def more(payload: Any, ctx: Context) -> str:
        return "done"

    store.sql("insert into workflow_rate_limit (name, max_runs, period) values ('odd', 5, 'x')")
    store.sql(
        "insert into workflow_registry (workflow_name, runtime, rate_limit) "
        "values (?, 'python', 'odd')",
        TYPE,
    )
    with store.client() as client:
        runs = [client.start(t, {"n": n}).id for n in range(3) for t in (TYPE, other)]
        with poller_thread(app, type_prefixes=["test.values.%"], poll_interval=0.2):
            done = lambda: all(client.get(r).is_terminal for r in runs)  # noqa: E731
            wait_until(done, 20, lambda: str([client.get(r).status for r in runs]))
        assert all(client.get(r).status is RunStatus.SUCCEEDED for r in runs)
    listed = run_cli(store, capsys, "limits", "list")
    assert listed.code == 0 and "unreadable: x" in listed.out, listed.err
