"""Continue-as-new on both stores: a run ends and a fresh run of its type carries on with
a new payload and an empty journal, in one transaction, linked both ways; ``wait``
follows the chain; a zombie worker's continue writes nothing; a child's chain answers
its parent; a cancel stops a chain where it stands."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from conftest import Store
from test_cli import run_cli
from test_durable import journal, lifecycle, wait_suspended, wait_terminal, working

from simpleworkflow import Client, Context, RunStatus, observe
from simpleworkflow.admin import replaycheck
from simpleworkflow.app import App
from simpleworkflow.backends import Backend
from simpleworkflow.backends.records import (
    Claim,
    Continuation,
    Outcomes,
    Release,
    StepRecord,
    Success,
)
from simpleworkflow.models import Run
from simpleworkflow.retry import RetryPolicy

QUICK = RetryPolicy(backoff="fixed", base=0.2, jitter=0)
COUNTER = "test.cnew.counter.v1"


class Finished(observe.Observer):
    """The attempts' outcomes, as the observers hear them."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[str, str | None]] = []

    def attempt_finished(self, event: observe.AttemptFinished) -> None:
        self.outcomes.append((event.outcome, event.continued_as))


@pytest.fixture
def finished() -> Finished:
    return Finished()


@pytest.fixture
def app(store: Store, finished: Finished) -> App:
    return App(store.url, schema=store.schema, retry=QUICK, observers=[finished])


def chain(client: Client, run_id: str) -> list[Run]:
    """The runs of a chain from ``run_id`` on, following ``continued_as``."""
    runs = [client.get(run_id)]
    while runs[-1].continued_as is not None:
        runs.append(client.get(runs[-1].continued_as))
    return runs


def counter(app: App, kind: str) -> None:
    """A workflow that counts ``n`` up to ``until``, one run per number."""

    def count(payload: dict[str, Any], ctx: Context) -> Any:
        seen = ctx.step("seen", lambda: payload["n"])
        if seen < payload["until"]:
            ctx.continue_as_new({**payload, "n": seen + 1})
        return {"n": seen}

    async def count_async(payload: dict[str, Any], ctx: Context) -> Any:
        seen = await ctx.step("seen", lambda: payload["n"])
        if seen < payload["until"]:
            await ctx.continue_as_new({**payload, "n": seen + 1})
        return {"n": seen}

    app.workflow(COUNTER)(count if kind == "def" else count_async)


@pytest.mark.parametrize("kind", ["async", "def"])
def test_a_chain_of_three_carries_the_payload_with_an_empty_journal_and_links_both_ways(
    store: Store, app: App, client: Client, finished: Finished, kind: str
) -> None:
    counter(app, kind)
    first = client.start(COUNTER, {"n": 1, "until": 3}, priority=7, max_attempts=5)
    with working(app):
        last = client.wait(first.id, timeout=20)

    assert (last.status, last.result) == (RunStatus.SUCCEEDED, {"n": 3}), last.last_error
    runs = chain(client, first.id)
    assert [run.id for run in runs][-1] == last.id and len(runs) == 3
    assert [run.payload["n"] for run in runs] == [1, 2, 3]
    for before, after in itertools.pairwise(runs):
        assert before.status is RunStatus.SUCCEEDED
        assert before.result == {"continued_as": after.id}
        assert after.continued_from == before.id
        assert (after.type, after.priority, after.max_attempts) == (COUNTER, 7, 5)
        assert after.idempotency_key is None
        assert "continued_as_new" in lifecycle(client, before.id)
        assert lifecycle(client, after.id)[0] == "created"
    assert runs[0].continued_from is None and runs[-1].continued_as is None
    # Each run journaled its own "seen" alone: the journal starts empty in each.
    for run in runs:
        assert [(e["name"], e["output"]) for e in journal(store, run.id)] == [
            ("seen", run.payload["n"])
        ]
    assert store.count() == 3
    continued = [(o, n) for o, n in finished.outcomes if o == observe.CONTINUED]
    assert continued == [(observe.CONTINUED, runs[1].id), (observe.CONTINUED, runs[2].id)]


def test_wait_without_following_returns_the_run_itself(app: App, client: Client) -> None:
    counter(app, "async")
    first = client.start(COUNTER, {"n": 1, "until": 2})
    with working(app):
        last = client.wait(first.id, timeout=20)
        alone = client.wait(first.id, timeout=20, follow=False)
    assert alone.id == first.id and alone.result == {"continued_as": last.id}
    assert last.result == {"n": 2}


def test_the_async_client_follows_the_chain(store: Store, app: App) -> None:
    counter(app, "async")

    async def main() -> Run:
        async with store.async_client() as client:
            first = await client.start(COUNTER, {"n": 1, "until": 3})
            with working(app):
                return await client.wait(first.id, timeout=20)

    last = asyncio.run(main())
    assert last.result == {"n": 3} and last.continued_from is not None


def test_an_idempotency_key_stays_with_the_first_run_and_blocks_no_successor(
    app: App, client: Client
) -> None:
    counter(app, "async")
    first = client.start(COUNTER, {"n": 1, "until": 2}, idempotency_key="poll:partner-a")
    with working(app):
        last = client.wait(first.id, timeout=20)
    again = client.start(COUNTER, {"n": 1, "until": 2}, idempotency_key="poll:partner-a")
    assert again.id == first.id and again.created is False
    assert client.wait(again.id).id == last.id


def _claim(backend: Backend) -> Any:
    leases = backend.execute(
        backend.claim(Claim(worker_id="w", types=[COUNTER], limit=1, lease_seconds=30))
    )
    assert len(leases) == 1
    return leases[0]


def test_a_continue_with_a_stale_lease_writes_nothing(
    store: Store, client: Client, backend: Backend
) -> None:
    run_id = client.start(COUNTER, {"n": 1}).id
    zombie = _claim(backend)
    # The zombie's lease is given back and another worker claims the run.
    backend.execute(backend.finish(Outcomes(released=[Release(run_id, zombie.token)]), "w"))
    current = _claim(backend)
    assert current.token != zombie.token

    late = Continuation(run_id, zombie.token, COUNTER, "0190b5a4-0000-7000-8000-000000000001", "{}")
    accepted = backend.execute(backend.finish(Outcomes(continued=[late]), "zombie"))

    assert accepted == set()
    run = client.get(run_id)
    assert (run.status, run.continued_as, run.result) == (RunStatus.LEASED, None, None)
    assert store.count() == 1, "the zombie started a successor"
    assert "continued_as_new" not in lifecycle(client, run_id)

    # The worker that holds the lease can continue it; its attempt's trace context goes
    # to the successor, for the successor's first attempt to link to.
    attempt = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    fresh = Continuation(
        run_id, current.token, COUNTER, "0190b5a4-0000-7000-8000-000000000002", "[1]", attempt
    )
    assert backend.execute(backend.finish(Outcomes(continued=[fresh]), "w")) == {run_id}
    successor = client.get(fresh.next_id)
    assert (successor.status, successor.continued_from) == (RunStatus.PENDING, run_id)
    assert (successor.payload, successor.trace_context) == ([1], {"attempt": attempt})
    assert client.get(run_id).continued_as == fresh.next_id


def test_a_parent_waiting_on_a_child_that_continues_gets_the_chains_result(
    store: Store, app: App, client: Client
) -> None:
    counter(app, "async")

    @app.workflow("test.cnew.parent.v1")
    async def parent(payload: Any, ctx: Context) -> Any:
        child_id = await ctx.start_child(COUNTER, {"n": 1, "until": 3})
        return {"child": child_id, "value": await ctx.wait_child(child_id)}

    run_id = client.start("test.cnew.parent.v1", {}).id
    with working(app):
        run = wait_terminal(client, run_id)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result["value"] == {"n": 3}
    runs = chain(client, run.result["child"])
    assert len(runs) == 3 and all(r.parent_id == run_id for r in runs)
    assert store.count() == 4


def test_cancelling_the_run_under_way_ends_the_chain_there(app: App, client: Client) -> None:
    @app.workflow("test.cnew.poller.v1")
    async def poller(payload: Any, ctx: Context) -> Any:
        if payload["round"] == 1:
            await ctx.continue_as_new({"round": 2})
        await ctx.sleep("pause", "1h")
        return "never"

    first = client.start("test.cnew.poller.v1", {"round": 1})
    with working(app):
        wait_terminal(client, first.id)
        second = client.get(client.get(first.id).continued_as or "")
        wait_suspended(client, second.id, "sleep")
        # The finished run of the chain cannot be cancelled; the one under way can.
        assert client.cancel(first.id) is False
        client.cancel(second.id)
        last = client.wait(first.id, timeout=10)

    assert (last.id, last.status) == (second.id, RunStatus.CANCELLED)
    assert client.get(first.id).status is RunStatus.SUCCEEDED


def test_a_payload_that_is_not_json_fails_the_run_and_starts_nothing(
    store: Store, app: App, client: Client
) -> None:
    @app.workflow("test.cnew.bad.v1")
    async def bad(payload: Any, ctx: Context) -> Any:
        await ctx.continue_as_new({"when": object()})

    run_id = client.start("test.cnew.bad.v1", {}).id
    with working(app):
        run = wait_terminal(client, run_id)
    assert run.status is RunStatus.FAILED and "InvalidPayload" in (run.last_error or "")
    assert run.continued_as is None and store.count() == 1


def test_runs_show_names_the_runs_of_the_chain(
    store: Store, app: App, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    counter(app, "async")
    first = client.start(COUNTER, {"n": 1, "until": 2})
    with working(app):
        last = client.wait(first.id, timeout=20)

    before = run_cli(store, capsys, "runs", "show", first.id).out
    after = run_cli(store, capsys, "runs", "show", last.id).out
    assert f"continued_as     {last.id}" in before and "continued_from" not in before
    assert f"continued_from   {first.id}" in after and "continued_as " not in after
    assert "continued_as_new" in before  # the event in its audit trail
    shown = run_cli(store, capsys, "runs", "show", first.id, "--json").json()
    assert shown["run"]["continued_as"] == last.id


def test_replay_check_replays_a_body_up_to_its_continue(
    store: Store, client: Client, backend: Backend
) -> None:
    """A run with "seen" journaled, whose code continues next: it replays. Code that
    continues before the journaled step never reaches it: diverged."""
    run_id = client.start(COUNTER, {"n": 1, "until": 2}).id
    lease = _claim(backend)
    step = StepRecord(run_id, lease.token, "seen", "step", 0, "1", 1)
    assert backend.execute(backend.record_steps([step])) == {(run_id, "seen")}
    backend.execute(backend.finish(Outcomes(released=[Release(run_id, lease.token)]), "w"))

    same = App(store.url, schema=store.schema)
    counter(same, "async")
    [report] = asyncio.run(replaycheck.check_runs(same, backend))
    assert (report.run_id, report.verdict) == (run_id, replaycheck.OK), report.detail

    hasty = App(store.url, schema=store.schema)

    @hasty.workflow(COUNTER)
    async def continues_first(payload: dict[str, Any], ctx: Context) -> Any:
        await ctx.continue_as_new(payload)

    [report] = asyncio.run(replaycheck.check_runs(hasty, backend))
    assert (report.run_id, report.verdict) == (run_id, replaycheck.DIVERGED)
    assert "'seen'" in report.detail
    assert store.count() == 1, "replay-check started a successor"


def test_a_chain_under_a_concurrency_limit_gives_each_lease_back(app: App, client: Client) -> None:
    """Each run of the chain is counted against its type's limit of one and its key's;
    a continue gives the lease back, or the successor would never be claimed."""

    @app.workflow("test.cnew.limited.v1", concurrency=1, key_concurrency=1)
    async def limited(payload: dict[str, Any], ctx: Context) -> Any:
        if payload["n"] < 3:
            await ctx.continue_as_new({"n": payload["n"] + 1})
        return payload["n"]

    first = client.start("test.cnew.limited.v1", {"n": 1}, concurrency_key="customer-7")
    with working(app):
        last = client.wait(first.id, timeout=20)
    assert (last.status, last.result) == (RunStatus.SUCCEEDED, 3), last.last_error
    assert [run.concurrency_key for run in chain(client, first.id)] == ["customer-7"] * 3


def test_successes_and_continues_recorded_together(
    store: Store, client: Client, backend: Backend
) -> None:
    """One flush of the outbox holds both kinds: each run ends, one successor starts."""
    done, going = client.start(COUNTER, {"n": 1}).id, client.start(COUNTER, {"n": 2}).id
    claim = Claim(worker_id="w", types=[COUNTER], limit=2, lease_seconds=30)
    leases = {lease.run.id: lease for lease in backend.execute(backend.claim(claim))}
    then = "0190b5a4-0000-7000-8000-000000000003"
    outcomes = Outcomes(
        succeeded=[Success(done, leases[done].token, '"over"')],
        continued=[Continuation(going, leases[going].token, COUNTER, then, '{"n": 3}')],
    )
    assert backend.execute(backend.finish(outcomes, "w")) == {done, going}
    assert client.get(done).result == "over" and client.get(done).continued_as is None
    assert client.get(going).result == {"continued_as": then}
    assert client.get(then).payload == {"n": 3}
    assert store.count() == 3
