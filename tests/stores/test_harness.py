"""The test harness (``simpleworkflow.testing``): the real engine on a fresh store, a clock
the test moves, helpers to run until something happens, and doubles of steps.

Everything runs on both stores: on SQLite the statements read the test's clock through a
connection function, on Postgres through a ``now()`` that shadows ``pg_catalog``'s.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import Store

from simpleworkflow import App, Context, RetryPolicy, config, errors
from simpleworkflow.backends import open_backend
from simpleworkflow.models import RunStatus
from simpleworkflow.testing import Environment, assert_replays, record_history

MONTH = "billing.month.v1"
NAP = "billing.nap.v1"
STEPS = "billing.steps.v1"
TICK = "billing.tick.v1"

app = App()
charges: list[str] = []


@app.workflow(MONTH)
async def month(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Sleeps a month, charges with an hour between tries, waits three days for an
    approval that never comes."""
    await ctx.sleep("wait-a-month", "30d")

    def charge() -> str:
        charges.append(payload["order"])
        if charges.count(payload["order"]) < 3:
            raise RuntimeError("the card was declined")
        return "charged"

    hourly = RetryPolicy(max_attempts=5, backoff="fixed", base="1h", jitter=0)
    charged = await ctx.step("charge", charge, retry=hourly)
    approval = await ctx.wait_for_event("approval", event="approved", timeout="3d")
    return {"charged": charged, "approval": approval}


@app.workflow(NAP)
def nap(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    ctx.set_value("phase", "asleep")
    ctx.stream_append("log", "sleeping")
    ctx.sleep("nap", payload["for"])
    ctx.stream_append("log", "awake")
    ctx.stream_close("log")
    ctx.set_value("phase", "awake")
    answer = ctx.wait_for_event("answer", event="answered")
    return {"answer": answer}


@app.workflow(STEPS)
async def steps(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    quick = RetryPolicy(max_attempts=4, backoff="fixed", base=0, jitter=0)
    price = await ctx.step("price", lambda: 10, retry=quick)
    quote = await ctx.step("quote", _call_the_quote_service)
    return {"price": price, "quote": quote}


FLAKY = "billing.flaky.v1"
flaky_tries: list[str] = []


@app.workflow(FLAKY, retry=RetryPolicy(backoff="fixed", base="6h", jitter=0))
async def flaky(payload: dict[str, Any], ctx: Context) -> int:
    """Fails its first two attempts as a whole (a run's retry, six hours apart)."""
    flaky_tries.append(payload["key"])
    if flaky_tries.count(payload["key"]) < 3:
        raise RuntimeError("the partner is down")
    return flaky_tries.count(payload["key"])


FETCH = "billing.fetch.v1"


@app.workflow(FETCH)
async def fetch(payload: dict[str, Any], ctx: Context) -> Any:
    """Steps whose functions are coroutine functions."""

    async def rates() -> str:
        return "live rates"

    async def invoice() -> str:
        raise AssertionError("a test's double answers for the invoice service")

    got = await ctx.step("rates", rates, retry=RetryPolicy(base=0, jitter=0))
    return {"rates": got, "invoice": await ctx.step("invoice", invoice)}


LEDGER = "billing.ledger.v1"


@app.workflow(LEDGER)
def ledger(payload: dict[str, Any], ctx: Context) -> Any:
    """A transactional step, then a plain one: doubles stand in for either."""
    booked = ctx.transaction("book", _book, retry=RetryPolicy(base=0, jitter=0))
    return {"booked": booked, "sent": ctx.step("send", lambda: "sent")}


def _book(conn: Any) -> str:
    raise AssertionError("a test's double answers for the booking")


def _call_the_quote_service() -> str:
    raise AssertionError("a test's double answers for the quote service")


ticking = App()
ticking.rate_limit("partner-api", "1/h")
PARTNER = "billing.partner.v1"


@ticking.workflow(PARTNER, rate_limit="partner-api")
async def call_partner(payload: dict[str, Any], ctx: Context) -> int:
    return int(payload["n"])


@ticking.schedule(TICK, cron="0 3 * * *")
async def tick(payload: dict[str, Any], ctx: Context) -> str:
    return "ticked"


@pytest.fixture
def env(tmp_path: Path) -> Any:
    with Environment(app, directory=tmp_path) as env:
        yield env


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    """Each store: ``None`` (the harness's SQLite file), or a Postgres server's URL."""
    return request.getfixturevalue("postgres_url") if request.param == "postgres" else None


@pytest.fixture
def any_env(store_url: str | None, tmp_path: Path) -> Any:
    """An environment on each store."""
    with Environment(app, database_url=store_url, directory=tmp_path) as env:
        yield env


def test_a_month_long_workflow_finishes_under_the_harness(any_env: Environment) -> None:
    env = any_env
    began = env.now()
    order = f"o-{uuid.uuid4().hex[:8]}"
    run = env.start(MONTH, {"order": order})

    done = env.run_until_done(run.id)

    assert done.status is RunStatus.SUCCEEDED
    assert done.result == {"charged": "charged", "approval": None}
    journal = {entry.step_name: entry for entry in env.journal(run.id)}
    assert list(journal) == ["wait-a-month", "charge", "approval"]
    assert journal["charge"].attempts == 3 and charges.count(order) == 3
    assert journal["approval"].output == {"timeout": True}
    # the store's clock went through the month, the two hours of backoff and the 3 days
    # (give or take a second: a wait's row is stamped a few ms after its deadline is set)
    charge, approval = journal["charge"], journal["approval"]
    assert charge.started_at is not None and charge.started_at - began >= timedelta(days=30)
    assert charge.duration is not None and charge.duration >= 2 * 3600 - 1
    assert approval.duration is not None and approval.duration >= 3 * 86400 - 1
    assert env.now() - began >= timedelta(days=33, hours=2)


def test_advance_moves_the_clock_by_hand(store_url: str | None, tmp_path: Path) -> None:
    with Environment(app, database_url=store_url, directory=tmp_path, auto_skip=False) as env:
        run = env.start(NAP, {"for": "2h"})
        waiting = env.run_until_waiting(run.id, "sleep")
        assert waiting.status is RunStatus.PENDING and env.values(run.id) == {"phase": "asleep"}

        env.advance("1h")  # not yet
        with pytest.raises(errors.WaitTimeout):
            env.run_until_waiting(run.id, "signal", timeout=0.5)

        env.advance(timedelta(hours=1))
        assert env.run_until_waiting(run.id, "signal").status is RunStatus.PENDING
        assert env.values(run.id) == {"phase": "awake"}
        assert env.stream(run.id, "log") == ["sleeping", "awake"]


def test_signals_reads_and_waits(any_env: Environment) -> None:
    env = any_env
    run = env.start(NAP, {"for": 0})
    assert env.run_until_waiting(run.id, "signal").waiting_states == ["waiting-signal"]

    env.signal(run.id, "answered", {"yes": True})

    done = env.run_until_done(run.id)
    assert done.status is RunStatus.SUCCEEDED and done.result == {"answer": {"yes": True}}
    assert env.results(run.id)["answer"] == {"signal": {"yes": True}}
    assert env.stream(run.id, "log") == ["sleeping", "awake"]


def test_a_runs_own_retries_and_deadline_follow_the_clock(any_env: Environment) -> None:
    env = any_env
    key = uuid.uuid4().hex
    began = env.now()
    retried = env.start(FLAKY, {"key": key}, max_attempts=3)
    assert env.run_until_done(retried.id).result == 3
    assert env.now() - began >= timedelta(hours=12)  # two backoffs of six hours

    late = env.start(NAP, {"for": "2d"}, deadline="1d")  # sleeps past its deadline
    done = env.run_until_done(late.id)
    assert done.status is RunStatus.FAILED and "DeadlineExceeded" in (done.last_error or "")


def test_a_debounce_window_passes_with_the_clock(any_env: Environment) -> None:
    env = any_env
    key = f"sync-{uuid.uuid4().hex[:6]}"
    first = env.start(NAP, {"for": 0}, debounce=(key, "1h"))
    again = env.start(NAP, {"for": 0}, debounce=(key, "1h"))
    assert again.id == first.id  # collapsed: due an hour after the last start

    waiting = env.run_until_waiting(first.id, "signal")
    assert waiting.status is RunStatus.PENDING and env.now() >= again.run_at


def test_a_signal_is_dated_by_the_test_clock(env: Environment) -> None:
    """Races are won by the signal sent first: its time must be the store's."""
    run = env.start(NAP, {"for": 0})
    env.run_until_waiting(run.id, "signal")
    later = env.advance("10d")

    env.signal(run.id, "answered")

    assert env.client.signals(run.id)[0].created_at >= later - timedelta(milliseconds=1)


def test_waiting_for_what_never_comes_says_so(env: Environment) -> None:
    run = env.start(NAP, {"for": "1d"})
    with pytest.raises(errors.WaitTimeout, match="cannot happen"):
        env.run_until_done(run.id)  # the day is skipped, then the run waits for a signal


def test_settle_runs_everything_that_time_alone_moves(env: Environment) -> None:
    began = env.now()
    napping = [env.start(NAP, {"for": f"{hours}h"}) for hours in (1, 5)]
    retried = env.start(FLAKY, {"key": uuid.uuid4().hex}, max_attempts=3)

    env.settle()

    assert env.client.get(retried.id).status is RunStatus.SUCCEEDED
    for run in napping:  # both slept, and wait for their signal now
        assert env.client.get(run.id).waiting_states == ["waiting-signal"]
    assert env.now() - began >= timedelta(hours=12)


def test_a_step_fails_as_often_as_the_test_says(any_env: Environment) -> None:
    env = any_env
    env.fail_step("price", times=2, workflow=STEPS)
    env.stub_step("quote", "Q-7")
    run = env.start(STEPS, {})

    done = env.run_until_done(run.id)

    assert done.status is RunStatus.SUCCEEDED and done.result == {"price": 10, "quote": "Q-7"}
    assert [(e.step_name, e.attempts) for e in env.journal(run.id)] == [("price", 3), ("quote", 1)]


def test_doubles_stand_in_for_a_transactional_step(any_env: Environment) -> None:
    env = any_env
    booking = env.stub_step("book", "B-1", workflow=LEDGER)
    sending = env.fail_step("send", times=1)
    run = env.start(LEDGER, {})

    done = env.run_until_done(run.id)

    assert done.result == {"booked": "B-1", "sent": "sent"}
    assert (booking.tries, sending.tries) == (1, 2)
    assert env.results(run.id) == {"book": "B-1", "send": "sent"}  # both journaled


def test_doubles_stand_in_for_coroutine_functions(env: Environment) -> None:
    rates = env.fail_step("rates", times=2, workflow=FETCH)
    env.stub_step("invoice", {"total": 12})
    run = env.start(FETCH, {})

    done = env.run_until_done(run.id)

    assert done.result == {"rates": "live rates", "invoice": {"total": 12}}
    assert rates.tries == 3 and env.journal(run.id)[0].attempts == 3


def test_a_failure_double_can_exhaust_the_retries(env: Environment) -> None:
    env.fail_step("price", times=9, error=lambda: ValueError("no price today"))
    run = env.start(STEPS, {})

    done = env.run_until_done(run.id)

    assert done.status is RunStatus.FAILED
    assert "no price today" in (done.last_error or "")
    assert env.journal(run.id)[0].attempts == 4


def test_cron_ticks_come_with_the_skipped_days(store_url: str | None, tmp_path: Path) -> None:
    with Environment(ticking, database_url=store_url, directory=tmp_path) as env:
        _declared(env, TICK)  # by the worker, as it starts
        env.advance("3d")

        # each 03:00 on the way fired on time: none was missed (and skipped)
        ticked = env.client.list(type_prefix=TICK).runs
        assert len(ticked) == 3
        for run in ticked:
            assert env.run_until_done(run.id).result == "ticked"
        ticks = sorted(run.payload["scheduled_for"] for run in ticked)
        assert all(tick.endswith("T03:00:00Z") for tick in ticks), ticks


def test_a_rate_limits_windows_open_as_the_clock_skips(
    store_url: str | None, tmp_path: Path
) -> None:
    with Environment(ticking, database_url=store_url, directory=tmp_path) as env:
        _declared(env, TICK)  # the worker has written its limits too
        began = env.now()
        runs = [env.start(PARTNER, {"n": n}) for n in range(3)]

        assert [env.run_until_done(run.id).result for run in runs] == [0, 1, 2]
        # one run an hour (windows start on the hour): the third waited two windows on
        hour = began.replace(minute=0, second=0, microsecond=0)
        assert env.now() >= hour + timedelta(hours=2)
        throttled = [e for run in runs for e in env.client.events(run.id)]
        assert sum(e.event_type == "throttled" for e in throttled) >= 2


def _declared(env: Environment, name: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            env.client.schedules.get(name)
            return
        except errors.ScheduleNotFound:
            assert time.monotonic() < deadline, "the worker never declared the schedule"
            time.sleep(0.01)


def test_a_recorded_history_replays_against_the_code(env: Environment, tmp_path: Path) -> None:
    run = env.start(NAP, {"for": "1h"})
    env.run_until_waiting(run.id, "signal")
    path = tmp_path / "nap.json"
    record_history(env.client, run.id, path)
    assert json.loads(path.read_text())["run"]["type"] == NAP

    assert assert_replays(app, path).verdict == "ok"

    changed = App()

    @changed.workflow(NAP)
    def renamed(payload: dict[str, Any], ctx: Context) -> None:
        ctx.sleep("siesta", payload["for"])  # the journal has "nap"

    with pytest.raises(AssertionError, match="does not replay: diverged"):
        assert_replays(changed, path)


def test_a_history_file_that_is_not_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "not.json"
    path.write_text('{"format": 1, "run": {}}')
    with pytest.raises(errors.InvalidArgument, match="not a recorded history"):
        assert_replays(app, path)


def test_bad_input_is_refused(env: Environment) -> None:
    with pytest.raises(errors.InvalidArgument, match="advance's duration"):
        env.advance("-1h")
    with pytest.raises(errors.InvalidArgument, match="times must be a positive integer"):
        env.fail_step("price", times=0)


def test_closing_stops_the_worker_and_removes_the_store() -> None:
    with Environment(app) as env:
        path = Path(config.sqlite_path(env.url))
        assert path.exists() and env.worker is not None
    assert not path.parent.exists()
    assert [t.name for t in threading.enumerate() if t.name == "simpleworkflow-test-worker"] == []


def test_the_store_itself_is_dated_by_the_test_clock(any_env: Environment) -> None:
    """On Postgres even the columns' defaults read the test's clock (the harness's tables
    are made with its now() first in the path); elsewhere on the server time is real."""
    env = any_env
    later = env.advance("100d")
    run = env.start(NAP, {"for": 0})
    if env.schema is not None:
        assert run.created_at >= later - timedelta(milliseconds=1)
    assert env.client.get(run.id).run_at >= later - timedelta(milliseconds=1)


def test_a_store_nobody_rigged_runs_its_statements_unchanged(store: Store) -> None:
    backend = open_backend(store.url, schema=store.schema)
    try:
        assert backend.rig is None
        assert all("simpleworkflow_test_now" not in sql for sql in backend.q.values())
    finally:
        backend.close()


class _Any(dict[str, Any]):
    def __missing__(self, key: str) -> None:
        return None


def test_every_statement_still_compiles_on_the_test_clock(env: Environment) -> None:
    """The harness's SQLite statements call its clock where they said 'now': each must
    still be one SQLite accepts (a 'now' used as anything but a time value would not)."""
    backend = env.client.backend
    assert backend.rig is not None
    conn = sqlite3.connect(config.sqlite_path(env.url))
    conn.create_function("simpleworkflow_test_now", 0, env.clock.sql_now)
    conn.create_function("json_contains", 2, lambda a, b: False)  # the store's own, too
    try:
        rigged = {name: sql for name, sql in backend.q.items() if "simpleworkflow_test_now" in sql}
        assert len(rigged) > 50 and all("'now'" not in sql for sql in backend.q.values())
        for sql in rigged.values():
            conn.execute("explain " + sql, _Any())
    finally:
        conn.close()
