"""Cancels and lease rescues racing real worker processes, on both stores.

Workers are ``tests/durable_app.py`` processes running ``durable.many.v1``: many short
steps in a row, each noting in a ledger (a file outside the engine) that it began, and
when. Afterwards every run's audit trail must end with its terminal event (nothing is
written after ``cancelled``, ``failed`` or ``succeeded``), and a cancelled run's journal
holds only steps whose completion was recorded before the cancel.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import Store, every_store
from test_durable_processes import Worker, Workers
from worker_app import Ledger, wait_until

from simpleworkflow import Client, RunStatus

MANY = "durable.many.v1"
MANY_SYNC = "durable.many.sync.v1"
GATED = "durable.gated.v1"
TERMINAL = {"succeeded", "failed", "cancelled"}


@pytest.fixture
def workers(store: Store, ledger: Ledger, tmp_path: Path) -> Iterator[Workers]:
    with contextlib.closing(Workers(store, ledger, tmp_path)) as started:
        yield started


def begun_by_run(ledger: Ledger) -> dict[str, list[dict[str, Any]]]:
    """The ledger's step lines by run, read once (it grows long)."""
    lines: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for line in ledger.entries("step"):
        lines[line["run"]].append(line)
    return lines


def wait_begun(ledger: Ledger, run_ids: list[str], count: int, log: str = "") -> None:
    def counts() -> list[int]:
        begun = begun_by_run(ledger)
        return [len(begun[run_id]) for run_id in run_ids]

    wait_until(lambda: min(counts()) >= count, 30, lambda: f"steps begun: {counts()}\n{log}")


def wait_finished(client: Client, run_ids: list[str], timeout: float = 60) -> None:
    wait_until(
        lambda: all(client.get(run_id).is_terminal for run_id in run_ids),
        timeout,
        lambda: f"statuses: {[client.get(r).status.value for r in run_ids]}",
    )


def assert_fenced(client: Client, run_id: str) -> None:
    """The audit trail ends with the terminal event; a cancelled run journaled no step
    whose completion came after the cancel."""
    events = [e for e in client.events(run_id) if e.event_type != "heartbeat"]
    types = [e.event_type for e in events]
    ends = [i for i, kind in enumerate(types) if kind in TERMINAL]
    tail = types[max(ends[0] - 2, 0) :] if ends else types[-5:]
    assert len(ends) == 1 and ends[0] == len(types) - 1, f"run {run_id} ends with {tail}"
    if types[-1] != "cancelled":
        return
    before_cancel = {e.data["step"] for e in events if e.event_type == "step_completed"}
    journaled = {s.step_name for s in client.steps(run_id) if s.status == "completed"}
    assert journaled <= before_cancel, f"run {run_id}: journaled after the cancel"


def cancel_all(client: Client, run_ids: list[str], seed: int) -> dict[str, float]:
    """Cancel every run, four at a time from threads of this process, each after a pause
    that lands it anywhere in a step's few milliseconds; the wall time each ``cancel()``
    returned."""
    rng = random.Random(seed)
    pauses = {run_id: rng.uniform(0, 0.05) for run_id in run_ids}

    def cancel(run_id: str) -> tuple[str, float]:
        time.sleep(pauses[run_id])
        assert client.cancel(run_id)
        return run_id, time.time()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return dict(pool.map(cancel, rng.sample(run_ids, len(run_ids))))


def test_cancels_racing_steps_leave_nothing_after_the_cancel(
    store: Store, client: Client, workers: Workers, ledger: Ledger
) -> None:
    """No step begins once its run's ``cancel()`` has returned, whichever thread the step
    runs on (the loop, the step pool, a ``def`` body's), and nothing is written after the
    cancel. Each step notes in the ledger the wall time it began."""
    worker = workers.start("w-1")
    payloads = [
        (MANY, {"steps": 2000}),
        (MANY, {"steps": 2000, "threads": True}),
        (MANY_SYNC, {"steps": 2000}),
    ]
    returned: dict[str, float] = {}
    for turn in range(2):
        run_ids = [client.start(kind, payload).id for kind, payload in payloads * 8]
        wait_begun(ledger, run_ids, 3, worker.log())
        returned.update(cancel_all(client, run_ids, seed=turn))
    wait_finished(client, list(returned))
    late = []
    begun = begun_by_run(ledger)
    for run_id, at in returned.items():
        assert client.get(run_id).status is RunStatus.CANCELLED
        assert_fenced(client, run_id)
        late += [round(e["at"] - at, 4) for e in begun[run_id] if e["at"] >= at]
    assert not late, f"steps began after their run's cancel returned, seconds after: {late}"


@dataclass
class Rescue:
    """One store's side of the rescue race: its workers, ledger and runs."""

    kind: str
    client: Client
    ledger: Ledger
    workers: Workers
    frozen: Worker
    run_ids: list[str] = field(default_factory=list)

    def check(self, steps: int, rescuer: Worker) -> None:
        """Every run succeeded, nothing was written after its end, and one at least was
        rescued (else the test raced nothing)."""
        rescued = 0
        for run_id in self.run_ids:
            run = self.client.get(run_id)
            assert run.status is RunStatus.SUCCEEDED, (self.kind, run.status, run.last_error)
            assert run.result == steps, self.kind
            assert_fenced(self.client, run_id)
            rescued += any(
                e.event_type == "retried" and e.data.get("reason") == "lease_expired"
                for e in self.client.events(run_id)
            )
        assert rescued, f"{self.kind}: no run was rescued: the test raced nothing\n{rescuer.log()}"


def test_lease_rescues_racing_a_frozen_worker_leave_nothing_after_the_end(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Worker A is frozen (SIGSTOP) past its 2 s lease again and again while worker B
    rescues its runs, and thawed (SIGCONT) at moments that race B's rescues.

    Both stores at once, each with a pair of workers of its own, the two A's frozen and
    thawed together: every check is made on each store, and the freezes are waited out
    once."""
    payload = {"steps": 300, "pause": 0.01}
    with contextlib.ExitStack() as stack:
        sides = []
        for store, where in every_store(tmp_path, request):
            ledger = Ledger(where / "ledger.jsonl")
            workers = stack.enter_context(contextlib.closing(Workers(store, ledger, where)))
            client = stack.enter_context(store.client())
            frozen = workers.start("w-frozen", ready=False)
            sides.append(Rescue(store.kind, client, ledger, workers, frozen))
        for side in sides:  # the runs start together, so that neither store's are ahead
            side.frozen.wait_ready()
        for side in sides:
            side.run_ids = [side.client.start(MANY, payload, max_attempts=20).id for _ in range(6)]
        for side in sides:
            wait_begun(side.ledger, side.run_ids, 3, side.frozen.log())
        rescuers = [side.workers.start("w-rescuer", ready=False) for side in sides]
        for rescuer in rescuers:
            rescuer.wait_ready()
        rng = random.Random(11)
        for _ in range(4):  # a freeze may catch it holding SQLite's write lock: no rescue then
            for side in sides:
                side.frozen.proc.send_signal(signal.SIGSTOP)
            time.sleep(2.0 + rng.uniform(0.2, 1.5))
            for side in sides:
                side.frozen.proc.send_signal(signal.SIGCONT)
            time.sleep(rng.uniform(0.2, 0.8))
        for side, rescuer in zip(sides, rescuers, strict=True):
            wait_finished(side.client, side.run_ids, timeout=90)
            side.check(payload["steps"], rescuer)


def test_no_step_begins_once_cancel_has_returned(
    store: Store, client: Client, workers: Workers, ledger: Ledger, tmp_path: Path
) -> None:
    """Runs wait between two steps (outside any step) for a gate the test opens right
    after ``cancel()`` returned; no second step may begin, and nothing is journaled after
    the cancel.

    The worker last learned that it holds each run long before the gate opens (on SQLite
    it hears of another process's cancel only by reading the run), so it must read the
    run again before the second step, and finds it cancelled.
    """
    worker = workers.start("w-1")
    gate = tmp_path / "gate"
    run_ids = [client.start(GATED, {"gate": str(gate)}).id for _ in range(4)]
    wait_until(
        lambda: len(ledger.entries("gate")) == len(run_ids),
        30,
        lambda: f"at the gate: {len(ledger.entries('gate'))}\n{worker.log()}",
    )
    for run_id in run_ids:
        assert client.cancel(run_id)
    gate.touch()
    wait_finished(client, run_ids)
    time.sleep(1.0)  # longer than a SQLite worker takes to notice a cancel by itself
    for run_id in run_ids:
        assert_fenced(client, run_id)
        begun = [e["step"] for e in ledger.entries("step", run=run_id)]
        assert begun == ["before"], f"steps begun: {begun}"
