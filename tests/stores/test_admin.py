"""The admin facade on both stores: every operator verb, what it changes and what it refuses.

Runs are put in the states an operator meets (failed by a real worker, leased, sleeping,
waiting) and each verb is checked the way an operator would check it: through the runs,
events and journal the clients read back, and the rows left in the tables.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from conftest import Store, poller_thread
from worker_app import wait_until

from simpleworkflow import Client, Context, RunStatus, errors, observe
from simpleworkflow.admin import STATES, Admin, AsyncAdmin, unclaimed
from simpleworkflow.app import App
from simpleworkflow.models import Run
from simpleworkflow.retry import RetryPolicy

INVOICE = "billing.invoice.v1"
REFUND = "billing.refund.v1"
ONCE = RetryPolicy(max_attempts=1)
QUICK = RetryPolicy(backoff="fixed", base=0.1, jitter=0)


@pytest.fixture
def admin(client: Client) -> Admin:
    return client.admin


def sql_time(store: Store, moment: datetime) -> str:
    """A time as each store keeps it, for arranging ages with plain SQL."""
    if store.kind == "sqlite":
        return moment.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "milliseconds")
    return moment.isoformat()


def age(store: Store, run_id: str, days: float) -> None:
    """Make a run look as if it last changed ``days`` ago."""
    then = sql_time(store, datetime.now(UTC) - timedelta(days=days))
    store.sql("update workflow_run set updated_at = ? where id = ?", then, run_id)


def event_types(client: Client, run_id: str) -> list[str]:
    return [e.event_type for e in client.events(run_id) if e.event_type != "heartbeat"]


def finished(client: Client, run_id: str) -> Run:
    wait_until(
        lambda: client.get(run_id).is_terminal, 30, lambda: f"{client.get(run_id)} never finished"
    )
    return client.get(run_id)


# -- registry ---------------------------------------------------------------------------


def test_registry_set_pause_resume(admin: Admin) -> None:
    assert admin.registry() == []
    entry = admin.set_runtime(INVOICE, "go", description="the Go service")
    assert (entry.workflow_name, entry.runtime, entry.is_enabled) == (INVOICE, "go", True)
    # A set without a description keeps the one there.
    assert admin.set_runtime(INVOICE, "python").description == "the Go service"
    assert admin.pause(INVOICE).is_enabled is False
    assert [e.is_enabled for e in admin.registry()] == [False]
    assert admin.resume(INVOICE).is_enabled is True
    assert [(e.workflow_name, e.runtime) for e in admin.registry()] == [(INVOICE, "python")]


@pytest.mark.parametrize(
    ("verb", "error", "message"),
    [
        (lambda a: a.pause(REFUND), errors.TypeNotRegistered, f"{REFUND} is not in the registry"),
        (lambda a: a.resume(REFUND), errors.TypeNotRegistered, f"{REFUND} is not in the registry"),
        (lambda a: a.pause("Billing"), errors.InvalidTypeName, "invalid workflow type 'Billing'"),
        (lambda a: a.set_runtime(INVOICE, "Go"), errors.InvalidArgument, "invalid runtime 'Go'"),
        (
            lambda a: a.set_runtime(INVOICE, "go", description="a\x00b"),
            errors.InvalidArgument,
            "a description must be text",
        ),
    ],
)
def test_registry_refusals_change_nothing(
    admin: Admin, verb: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        verb(admin)
    assert admin.registry() == []


def test_an_unregistered_type_is_both_a_bad_argument_and_a_missing_thing(admin: Admin) -> None:
    with pytest.raises(errors.InvalidArgument) as caught:
        admin.pause(REFUND)
    assert isinstance(caught.value, LookupError)
    assert caught.value.type == REFUND  # type: ignore[attr-defined]


def test_the_registry_view_rereads_for_a_missing_type_and_when_old(store: Store) -> None:
    """What the API's starts warn of: a type just registered is seen within ``recheck``,
    a pause within ``max_age``, and a read is not made for each start."""
    now = [0.0]
    view = unclaimed.RegistryView(max_age=30, recheck=1, clock=lambda: now[0])

    async def scenario() -> list[list[str]]:
        said = []
        async with store.async_client() as client:
            said.append(await view.start_warnings(client.admin, INVOICE))
            await client.admin.set_runtime(INVOICE, "python")
            said.append(await view.start_warnings(client.admin, INVOICE))  # read 0 s ago
            now[0] = 1.0
            said.append(await view.start_warnings(client.admin, INVOICE))
            await client.admin.pause(INVOICE)
            now[0] = 29.0
            said.append(await view.start_warnings(client.admin, INVOICE))  # known: no read
            now[0] = 31.0
            said.append(await view.start_warnings(client.admin, INVOICE))
        return said

    missing, still_missing, registered, not_yet_seen, paused = asyncio.run(scenario())
    assert missing == still_missing and "no worker or runtime has registered" in missing[0]
    assert registered == not_yet_seen == []
    assert paused == [
        f"{INVOICE} is paused: the run waits as pending until "
        f"`simpleworkflow registry resume {INVOICE}`"
    ]


# -- counts and lateness ------------------------------------------------------------------


def arrange_every_state(store: Store, client: Client) -> dict[str, str]:
    """One run of INVOICE in each state an operator may meet; ``{what: run id}``."""
    ids = {
        what: client.start(INVOICE).id
        for what in (
            "queued",
            "later",
            "leased",
            "succeeded",
            "failed",
            "cancelled",
            "retrying",
            "sleeping",
            "signal",
            "child",
            "step-retry",
            "race",
            "throttled",
            "deleted",
        )
    }
    client.start(REFUND)
    updates = {
        "later": ("run_at", sql_time(store, datetime.now(UTC) + timedelta(days=1))),
        "leased": ("status", "leased"),
        "succeeded": ("status", "succeeded"),
        "failed": ("status", "failed"),
        "retrying": ("attempt", 1),
        "sleeping": ("waiting_for", json.dumps({"kind": "sleep", "step": "nap"})),
        "signal": ("waiting_for", json.dumps({"kind": "signal", "event": "approved"})),
        "child": ("waiting_for", json.dumps({"kind": "child", "child_id": ids["queued"]})),
        "step-retry": ("waiting_for", json.dumps({"kind": "retry", "step": "charge"})),
        "race": (
            "waiting_for",
            json.dumps({"kind": "any", "waits": [{"kind": "signal"}, {"kind": "sleep"}]}),
        ),
        "throttled": (
            "waiting_for",
            json.dumps({"kind": "throttle", "rate_limit": "partner-api", "until": "2030-01-01"}),
        ),
    }
    for what, (column, value) in updates.items():
        store.sql(f"update workflow_run set {column} = ? where id = ?", value, ids[what])
    client.cancel(ids["cancelled"])
    client.delete(ids["deleted"])
    return ids


def test_counts_by_type_and_state_agree_with_the_listing(store: Store, client: Client) -> None:
    arrange_every_state(store, client)
    counts = client.admin.counts()
    assert list(counts) == [INVOICE, REFUND]
    assert list(counts[INVOICE]) == list(STATES)
    assert counts[INVOICE] == {
        "pending": 9,  # queued, later, retrying, sleeping, signal, child, step-retry, race,
        # throttled
        "leased": 1,
        "succeeded": 1,
        "failed": 1,
        "cancelled": 1,
        "sleeping": 2,  # the race waits for a signal and a sleep: it counts in both
        "waiting-signal": 2,
        "waiting-child": 1,
        "retrying": 2,  # due again after a failed attempt, or a step waiting to retry
        "throttled": 1,
    }
    assert counts[REFUND]["pending"] == 1
    for state in STATES:  # the same states as `list(status=...)`, deleted runs left out
        listed = client.list(type_prefix="billing.invoice.%", status=state, limit=100).runs
        assert counts[INVOICE][state] == len(listed), state


def test_oldest_due_counts_only_runs_that_are_due(store: Store, client: Client) -> None:
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    client.start(INVOICE, run_at=hour_ago)
    client.start(INVOICE)
    client.start(REFUND, delay="1d")  # scheduled for tomorrow: not late
    sleeper = client.start(REFUND, run_at=hour_ago - timedelta(hours=1))
    store.sql(
        "update workflow_run set waiting_for = ?, run_at = ? where id = ?",
        json.dumps({"kind": "sleep"}),
        sql_time(store, datetime.now(UTC) + timedelta(days=1)),
        sleeper.id,
    )
    late = client.admin.oldest_due()
    assert list(late) == [INVOICE]
    assert 3600 <= late[INVOICE] < 3600 + 300


def test_stats_put_counts_lateness_and_registry_together(client: Client) -> None:
    admin = client.admin
    client.start(INVOICE, run_at=datetime.now(UTC) - timedelta(minutes=5))
    admin.set_runtime(REFUND, "go")
    admin.pause(REFUND)
    stats = {item.type: item for item in admin.stats()}
    assert list(stats) == [INVOICE, REFUND]
    invoice, refund = stats[INVOICE], stats[REFUND]
    assert (invoice.total, invoice.counts["pending"], invoice.registry) == (1, 1, None)
    assert invoice.oldest_due is not None and invoice.oldest_due >= 300
    assert (refund.total, refund.oldest_due, refund.paused) == (0, None, True)
    shown = refund.to_dict()
    assert shown["registry"]["runtime"] == "go" and shown["counts"]["pending"] == 0
    assert json.loads(json.dumps(invoice.to_dict()))["oldest_due_seconds"] >= 300


# -- retry -------------------------------------------------------------------------------


def test_a_failed_run_is_retried_on_the_same_id_and_can_succeed(
    store: Store, client: Client
) -> None:
    app = App(store.url, schema=store.schema, retry=QUICK)
    fixed = threading.Event()

    @app.workflow(INVOICE)
    def invoice(payload: dict[str, Any]) -> dict[str, Any]:
        if not fixed.is_set():
            raise RuntimeError("the mail server is down")
        return {"sent": True}

    run = client.start(INVOICE, max_attempts=2)
    with poller_thread(app, type_prefixes=["billing.%"], poll_interval=0.1):
        failed = finished(client, run.id)
        assert (failed.status, failed.attempt, failed.max_attempts) == (RunStatus.FAILED, 2, 2)
        fixed.set()
        retried = client.admin.retry(run.id)
        assert (retried.id, retried.status, retried.attempt) == (run.id, RunStatus.PENDING, 2)
        assert retried.max_attempts == 3  # room for one more attempt
        assert retried.run_at <= datetime.now(UTC) + timedelta(seconds=5)
        done = finished(client, run.id)
    assert (done.status, done.result, done.attempts_made) == (
        RunStatus.SUCCEEDED,
        {"sent": True},
        3,
    )
    trail = event_types(client, run.id)
    assert trail.index("failed") < trail.index("retried_by_operator") < trail.index("succeeded")
    audit = next(e for e in client.events(run.id) if e.event_type == "retried_by_operator")
    assert audit.data["previous_status"] == "failed"
    assert "the mail server is down" in audit.data["last_error"]
    assert (audit.data["attempt"], audit.data["max_attempts"]) == (2, 3)


def test_a_retried_workflow_replays_its_finished_steps_and_reruns_the_one_that_gave_up(
    store: Store, client: Client
) -> None:
    app = App(store.url, schema=store.schema)
    ran: list[str] = []
    fixed = threading.Event()

    def reserve() -> str:
        ran.append("reserve")
        return "r-1"

    def charge() -> str:
        ran.append("charge")
        if not fixed.is_set():
            raise RuntimeError("card processor unavailable")
        return "c-1"

    @app.workflow(INVOICE, retry=ONCE)
    async def invoice(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        reservation = await ctx.step("reserve", reserve)
        payment = await ctx.step("charge", charge, retry=ONCE)
        return {"reservation": reservation, "payment": payment}

    run = client.start(INVOICE, max_attempts=1)
    with poller_thread(app, type_prefixes=["billing.%"], poll_interval=0.1):
        assert finished(client, run.id).status is RunStatus.FAILED
        fixed.set()
        client.admin.retry(run.id)
        done = finished(client, run.id)
    assert done.status is RunStatus.SUCCEEDED, done.last_error
    assert done.result == {"reservation": "r-1", "payment": "c-1"}
    assert ran == ["reserve", "charge", "charge"]  # reserve replayed from the journal
    steps = client.admin.steps(run.id)
    assert [(s.step_name, s.status, s.attempts) for s in steps] == [
        ("reserve", "completed", 1),
        ("charge", "completed", 2),
    ]


def test_a_cancelled_run_is_retried(client: Client) -> None:
    run = client.start(INVOICE)
    client.cancel(run.id, reason="by mistake")
    retried = client.admin.retry(run.id)
    assert (retried.status, retried.max_attempts, retried.attempts_made) == (
        RunStatus.PENDING,
        3,
        0,
    )
    assert event_types(client, run.id) == ["created", "cancelled", "retried_by_operator"]
    assert client.get(run.id) == retried


@pytest.mark.parametrize("state", ["pending", "leased", "succeeded", "deleted"])
def test_retry_refuses_a_run_that_has_not_failed(store: Store, client: Client, state: str) -> None:
    run = client.start(INVOICE)
    if state in ("leased", "succeeded"):
        store.sql("update workflow_run set status = ? where id = ?", state, run.id)
    if state == "deleted":
        client.cancel(run.id)
        client.delete(run.id)
    before = (client.get(run.id), client.events(run.id))
    with pytest.raises(errors.RunNotRetryable) as caught:
        client.admin.retry(run.id)
    assert f"run {run.id} cannot be retried" in str(caught.value)
    assert caught.value.status == ("cancelled" if state == "deleted" else state)
    assert (client.get(run.id), client.events(run.id)) == before


@pytest.mark.parametrize("run_id", ["01a2167f-82c9-750a-a792-c096e68577ca", "1234"])
def test_verbs_on_an_unknown_run_raise_run_not_found(admin: Admin, run_id: str) -> None:
    for verb in (admin.retry, admin.events, admin.steps):
        with pytest.raises(errors.RunNotFound):
            verb(run_id)


# -- events and steps ----------------------------------------------------------------------


def test_events_and_timed_steps(store: Store, client: Client) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow(INVOICE)
    async def invoice(payload: dict[str, Any], ctx: Context) -> str:
        await ctx.step("first", lambda: 1)
        await ctx.sleep("pause", 0.3)
        await ctx.step("second", lambda: 2)
        return "done"

    run = client.start(INVOICE)
    with poller_thread(app, type_prefixes=["billing.%"], poll_interval=0.1):
        assert finished(client, run.id).status is RunStatus.SUCCEEDED
    events = client.admin.events(run.id)
    assert events == client.events(run.id)
    assert [e.event_type for e in events][:1] == ["created"]
    steps = client.admin.steps(run.id)
    assert [s.step_name for s in steps] == ["first", "pause", "second"]
    for step in steps:
        assert step.started_at is not None and step.completed_at is not None
        assert step.started_at <= step.completed_at
        assert step.duration == (step.completed_at - step.started_at).total_seconds()
    first, pause, second = (
        (s.started_at or datetime.max, s.completed_at or datetime.min) for s in steps
    )
    # A sleep is journaled, with when it ends, as it begins: it shows as a gap.
    assert first[1] <= pause[0] and pause[1] <= second[0]
    assert datetime.fromisoformat(steps[1].output["until"]) > pause[0]
    # The client's journal is the same, timings included.
    assert client.steps(run.id) == steps


# -- purge ---------------------------------------------------------------------------------


def test_purge_deletes_old_finished_runs_with_everything_they_own(
    store: Store, client: Client
) -> None:
    old = [client.start(INVOICE) for _ in range(5)]
    for run in old:
        client.signal(run.id, "approved", {"by": "ada"})
        store.sql(
            "insert into workflow_step (run_id, step_name, position) values (?, 'charge', 0)",
            run.id,
        )
        client.cancel(run.id)
        age(store, run.id, days=40)
    recent = client.start(INVOICE)
    client.cancel(recent.id)
    pending, leased = client.start(INVOICE), client.start(INVOICE)
    store.sql("update workflow_run set status = 'leased' where id = ?", leased.id)
    for run in (pending, leased):
        age(store, run.id, days=400)
    deleted_pending, deleted_leased = client.start(REFUND), client.start(REFUND)
    for run in (deleted_pending, deleted_leased):
        client.delete(run.id)
    store.sql("update workflow_run set status = 'leased' where id = ?", deleted_leased.id)
    for run in (deleted_pending, deleted_leased):
        age(store, run.id, days=40)

    seen: list[tuple[str, int]] = []

    class Deletions(observe.Observer):
        def runs_deleted(self, event: observe.RunsDeleted) -> None:
            seen.append((event.type, event.count))

    admin = Admin(store.url, schema=store.schema, observers=[Deletions()])
    with admin:
        assert admin.purge("30d", type=REFUND) == 1
        assert admin.purge(timedelta(days=30), batch_size=2) == 5
        assert admin.purge("30d") == 0
    gone = {run.id for run in old} | {deleted_pending.id}
    left = {str(row[0]) for row in store.sql("select id from workflow_run")}
    assert left == {recent.id, pending.id, leased.id, deleted_leased.id}
    assert not gone & {str(row[0]) for row in store.sql("select workflow_id from workflow_event")}
    assert store.count("workflow_step") == 0
    assert store.count("workflow_signal") == 0
    assert seen == [(REFUND, 1), (INVOICE, 2), (INVOICE, 2), (INVOICE, 1)]


def test_purge_keeps_a_finished_child_while_its_parent_is_under_way(
    store: Store, client: Client
) -> None:
    parent = client.start(INVOICE)
    child = client.start(REFUND)
    store.sql("update workflow_run set parent_id = ? where id = ?", parent.id, child.id)
    client.cancel(child.id)
    age(store, child.id, days=40)
    assert client.admin.purge("30d") == 0
    client.cancel(parent.id)
    age(store, parent.id, days=40)
    age(store, child.id, days=40)
    assert client.admin.purge("30d") == 2
    assert store.count() == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"older_than": "soon"}, "cannot read older_than"),
        ({"older_than": -1}, "older_than must be a finite, non-negative duration"),
        ({"older_than": 10**12}, "older_than must be at most 100 years"),
        ({"older_than": "1d", "batch_size": 0}, "batch_size must be an integer"),
        ({"older_than": "1d", "type": "Billing"}, "invalid workflow type"),
    ],
)
def test_purge_refuses_bad_arguments(admin: Admin, options: dict[str, Any], message: str) -> None:
    with pytest.raises(errors.InvalidInput, match=message):
        admin.purge(**options)


# -- the faces -------------------------------------------------------------------------------


def test_the_async_admin_does_the_same(store: Store) -> None:
    async def main() -> None:
        async with store.async_client() as client:
            admin = client.admin
            assert isinstance(admin, AsyncAdmin)
            run = await client.start(INVOICE)
            await client.cancel(run.id)
            retried = await admin.retry(run.id)
            assert retried.status is RunStatus.PENDING
            assert [e.event_type for e in await admin.events(run.id)][-1] == "retried_by_operator"
            assert await admin.steps(run.id) == []
            await admin.set_runtime(INVOICE, "python")
            assert (await admin.pause(INVOICE)).is_enabled is False
            assert (await admin.resume(INVOICE)).is_enabled is True
            assert [e.workflow_name for e in await admin.registry()] == [INVOICE]
            assert (await admin.counts())[INVOICE]["pending"] == 1
            assert INVOICE in await admin.oldest_due()
            assert [s.type for s in await admin.stats()] == [INVOICE]
            await client.cancel(run.id)
            assert await admin.purge(0) == 1
        async with AsyncAdmin(store.url, schema=store.schema) as own:
            assert await own.registry() != []

    asyncio.run(main())


def test_an_admin_opened_on_a_url_closes_its_store_and_a_clients_does_not(store: Store) -> None:
    with store.client() as client:
        with client.admin as admin:
            assert admin is client.admin  # one per client
            admin.set_runtime(INVOICE, "python")
        assert client.admin.registry() != []  # the client's store is still open
        assert client.start(INVOICE).created
    with Admin(store.url, schema=store.schema) as own:
        assert [e.workflow_name for e in own.registry()] == [INVOICE]
        assert own.latest_version == own.backend.latest_version
        assert "workflow_run" in own.migration_sql()


def test_an_admin_migrates_where_a_client_would(empty_store: Store) -> None:
    admin = Admin(empty_store.url, schema=empty_store.schema)
    with admin:
        if empty_store.kind == "postgres":
            with pytest.raises(errors.SchemaError, match="simpleworkflow migrate"):
                admin.registry()
            assert admin.migrate() != []
        assert admin.registry() == []


# -- plans -----------------------------------------------------------------------------------


def test_lateness_is_one_index_probe_per_type_on_postgres(store: Store) -> None:
    """However long the queues, the oldest due run of each type is read from the index."""
    if store.kind != "postgres":
        pytest.skip("a Postgres plan")
    with store.client() as client:
        for n in range(20):
            client.start_many([(f"load.type{n % 4}.v1", {}) for _ in range(1000)])
        with psycopg.connect(store.url, autocommit=True) as conn:
            conn.execute(f'analyze "{store.schema}".workflow_run'.encode())
            rows = conn.execute(("explain " + client.backend.q["oldest_due"]).encode()).fetchall()
        assert len(client.admin.oldest_due()) == 4
    plan = "\n".join(row[0] for row in rows)
    assert "idx_workflow_run_due" in plan, plan
    assert "Seq Scan on workflow_run" not in plan, plan
