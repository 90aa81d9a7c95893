"""Durable loops (``ctx.loop``) on both stores: iterations located by path, state
commits, history trimming, resumes from the latest committed state, bad arguments."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Store
from test_durable import QUICK, Ledger, journal, wait_terminal, working

from simpleworkflow import Break, Client, Context, Continue, RunStatus
from simpleworkflow.app import App


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema, retry=QUICK)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


LOOP = {"commit_every": 2, "history_every": 4, "history_keep": 2}
# Iterations 0 to 5 each journal ~i/add and ~i/tick; the state is committed before
# iterations 2, 4 and 6; the trim after iteration 3 deletes iterations 0 and 1.
TRIMMED = [
    "count/~2",
    "count/~2/add",
    "count/~2/tick",
    "count/~3/add",
    "count/~3/tick",
    "count/~4",
    "count/~4/add",
    "count/~4/tick",
    "count/~5/add",
    "count/~5/tick",
    "count/~6",
    "count",
]


@pytest.mark.parametrize("kind", ["async", "def"])
def test_a_loop_journals_each_iteration_by_path_commits_and_trims(
    store: Store, app: App, client: Client, ledger: Ledger, kind: str
) -> None:
    def iteration_async(ctx: Context) -> Any:
        async def iteration(state: dict[str, int]) -> Any:
            ledger.note(f"body-{state['i']}")
            if state["i"] == 6:
                return Break(state["total"])
            total = await ctx.step("add", ledger.note, f"add-{state['i']}", state["total"] + 1)
            # every iteration ends in a suspension (long enough not to have ended by the
            # time its entry is written, under load)
            await ctx.sleep("tick", 0.25)
            return Continue({"i": state["i"] + 1, "total": total})

        return iteration

    def iteration_def(ctx: Context) -> Any:
        def iteration(state: dict[str, int]) -> Any:
            ledger.note(f"body-{state['i']}")
            if state["i"] == 6:
                return Break(state["total"])
            total = ctx.step("add", ledger.note, f"add-{state['i']}", state["total"] + 1)
            ctx.sleep("tick", 0.25)
            return Continue({"i": state["i"] + 1, "total": total})

        return iteration

    if kind == "async":

        @app.workflow("test.loops.count.v1")
        async def body(payload: Any, ctx: Context) -> Any:
            return await ctx.loop("count", {"i": 0, "total": 0}, iteration_async(ctx), **LOOP)

    else:

        @app.workflow("test.loops.count.v1")
        def body(payload: Any, ctx: Context) -> Any:
            return ctx.loop("count", {"i": 0, "total": 0}, iteration_def(ctx), **LOOP)

    run_id = client.start("test.loops.count.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == 6
    # Each step ran once. A resume starts from the latest committed state: iteration 0
    # runs again (replaying) on the resumes after iterations 0 and 1, iteration 1 on the
    # one after it, then the state before iteration 2 is committed, and so on.
    assert [ledger.count(f"add-{i}") for i in range(6)] == [1] * 6
    assert [ledger.count(f"body-{i}") for i in range(7)] == [3, 2, 3, 2, 3, 2, 1]
    rows = journal(store, run_id)
    assert [row["name"] for row in rows] == TRIMMED
    kinds = {row["name"]: row["kind"] for row in rows}
    assert (kinds["count"], kinds["count/~4"], kinds["count/~4/add"]) == (
        "loop",
        "loop_state",
        "step",
    )
    assert rows[5]["output"] == {"state": {"i": 4, "total": 4}}
    steps = [s.step_name for s in client.steps(run_id)]
    assert "count/~5/add" in steps


def test_a_failed_attempt_resumes_from_the_last_committed_state(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.loops.resume.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        async def iteration(n: int) -> Any:
            ledger.note(f"body-{n}")
            if n == 5:
                return Break(n)
            await ctx.step("work", ledger.note, f"work-{n}", n)
            if n == 4 and ledger.count("crash") == 0:
                ledger.note("crash")
                raise RuntimeError("the attempt dies inside iteration 4")
            return Continue(n + 1)

        return await ctx.loop("items", 0, iteration, commit_every=3, history_every=None)

    run_id = client.start("test.loops.resume.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.attempt == 1  # one failed attempt
    # Attempt 2 starts from the state committed before iteration 3: iterations 3 and 4
    # run again, and their journaled steps replay instead of running.
    assert [ledger.count(f"body-{n}") for n in range(6)] == [1, 1, 1, 2, 2, 1]
    assert [ledger.count(f"work-{n}") for n in range(5)] == [1] * 5
    names = [row["name"] for row in journal(store, run_id)]
    assert names == [f"items/~{n}/work" for n in range(3)] + [
        "items/~3",
        "items/~3/work",
        "items/~4/work",
        "items",
    ]


def test_a_finished_loop_replays_without_running_its_body(
    store: Store, app: App, client: Client, ledger: Ledger
) -> None:
    @app.workflow("test.loops.replay.v1")
    def body(payload: Any, ctx: Context) -> Any:
        def iteration(n: int) -> Any:
            ledger.note("body")
            ctx.step("work", ledger.note, "work", n)
            return Break(n) if n >= 2 else Continue(n + 1)

        result = ctx.loop("items", 0, iteration, commit_every=1)
        again = ctx.loop("items", 10, iteration, commit_every=1)  # items#2
        ctx.sleep("after", 0.05)
        return [result, again]

    run_id = client.start("test.loops.replay.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == [2, 10]
    assert (ledger.count("body"), ledger.count("work")) == (4, 4)
    names = {row["name"] for row in journal(store, run_id)}
    assert {"items", "items#2", "items/~1", "items/~2/work", "items#2/~0/work"} <= names


def test_bad_loop_arguments_are_refused_naming_the_field(
    store: Store, app: App, client: Client
) -> None:
    @app.workflow("test.loops.bad.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        refused = []
        for name, options in (
            ("a", {"commit_every": 0}),
            ("a", {"history_keep": 0}),
            ("a", {"history_every": -1}),
            ("a", {"commit_every": True}),
            ("a/b", {}),
            ("~a", {}),
            ("", {}),
        ):
            try:
                await ctx.loop(name, 0, lambda n: Break(n), **options)
            except Exception as exc:
                refused.append(f"{type(exc).__name__}: {exc}")
        try:
            await ctx.loop("c", 0, lambda n: n)
        except Exception as exc:
            refused.append(f"{type(exc).__name__}: {exc}")
        return refused

    run_id = client.start("test.loops.bad.v1").id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    refused = run.result
    assert len(refused) == 8 and all(r.startswith("InvalidArgument") for r in refused)
    for index, field in enumerate(
        ["commit_every", "history_keep", "history_every", "commit_every", "'/'", "'~'"]
    ):
        assert field in refused[index]
    assert "loop name" in refused[6]
    assert "Continue(state) or Break(result)" in refused[7]
