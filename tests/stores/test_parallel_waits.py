"""Waits side by side, in ``race`` and ``gather``, on both stores.

A run suspended in several waits at once must record every one of them and wake when
any of them can make progress; a race is won by what happened first in database time,
not by which branch the replay happened to finish first. Each test runs a real poller
on a thread, as tests/test_durable.py does, and sends signals from a client of its own.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import Store
from test_cli import run_cli
from test_durable import QUICK, as_time, journal, lifecycle, wait_terminal, working
from worker_app import wait_until

from simpleworkflow import Client, Context, RunStatus
from simpleworkflow.app import App


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema, retry=QUICK)


def waits_of(run_waiting_for: Any) -> list[dict[str, Any]]:
    """The waits a run's ``waiting_for`` holds: one, or the elements of ``kind: any``."""
    if not isinstance(run_waiting_for, dict):
        return []
    if run_waiting_for.get("kind") == "any":
        return list(run_waiting_for["waits"])
    return [run_waiting_for]


def wait_waiting(client: Client, run_id: str, steps: set[str], timeout: float = 15) -> Any:
    """Wait until the run is pending and suspended in exactly the waits named ``steps``."""

    def suspended() -> bool:
        run = client.get(run_id)
        named = {wait.get("step") for wait in waits_of(run.waiting_for)}
        return run.status is RunStatus.PENDING and named == steps

    def describe() -> str:
        run = client.get(run_id)
        return f"run is {run.status}, waiting for {run.waiting_for}: {lifecycle(client, run_id)}"

    wait_until(suspended, timeout, describe)
    return client.get(run_id)


def db_now(store: Store) -> datetime:
    """The database's clock (the one that stamps signals and due times)."""
    if store.kind == "sqlite":
        [(now,)] = store.sql("select strftime('%Y-%m-%d %H:%M:%f', 'now')")
    else:
        [(now,)] = store.sql("select now()")
    return as_time(now)


def test_a_race_of_two_waits_finishes_on_a_signal_for_either(
    store: Store, app: App, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    @app.workflow("test.waits.either.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        index, value = await ctx.race(
            "decision",
            ctx.wait_for_event("approve", event="approve"),
            ctx.wait_for_event("reject", event="reject"),
        )
        return {"index": index, "value": value}

    # One run gets each signal: whichever wait a run would record alone, one of them
    # is signalled for the other.
    approved = client.start("test.waits.either.v1").id
    rejected = client.start("test.waits.either.v1").id
    with working(app):
        for run_id in (approved, rejected):
            run = wait_waiting(client, run_id, {"approve", "reject"})
            assert run.waiting_for["kind"] == "any"
            assert run.run_at.year == 9999  # nothing wakes it but a signal
        shown = run_cli(store, capsys, "runs", "show", approved).out
        assert '{"kind":"signal","step":"approve","event":"approve"}' in shown
        assert '{"kind":"signal","step":"reject","event":"reject"}' in shown
        rows = [line.split() for line in shown.splitlines()]
        waiting = [json.loads(row[4]) for row in rows if len(row) == 5 and row[3] == "waiting"]
        assert [(data["step"], data["event"]) for data in waiting] == [
            ("approve", "approve"),
            ("reject", "reject"),
        ]
        assert client.signal(approved, "approve", {"by": "ada"}).woke
        assert client.signal(rejected, "reject", {"by": "bob"}).woke
        first = wait_terminal(client, approved)
        second = wait_terminal(client, rejected)

    assert first.status is RunStatus.SUCCEEDED, first.last_error
    assert first.result == {"index": 0, "value": {"by": "ada"}}
    assert second.status is RunStatus.SUCCEEDED, second.last_error
    assert second.result == {"index": 1, "value": {"by": "bob"}}
    resumed = [e.data for e in client.events(rejected) if e.event_type == "resumed"]
    assert [wait["step"] for wait in waits_of(resumed[0])] == ["approve", "reject"]


def test_a_signal_wins_a_race_against_a_long_sleep_at_once(
    store: Store, app: App, client: Client
) -> None:
    @app.workflow("test.waits.signalorsleep.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        index, value = await ctx.race(
            "reply or give up",
            ctx.wait_for_event("reply", event="reply", match={"ticket": 7}),
            ctx.sleep("give up", "30s"),
        )
        return {"index": index, "value": value}

    run_id = client.start("test.waits.signalorsleep.v1").id
    with working(app):
        run = wait_waiting(client, run_id, {"reply", "give up"})
        reply, sleep = run.waiting_for["waits"]
        assert reply == {
            "kind": "signal",
            "step": "reply",
            "event": "reply",
            "match": {"ticket": 7},
        }
        assert sleep["kind"] == "sleep"
        # The run is due when the sleep ends, and its waiting_for says so.
        assert run.waiting_for["until"] == sleep["until"]
        assert abs(run.run_at - datetime.fromisoformat(sleep["until"])) < timedelta(seconds=1)
        assert not client.signal(run_id, "reply", {"ticket": 8}).woke  # no match: sleeps on
        sent = time.monotonic()
        assert client.signal(run_id, "reply", {"ticket": 7, "text": "fixed"}).woke
        run = wait_terminal(client, run_id)
        took = time.monotonic() - sent

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"index": 0, "value": {"ticket": 7, "text": "fixed"}}
    assert took < 15, f"the signal did not wake the run: it finished after {took:.1f}s"


def test_the_race_is_won_by_what_happened_first_in_database_time(
    store: Store, app: App, client: Client
) -> None:
    @app.workflow("test.waits.dbtime.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        # The sleep comes first: were the branch that finishes first in the replay to
        # win, it would, since a sleep that is over needs no read of the store.
        index, value = await ctx.race(
            "timer or reply",
            ctx.sleep("timer", "3s"),
            ctx.wait_for_event("reply", event="reply"),
        )
        return {"index": index, "value": value}

    run_id = client.start("test.waits.dbtime.v1").id
    with working(app):
        run = wait_waiting(client, run_id, {"timer", "reply"})
    # No worker runs now: the signal comes before the timer ends, and the run is
    # replayed only after both.
    client.signal(run_id, "reply", {"n": 1})
    [(sent_at,)] = store.sql("select created_at from workflow_signal where run_id = ?", run_id)
    until = datetime.fromisoformat(run.waiting_for["until"])
    assert as_time(sent_at) < until, "the test was too slow to signal before the timer ended"
    wait_until(lambda: db_now(store) > until + timedelta(seconds=1), 15, lambda: "clock stuck")
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"index": 1, "value": {"n": 1}}
    steps = {s["name"]: s for s in journal(store, run_id)}
    assert steps["timer or reply"]["output"]["winner"] == 1


def test_a_gather_of_two_waits_takes_each_signal_as_it_comes(
    store: Store, app: App, client: Client
) -> None:
    @app.workflow("test.waits.both.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        both = await asyncio.gather(
            ctx.wait_for_event("left", event="left"),
            ctx.wait_for_event("right", event="right"),
        )
        return list(both)

    run_id = client.start("test.waits.both.v1").id
    with working(app):
        run = wait_waiting(client, run_id, {"left", "right"})
        assert client.signal(run_id, "right", {"side": "r"}).woke
        # The run wakes, journals the signal it got, and waits on for the other alone.
        run = wait_waiting(client, run_id, {"left"})
        assert run.waiting_for["kind"] == "signal"
        steps = {s["name"]: s for s in journal(store, run_id)}
        assert steps["right"]["status"] == "completed"
        assert steps["right"]["output"] == {"signal": {"side": "r"}}
        assert steps["left"]["status"] == "retrying"
        assert client.signal(run_id, "left", {"side": "l"}).woke
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == [{"side": "l"}, {"side": "r"}]
    events = lifecycle(client, run_id)
    assert events.count("waiting") == 3  # two waits, then the one left
    assert events.count("resumed") == 2


def test_a_child_that_finishes_wakes_a_parent_racing_it_against_a_signal(
    store: Store, app: App, client: Client
) -> None:
    @app.workflow("test.waits.child.v1")
    async def child(payload: Any, ctx: Context) -> Any:
        return {"done": await ctx.wait_for_event("go", event="go")}

    @app.workflow("test.waits.parent.v1")
    async def parent(payload: Any, ctx: Context) -> Any:
        child_id = await ctx.start_child("test.waits.child.v1")
        index, value = await ctx.race(
            "child or abort",
            ctx.wait_child(child_id, name="child"),
            ctx.wait_for_event("abort", event="abort", timeout="1h"),
        )
        return {"index": index, "value": value}

    run_id = client.start("test.waits.parent.v1").id
    with working(app):
        run = wait_waiting(client, run_id, {"child", "abort"})
        [child_wait] = [w for w in waits_of(run.waiting_for) if w["kind"] == "child"]
        # The abort's timeout makes the run due in an hour: only the child can wake it.
        assert run.run_at > datetime.now(UTC) + timedelta(minutes=30)
        # The child may still be on its way to its wait: signalled before, it would find
        # the signal at once instead of being woken by it.
        wait_waiting(client, child_wait["child_id"], {"go"})
        assert client.signal(child_wait["child_id"], "go", {"ok": True}).woke
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"index": 0, "value": {"done": {"ok": True}}}


@pytest.mark.parametrize("wrapped", [True, False])
def test_every_wait_of_a_gather_inside_a_race_is_recorded(
    store: Store, app: App, client: Client, wrapped: bool
) -> None:
    async def both(ctx: Context) -> list[Any]:
        return list(await gather(ctx))

    def gather(ctx: Context) -> Any:
        return asyncio.gather(
            ctx.wait_for_event("a", event="a"), ctx.wait_for_event("b", event="b")
        )

    @app.workflow("test.waits.nested.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        # As a coroutine, the gather runs in its branch. As is, asyncio.gather starts its
        # waits at once, outside the race (docs/durable.md says to wrap it): the race
        # cannot tell them from the body's, but they are recorded all the same.
        branch = both(ctx) if wrapped else gather(ctx)
        index, value = await ctx.race("both or c", branch, ctx.wait_for_event("c", event="c"))
        return {"index": index, "value": value}

    run_id = client.start("test.waits.nested.v1").id
    with working(app):
        wait_waiting(client, run_id, {"a", "b", "c"})
        if not wrapped:
            return
        assert client.signal(run_id, "b", {"n": "b"}).woke
        wait_waiting(client, run_id, {"a", "c"})
        assert client.signal(run_id, "c", {"n": "c"}).woke
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"index": 1, "value": {"n": "c"}}
    steps = {s["name"]: s for s in journal(store, run_id)}
    assert steps["b"]["output"] == {"signal": {"n": "b"}}  # consumed before the race ended
    assert steps["a"]["status"] == "retrying"  # its branch lost: no longer waited for


def test_a_replayed_race_leaves_no_call_unawaited_behind(app: App, store: Store) -> None:
    """Replaying a finished race closes its branches (never awaited this time) and the
    durable calls inside them: Python has no "coroutine was never awaited" to warn of."""

    @app.workflow("test.race.replayed.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        index, _ = await ctx.race(
            "first", ctx.sleep("short", 0.01), ctx.wait_for_event("never", event="never")
        )
        await ctx.sleep("after", 0.5)  # suspends: the body replays the race after it
        return index

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        with app.client() as client, working(app):
            run_id = client.start("test.race.replayed.v1").id
            run = wait_terminal(client, run_id)
        gc.collect()
    assert run.status is RunStatus.SUCCEEDED and run.result == 0
    assert "first" in [row["name"] for row in journal(store, run_id)]
    never_awaited = [w for w in caught if "never awaited" in str(w.message)]
    assert not never_awaited, [str(w.message) for w in never_awaited]
