"""Cron schedules on both stores and both faces: create, list, get, pause, resume,
trigger and delete; refused input that writes nothing; the scheduler's passes (each
missed-tick policy, from a next tick set in the past rather than by waiting), racing
schedulers, rows written with plain SQL, and schedules declared in code with
``@app.schedule``."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import re
import threading
import time
import zoneinfo
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import Store, poller_thread
from prometheus_client import CollectorRegistry

from simpleworkflow import App, Schedule, errors, observe, schedules
from simpleworkflow.backends import Backend
from simpleworkflow.metrics import MetricsObserver
from simpleworkflow.worker import scheduler
from simpleworkflow.worker.scheduler import Scheduler

NIGHTLY = "billing.invoice.nightly.v1"
REPORT = "reports.digest.v1"


class Awaited:
    """The async schedules facade with each coroutine run to completion, so that one test
    body checks both faces."""

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._target, self._loop = target, loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not inspect.iscoroutinefunction(attr):
            return attr
        return lambda *args, **kwargs: self._loop.run_until_complete(attr(*args, **kwargs))


@pytest.fixture(params=["sync", "async"])
def faces(request: pytest.FixtureRequest, store: Store) -> Iterator[Any]:
    """``client.schedules`` of a ``Client`` or (awaited) of an ``AsyncClient``."""
    if request.param == "sync":
        with store.client() as client:
            yield client.schedules
        return
    loop = asyncio.new_event_loop()
    client = store.async_client()
    try:
        yield Awaited(client.schedules, loop)
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()


def scheduled_runs(store: Store, name: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``(type, key, payload)`` of the runs a schedule started, by key: from the table."""
    rows = store.sql(
        "select type, idempotency_key, payload from workflow_run "
        "where idempotency_key like ? order by idempotency_key",
        f"schedule:{name}:%",
    )
    return [(t, k, p if isinstance(p, dict) else json.loads(p)) for t, k, p in rows]


def one_pass(store: Store) -> float:
    """One pass of a scheduler, as a worker runs it; returns the sleep it chose."""
    backend = store.backend()

    async def go() -> float:
        try:
            return await Scheduler(backend).pass_once()
        finally:
            await backend.aclose()

    return asyncio.run(go())


def set_next_tick(store: Store, name: str, moment: datetime) -> None:
    backend = store.backend()
    try:
        text = backend.encode_params({"t": moment})["t"]
    finally:
        backend.close()
    store.sql("update workflow_schedule set next_tick_at = ? where name = ?", text, name)


def test_create_get_list_pause_resume_delete(faces: Any) -> None:
    made = faces.create(
        NIGHTLY, cron="0 2 * * *", tz="Europe/Berlin", payload={"region": "eu"}, priority=5
    )
    assert isinstance(made, Schedule)
    assert (made.name, made.workflow_type, made.cron, made.timezone) == (
        NIGHTLY,
        NIGHTLY,
        "0 2 * * *",
        "Europe/Berlin",
    )
    assert (made.payload, made.missed, made.priority, made.max_attempts) == (
        {"region": "eu"},
        "skip",
        5,
        None,
    )
    assert not made.paused and not made.in_code and made.last_tick_at is None
    # 02:00 in Berlin is 01:00 UTC in winter and 00:00 UTC in summer
    assert made.next_tick_at is not None and made.next_tick_at > datetime.now(UTC)
    assert made.next_tick_at.minute == 0 and made.next_tick_at.hour in (0, 1)
    other = faces.create("reports.weekly", REPORT, cron="0 8 * * MON", missed="once")
    assert [s.name for s in faces.list()] == ["billing.invoice.nightly.v1", "reports.weekly"]
    assert faces.list(type=REPORT) == [other]
    assert faces.get(NIGHTLY) == made

    paused = faces.pause(NIGHTLY)
    assert paused.paused and faces.get(NIGHTLY).paused
    resumed = faces.resume(NIGHTLY)
    assert not resumed.paused and resumed.next_tick_at == made.next_tick_at
    assert faces.delete(NIGHTLY) is True
    assert faces.delete(NIGHTLY) is False
    assert [s.name for s in faces.list()] == ["reports.weekly"]
    for call in (faces.get, faces.pause, faces.resume):
        with pytest.raises(errors.ScheduleNotFound, match="no schedule named"):
            call(NIGHTLY)


def triggered_twice(faces: Any, name: str) -> tuple[Any, Any]:
    """Two triggers at the start of one second (tried again if the clock crossed into the
    next between them): a double click."""
    for _ in range(5):
        time.sleep(1 - time.time() % 1)
        first, second = faces.trigger(name), faces.trigger(name)
        if first.payload["scheduled_for"] == second.payload["scheduled_for"]:
            return first, second
    raise AssertionError("two triggers never fell within one second")


def test_trigger_starts_one_run_now_as_a_tick_would_and_keeps_the_next_tick(
    faces: Any, store: Store
) -> None:
    made = faces.create(
        NIGHTLY, cron="0 2 * * *", payload={"region": "eu"}, priority=5, max_attempts=7
    )
    before = datetime.now(UTC).replace(microsecond=0)
    first, second = triggered_twice(faces, NIGHTLY)
    assert first.created and not second.created and second.id == first.id  # one run
    assert (first.type, first.priority, first.max_attempts) == (NIGHTLY, 5, 7)
    moment = first.payload["scheduled_for"]
    assert first.payload == {
        "region": "eu",
        "schedule": NIGHTLY,
        "scheduled_for": moment,
        "triggered": True,
    }
    assert before <= datetime.fromisoformat(moment) <= datetime.now(UTC)
    assert first.idempotency_key == f"schedule:{NIGHTLY}:now:{moment}"
    assert [(t, k) for t, k, _ in scheduled_runs(store, NIGHTLY)] == [
        (NIGHTLY, first.idempotency_key)
    ]
    after = faces.get(NIGHTLY)
    assert (after.next_tick_at, after.last_tick_at) == (made.next_tick_at, None)

    faces.pause(NIGHTLY)  # a paused schedule may still be started by hand
    time.sleep(1 - time.time() % 1)
    again = faces.trigger(NIGHTLY)
    assert again.created and again.id != first.id and faces.get(NIGHTLY).paused
    assert len(scheduled_runs(store, NIGHTLY)) == 2

    with pytest.raises(errors.ScheduleNotFound, match="no schedule named"):
        faces.trigger("no.such.schedule")
    with pytest.raises(errors.InvalidArgument, match="invalid schedule name"):
        faces.trigger("Not:A:Name")
    assert len(scheduled_runs(store, NIGHTLY)) == 2


def test_creating_again_changes_the_definition_and_keeps_the_pause(faces: Any) -> None:
    first = faces.create(NIGHTLY, cron="0 2 * * *")
    faces.pause(NIGHTLY)
    same_cron = faces.create(NIGHTLY, cron="0 2 * * *", payload={"v": 2}, missed="each")
    assert same_cron.paused and same_cron.payload == {"v": 2} and same_cron.missed == "each"
    assert same_cron.next_tick_at == first.next_tick_at
    moved = faces.create(NIGHTLY, cron="30 3 * * *")
    assert moved.next_tick_at is not None and moved.next_tick_at.minute == 30


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"name": "Billing.Nightly"}, errors.InvalidArgument, "invalid schedule name"),
        ({"name": "billing:nightly"}, errors.InvalidArgument, "invalid schedule name"),
        ({"type": "billing"}, errors.InvalidTypeName, "invalid workflow type"),
        ({"cron": "61 * * * *"}, errors.InvalidArgument, "Bad minute"),
        ({"cron": "* * *"}, errors.InvalidArgument, "Wrong number of fields"),
        ({"cron": ""}, errors.InvalidArgument, "non-empty"),
        ({"cron": "* * */20 * 1L"}, errors.InvalidArgument, "never ticks"),
        ({"tz": "Mars/Olympus"}, errors.InvalidArgument, "unknown time zone"),
        ({"missed": "all"}, errors.InvalidArgument, "missed must be one of skip, once, each"),
        ({"payload": [1, 2]}, errors.InvalidPayload, "must be a JSON object"),
        ({"payload": {"scheduled_for": 1}}, errors.InvalidPayload, "cannot hold"),
        ({"payload": {"x": float("nan")}}, errors.InvalidPayload, "NaN or infinite"),
        ({"priority": True}, errors.InvalidArgument, "priority"),
        ({"max_attempts": 0}, errors.InvalidArgument, "max_attempts"),
    ],
)
def test_bad_definitions_are_refused_and_write_nothing(
    store: Store, arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    call: dict[str, Any] = {"name": "billing.nightly", "type": NIGHTLY, "cron": "0 2 * * *"}
    call.update(arguments)
    with store.client() as client, pytest.raises(error, match=message):
        client.schedules.create(call.pop("name"), call.pop("type"), **call)
    assert store.count("workflow_schedule") == 0
    declared: dict[str, Any] = {"name": "billing.nightly", "type": NIGHTLY, "cron": "0 2 * * *"}
    declared.update(arguments)
    with pytest.raises(error, match=message):
        App().schedule(declared.pop("type"), **declared)


def test_aliases_and_seconds_are_read() -> None:
    assert schedules.check_cron("@daily") == "@daily"
    assert schedules.check_cron(" */15  * * * * * ") == "*/15 * * * * *"
    after = datetime(2026, 1, 1, 12, 0, 7, tzinfo=UTC)
    assert schedules.next_tick("*/15 * * * * *", "UTC", after) == after.replace(second=15)
    assert schedules.next_tick("@hourly", "UTC", after) == after.replace(hour=13, second=0)


def test_ticks_follow_the_time_zone_across_dst() -> None:
    """02:30 in Berlin does not exist on 29 March 2026: cronsim, as Debian's cron, runs
    the job at 03:00 that day; on 25 October 02:30 happens twice and it runs once."""
    before_spring = datetime(2026, 3, 28, 12, tzinfo=UTC)
    ticks = [schedules.next_tick("30 2 * * *", "Europe/Berlin", before_spring)]
    ticks.append(schedules.next_tick("30 2 * * *", "Europe/Berlin", ticks[-1]))
    assert [t.isoformat() for t in ticks] == [
        "2026-03-29T01:00:00+00:00",  # 03:00 CEST
        "2026-03-30T00:30:00+00:00",  # 02:30 CEST
    ]
    autumn = schedules.due(
        "30 2 * * *",
        "Europe/Berlin",
        "each",
        datetime(2026, 10, 25, 0, 0, tzinfo=UTC),
        datetime(2026, 10, 25, 3, 0, tzinfo=UTC),
    )
    assert len(autumn.ticks) == 1


def test_due_ticks_by_policy() -> None:
    """An outage of 100 seconds of a schedule that ticks every second: the last minute's
    ticks are on time and all start; of the 40 missed, ``skip`` starts none, ``once`` the
    latest, ``each`` every one."""
    now = datetime(2026, 11, 26, 12, 0, 30, 250_000, tzinfo=UTC)
    since = now - timedelta(seconds=100)
    found = {
        p: schedules.due("* * * * * *", "UTC", p, since, now) for p in ("skip", "once", "each")
    }
    assert [len(found[p].ticks) for p in ("skip", "once", "each")] == [60, 61, 100]
    assert [found[p].skipped for p in ("skip", "once", "each")] == [40, 39, 0]
    assert found["once"].ticks[0] == now.replace(microsecond=0) - timedelta(seconds=60)
    assert {d.next_at for d in found.values()} == {
        now.replace(microsecond=0) + timedelta(seconds=1)
    }
    for due in found.values():
        assert due.ticks == sorted(due.ticks)


def test_each_catches_up_at_most_the_cap() -> None:
    now = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)
    due = schedules.due("* * * * * *", "UTC", "each", now - timedelta(hours=3), now)
    late = [t for t in due.ticks if t < now - schedules.GRACE]
    assert len(late) == schedules.MAX_CATCH_UP
    assert late[-1] == now - schedules.GRACE - timedelta(seconds=1)  # the latest ones
    assert due.skipped == 3 * 3600 - 60 - schedules.MAX_CATCH_UP


def far_cron(now: datetime) -> tuple[str, datetime]:
    """A daily cron at a time of day twelve hours from now, so that no tick falls within
    the grace of the test's now, and its tick three days ago."""
    at = (now + timedelta(hours=12)).replace(second=0, microsecond=0)
    return f"{at.minute} {at.hour} * * *", at - timedelta(days=4)


@pytest.mark.parametrize(("missed", "started"), [("skip", 0), ("once", 1), ("each", 4)])
def test_missed_ticks_by_policy_in_the_store(store: Store, missed: str, started: int) -> None:
    """Every worker was down for four days: the pass starts what the policy says, keyed
    by tick, with the tick in the payload, and plans the next tick after now."""
    cron, long_ago = far_cron(datetime.now(UTC))
    with store.client() as client:
        client.schedules.create(NIGHTLY, cron=cron, payload={"k": 1}, missed=missed)
        set_next_tick(store, NIGHTLY, long_ago)
        assert one_pass(store) == 0.0  # something was due: it looks again at once
        after = client.schedules.get(NIGHTLY)
    runs = scheduled_runs(store, NIGHTLY)
    assert len(runs) == started
    ticks = [long_ago + timedelta(days=d) for d in range(4)][4 - started :]
    assert [key for _, key, _ in runs] == [schedules.tick_key(NIGHTLY, t) for t in ticks]
    assert [payload for _, _, payload in runs] == [
        {"k": 1, "schedule": NIGHTLY, "scheduled_for": schedules.iso(t)} for t in ticks
    ]
    assert after.next_tick_at == long_ago + timedelta(days=4)
    assert after.last_tick_at == (ticks[-1] if ticks else None)
    sleep = one_pass(store)  # nothing due now: sleeps until the next tick, at most MAX_SLEEP
    assert sleep == scheduler.MAX_SLEEP
    assert len(scheduled_runs(store, NIGHTLY)) == started


def test_a_paused_schedule_starts_nothing_and_resumes_from_now(store: Store) -> None:
    cron, long_ago = far_cron(datetime.now(UTC))
    with store.client() as client:
        client.schedules.create(NIGHTLY, cron=cron, missed="each")
        set_next_tick(store, NIGHTLY, long_ago)
        client.schedules.pause(NIGHTLY)
        one_pass(store)
        assert scheduled_runs(store, NIGHTLY) == []
        resumed = client.schedules.resume(NIGHTLY)
    assert resumed.next_tick_at == long_ago + timedelta(days=4)  # the paused ticks are gone
    one_pass(store)
    assert scheduled_runs(store, NIGHTLY) == []


def test_racing_schedulers_start_each_tick_once(store: Store) -> None:
    """Eight schedulers read the same due ticks at once: one moves the next tick on and
    starts the runs; the others find it moved and start nothing."""
    cron, long_ago = far_cron(datetime.now(UTC))
    with store.client() as client:
        client.schedules.create(NIGHTLY, cron=cron, missed="each")
    set_next_tick(store, NIGHTLY, long_ago)
    backends = [store.backend() for _ in range(8)]
    barrier = threading.Barrier(len(backends))
    errors_seen: list[BaseException] = []

    def race(backend: Backend) -> None:
        async def go() -> None:
            try:
                due, now, _ = await backend.execute_async(backend.due_schedules(10))
                barrier.wait(10)
                for schedule in due:
                    await Scheduler(backend)._start(schedule, now)
            finally:
                await backend.aclose()

        try:
            asyncio.run(go())
        except BaseException as exc:
            errors_seen.append(exc)

    threads = [threading.Thread(target=race, args=(b,)) for b in backends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors_seen == []
    assert len(scheduled_runs(store, NIGHTLY)) == 4
    assert store.count() == 4


def test_a_schedule_inserted_with_plain_sql_is_planned_then_started(store: Store) -> None:
    """The statement of docs/schedules.md: no next tick; the next pass plans one."""
    store.sql(
        "insert into workflow_schedule (name, workflow_type, cron, timezone, payload) "
        "values (?, ?, ?, ?, ?)",
        "reports.weekly",
        REPORT,
        "0 8 * * MON",
        "Europe/Berlin",
        '{"kind": "weekly"}',
    )
    assert one_pass(store) == 0.0
    with store.client() as client:
        planned = client.schedules.get("reports.weekly")
    assert planned.next_tick_at is not None and planned.next_tick_at > datetime.now(UTC)
    assert planned.next_tick_at.astimezone(zoneinfo.ZoneInfo("Europe/Berlin")).hour == 8
    assert planned.payload == {"kind": "weekly"} and planned.missed == "skip"


@pytest.mark.parametrize(
    ("cron", "zone", "planned", "reason"),
    [
        ("every day", "UTC", False, "invalid cron expression"),
        ("0 8 * * *", "Mars/Olympus", False, "unknown time zone"),
        ("0 8 * * *", "Mars/Olympus", True, "unknown time zone"),  # a zone this host lacks
    ],
)
def test_a_row_the_scheduler_cannot_read_is_paused_with_the_reason(
    store: Store,
    caplog: pytest.LogCaptureFixture,
    cron: str,
    zone: str,
    planned: bool,
    reason: str,
) -> None:
    store.sql(
        "insert into workflow_schedule (name, workflow_type, cron, timezone) values (?, ?, ?, ?)",
        "broken.one",
        REPORT,
        cron,
        zone,
    )
    if planned:
        set_next_tick(store, "broken.one", datetime.now(UTC) - timedelta(minutes=5))
    with caplog.at_level(logging.WARNING, logger="simpleworkflow.worker"):
        one_pass(store)
    with store.client() as client:
        broken = client.schedules.get("broken.one")
    assert broken.paused and broken.error is not None and reason in broken.error
    assert f"schedule broken.one paused: {reason}" in caplog.text
    assert store.count() == 0


def test_app_schedule_registers_the_handler_once() -> None:
    app = App()

    @app.schedule(NIGHTLY, cron="0 2 * * *", tz="Europe/Berlin")
    def nightly(payload: dict[str, Any]) -> None: ...

    @app.schedule(REPORT, cron="0 8 * * MON", name="reports.weekly", missed="once")
    @app.schedule(REPORT, cron="0 8 1 * *", name="reports.monthly")
    @app.workflow(REPORT)
    def digest(payload: dict[str, Any]) -> None: ...

    assert app.definitions[NIGHTLY].fn is nightly and app.definitions[REPORT].fn is digest
    assert sorted(app.schedules) == [NIGHTLY, "reports.monthly", "reports.weekly"]
    assert app.schedules["reports.weekly"].missed == "once"
    with pytest.raises(errors.InvalidArgument, match="already declared"):
        app.schedule(NIGHTLY, cron="0 3 * * *")
    with pytest.raises(errors.InvalidArgument, match="already registered"):
        app.schedule(REPORT, cron="0 9 * * *", name="reports.other")(lambda payload: None)


def test_workers_write_the_apps_schedules_and_report_those_gone_from_code(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    old = App(store.url, schema=store.schema)
    old.schedule(NIGHTLY, cron="0 2 * * *")(lambda payload: None)
    old.schedule(NIGHTLY, cron="0 4 * * *", name="billing.early")
    with poller_thread(old, poll_interval=0.05):
        pass
    with store.client() as client:
        assert [(s.name, s.cron, s.in_code) for s in client.schedules.list()] == [
            ("billing.early", "0 4 * * *", True),
            (NIGHTLY, "0 2 * * *", True),
        ]
        client.schedules.create("billing.by-hand", NIGHTLY, cron="0 5 * * *")

    new = App(store.url, schema=store.schema)
    new.schedule(NIGHTLY, cron="0 3 * * *", payload={"v": 2})(lambda payload: None)
    warnings = caplog.at_level(logging.WARNING, logger="simpleworkflow.worker")
    with warnings, poller_thread(new, poll_interval=0.05, scheduler=False):
        pass
    with store.client() as client:
        found = {s.name: s for s in client.schedules.list()}
    assert found[NIGHTLY].cron == "0 3 * * *" and found[NIGHTLY].payload == {"v": 2}
    assert not found["billing.early"].paused  # kept, and reported
    assert "schedule(s) billing.early, declared in code" in caplog.text
    assert "billing.by-hand" not in caplog.text  # made at run time: none of the code's


def test_a_worker_starts_the_ticks_of_a_seconds_schedule(store: Store) -> None:
    app = App(store.url, schema=store.schema)
    app.schedule("cron.tick.v1", cron="* * * * * *")(lambda payload: payload)
    with poller_thread(app, poll_interval=0.05):
        deadline = datetime.now(UTC) + timedelta(seconds=20)
        while len(scheduled_runs(store, "cron.tick.v1")) < 2 and datetime.now(UTC) < deadline:
            threading.Event().wait(0.1)
    runs = scheduled_runs(store, "cron.tick.v1")
    assert len(runs) >= 2
    assert all(run_type == "cron.tick.v1" for run_type, _, _ in runs)


def documented_sql(store: Store) -> list[str]:
    """The statements of docs/schedules.md for other runtimes, for this store: on SQLite
    without the schema prefix and with SQLite's clock, as the page says."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "schedules.md").read_text()
    blocks = re.findall(r"```sql\n(.*?)```", text, flags=re.S)
    statements = [s.strip() for block in blocks for s in block.split(";") if s.strip()]
    statements = [
        "\n".join(x for x in s.splitlines() if not x.startswith("--")) for s in statements
    ]
    if store.kind == "sqlite":
        now = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
        return [s.replace("workflow.", "").replace("now()", now) for s in statements]
    return [s.replace("workflow.", f'"{store.schema}".') for s in statements]


def test_the_documented_sql_creates_pauses_resumes_and_deletes(store: Store) -> None:
    create, pause, resume, delete = documented_sql(store)
    store.sql(create)
    store.sql(create)  # again: an upsert
    one_pass(store)
    with store.client() as client:
        made = client.schedules.get("reports.weekly")
        assert (made.workflow_type, made.missed, made.payload) == (
            REPORT,
            "once",
            {"period": "week"},
        )
        assert made.next_tick_at is not None and made.next_tick_at > datetime.now(UTC)
        store.sql(pause)
        assert client.schedules.get("reports.weekly").paused
        store.sql(resume)
        one_pass(store)
        assert client.schedules.get("reports.weekly").next_tick_at == made.next_tick_at
        store.sql(delete)
        assert client.schedules.list() == []


def test_the_schedulers_read_is_an_index_scan(store: Store) -> None:
    """20,000 schedules waiting for later: the scheduler's read of the due ones walks
    ``idx_workflow_schedule_due`` on both stores, not the table."""
    later = "2099-01-01 00:00:00"
    if store.kind == "postgres":
        store.sql(
            "insert into workflow_schedule (name, workflow_type, cron, next_tick_at) "
            "select 's.' || n, 'a.b.v1', '@daily', timestamptz '2099-01-01' + n * interval '1s' "
            "from generate_series(1, 20000) as n"
        )
        store.sql("analyze workflow_schedule")
    else:
        store.sql(
            "with recursive n(i) as (select 1 union all select i + 1 from n where i < 20000) "
            "insert into workflow_schedule (name, workflow_type, cron, next_tick_at) "
            "select 's.' || i, 'a.b.v1', '@daily', ? from n",
            later,
        )
        store.sql("analyze")
    backend = store.backend()
    query = backend.q["due_schedules"]
    backend.close()
    if store.kind == "postgres":
        plan = "\n".join(
            row[0] for row in store.sql("explain " + query.replace("%(limit)s", "100"))
        )
        assert "idx_workflow_schedule_due" in plan and "Seq Scan" not in plan, plan
    else:
        plan = "\n".join(
            str(row[-1])
            for row in store.sql("explain query plan " + query.replace(":limit", "100"))
        )
        assert (
            "USING INDEX idx_workflow_schedule_due" in plan
            and "SCAN workflow_schedule\n" not in plan + "\n"
        ), plan


class Recorder(observe.Observer):
    """The producer hooks a scheduler calls, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    @contextlib.contextmanager
    def around_start(self, type: str | None, parent: Any = None) -> Iterator[None]:
        self.calls.append(("around_start", type))
        yield

    def run_created(self, event: observe.RunCreated) -> None:
        self.calls.append(("run_created", (event.run.type, event.created)))


def test_runs_a_scheduler_starts_reach_the_observers_and_the_metrics(store: Store) -> None:
    """As a client's starts do: one around_start per schedule (a batch when several ticks
    are due), a run_created for each run, so runs_started counts them."""
    registry = CollectorRegistry()
    recorder = Recorder()
    observers = observe.Observers([MetricsObserver(registry), recorder])
    cron, long_ago = far_cron(datetime.now(UTC))
    with store.client() as client:
        client.schedules.create(NIGHTLY, cron=cron, missed="each")
        client.schedules.create("report.daily.v1", cron=cron, missed="once")
    for name in (NIGHTLY, "report.daily.v1"):
        set_next_tick(store, name, long_ago)
    backend = store.backend()

    async def go() -> None:
        try:
            await Scheduler(backend, observers=observers).pass_once()
        finally:
            await backend.aclose()

    asyncio.run(go())
    assert len(scheduled_runs(store, NIGHTLY)) == 4
    assert len(scheduled_runs(store, "report.daily.v1")) == 1
    started = {
        name: registry.get_sample_value("simpleworkflow_runs_started_total", {"type": name})
        for name in (NIGHTLY, "report.daily.v1")
    }
    assert started == {NIGHTLY: 4.0, "report.daily.v1": 1.0}
    assert Counter(recorder.calls) == {
        ("around_start", None): 1,  # four ticks: a batch
        ("run_created", (NIGHTLY, True)): 4,
        ("around_start", "report.daily.v1"): 1,
        ("run_created", ("report.daily.v1", True)): 1,
    }
    assert recorder.calls[0][0] == "around_start" and recorder.calls[-1][0] == "run_created"


def test_a_triggered_run_reaches_the_clients_observers_and_the_metrics(store: Store) -> None:
    registry = CollectorRegistry()
    recorder = Recorder()
    with store.client(observers=[MetricsObserver(registry), recorder]) as client:
        client.schedules.create(NIGHTLY, cron="0 2 * * *")
        client.schedules.trigger(NIGHTLY)
    assert recorder.calls == [("around_start", NIGHTLY), ("run_created", (NIGHTLY, True))]
    started = registry.get_sample_value("simpleworkflow_runs_started_total", {"type": NIGHTLY})
    assert started == 1.0
