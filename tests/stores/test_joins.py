"""Joins (``ctx.join``) on both stores: every branch runs, every outcome is collected,
branches are journaled under the join's path and not run again once finished."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Store
from test_durable import QUICK, Ledger, journal, wait_terminal, working
from worker_app import wait_until

from simpleworkflow import Break, Client, Context, Continue, JoinError, PermanentError, RunStatus
from simpleworkflow.admin import replaycheck
from simpleworkflow.app import App


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema, retry=QUICK)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


def test_an_async_join_returns_every_result_and_replays_finished_branches(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.joins.all.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        async def branch(source: str) -> Any:
            ledger.note(f"branch-{source}")
            value = await ctx.step("fetch", ledger.note, f"fetch-{source}", source.upper())
            if source == "slow":
                await ctx.sleep("pause", 0.1)  # the run suspends once the others are done
            return value

        return await ctx.join("enrich", {s: (lambda s=s: branch(s)) for s in ("a", "b", "slow")})

    run_id = client.start("test.joins.all.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"a": "A", "b": "B", "slow": "SLOW"}
    # The finished branches are not run again on the resume after the sleep.
    assert [ledger.count(f"branch-{s}") for s in ("a", "b", "slow")] == [1, 1, 2]
    assert [ledger.count(f"fetch-{s}") for s in ("a", "b", "slow")] == [1, 1, 1]
    rows = {row["name"]: row["kind"] for row in journal(store, run_id)}
    assert rows == {
        "enrich/a/fetch": "step",
        "enrich/b/fetch": "step",
        "enrich/slow/fetch": "step",
        "enrich/slow/pause": "sleep",
        "enrich/a": "join_branch",
        "enrich/b": "join_branch",
        "enrich/slow": "join_branch",
        "enrich": "join",
    }


def fail(why: str) -> None:
    raise PermanentError(why)


@pytest.mark.parametrize("kind", ["async", "def"])
def test_a_join_error_carries_every_failure_and_the_other_results(
    store: Store, app: App, client: Client, kind: str
) -> None:
    if kind == "async":

        @app.workflow("test.joins.fail.v1")
        async def body(payload: Any, ctx: Context) -> Any:
            try:
                await ctx.join(
                    "calls",
                    {
                        "ok": lambda: ctx.step("call", str.upper, "fine"),
                        "x": lambda: ctx.step("call", fail, "x is down"),
                        "y": lambda: ctx.step("call", fail, "y is down"),
                    },
                )
            except JoinError as exc:
                return {"errors": {b: str(e) for b, e in exc.errors.items()}, **exc.results}
            return None

    else:

        @app.workflow("test.joins.fail.v1")
        def body(payload: Any, ctx: Context) -> Any:
            try:
                ctx.join(
                    "calls",
                    {
                        "ok": lambda: ctx.step("call", str.upper, "fine"),
                        "x": lambda: ctx.step("call", fail, "x is down"),
                        "y": lambda: ctx.step("call", fail, "y is down"),
                    },
                )
            except JoinError as exc:
                return {"errors": {b: str(e) for b, e in exc.errors.items()}, **exc.results}
            return None

    run_id = client.start("test.joins.fail.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result["ok"] == "FINE"
    assert sorted(run.result["errors"]) == ["x", "y"]
    assert "x is down" in run.result["errors"]["x"]
    assert "y is down" in run.result["errors"]["y"]
    names = {row["name"] for row in journal(store, run_id)}
    assert {"calls/ok/call", "calls/x/call", "calls/y/call", "calls/ok"} <= names
    assert "calls" not in names  # a failed join has no result to journal


def test_bad_join_arguments_are_refused_naming_the_field(
    store: Store, app: App, client: Client
) -> None:
    @app.workflow("test.joins.bad.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        refused = []
        for name, branches in (
            ("j", {}),
            ("j", {"a/b": lambda: None}),
            ("j", {"": lambda: None}),
            ("j", {"a": 42}),
            ("j/k", {"a": lambda: None}),
        ):
            try:
                await ctx.join(name, branches)
            except Exception as exc:
                refused.append(f"{type(exc).__name__}: {exc}")
        return refused

    run_id = client.start("test.joins.bad.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    refused = run.result
    assert len(refused) == 5 and all(r.startswith("InvalidArgument") for r in refused)
    assert "non-empty mapping" in refused[0]
    assert "join branch name" in refused[1] and "'/'" in refused[1]
    assert "join branch name" in refused[2]
    assert "join branch 'a' must be" in refused[3]
    assert "join name" in refused[4]


def register_scoped(app: App, *, work: str = "work", branch: str = "a") -> None:
    """A loop of 5 iterations whose last one joins two branches, one of which waits for
    a signal: the run is suspended inside both."""

    @app.workflow("test.joins.checked.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        async def turn(n: int) -> Any:
            await ctx.step(work, str, n)
            if n < 4:
                return Continue(n + 1)
            return Break(
                await ctx.join(
                    "both",
                    {
                        branch: lambda: ctx.step("call", str.upper, "x"),
                        "b": lambda: ctx.wait_for_event("go", event="go"),
                    },
                )
            )

        return await ctx.loop("items", 0, turn, commit_every=2, history_every=2, history_keep=1)


def test_replay_check_replays_a_run_in_a_loop_and_a_join_and_finds_renamed_calls(
    store: Store, app: App, client: Client
) -> None:
    register_scoped(app)
    run_id = client.start("test.joins.checked.v1").id
    with working(app):
        wait_until(
            lambda: (client.get(run_id).waiting_for or {}).get("event") == "go",
            20,
            lambda: f"the run never waited: {client.get(run_id)}",
        )

    def verdicts(other: App) -> list[tuple[str, str]]:
        backend = store.backend()
        try:
            return [(r.verdict, r.detail) for r in replaycheck.check(other, backend)]
        finally:
            backend.close()

    same = App(store.url, schema=store.schema)
    register_scoped(same)
    assert verdicts(same) == [("ok", "")]

    renamed_step = App(store.url, schema=store.schema)
    register_scoped(renamed_step, work="labour")
    [(verdict, detail)] = verdicts(renamed_step)
    assert verdict == "diverged" and "'items/~4/labour'" in detail, detail

    renamed_branch = App(store.url, schema=store.schema)
    register_scoped(renamed_branch, branch="c")
    [(verdict, detail)] = verdicts(renamed_branch)
    assert verdict == "diverged" and "'items/~4/both/a/call'" in detail, detail


def test_an_uncaught_join_of_permanent_failures_fails_the_run_at_once(
    store: Store, app: App, client: Client
) -> None:
    @app.workflow("test.joins.uncaught.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        return await ctx.join(
            "calls",
            {
                "ok": lambda: ctx.step("call", str.upper, "fine"),
                "x": lambda: ctx.step("call", fail, "x is down"),
            },
        )

    run_id = client.start("test.joins.uncaught.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.FAILED
    assert run.attempt == 1, "a PermanentJoinError is not retried by the run's policy"
    assert "PermanentJoinError" in (run.last_error or "")
    assert "join 'calls': 1 of 2 branches failed: x: StepFailed" in (run.last_error or "")


def test_a_branch_that_raises_when_called_is_collected_and_a_plain_value_is_a_result(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    def boom() -> None:
        raise ValueError("boom")

    @app.workflow("test.joins.mixed.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        try:
            await ctx.join(
                "mixed",
                {
                    "step": lambda: ctx.step("call", ledger.note, "call", 1),
                    "boom": boom,
                    "plain": lambda: 5,
                },
            )
        except JoinError as exc:
            assert type(exc) is JoinError  # a ValueError is not permanent
            return {"errors": sorted(exc.errors), "results": exc.results}
        return None

    run_id = client.start("test.joins.mixed.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"errors": ["boom"], "results": {"step": 1, "plain": 5}}
    assert ledger.count("call") == 1


def test_a_def_body_runs_the_branches_in_turn_and_replays_finished_ones(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.joins.sync.v1")
    def body(payload: Any, ctx: Context) -> Any:
        def branch(source: str) -> Any:
            ledger.note(f"branch-{source}")
            value = ctx.step("fetch", ledger.note, f"fetch-{source}", source.upper())
            # each branch suspends the run once: long enough that the sleep has not ended by
            # the time its journal entry is written (0.05 s had, under load)
            ctx.sleep("pause", 0.3)
            return value

        return ctx.join("enrich", {s: (lambda s=s: branch(s)) for s in ("a", "b")})

    run_id = client.start("test.joins.sync.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"a": "A", "b": "B"}
    # a: run, suspended, run again to its end; b then the same; a is not run a third time.
    assert [ledger.count(f"branch-{s}") for s in ("a", "b")] == [2, 2]
    assert [ledger.count(f"fetch-{s}") for s in ("a", "b")] == [1, 1]
    names = [row["name"] for row in journal(store, run_id)]
    assert names == [
        "enrich/a/fetch",
        "enrich/a/pause",
        "enrich/a",
        "enrich/b/fetch",
        "enrich/b/pause",
        "enrich/b",
        "enrich",
    ]


def test_a_join_that_loses_a_race_ends_with_its_branches(
    store: Store, app: App, client: Client
) -> None:
    @app.workflow("test.joins.raced.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        index, _ = await ctx.race(
            "first",
            ctx.join("both", {"a": lambda: ctx.wait_for_event("never", event="never")}),
            ctx.sleep("soon", 0.1),
        )
        return {"index": index, "after": await ctx.step("after", str.upper, "done")}

    run_id = client.start("test.joins.raced.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"index": 1, "after": "DONE"}
    assert "both" not in {row["name"] for row in journal(store, run_id)}
