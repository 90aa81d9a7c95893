"""Times and durations at the edges of their range (issue 24), on both stores.

A run whose ``run_at`` was ``0001-01-01T00:00:00+14:00`` (year 0 in UTC) was stored by
Postgres, and then every worker that claimed it died reading it back, one after another
as its lease ran out; listing runs failed while it existed. Every edge now refuses a time
outside ``durations.EARLIEST`` .. ``durations.LATEST`` and a duration over 100 years, the
same way on both stores. Here: what lies just inside the range is stored, read back,
listed and claimed by a real worker (a poller on a thread); what lies outside is refused
with a typed error everywhere it can come in, and nothing is stored.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from api_helpers import PREFIX, Api, assert_problem
from conftest import Store, poller_thread
from worker_app import wait_until

from simpleworkflow import App, Client, Context, RetryPolicy, RunStatus, cli, durations, errors
from simpleworkflow.models import Run

ECHO = "test.range.echo.v1"
PLUS_14 = timezone(timedelta(hours=14))
MINUS_14 = timezone(timedelta(hours=-14))
#: The range's ends, written with the offsets furthest from UTC.
EARLIEST_EAST = durations.EARLIEST.astimezone(PLUS_14)
LATEST_WEST = durations.LATEST.astimezone(MINUS_14)
YEAR_0 = datetime(1, 1, 1, tzinfo=PLUS_14)
YEAR_10000 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=MINUS_14)
QUICK = RetryPolicy(backoff="fixed", base=0.2, jitter=0)


@pytest.fixture
def app(store: Store) -> App:
    app = App(store.url, schema=store.schema, retry=QUICK)

    @app.workflow(ECHO)
    def echo(payload: Any) -> Any:
        return payload

    return app


def working(app: App) -> contextlib.AbstractContextManager[Any]:
    return poller_thread(app, type_prefixes=["test.%"], poll_interval=0.1, lease_duration=2)


def finished(client: Client, run_id: str) -> Run:
    wait_until(lambda: client.get(run_id).is_terminal, 20, lambda: str(client.get(run_id)))
    return client.get(run_id)


def times(run: Run) -> tuple[datetime, datetime | None]:
    return run.run_at, run.deadline


# -- just inside the range: stored, read back, claimed -----------------------------------


def test_runs_at_the_ends_of_the_range_are_read_back_and_claimed(app: App, client: Client) -> None:
    due = client.start(ECHO, {"n": 1}, run_at=EARLIEST_EAST, deadline=LATEST_WEST)
    overdue = client.start(ECHO, {"n": 2}, deadline=durations.EARLIEST)
    last = client.start(ECHO, {"n": 3}, run_at=LATEST_WEST)
    longest = client.start(ECHO, delay=durations.MAX_SECONDS, deadline="36600d")
    assert times(due) == (durations.EARLIEST, durations.LATEST)
    for run in (due, overdue, last, longest):
        assert times(client.get(run.id)) == times(run)
    assert (longest.run_at - longest.created_at).total_seconds() == pytest.approx(
        durations.MAX_SECONDS, abs=2
    )
    assert {run.id for run in client.list().runs} == {due.id, overdue.id, last.id, longest.id}

    with working(app):
        assert finished(client, due.id).result == {"n": 1}
        failed = finished(client, overdue.id)
        assert failed.status is RunStatus.FAILED
        assert failed.last_error is not None and "DeadlineExceeded" in failed.last_error
        # The worker goes on with the runs that come next.
        assert finished(client, client.start(ECHO, {"n": 4}).id).result == {"n": 4}
    assert client.get(last.id).status is RunStatus.PENDING
    assert client.get(longest.id).status is RunStatus.PENDING
    for run in (due, overdue):
        lapsed = [e for e in client.events(run.id) if e.data.get("reason") == "lease_expired"]
        assert not lapsed, "a worker died holding the run"


def test_the_api_takes_the_ends_of_the_range_and_answers_for_them(store: Store) -> None:
    api = Api(store)
    try:
        body = {
            "type": ECHO,
            "run_at": EARLIEST_EAST.isoformat(),
            "deadline": LATEST_WEST.isoformat(),
        }
        created = api.post(f"{PREFIX}/runs", json=body)
        assert created.status_code == 201, created.text
        started = created.json()
        assert started["run_at"] == "0002-01-01T00:00:00+00:00"
        assert started["deadline"] == "9998-12-31T23:59:59+00:00"
        read = api.get(f"{PREFIX}/runs/{started['id']}").json()
        assert {k: v for k, v in started.items() if k not in ("created", "warnings")} == read
        far = api.post(f"{PREFIX}/runs", json={"type": ECHO, "deadline": "36600d"})
        assert far.status_code == 201, far.text
        listed = api.get(f"{PREFIX}/runs", params={"created_since": EARLIEST_EAST.isoformat()})
        assert listed.status_code == 200, listed.text
        assert {run["id"] for run in listed.json()["runs"]} == {started["id"], far.json()["id"]}
    finally:
        api.close()


def test_the_api_refuses_durations_out_of_the_range_wherever_it_takes_them(
    store: Store,
) -> None:
    """Start bodies and the runs listing are tested with the rest of their input in
    test_api_input.py; these are the other endpoints that take a duration."""
    api = Api(store)
    try:
        workers = api.get(f"{PREFIX}/workers", params={"gone_within": "999999999d"})
        assert_problem(workers, 422, "gone_within must be at most 100 years")
        limit = api.request("PUT", f"{PREFIX}/limits/partner-api", json={"rate": "1/999999999d"})
        assert_problem(limit, 422, "the rate's period must be at most 100 years")
        assert store.count("workflow_rate_limit") == 0
    finally:
        api.close()


# -- outside it: refused wherever it comes in, nothing stored ----------------------------


def test_durable_calls_out_of_the_range_are_refused_in_the_body(app: App, client: Client) -> None:
    """Each call raises InvalidArgument where it is made, before anything is journaled."""

    @app.workflow("test.range.calls.v1")
    async def calls(payload: Any, ctx: Context) -> list[str]:
        def later() -> None:
            raise errors.RetryAfter(1e300)

        said = []
        for call in (
            lambda: ctx.sleep("nap", "999999999d"),
            lambda: ctx.sleep("nap", 1e300),
            lambda: ctx.sleep_until("alarm", YEAR_0),
            lambda: ctx.sleep_until("alarm", YEAR_10000),
            lambda: ctx.wait_for_event("reply", event="go", timeout="999999999d"),
            lambda: ctx.step("later", later),
            lambda: ctx.step("ok", lambda: 1, retry=RetryPolicy(cap="999999999d")),
        ):
            try:
                await call()
            except errors.InvalidArgument as exc:
                said.append(str(exc))
        return said

    run_id = client.start("test.range.calls.v1").id
    with working(app):
        run = finished(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == [
        "sleep duration must be at most 100 years (3162240000 seconds), not '999999999d'",
        "sleep duration must be at most 100 years (3162240000 seconds), not 1e+300",
        f"sleep_until's time must be a time {durations.TIME_RANGE} (UTC), "
        "not '0001-01-01T00:00:00+14:00'",
        f"sleep_until's time must be a time {durations.TIME_RANGE} (UTC), "
        "not '9999-12-31T23:59:59-14:00'",
        "timeout must be at most 100 years (3162240000 seconds), not '999999999d'",
        "RetryAfter's delay must be at most 100 years (3162240000 seconds), not 1e+300",
        "retry cap must be at most 100 years (3162240000 seconds), not '999999999d'",
    ]
    assert [entry.step_name for entry in client.steps(run_id)] == []


def test_declarations_out_of_the_range_are_refused(store: Store) -> None:
    app = App(store.url, schema=store.schema)
    with pytest.raises(errors.InvalidArgument, match=r"^timeout must be at most 100 years"):
        app.workflow("test.range.slow.v1", timeout="999999999d")(lambda payload: None)
    with pytest.raises(errors.InvalidArgument, match=r"^the rate's period must be at most 100"):
        app.rate_limit("partner-api", (1, "999999999d"))
    with pytest.raises(errors.InvalidArgument, match=r"^retry base must be at most 100 years"):
        RetryPolicy(base=1e300)


def test_the_admin_refuses_durations_out_of_the_range(store: Store, client: Client) -> None:
    admin = client.admin
    admin.set_runtime(ECHO, "python")
    for call, field in [
        (lambda: admin.set_retention(ECHO, "999999999d"), "retention"),
        (lambda: admin.set_rate_limit("partner-api", (5, "999999999d")), "the rate's period"),
        (lambda: admin.workers(gone_within="999999999d"), "gone_within"),
        (lambda: admin.purge(older_than="999999999d"), "older_than"),
        (lambda: admin.sweep(default_retention="999999999d"), "the default retention"),
    ]:
        with pytest.raises(errors.InvalidArgument, match=f"^{field} must be at most 100 years"):
            call()
    assert admin.registry()[0].retention is None
    assert admin.rate_limits() == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["start", ECHO, "--deadline", YEAR_0.isoformat()], "--deadline must be a time from"),
        (["start", ECHO, "--deadline", "999999999d"], "--deadline must be at most 100 years"),
        (["start", ECHO, "--delay", "999999999d"], "delay must be at most 100 years"),
        (["start", ECHO, "--debounce", "k", "999999999d"], "debounce window must be at most"),
        (["start", ECHO, "--retention", "999999999d"], "retention must be at most 100 years"),
        (["runs", "list", "--created-since", YEAR_0.isoformat()], "--created-since must be"),
        (["runs", "list", "--created-until", YEAR_10000.isoformat()], "--created-until must"),
    ],
    ids=["deadline-year-0", "deadline-in", "delay", "debounce", "retention", "since", "until"],
)
def test_the_cli_refuses_times_and_durations_out_of_the_range(
    store: Store, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    code = cli.main(["-d", store.url, "--schema", store.schema, *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"simpleworkflow: error: {says}"), err
    assert store.count("workflow_run") == 0


def test_a_refused_time_reaches_no_store_from_any_zone(store: Store, client: Client) -> None:
    """The range is the instant's, whatever offset the time is written with: the first
    instant of year 2 from +14:00 and the last of year 9998 from -14:00 are inside it,
    a microsecond further is not."""
    assert client.start(ECHO, run_at=EARLIEST_EAST).run_at == durations.EARLIEST
    for moment in (
        EARLIEST_EAST - timedelta(microseconds=1),
        LATEST_WEST + timedelta(microseconds=1),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime.max.replace(tzinfo=UTC),
    ):
        with pytest.raises(errors.InvalidArgument, match=r"^run_at must be a time from"):
            client.start(ECHO, run_at=moment)
    assert store.count("workflow_run") == 1
