"""``ctx.patched``: a code change deployed under runs in flight, on both stores.

A shop's old code charges, then ships; the new code bills instead of charging, guarded
by patch ``bill``. A run started on the old code and resumed on the new one keeps the old
side (no divergence); a new run takes the new side; replay-check says which runs still
need the old side, and when the patch can be retired (the ``if`` replaced by its new
side alone).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from api_helpers import PREFIX, Api
from conftest import Store
from test_dashboard import Dash
from test_durable import Ledger, journal, wait_suspended, wait_terminal, working
from worker_app import wait_until

from simpleworkflow import App, Client, Context, RetryPolicy, RunStatus
from simpleworkflow.admin import replaycheck
from simpleworkflow.cli import replaycheck as replaycheck_cli

SHOP = "test.patches.shop.v1"
QUICK = RetryPolicy(backoff="fixed", base=0.2, jitter=0)
OLD, PATCHED, RETIRED = "old", "patched", "retired"


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


def shop(store: Store, ledger: Ledger, code: str, sync: bool) -> App:
    """The shop as deployed: ``old`` (charge), ``patched`` (bill behind patch ``bill``,
    charge for old runs) or ``retired`` (bill alone, the patch removed)."""
    app = App(store.url, schema=store.schema, retry=QUICK)

    def note(what: str) -> str:
        return ledger.note(what, what)

    if sync:

        @app.workflow(SHOP)
        def body(payload: Any, ctx: Context) -> Any:
            ctx.step("reserve", note, "reserve")
            if code == RETIRED or (code == PATCHED and ctx.patched("bill")):
                paid = ctx.step("bill", note, "bill")
            else:
                paid = ctx.step("charge", note, "charge")
            ctx.sleep("cool off", payload["nap"])
            ctx.step("ship", note, "ship")
            ctx.sleep("rest", payload.get("rest", 0))
            return paid

    else:

        @app.workflow(SHOP)
        async def body(payload: Any, ctx: Context) -> Any:
            await ctx.step("reserve", note, "reserve")
            if code == RETIRED or (code == PATCHED and await ctx.patched("bill")):
                paid = await ctx.step("bill", note, "bill")
            else:
                paid = await ctx.step("charge", note, "charge")
            await ctx.sleep("cool off", payload["nap"])
            await ctx.step("ship", note, "ship")
            await ctx.sleep("rest", payload.get("rest", 0))
            return paid

    return app


def check(store: Store, app: App) -> dict[str, replaycheck.ReplayReport]:
    backend = store.backend()
    try:
        return {r.run_id: r for r in asyncio.run(replaycheck.check_runs(app, backend))}
    finally:
        backend.close()


@pytest.mark.parametrize("sync", [False, True], ids=["async_body", "def_body"])
def test_an_old_run_keeps_the_old_side_and_a_new_run_takes_the_new(
    store: Store, client: Client, ledger: Ledger, sync: bool
) -> None:
    old_id = client.start(SHOP, {"nap": 0.5}).id
    with working(shop(store, ledger, OLD, sync)) as old:
        wait_suspended(client, old_id, "sleep")
        old.stop()

    patched = shop(store, ledger, PATCHED, sync)
    [report] = check(store, patched).values()
    assert (report.run_id, report.verdict) == (old_id, replaycheck.OK)
    assert (report.old_side, report.new_side) == (("bill",), ())
    assert "old side of patch 'bill'" in report.detail

    new_id = client.start(SHOP, {"nap": 30}).id
    with working(patched):
        old_run = wait_terminal(client, old_id)
        wait_suspended(client, new_id, "sleep")

    assert old_run.status is RunStatus.SUCCEEDED, old_run.last_error
    assert old_run.result == "charge"
    assert [(s["name"], s["kind"]) for s in journal(store, old_id)] == [
        ("reserve", "step"),
        ("charge", "step"),
        ("cool off", "sleep"),
        ("@patch:bill", "patch"),  # decided where the replay met it, written after
        ("ship", "step"),
        ("rest", "sleep"),
    ]
    assert journal(store, old_id)[3]["output"] == {"patched": False}
    assert [(s["name"], s["output"]) for s in journal(store, new_id)][:3] == [
        ("reserve", "reserve"),
        ("@patch:bill", {"patched": True}),
        ("bill", "bill"),
    ]
    assert (ledger.count("charge"), ledger.count("bill")) == (1, 1)

    reports = check(store, patched)
    assert (reports[new_id].verdict, reports[new_id].new_side) == (replaycheck.OK, ("bill",))
    assert replaycheck_cli.patch_lines(list(reports.values())) == [
        "patch 'bill': no unfinished run on its old side; it can be removed"
    ]
    # Retired: the new side alone, and the run that journaled the patch replays without it.
    [retired] = check(store, shop(store, ledger, RETIRED, sync)).values()
    assert (retired.run_id, retired.verdict) == (new_id, replaycheck.OK)


def test_replay_check_keeps_a_patch_while_a_run_needs_its_old_side(
    store: Store, client: Client, ledger: Ledger
) -> None:
    old_id = client.start(SHOP, {"nap": 0.3, "rest": 60}).id
    with working(shop(store, ledger, OLD, False)) as old:
        wait_suspended(client, old_id, "sleep")
        old.stop()
    with working(shop(store, ledger, PATCHED, False)):  # resumed: the old side, journaled
        wait_until(
            lambda: [s["name"] for s in journal(store, old_id)][-1] == "rest",
            20,
            lambda: f"not resting yet: {journal(store, old_id)}",
        )
    assert journal(store, old_id)[3]["output"] == {"patched": False}

    patched = check(store, shop(store, ledger, PATCHED, False))
    assert replaycheck_cli.patch_lines(list(patched.values())) == [
        "patch 'bill': 1 run on its old side; keep it"
    ]
    assert "patch 'bill': 1 run on its old side; keep it" in replaycheck_cli.report_text(
        list(patched.values())
    )
    [retired] = check(store, shop(store, ledger, RETIRED, False)).values()
    assert retired.verdict == replaycheck.DIVERGED
    assert "'bill'" in retired.detail and "'charge'" in retired.detail


def test_a_run_that_had_not_reached_the_patch_takes_the_new_side(
    store: Store, client: Client, ledger: Ledger
) -> None:
    app = App(store.url, schema=store.schema, retry=QUICK)

    @app.workflow("test.patches.later.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.sleep("first", 0.3)  # journaled before the patch existed
        sides = [await ctx.patched("tax") for _ in range(3)]  # one decision, asked again
        await ctx.sleep("second", 0.3)
        return [*sides, await ctx.patched("tax")]

    run_id = client.start("test.patches.later.v1").id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == [True, True, True, True]
    assert [s["kind"] for s in journal(store, run_id)] == ["sleep", "patch", "sleep"]


def test_a_bad_patch_id_fails_the_run_at_once_naming_it(
    store: Store, client: Client, ledger: Ledger
) -> None:
    app = App(store.url, schema=store.schema, retry=QUICK)

    @app.workflow("test.patches.bad.v1")
    def body(payload: Any, ctx: Context) -> Any:
        return ctx.patched("")

    run_id = client.start("test.patches.bad.v1").id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.FAILED
    assert "patch id must be text" in (run.last_error or "")
    assert run.attempt == 1


def test_the_api_and_the_timeline_show_a_patch_as_its_kind(
    store: Store, client: Client, ledger: Ledger
) -> None:
    run_id = client.start(SHOP, {"nap": 0.1}).id
    with working(shop(store, ledger, PATCHED, False)):
        assert wait_terminal(client, run_id).status is RunStatus.SUCCEEDED
    api, dash = Api(store), Dash(store)
    try:
        steps = api.get(f"{PREFIX}/runs/{run_id}/steps").json()
        page = dash.get(f"/runs/{run_id}").text
    finally:
        api.close()
        dash.close()
    [patch] = [s for s in steps if s["step_name"] == "@patch:bill"]
    assert (patch["kind"], patch["status"], patch["output"]) == (
        "patch",
        "completed",
        {"patched": True},
    )
    assert 'class="bar kind-patch"' in page


def test_a_patch_not_awaited_fails_the_run_naming_it(
    store: Store, client: Client, ledger: Ledger
) -> None:
    app = App(store.url, schema=store.schema, retry=QUICK)

    @app.workflow("test.patches.unawaited.v1")
    async def body(payload: Any, ctx: Context) -> Any:
        if ctx.patched("tax"):  # a coroutine, never awaited: always true
            return "new"
        return "old"

    run_id = client.start("test.patches.unawaited.v1").id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.FAILED
    assert "NotAwaited" in (run.last_error or "")
    assert "ctx.patched('tax')" in (run.last_error or "")
