"""Claiming ahead, on both stores: a worker whose handlers are quick claims more runs than
it has free slots, and the runs it could not start yet wait in it for a slot.

What a user relies on: no more handlers run at once than ``concurrency``; a run waiting
in a worker keeps its lease (heartbeats renew it) and is never lost; a waiting run that
is cancelled never runs; and a worker that shuts down gives its waiting runs back at
once, without waiting for its running handlers to finish.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Store, poller_thread
from worker_app import wait_until

from simpleworkflow import App, Client, Context, RunStatus
from simpleworkflow.backends.base import Claim, Success
from simpleworkflow.durable import holding
from simpleworkflow.worker import outbox

QUICK = "test.quick.v1"
BRIEF = "test.brief.v1"  # QUICK, but it awaits: handlers overlap
BLOCK = "test.block.v1"
PLAIN = "test.plain.v1"  # QUICK, as a plain def (run in a thread)
TIMED = "test.timed.v1"  # PLAIN, with a timeout
SLOW = "test.slow.v1"  # a plain def that takes a while


class Seen:
    """Which runs' handlers started, and the most that ran at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started: list[str] = []
        self.now = 0
        self.most = 0

    def enter(self, run_id: str) -> None:
        with self._lock:
            self.started.append(run_id)
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # a failed test leaves no handler blocked


@pytest.fixture
def app(store: Store, seen: Seen, release: threading.Event) -> App:
    app = App(store.url, schema=store.schema)

    @app.workflow(QUICK)
    async def quick(payload: Any, ctx: Context) -> None:
        seen.enter(ctx.run_id)
        seen.leave()

    @app.workflow(BRIEF)
    async def brief(payload: Any, ctx: Context) -> None:
        seen.enter(ctx.run_id)
        await asyncio.sleep(0.001)
        seen.leave()

    @app.workflow(PLAIN)
    def plain(payload: Any, ctx: Context) -> None:
        seen.enter(ctx.run_id)
        seen.leave()
        if payload.get("fail"):
            raise ValueError("plain def handler failed")

    @app.workflow(TIMED, timeout=1)
    def timed(payload: Any, ctx: Context) -> None:
        seen.enter(ctx.run_id)
        seen.leave()

    @app.workflow(SLOW)
    def slow(payload: Any, ctx: Context) -> None:
        seen.enter(ctx.run_id)
        threading.Event().wait(0.2)
        seen.leave()

    @app.workflow(BLOCK)
    def block(payload: Any, ctx: Context) -> None:
        seen.enter(ctx.run_id)
        release.wait(30)
        seen.leave()

    return app


def statuses(client: Client, run_ids: list[str]) -> set[RunStatus]:
    return {client.get(run_id).status for run_id in run_ids}


def settled(client: Client, run_ids: list[str], status: RunStatus, within: float = 15) -> None:
    wait_until(
        lambda: statuses(client, run_ids) == {status},
        within,
        lambda: f"expected every run {status}, found {statuses(client, run_ids)}",
    )


def lifecycle(client: Client, run_id: str) -> list[str]:
    return [e.event_type for e in client.events(run_id) if e.event_type != "heartbeat"]


def quick_runs(client: Client, count: int, kind: str = QUICK) -> list[str]:
    return [run.id for run in client.start_many([(kind, {})] * count)]


def waiting_behind_a_blocked_slot(
    client: Client, seen: Seen, least: int, kind: str = QUICK
) -> tuple[str, list[str]]:
    """With one slot: quick runs first (the worker learns its handlers are quick), then a
    run that blocks the slot, then quick runs of ``kind``, some claimed ahead to wait
    behind it (as many as the handlers' pace allows, at least ``least``; no more are
    claimed while any wait). Returns the blocking run and those claimed ahead."""
    settled(client, quick_runs(client, 30), RunStatus.SUCCEEDED)
    blocker = client.start(BLOCK).id
    wait_until(lambda: blocker in seen.started, 15, "the blocking run never started")
    later = quick_runs(client, 10, kind)

    def claimed_ahead() -> list[str]:
        return [run_id for run_id in later if client.get(run_id).status is RunStatus.LEASED]

    wait_until(lambda: len(claimed_ahead()) >= least, 15, "too few runs were claimed ahead")
    threading.Event().wait(0.5)  # any claim under way has landed
    return blocker, claimed_ahead()


def test_no_more_handlers_run_at_once_than_the_concurrency_while_claiming_ahead(
    app: App, client: Client, seen: Seen
) -> None:
    with poller_thread(app, concurrency=3, poll_interval=0.2):
        run_ids = [run.id for run in client.start_many([(BRIEF, {})] * 300)]
        settled(client, run_ids, RunStatus.SUCCEEDED, within=60)
    assert sorted(seen.started) == sorted(run_ids)
    assert seen.most == 3


def test_quick_def_and_async_handlers_drained_together_all_end_within_the_concurrency(
    app: App, client: Client, seen: Seen
) -> None:
    # The outbox gathers outcomes while quick handlers run, on the loop or in threads: a
    # mix of both, some def handlers raising, must end every run once.
    kinds = [(BRIEF, {}), (PLAIN, {}), (PLAIN, {"fail": True}), (QUICK, {})] * 60
    requests = [{"type": kind, "payload": payload, "max_attempts": 1} for kind, payload in kinds]
    with poller_thread(app, concurrency=3, poll_interval=0.2):
        runs = client.start_many(requests)
        failing = [run.id for run in runs if run.payload == {"fail": True}]
        others = [run.id for run in runs if run.id not in failing]
        settled(client, failing, RunStatus.FAILED, within=60)
        settled(client, others, RunStatus.SUCCEEDED, within=60)
    assert sorted(seen.started) == sorted(run.id for run in runs)
    assert seen.most <= 3


@pytest.mark.parametrize("kind", [QUICK, PLAIN])
def test_runs_waiting_for_a_slot_keep_their_leases_and_a_cancelled_one_never_runs(
    app: App, client: Client, seen: Seen, release: threading.Event, kind: str
) -> None:
    # A lease of 3 s, renewed every second: short enough to outlive in the test, long
    # enough that a heartbeat late by a loaded machine's second does not lose it.
    with poller_thread(app, concurrency=1, lease_duration=3, poll_interval=0.2):
        blocker, waiting = waiting_behind_a_blocked_slot(client, seen, least=2, kind=kind)
        dropped, *kept = waiting
        assert client.cancel(dropped)
        settled(client, [dropped], RunStatus.CANCELLED)
        # Past their first lease: heartbeats renewed the leases of the runs that wait.
        threading.Event().wait(4)
        assert statuses(client, kept) == {RunStatus.LEASED}
        assert not set(waiting) & set(seen.started)
        release.set()
        settled(client, [blocker, *kept], RunStatus.SUCCEEDED)
    assert dropped not in seen.started
    assert client.get(dropped).status is RunStatus.CANCELLED
    for run_id in kept:
        assert client.get(run_id).attempt == 0
        assert lifecycle(client, run_id) == ["created", "leased", "started", "succeeded"]


@pytest.mark.parametrize("kind", [QUICK, PLAIN])
def test_shutdown_gives_runs_waiting_for_a_slot_back_at_once(
    app: App, client: Client, seen: Seen, release: threading.Event, kind: str
) -> None:
    # Plain def runs too: the blocked handler's thread, returning after the shutdown
    # began, starts none of them.
    with poller_thread(app, concurrency=1, shutdown_grace=30, poll_interval=0.2) as poller:
        blocker, waiting = waiting_behind_a_blocked_slot(client, seen, least=1, kind=kind)
        poller.stop()
        # Given back while the blocked handler still has its grace period to finish.
        settled(client, waiting, RunStatus.PENDING, within=10)
        assert client.get(blocker).status is RunStatus.LEASED
        release.set()
    assert client.get(blocker).status is RunStatus.SUCCEEDED
    assert not set(waiting) & set(seen.started)
    for run_id in waiting:
        run = client.get(run_id)
        assert (run.attempt, run.leased_by) == (0, None)
        assert lifecycle(client, run_id) == ["created", "leased", "started", "released"]
    with poller_thread(app, concurrency=1, poll_interval=0.2):
        settled(client, waiting, RunStatus.SUCCEEDED)


def test_a_def_handler_waiting_for_a_slot_is_timed_from_its_start(
    app: App, client: Client, seen: Seen, release: threading.Event
) -> None:
    # Claimed ahead behind a handler that holds the one slot for longer than their
    # timeout (1 s): counted from their claim, they would all time out.
    with poller_thread(app, concurrency=1, poll_interval=0.2):
        blocker, waiting = waiting_behind_a_blocked_slot(client, seen, least=1, kind=TIMED)
        threading.Event().wait(1.5)
        release.set()
        settled(client, [blocker, *waiting], RunStatus.SUCCEEDED)
    for run_id in waiting:
        assert client.get(run_id).attempt == 0


def test_a_plain_def_drain_claiming_ahead_runs_each_handler_once_within_the_concurrency(
    app: App, client: Client, seen: Seen
) -> None:
    with poller_thread(app, concurrency=3, poll_interval=0.2):
        run_ids = quick_runs(client, 300, PLAIN)
        settled(client, run_ids, RunStatus.SUCCEEDED, within=60)
    assert sorted(seen.started) == sorted(run_ids)
    assert seen.most <= 3


def test_a_worker_whose_handlers_have_not_returned_claims_only_for_its_free_slots(
    app: App, client: Client, seen: Seen, release: threading.Event
) -> None:
    """Slow handlers (or none seen yet) mean no claiming ahead: the runs a worker cannot
    start stay pending, for another worker to take."""
    with poller_thread(app, concurrency=2, poll_interval=0.2):
        run_ids = [run.id for run in client.start_many([(BLOCK, {})] * 5)]
        wait_until(lambda: len(seen.started) == 2, 15, "the blocking runs never started")
        threading.Event().wait(0.5)  # a claim too many would have landed by now
        leased = [r for r in run_ids if client.get(r).status is RunStatus.LEASED]
        assert sorted(leased) == sorted(seen.started)
        release.set()
        settled(client, run_ids, RunStatus.SUCCEEDED)


@pytest.mark.parametrize("late_kind", [BRIEF, PLAIN, SLOW])
def test_a_free_slot_takes_a_due_run_while_the_others_hold_long_handlers(
    app: App, client: Client, seen: Seen, release: threading.Event, late_kind: str
) -> None:
    """After quick runs (the worker has learnt its handlers are quick), three of four
    slots fill with handlers that block: the fourth still takes the next due run at once,
    whatever the pace says of handlers that have not returned yet, and its outcome is
    written without waiting for them (the outbox waits for the outcomes of handlers
    still running in threads, but not for ever)."""
    with poller_thread(app, concurrency=4, claim_batch=4, poll_interval=0.2):
        settled(client, quick_runs(client, 30), RunStatus.SUCCEEDED)
        blockers = [client.start(BLOCK).id for _ in range(3)]
        wait_until(lambda: set(blockers) <= set(seen.started), 15, "the blockers never started")
        late = client.start(late_kind).id
        settled(client, [late], RunStatus.SUCCEEDED)
        assert statuses(client, blockers) == {RunStatus.LEASED}
        release.set()
        settled(client, blockers, RunStatus.SUCCEEDED)


def test_a_freshly_claimed_run_begins_its_first_step_without_reading_its_lease_again(
    store: Store, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim found the run held, as a read would have: while that is fresh enough to
    begin a step on (see ``durable.holding``), the first step reads nothing more."""
    monkeypatch.setattr(holding, "HOLD_FRESH_FOR", 60.0)  # what the claim knew stays fresh
    reads: list[str] = []
    read = holding.Holding._read

    async def counted(self: holding.Holding) -> None:
        reads.append("read")
        await read(self)

    monkeypatch.setattr(holding.Holding, "_read", counted)
    app = App(store.url, schema=store.schema)

    @app.workflow("test.one.step.v1")
    async def one_step(payload: Any, ctx: Context) -> int:
        return int(await ctx.step("one", lambda: 1))

    run_id = client.start("test.one.step.v1").id
    with poller_thread(app):
        assert client.wait(run_id, timeout=20).status is RunStatus.SUCCEEDED
    assert [s.step_name for s in client.steps(run_id)] == ["one"]
    assert reads == []


def test_the_outbox_lets_a_claim_about_to_be_sent_go_before_its_write(
    store: Store, client: Client
) -> None:
    """A claim the loop has decided on goes out before the outcomes queued meanwhile: its
    rows start the next handlers, their commit starts nothing. The outcome still counts."""
    run_id = client.start("test.ahead.outbox.v1").id
    backend = store.backend()
    log: list[str] = []

    class Outbox(outbox.Outbox):
        async def write(self, items: list[outbox.Item]) -> set[Any]:
            log.append("outcome written")
            return await super().write(items)

    async def scenario() -> bool:
        box = Outbox(backend, "w")
        writer = asyncio.create_task(box.run())
        claim = Claim(worker_id="w", types=("test.ahead.outbox.v1",), limit=1, lease_seconds=30)
        (lease,) = await backend.execute_async(backend.claim(claim))
        about_to_send = [True]
        box.claim_sending = lambda: about_to_send[0]

        async def send_claim() -> None:
            log.append("claim sent")
            about_to_send[0] = False

        try:
            recording = asyncio.create_task(box.deliver(Success(run_id, lease.token, "null")))
            await asyncio.sleep(0)  # the outcome is queued, the writer woken
            sending = asyncio.create_task(send_claim())
            counted = await recording
            await sending
            return counted
        finally:
            writer.cancel()
            await backend.aclose()

    try:
        assert asyncio.run(scenario()) is True
    finally:
        backend.close()
    assert log == ["claim sent", "outcome written"]
    assert client.get(run_id).status is RunStatus.SUCCEEDED
