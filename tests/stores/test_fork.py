"""Forking a run from a step on both stores (``admin.fork``): the fork replays the
original's journal before the step and runs that step and the later ones again, with a
new payload or the original's; the original is untouched; both are linked; and what
each kind of journal entry with a side row (a signal, a child, a rate limit's token, a
transactional step, a sleep, a join's scope, a rollback) does in a fork."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import Store
from test_durable import Ledger, journal, lifecycle, wait_suspended, wait_terminal, working

from simpleworkflow import Client, Context, PermanentError, RunStatus, errors, observe
from simpleworkflow.app import App
from simpleworkflow.retry import RetryPolicy

THREE = "test.fork.three.v1"
SIDES = "test.fork.sides.v1"
CHILD = "test.fork.child.v1"
JOINED = "test.fork.joined.v1"
SAGA = "test.fork.saga.v1"
QUICK = RetryPolicy(backoff="fixed", base=0.1, jitter=0)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema, retry=QUICK)


def three_steps(app: App, ledger: Ledger) -> None:
    """a, b, c; c fails for good while the payload says so."""

    @app.workflow(THREE)
    async def body(payload: dict[str, Any], ctx: Context) -> Any:
        a = await ctx.step("a", ledger.note, "a", payload["n"])
        b = await ctx.step("b", ledger.note, "b", a + 1)

        def c() -> int:
            ledger.note("c")
            if payload.get("fail"):
                raise PermanentError("c was told to fail")
            return b + 1

        return {"c": await ctx.step("c", c), "n": payload["n"]}


def failed_three(app: App, client: Client, ledger: Ledger) -> str:
    three_steps(app, ledger)
    run_id = client.start(THREE, {"n": 1, "fail": True}).id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.FAILED, run.last_error
    assert dict(ledger.counts) == {"a": 1, "b": 1, "c": 1}
    return run_id


def test_a_fork_from_a_middle_step_runs_it_and_the_later_ones_again_with_the_new_payload(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    original = failed_three(app, client, ledger)
    before = (client.get(original), journal(store, original), lifecycle(client, original))

    fork = client.admin.fork(original, from_step="b", payload={"n": 10})

    assert (fork.type, fork.status, fork.payload) == (THREE, RunStatus.PENDING, {"n": 10})
    assert (fork.forked_from, fork.forked_at_step) == (original, "b")
    assert fork.id != original and fork.parent_id is None and fork.idempotency_key is None
    assert [e["name"] for e in journal(store, fork.id)] == ["a"]  # entries before b only
    with working(app):
        done = wait_terminal(client, fork.id)
    assert done.status is RunStatus.SUCCEEDED, done.last_error
    # a replayed (the original's output, n=1: 1), b and c ran again; the payload is new.
    assert done.result == {"c": 3, "n": 10}
    assert dict(ledger.counts) == {"a": 1, "b": 2, "c": 2}
    assert lifecycle(client, fork.id)[0] == "created"
    # The original is exactly as it was, and lists its fork.
    assert (client.get(original), journal(store, original), lifecycle(client, original)) == before
    assert [run.id for run in client.admin.forks(original)] == [fork.id]
    assert client.admin.forks(fork.id) == []


def test_a_fork_by_position_keeps_the_original_payload(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    original = failed_three(app, client, ledger)
    position = {s.step_name: s.position for s in client.steps(original)}["c"]
    fork = client.admin.fork(original, position)
    assert fork.payload == {"n": 1, "fail": True} and fork.forked_at_step == "c"
    assert [e["name"] for e in journal(store, fork.id)] == ["a", "b"]
    with working(app):
        done = wait_terminal(client, fork.id)
    # Same payload: c fails again, and a and b did not run again.
    assert done.status is RunStatus.FAILED
    assert dict(ledger.counts) == {"a": 1, "b": 1, "c": 2}


def test_bad_forks_are_refused_with_typed_errors_and_write_nothing(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    original = failed_three(app, client, ledger)
    runs = store.count()
    with pytest.raises(errors.RunNotFound):
        client.admin.fork("0190c8a4-0000-7000-8000-000000000000", "a")
    with pytest.raises(errors.StepNotFound) as unknown:
        client.admin.fork(original, "d")
    assert "'d'" in str(unknown.value) and "'a', 'b', 'c'" in str(unknown.value)
    assert unknown.value.steps == ["a", "b", "c"]
    with pytest.raises(errors.StepNotFound, match="position 99"):
        client.admin.fork(original, 99)
    with pytest.raises(errors.InvalidArgument, match="from_step"):
        client.admin.fork(original, 1.5)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidPayload):
        client.admin.fork(original, "a", payload={"x": float("nan")})
    pending = client.start(THREE, {"n": 1}).id  # no worker: still pending
    with pytest.raises(errors.ForkRefused, match="pending"):
        client.admin.fork(pending, "a")
    assert store.count() == runs + 1


def test_the_async_admin_forks_too(app: App, store: Store, ledger: Ledger, client: Client) -> None:
    original = failed_three(app, client, ledger)

    async def fork() -> Any:
        async with store.async_client() as aclient:
            made = await aclient.admin.fork(original, "c", payload={"n": 2})
            return made, await aclient.admin.forks(original)

    made, listed = asyncio.run(fork())
    assert made.forked_from == original and [run.id for run in listed] == [made.id]


class Created(observe.Observer):
    def __init__(self) -> None:
        self.runs: list[str] = []

    def run_created(self, event: observe.RunCreated) -> None:
        self.runs.append(event.run.id)


def test_the_observers_hear_of_a_fork_as_of_a_start(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    original = failed_three(app, client, ledger)
    created = Created()
    with store.client(observers=[created]) as watched:
        fork = watched.admin.fork(original, "a")
    assert created.runs == [fork.id]


def side_rows(app: App, ledger: Ledger) -> None:
    """A run that consumes a signal, takes a rate limit's token, runs a transactional
    step, sleeps, starts a child and waits for it, then ends in a step that may fail."""

    @app.workflow(CHILD)
    async def child(payload: dict[str, Any], ctx: Context) -> Any:
        return ledger.note("child", payload["from"])

    @app.workflow(SIDES)
    def body(payload: dict[str, Any], ctx: Context) -> Any:
        signal = ctx.wait_for_event("approval", event="approved")
        ctx.rate_limit("fork-hourly")
        ctx.transaction("tx", lambda conn: ledger.note("tx", 1))
        ctx.sleep("pause", 0.1)
        child_id = ctx.start_child(CHILD, {"from": payload["n"]}, name="kid")
        got = ctx.wait_child(child_id, name="kid-done")

        def last() -> Any:
            ledger.note("last")
            if payload.get("fail"):
                raise PermanentError("told to fail")
            return {"signal": signal, "child": got}

        return ctx.step("last", last)


def failed_sides(app: App, client: Client, ledger: Ledger) -> str:
    side_rows(app, ledger)
    client.admin.set_rate_limit("fork-hourly", "1/h")  # a second token would wait an hour
    run_id = client.start(SIDES, {"n": 1, "fail": True}).id
    client.signal(run_id, "approved", {"ok": True})
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.FAILED, run.last_error
    return run_id


def test_entries_with_side_rows_are_copied_and_not_taken_again(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    original = failed_sides(app, client, ledger)
    children = store.sql("select count(*) from workflow_run where type = ?", CHILD)[0][0]
    until = {e["name"]: e["output"] for e in journal(store, original)}["pause"]

    fork = client.admin.fork(original, "last", payload={"n": 2})
    with working(app):
        done = wait_terminal(client, fork.id)

    assert done.status is RunStatus.SUCCEEDED, done.last_error
    # The signal's payload and the child's result replay from the copied entries: no new
    # signal was needed, no token taken (the hourly limit would have held the fork back),
    # the transactional step and the child did not run again, and no child was started.
    assert done.result == {"signal": {"ok": True}, "child": 1}
    assert (ledger.counts["tx"], ledger.counts["child"], ledger.counts["last"]) == (1, 1, 2)
    assert store.sql("select count(*) from workflow_run where type = ?", CHILD)[0][0] == children
    # The signal row stays with the original, consumed by its wait; the fork has none.
    assert [(s.event, s.step_name) for s in client.signals(original)] == [("approved", "approval")]
    assert client.signals(fork.id) == []
    # The sleep's entry keeps the original's wake-up time, already past: no sleep again.
    assert {e["name"]: e["output"] for e in journal(store, fork.id)}["pause"] == until
    assert "sleeping" not in lifecycle(client, fork.id)


def test_a_fork_from_a_wait_waits_again_for_a_signal_of_its_own(
    app: App, client: Client, ledger: Ledger
) -> None:
    original = failed_sides(app, client, ledger)
    fork = client.admin.fork(original, "approval")
    with working(app):
        wait_suspended(client, fork.id, "signal")
    assert client.signals(fork.id) == []
    assert [s.step_name for s in client.signals(original)] == ["approval"]
    client.cancel(fork.id)


def test_a_fork_waiting_for_the_originals_child_is_refused_one_from_its_start_makes_its_own(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    original = failed_sides(app, client, ledger)
    with pytest.raises(errors.ForkRefused, match="child"):
        client.admin.fork(original, "kid-done")
    fork = client.admin.fork(original, "kid", payload={"n": 5})
    with working(app):
        done = wait_terminal(client, fork.id)
    assert done.status is RunStatus.SUCCEEDED, done.last_error
    assert done.result["child"] == 5  # its own child, with its own payload
    kids = store.sql("select parent_id from workflow_run where type = ?", CHILD)
    assert sorted(str(parent) for (parent,) in kids) == sorted([original, fork.id])


def test_a_fork_from_a_join_runs_its_branches_again_and_a_point_inside_one_is_refused(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow(JOINED)
    async def body(payload: dict[str, Any], ctx: Context) -> Any:
        got = await ctx.join(
            "enrich",
            {
                "x": lambda: ctx.step("fetch", ledger.note, "x", 1),
                "y": lambda: ctx.step("fetch", ledger.note, "y", 2),
            },
        )

        def after() -> Any:
            ledger.note("after")
            if payload.get("fail"):
                raise PermanentError("told to fail")
            return got

        return await ctx.step("after", after)

    original = client.start(JOINED, {"fail": True}).id
    with working(app):
        wait_terminal(client, original)
    with pytest.raises(errors.ForkRefused, match="join branch"):
        client.admin.fork(original, "enrich/x/fetch")
    again = client.admin.fork(original, "enrich", payload={})
    assert [e["name"] for e in journal(store, again.id)] == []  # its scope runs again
    after = client.admin.fork(original, "after", payload={})
    with working(app):
        assert wait_terminal(client, again.id).result == {"x": 1, "y": 2}
        assert wait_terminal(client, after.id).result == {"x": 1, "y": 2}
    assert (ledger.counts["x"], ledger.counts["y"], ledger.counts["after"]) == (2, 2, 3)


def test_a_fork_of_a_run_that_rolled_back_keeps_the_registrations_not_the_rollback(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow(SAGA)
    async def body(payload: dict[str, Any], ctx: Context) -> Any:
        await ctx.step("reserve", ledger.note, "reserve")
        await ctx.on_rollback("release", ledger.note, "release")

        def ship() -> str:
            ledger.note("ship")
            if payload.get("fail"):
                raise PermanentError("no carrier")
            return "shipped"

        return await ctx.step("ship", ship)

    original = client.start(SAGA, {"fail": True}).id
    with working(app):
        wait_terminal(client, original)
    assert ledger.counts["release"] == 1
    names = [e["name"] for e in journal(store, original)]
    assert "@rollback" in names and "rollback/release" in names
    with pytest.raises(errors.ForkRefused, match="rollback"):
        client.admin.fork(original, "@rollback")
    fork = client.admin.fork(original, "ship", payload={})
    assert [e["name"] for e in journal(store, fork.id)] == ["reserve", "on_rollback/release"]
    with working(app):
        assert wait_terminal(client, fork.id).result == "shipped"
    assert (ledger.counts["reserve"], ledger.counts["release"], ledger.counts["ship"]) == (1, 1, 2)
