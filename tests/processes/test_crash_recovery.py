"""Runs of a crashed worker come back promptly, and a run that kills its worker every time
pays for its own crashes only; with real worker processes, on both stores.

A crash is not an error of the handler: the runs are due again about one lease after the
worker's last heartbeat, not after the retry policy's backoff (a minute by default). And
since a dead worker cannot say which of its runs killed it, none is charged until it has
run alone, which a run does after its second crash beside others (see
``simpleworkflow.worker.recovery``).
"""

from __future__ import annotations

import collections
import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Store
from test_worker_processes import WorkerProcess, Workers, wait_status
from worker_app import CRASH_TYPE, HEALTHY_TYPE, POISON_TYPE, Ledger, wait_until

from simpleworkflow import Client, RunStatus

LEASE = 3.0
# Recovery within the lease plus this; the old figure was the lease, up to half a lease
# more, and a minute of backoff.
MARGIN = 8.0


@pytest.fixture
def workers(store: Store, ledger: Ledger, tmp_path: Path) -> Iterator[Workers]:
    with contextlib.closing(Workers(store, ledger, tmp_path)) as started:
        yield started


def test_runs_of_a_killed_worker_start_again_about_one_lease_later(
    client: Client, workers: Workers, ledger: Ledger
) -> None:
    doomed = workers.start("w-doomed", "crash.%", lease=LEASE)
    runs = [
        client.start(CRASH_TYPE, {"block_workers": ["w-doomed"], "seconds": 60}).id
        for _ in range(3)
    ]
    wait_until(
        lambda: len(ledger.entries("start")) == len(runs),
        15,
        lambda: f"handlers started: {ledger.read()}\n{doomed.log()}",
    )
    # Polls never: only a timer it sets itself, or a notification, wakes it for the runs.
    workers.start("w-rescuer", "crash.%", lease=LEASE, poll=600)

    killed = time.time()
    doomed.signal(signal.SIGKILL)
    assert doomed.wait_exit(10) == -signal.SIGKILL
    for run_id in runs:
        wait_status(client, run_id, RunStatus.SUCCEEDED, timeout=LEASE + MARGIN + 10)
    restarts = [e["at"] for e in ledger.entries("start", worker="w-rescuer")]
    assert len(restarts) == len(runs)
    slowest = max(restarts) - killed
    assert slowest < LEASE + MARGIN, f"recovered {slowest:.1f}s after the kill"
    for run_id in runs:
        run = client.get(run_id)
        assert (run.attempt, run.result) == (0, {"worker": "w-rescuer", "attempt": 1})
        [retried] = [e for e in client.events(run_id) if e.event_type == "retried"]
        assert retried.data["reason"] == "lease_expired"


HEALTHY_RUNS = 10


class Supervisor:
    """Keeps two worker processes alive, starting a new one when one dies."""

    def __init__(self, workers: Workers, *prefixes: str) -> None:
        self.workers = workers
        self.prefixes = prefixes
        self.slots: list[WorkerProcess] = []
        self.restarts = 0

    def start(self, count: int) -> None:
        self.slots = [self._new(n) for n in range(count)]
        for worker in self.slots:
            worker.wait_ready()

    def tend(self) -> None:
        for n, worker in enumerate(self.slots):
            if worker.proc.poll() is not None:
                self.restarts += 1
                self.slots[n] = self._new(n)

    def _new(self, slot: int) -> WorkerProcess:
        name = f"w{slot}-{self.restarts}"
        return self.workers.start(name, *self.prefixes, lease=2, ready=False)


def test_runs_that_kill_their_worker_fail_alone_and_their_neighbours_all_succeed(
    client: Client, workers: Workers, ledger: Ledger
) -> None:
    supervisor = Supervisor(workers, "poison.%")
    supervisor.start(2)
    third = HEALTHY_RUNS // 3
    started = client.start_many(
        [(HEALTHY_TYPE, {"n": n}) for n in range(third)]
        + [(POISON_TYPE, {})]
        + [(HEALTHY_TYPE, {"n": n}) for n in range(third, 2 * third)]
        + [(POISON_TYPE, {})]
        + [(HEALTHY_TYPE, {"n": n}) for n in range(2 * third, HEALTHY_RUNS)]
    )
    run_ids = [run.id for run in started]
    poisons = [run_ids[third], run_ids[2 * third + 1]]

    def finished() -> bool:
        supervisor.tend()
        return all(client.get(run_id).is_terminal for run_id in run_ids)

    def describe() -> str:
        counts = collections.Counter(client.get(run_id).status.value for run_id in run_ids)
        return f"runs by status: {dict(counts)}; worker restarts: {supervisor.restarts}"

    wait_until(finished, 120, describe)

    # Never charged for the poisons' crashes, however many they shared a worker with.
    neighbours = [client.get(run_id) for run_id in run_ids if run_id not in poisons]
    assert [(r.status, r.attempt) for r in neighbours] == [(RunStatus.SUCCEEDED, 0)] * len(
        neighbours
    )
    for poison in poisons:
        dead = client.get(poison)
        assert (dead.status, dead.attempt, dead.max_attempts) == (RunStatus.FAILED, 3, 3)
        crashes = [e for e in client.events(poison) if e.event_type in ("retried", "failed")]
        assert all(e.data["reason"] == "lease_expired" for e in crashes)
        # Two crashes beside others, free; then alone, a suspect, charged each time.
        charged = [e.data["charged"] for e in crashes]
        assert charged == [False, False, True, True, True], charged
        assert [e.data["suspect"] for e in crashes] == [False, True, True, True, False]
        assert len(ledger.entries("start", run=poison)) == len(crashes)
