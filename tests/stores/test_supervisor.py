"""Worker services under a supervisor: restarted when they die, the worker stopped cleanly
when they keep dying, and never a handler running past its lease meanwhile.

The faults are deliberate: a service of the test's own, or the worker's heartbeat or
lease watch replaced (in this process with ``monkeypatch``, in a worker process through
``worker_app.break_heartbeats_when``) by one that raises. No engine code knows of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Store, poller_thread
from test_durable_processes import as_time
from test_worker_processes import Workers, lifecycle, wait_status
from worker_app import BLOCKING_TYPE, Ledger, wait_until

from simpleworkflow import App, Client, Context, RunStatus, errors, observe
from simpleworkflow.worker import leases
from simpleworkflow.worker.supervisor import Limits, Loop, Supervisor

# -- the supervisor alone ----------------------------------------------------------------


class Flaky:
    """A service that raises ``deaths`` times (returns instead if ``returns``), then runs
    until cancelled."""

    name = "flaky"

    def __init__(self, deaths: int, *, returns: bool = False) -> None:
        self.deaths = deaths
        self.returns = returns
        self.starts = 0

    async def run(self) -> None:
        self.starts += 1
        if self.starts <= self.deaths:
            if self.returns:
                return
            raise RuntimeError(f"death {self.starts}")
        await asyncio.Event().wait()


def supervise(
    service: Any, limits: Limits, *, critical: bool = False, seconds: float = 1.0, **kw: Any
) -> list[errors.WorkerFailed]:
    """Run ``service`` under a supervisor for ``seconds``; the failures it reported."""
    failures: list[errors.WorkerFailed] = []

    async def main() -> None:
        supervisor = Supervisor(failures.append, limits, **kw)
        supervisor.add(service, critical=critical)
        supervisor.start()
        await asyncio.sleep(seconds)
        await supervisor.stop()

    asyncio.run(main())
    return failures


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="simpleworkflow")
    return caplog


def test_a_dead_service_is_logged_with_its_traceback_and_restarted_after_doubling_pauses(
    logged: pytest.LogCaptureFixture,
) -> None:
    service = Flaky(4)
    limits = Limits(first_backoff=0.1, max_backoff=0.4, max_deaths=10)
    assert supervise(service, limits, seconds=2.0) == []
    assert service.starts == 5
    restarts = [r for r in logged.records if "restarting" in r.getMessage()]
    assert [r.getMessage() for r in restarts] == [
        f"worker service 'flaky' failed; restarting it in {pause}s"
        for pause in ("0.1", "0.2", "0.4", "0.4")
    ]
    assert all(r.levelno == logging.ERROR and r.exc_info for r in restarts)
    assert "death 1" in str(restarts[0].exc_info[1])  # type: ignore[index]


def test_a_service_that_returns_while_the_worker_runs_is_restarted_too(
    logged: pytest.LogCaptureFixture,
) -> None:
    service = Flaky(1, returns=True)
    assert supervise(service, Limits(first_backoff=0.01), seconds=0.3) == []
    assert service.starts == 2
    assert any("returned while the worker runs" in r.getMessage() for r in logged.records)


def test_a_service_that_keeps_dying_fails_the_worker_once_and_is_not_restarted() -> None:
    service = Flaky(100)
    failures = supervise(service, Limits(first_backoff=0.01, max_deaths=3), seconds=0.5)
    assert service.starts == 4  # three deaths are forgiven, the fourth is one too many
    assert len(failures) == 1
    assert "'flaky' died 4 times within 60s" in str(failures[0])
    assert "RuntimeError: death 4" in str(failures[0])
    assert isinstance(failures[0].__cause__, RuntimeError)


def test_deaths_further_apart_than_the_window_never_fail_the_worker() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 100.0  # each death comes 100 s after the one before
        return now[0]

    service = Flaky(6)
    limits = Limits(first_backoff=0.01, max_deaths=1, window=60.0)
    assert supervise(service, limits, seconds=0.5, clock=clock) == []
    assert service.starts == 7


def test_a_critical_service_fails_the_worker_at_its_first_death() -> None:
    service = Flaky(1)
    failures = supervise(service, Limits(first_backoff=0.01), critical=True, seconds=0.3)
    assert service.starts == 1
    assert len(failures) == 1
    assert "'flaky', which it cannot run handlers without, died" in str(failures[0])


def test_stop_ends_services_that_run_and_those_waiting_to_restart() -> None:
    async def main() -> tuple[float, list[bool]]:
        supervisor = Supervisor(lambda failure: None, Limits(first_backoff=60.0))
        supervisor.add(Flaky(1))  # dies at once, then waits a minute to restart
        supervisor.add(Loop("forever", asyncio.Event().wait))
        supervisor.start()
        await asyncio.sleep(0.1)
        tasks = list(supervisor._tasks)
        started = time.monotonic()
        await supervisor.stop()
        return time.monotonic() - started, [task.done() for task in tasks]

    took, done = asyncio.run(main())
    assert done == [True, True]
    assert took < 5.0


# -- a worker whose services die ---------------------------------------------------------


class Witness:
    """What a handler saw, in the test's own memory: when it ran, and why it stopped."""

    def __init__(self) -> None:
        self.started = threading.Event()
        # When it was still running (wall clock), and when the lease it ran under ended.
        self.ticks: list[tuple[float, float]] = []
        self.reasons: list[str | None] = []


def ticking_handler(witness: Witness, blocks_on: str) -> Any:
    """An async handler that ticks every 20 ms on worker ``blocks_on`` until it is stopped."""

    async def handler(payload: Any, ctx: Context) -> dict[str, str]:
        if ctx.worker_id == blocks_on:
            witness.started.set()
            try:
                assert ctx.run.lease_until is not None
                ends = ctx.run.lease_until.timestamp()  # as the store set it at the claim
                while not ctx.is_cancelled():
                    witness.ticks.append((time.time(), ends))
                    await asyncio.sleep(0.02)
            finally:  # asked to stop, it is cancelled at its await
                witness.reasons.append(ctx.stop_reason)
            ctx.raise_if_cancelled()
        return {"worker": ctx.worker_id}

    return handler


class Seen(observe.Observer):
    def __init__(self) -> None:
        self.lost: list[observe.LeaseLost] = []

    def lease_lost(self, event: observe.LeaseLost) -> None:
        self.lost.append(event)


@pytest.fixture
def app(store: Store) -> App:
    return App(store.url, schema=store.schema)


def test_heartbeats_that_die_once_are_restarted_and_keep_a_long_run_leased(
    app: App, client: Client, monkeypatch: pytest.MonkeyPatch, logged: pytest.LogCaptureFixture
) -> None:
    @app.workflow("sup.long.v1")
    async def long(payload: Any) -> str:
        await asyncio.sleep(payload["seconds"])
        return "done"

    beat = leases.Keeper.beat
    deaths: list[str] = []

    async def dies_once(self: leases.Keeper) -> None:
        if not deaths:
            deaths.append("heartbeats")
            raise RuntimeError("heartbeats died once, on purpose")
        await beat(self)

    monkeypatch.setattr(leases.Keeper, "beat", dies_once)
    lease = 1.5
    long_id = client.start("sup.long.v1", {"seconds": 4 * lease}).id
    with poller_thread(app, lease_duration=lease, worker_id="w-once", poll_interval=0.2):
        quick = [client.start("sup.long.v1", {"seconds": 0}).id for _ in range(3)]
        runs = [client.wait(run_id, timeout=30) for run_id in [long_id, *quick]]

    assert [(run.status, run.result, run.attempt) for run in runs] == [
        (RunStatus.SUCCEEDED, "done", 0)
    ] * 4
    assert lifecycle(client, long_id) == ["created", "leased", "started", "succeeded"]
    heartbeats = [e for e in client.events(long_id) if e.event_type == "heartbeat"]
    assert len(heartbeats) >= 4, f"only {len(heartbeats)} heartbeats in {4 * lease}s"
    messages = [r.getMessage() for r in logged.records]
    assert "worker service 'heartbeats' failed; restarting it in 0.1s" in messages
    assert not [m for m in messages if "lease lost" in m]


def test_a_service_given_in_the_options_runs_beside_the_worker_and_is_restarted_like_its_own(
    app: App, client: Client, logged: pytest.LogCaptureFixture
) -> None:
    @app.workflow("sup.quick.v1")
    def quick(payload: Any) -> str:
        return "done"

    sweeper = Flaky(1)
    sweeper.name = "sweeper"
    with poller_thread(app, services=[sweeper], poll_interval=0.2):
        wait_until(lambda: sweeper.starts == 2, 10, "the service was not restarted")
        assert client.wait(client.start("sup.quick.v1").id, timeout=20).result == "done"
    assert "worker service 'sweeper' failed; restarting it in 0.1s" in logged.messages


def test_heartbeats_that_keep_dying_stop_the_handler_before_its_lease_ends_then_the_worker(
    store: Store,
    app: App,
    client: Client,
    monkeypatch: pytest.MonkeyPatch,
    logged: pytest.LogCaptureFixture,
) -> None:
    """Between a heartbeat's death and its restart the watch on lease ends still fences:
    the handler stops before the lease it holds ends, and the worker then fails."""
    witness, seen = Witness(), Seen()
    app.observe(seen)
    app.register("sup.tick.v1", ticking_handler(witness, blocks_on="w-deaf"))

    async def dead(self: leases.Keeper) -> None:
        raise RuntimeError("heartbeats broken on purpose")

    monkeypatch.setattr(leases.Keeper, "beat", dead)
    run_id = client.start("sup.tick.v1").id
    lease = 1.5
    with (
        pytest.raises(errors.WorkerFailed, match="'heartbeats' died 6 times within 60s"),
        poller_thread(app, lease_duration=lease, worker_id="w-deaf"),
    ):
        assert witness.started.wait(15)
        wait_until(lambda: "the worker stops" in logged.text, 20, "the worker never failed")

    # Its lease expired, so the worker may have claimed the run again before it failed
    # (and stopped that attempt when it failed): each attempt stopped before the end of
    # the lease it ran under.
    assert witness.reasons[0] == "lease lost"
    assert set(witness.reasons) <= {"lease lost", "shutdown"}
    late = [(at, ends) for at, ends in witness.ticks if at >= ends]
    assert not late, "the handler ran past its lease"
    lost = [(run_id, "not renewed")] * witness.reasons.count("lease lost")
    assert [(e.run.id, e.reason) for e in seen.lost] == lost


def test_when_the_lease_watch_dies_the_worker_stops_its_handlers_and_gives_their_runs_back(
    app: App, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    witness = Witness()
    app.register("sup.tick.v1", ticking_handler(witness, blocks_on="w-blind"))
    broken = threading.Event()
    watch = leases.Keeper.watch

    async def dies_on_demand(self: leases.Keeper) -> None:
        watching = asyncio.ensure_future(watch(self))
        try:
            while not broken.is_set():
                await asyncio.sleep(0.02)
        finally:
            watching.cancel()
        raise RuntimeError("lease watch broken on purpose")

    monkeypatch.setattr(leases.Keeper, "watch", dies_on_demand)
    run_id = client.start("sup.tick.v1").id
    failed = pytest.raises(errors.WorkerFailed, match="'lease-ends', which it cannot run")
    with failed, poller_thread(app, worker_id="w-blind", shutdown_grace=30):
        assert witness.started.wait(15)
        broken.set()
        wait_status(client, run_id, RunStatus.PENDING, timeout=10)

    assert witness.reasons == ["shutdown"]  # asked to stop at once, no grace
    assert lifecycle(client, run_id) == ["created", "leased", "started", "released"]
    monkeypatch.undo()
    with poller_thread(app, worker_id="w-next"):
        run = client.wait(run_id, timeout=20)
    assert (run.status, run.result, run.attempt) == (RunStatus.SUCCEEDED, {"worker": "w-next"}, 0)


def test_a_handler_that_sees_its_lease_end_before_the_watch_still_gets_it_logged_once(
    app: App, client: Client, monkeypatch: pytest.MonkeyPatch, logged: pytest.LogCaptureFixture
) -> None:
    """``ctx.is_cancelled()`` answers from the worker's own account of its leases, so a
    handler may stop for a lease about to end before the lease watch looks; the operator
    still reads the one warning the watch would have written (it once went unsaid)."""
    witness, seen = Witness(), Seen()
    app.observe(seen)
    app.register("sup.tick.v1", ticking_handler(witness, blocks_on="w-first"))

    async def silent(self: leases.Keeper) -> None:
        await asyncio.Event().wait()  # no heartbeat, and no watch: the handler sees it first

    monkeypatch.setattr(leases.Keeper, "beat", silent)
    monkeypatch.setattr(leases.Keeper, "watch", silent)
    run_id = client.start("sup.tick.v1").id
    with poller_thread(app, lease_duration=1.5, worker_id="w-first"):
        assert witness.started.wait(15)
        wait_until(lambda: witness.reasons, 10, "the handler never stopped")

    assert witness.reasons[0] == "lease lost"
    warning = f"could not renew the lease of 1 run ({run_id}) in time"
    assert logged.text.count(warning) == 1, logged.text
    assert [(e.run.id, e.reason) for e in seen.lost][:1] == [(run_id, "not renewed")]


# -- a worker process whose heartbeats keep dying ----------------------------------------


@pytest.fixture
def workers(store: Store, ledger: Ledger, tmp_path: Path) -> Iterator[Workers]:
    with contextlib.closing(Workers(store, ledger, tmp_path)) as started:
        yield started


def lease_ends(client: Client, run_id: str, worker_id: str) -> float:
    """When the last lease ``worker_id`` held on the run ended, by the store's records:
    its claim's or its last heartbeat's end (wall-clock seconds)."""
    ends = [
        as_time(e.data["lease_until"]).timestamp()
        for e in client.events(run_id)
        if e.event_type == "leased" and e.data["worker_id"] == worker_id
    ]
    ends += [
        e.created_at.timestamp() + e.data["extended_by_seconds"]
        for e in client.events(run_id)
        if e.event_type == "heartbeat" and e.data["worker_id"] == worker_id
    ]
    return max(ends)


def test_a_worker_process_whose_heartbeats_keep_dying_exits_non_zero_and_gives_its_runs_back(
    store: Store, client: Client, workers: Workers, ledger: Ledger, tmp_path: Path
) -> None:
    trigger = tmp_path / "break-heartbeats"
    env = {**store.env, "WORKER_APP_BREAK_HEARTBEATS": str(trigger)}
    lease = 12.0  # long enough that the worker fails before a lease it holds ends
    failing = workers.start("w-failing", "slow.%", lease=lease, env=env)
    payload = {"block_workers": ["w-failing"], "cooperative": True, "seconds": 60}
    run_ids = [client.start(BLOCKING_TYPE, payload).id for _ in range(2)]
    wait_until(lambda: len(ledger.entries("start", worker="w-failing")) == 2, 20, failing.log)
    wait_until(
        lambda: all(any(e.event_type == "heartbeat" for e in client.events(r)) for r in run_ids),
        20,
        failing.log,
    )

    trigger.touch()  # from now on the heartbeat service dies whenever it starts
    status = failing.wait_exit(30)
    log = failing.log()
    assert status != 0, log
    assert "worker service 'heartbeats' failed; restarting it in 0.1s" in log
    assert "RuntimeError: heartbeats broken on purpose by the test" in log
    assert "the worker stops: its service 'heartbeats' died 6 times within 60s" in log
    assert "released 2 unfinished runs" in log

    for run_id in run_ids:
        ends = lease_ends(client, run_id, "w-failing")
        ran = [e["at"] for e in ledger.entries(run=run_id, worker="w-failing")]
        assert max(ran) < ends, f"a handler ran past its lease: {ledger.entries(run=run_id)}"
        assert ledger.entries("stopped", run=run_id, worker="w-failing")

    workers.start("w-next", "slow.%")
    for run_id in run_ids:
        wait_status(client, run_id, RunStatus.SUCCEEDED, timeout=30)
        run = client.get(run_id)
        assert (run.result, run.attempt) == ({"worker": "w-next", "attempt": 1}, 0)
        assert lifecycle(client, run_id) == [
            "created", "leased", "started", "released", "leased", "started", "succeeded"
        ]  # fmt: skip
