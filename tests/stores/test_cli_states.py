"""Status that says what users mean: attempts made, and what a pending run waits for.

Real runs are brought into each state by a worker thread (a workflow that sleeps, one
that waits for a signal, one that waits for a child, a step between attempts, a run
between attempts, runs that succeeded or failed), then ``runs list`` is asked for each
state, on both stores.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Store, poller_thread
from test_cli import run_cli
from worker_app import wait_until

from simpleworkflow import App, Context
from simpleworkflow.retry import RetryPolicy

LATER = RetryPolicy(backoff="fixed", base=3600, jitter=0)
AT_ONCE = RetryPolicy(backoff="fixed", base=0.05, jitter=0)


def _flaky() -> None:
    raise RuntimeError("the provider is down")


def make_app(store: Store) -> App:
    app = App(store.url, schema=store.schema, retry=AT_ONCE)

    @app.workflow("test.state.sleep.v1")
    async def sleeps(payload: Any, ctx: Context) -> None:
        await ctx.sleep("nap", "1h")

    @app.workflow("test.state.signal.v1")
    async def waits(payload: Any, ctx: Context) -> None:
        await ctx.wait_for_event("approval", event="approve")

    @app.workflow("test.state.parent.v1")
    async def parent(payload: Any, ctx: Context) -> None:
        child = await ctx.start_child("test.state.unhandled.v1", {})
        await ctx.wait_child(child)

    @app.workflow("test.state.step.v1")
    async def step_retries(payload: Any, ctx: Context) -> None:
        await ctx.step("call", _flaky, retry=RetryPolicy(backoff="fixed", base=3600))

    @app.workflow("test.state.fails.v1", retry=LATER)
    def fails_once(payload: Any) -> None:
        raise RuntimeError("try again later")

    @app.workflow("test.state.broken.v1")
    def always_fails(payload: Any) -> None:
        raise RuntimeError("broken for good")

    @app.workflow("test.state.ok.v1")
    def succeeds(payload: Any) -> dict[str, bool]:
        return {"ok": True}

    return app


#: The run of each type, once the worker is done with it: (its state, attempts shown).
EXPECTED = {
    "test.state.sleep.v1": ("sleeping", "1/3"),
    "test.state.signal.v1": ("waiting-signal", "1/3"),
    "test.state.parent.v1": ("waiting-child", "1/3"),
    "test.state.step.v1": ("retrying", "1/3"),
    "test.state.fails.v1": ("retrying", "1/3"),
    "test.state.broken.v1": ("failed", "2/2"),
    "test.state.ok.v1": ("succeeded", "1/3"),
    "test.state.idle.v1": ("pending", "0/3"),  # no worker has a handler: never started
}


def _in_place(type_name: str, run: Any) -> bool:
    """Whether the worker has brought the run of this type where EXPECTED says."""
    state = EXPECTED[type_name][0]
    if state in ("failed", "succeeded"):
        return bool(run.status.value == state)
    if type_name == "test.state.fails.v1":
        return bool(run.status.value == "pending" and run.attempt == 1)
    if state == "pending":
        return True
    return run.status.value == "pending" and run.waiting_for is not None


@pytest.fixture
def runs(store: Store) -> Iterator[dict[str, str]]:
    """One run of each type in EXPECTED, each brought to its state; the worker stays up."""
    with store.client() as client:
        ids = {
            t: client.start(t, {}, max_attempts=2 if "broken" in t else None).id for t in EXPECTED
        }
        with poller_thread(make_app(store), type_prefixes=["test.state.%"], poll_interval=0.1):
            wait_until(
                lambda: all(_in_place(t, client.get(i)) for t, i in ids.items()),
                30,
                lambda: str({t: client.get(i).status.value for t, i in ids.items()}),
            )
            yield ids


def listed(store: Store, capsys: pytest.CaptureFixture[str], *states: str) -> set[str]:
    argv = [arg for state in states for arg in ("--status", state)]
    result = run_cli(store, capsys, "runs", "list", "--type", "test.state", "--json", *argv)
    assert result.code == 0, result.err
    return {run["id"] for run in result.json()["runs"]}


def test_each_waiting_state_lists_its_runs(
    store: Store, capsys: pytest.CaptureFixture[str], runs: dict[str, str]
) -> None:
    by_state: dict[str, set[str]] = {}
    for type_name, (state, _) in EXPECTED.items():
        by_state.setdefault(state, set()).add(runs[type_name])
    for state in ("sleeping", "waiting-signal", "waiting-child", "retrying"):
        assert listed(store, capsys, state) == by_state[state], state
    # Each is a pending run as stored, like the run never started and the parent's child.
    with store.client() as client:
        child = client.list(type_prefix="test.state.unhandled.v1").runs[0].id
    waiting = [by_state[s] for s in ("sleeping", "waiting-signal", "waiting-child", "retrying")]
    assert listed(store, capsys, "pending") == set().union(*waiting, by_state["pending"], {child})
    # Several states are alternatives, with stored statuses too.
    assert listed(store, capsys, "sleeping", "failed") == by_state["sleeping"] | by_state["failed"]


def test_the_attempt_column_counts_attempts_made(
    store: Store, capsys: pytest.CaptureFixture[str], runs: dict[str, str]
) -> None:
    out = run_cli(store, capsys, "runs", "list", "--type", "test.state", "-n", "100").out
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    header = out.splitlines()[0]
    for type_name, (state, attempts) in EXPECTED.items():
        row = rows[runs[type_name]]
        assert row[header.index("ATTEMPT") :].split()[0] == attempts, type_name
        if state not in ("failed", "succeeded", "pending"):
            assert f"pending ({state})" in row, row
    shown = run_cli(store, capsys, "runs", "show", runs["test.state.ok.v1"]).out
    assert "attempts         1 of 3" in shown
    as_json = run_cli(store, capsys, "runs", "show", runs["test.state.ok.v1"], "--json").json()
    # One figure of attempts: the stored count of failures is named for what it counts.
    assert "attempt" not in as_json["run"]
    assert (as_json["run"]["failed_attempts"], as_json["run"]["attempts_made"]) == (0, 1)


def test_a_run_in_several_waits_at_once_is_found_by_each(
    store: Store, capsys: pytest.CaptureFixture[str], runs: dict[str, str]
) -> None:
    """A run suspended in a race of a signal and a sleep stores the waits in a list."""
    run_id = runs["test.state.signal.v1"]
    store.sql(
        "update workflow_run set waiting_for = ? where id = ?",
        '{"kind": "any", "waits": [{"kind": "signal", "step": "a", "event": "approve"},'
        ' {"kind": "sleep", "step": "b", "until": "2030-01-01T00:00:00+00:00"}],'
        ' "until": "2030-01-01T00:00:00+00:00"}',
        run_id,
    )
    assert run_id in listed(store, capsys, "waiting-signal")
    assert run_id in listed(store, capsys, "sleeping")
    assert run_id not in listed(store, capsys, "waiting-child")
    out = run_cli(store, capsys, "runs", "list", "--type", "test.state.signal.v1").out
    assert "pending (waiting-signal, sleeping)" in out


def test_an_unknown_state_names_the_known_ones(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    known = "sleeping, waiting-signal, waiting-child, retrying"
    with store.client() as client, pytest.raises(ValueError, match=known):
        client.list(status="napping")
