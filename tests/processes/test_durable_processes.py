"""Durable execution across real worker processes, on both stores: SIGKILL and restarts.

Workers are ``tests/durable_app.py`` processes. Their step bodies append to a ledger file
(``O_APPEND``, outside the engine), which is what these tests count executions with.
"""

from __future__ import annotations

import collections
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import Store, stop_processes
from durable_app import STEPS, expected_values
from worker_app import Ledger, wait_until

from simpleworkflow import Client, RunStatus

DURABLE_APP = Path(__file__).parents[1] / "durable_app.py"


class Worker:
    """One ``durable_app.py`` process and its log."""

    def __init__(self, worker_id: str, store: Store, ledger: Ledger, log: Path) -> None:
        self.worker_id = worker_id
        self.log_path = log
        command = [sys.executable, str(DURABLE_APP), "--worker-id", worker_id]
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*command, "--ledger", str(ledger.path), "--lease", "2"],
                env=store.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 20.0) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, f"{self.worker_id} exited early:\n{self.log()}"
            return " claiming " in self.log()

        wait_until(ready, timeout, lambda: f"{self.worker_id} never started:\n{self.log()}")

    def stop(self, signum: int, timeout: float = 15.0) -> int:
        self.proc.send_signal(signum)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.worker_id} still running {timeout:g}s after {signum}:\n{self.log()}"
            ) from None


class Workers:
    def __init__(self, store: Store, ledger: Ledger, tmp_path: Path) -> None:
        self.store, self.ledger, self.tmp_path = store, ledger, tmp_path
        self.started: list[Worker] = []

    def start(self, worker_id: str, ready: bool = True) -> Worker:
        """Start a worker; wait until it claims unless ``ready`` is False (then call
        ``wait_ready``), which lets several start at once."""
        log = self.tmp_path / f"{worker_id}.log"
        worker = Worker(worker_id, self.store, self.ledger, log)
        self.started.append(worker)
        if ready:
            worker.wait_ready()
        return worker

    def close(self) -> None:
        stop_processes(worker.proc for worker in self.started)


@pytest.fixture
def workers(store: Store, ledger: Ledger, tmp_path: Path) -> Iterator[Workers]:
    with contextlib.closing(Workers(store, ledger, tmp_path)) as started:
        yield started


def completed_steps(store: Store, run_id: str) -> set[str]:
    rows = store.sql(
        "select step_name from workflow_step where run_id = ? and status = 'completed'", run_id
    )
    return {str(name) for (name,) in rows}


def statuses(client: Client, run_ids: list[str]) -> dict[str, int]:
    return dict(collections.Counter(client.get(run_id).status.value for run_id in run_ids))


def as_time(value: Any) -> datetime:
    """A timestamp column as an aware datetime (SQLite stores UTC text)."""
    if isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(str(value).replace(" ", "T"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# -- SIGKILL at every step boundary ------------------------------------------------------

#: Where the doomed worker parks each run until it is killed: inside step k's body, or
#: right after step k was journaled; in a ``def`` body and an ``async def`` one.
PARKS = [
    (body, where, k)
    for body in ("sync", "async")
    for where in ("in", "after")
    for k in range(1, STEPS + 1)
]


def test_a_worker_killed_at_any_step_boundary_never_reruns_a_journaled_step(
    store: Store, client: Client, workers: Workers, ledger: Ledger
) -> None:
    doomed = workers.start("w-doomed")
    runs: dict[str, tuple[str, str, int, int]] = {}
    for seed, (body, where, k) in enumerate(PARKS):
        payload = {"seed": seed, "park_worker": "w-doomed", "park_where": where, "park_step": k}
        runs[client.start(f"durable.steps.{body}.v1", payload).id] = (body, where, k, seed)

    wait_until(
        lambda: len(ledger.entries("parked")) == len(runs),
        30,
        lambda: f"parked: {len(ledger.entries('parked'))} of {len(runs)}\n{doomed.log()}",
    )
    assert doomed.stop(signal.SIGKILL) == -signal.SIGKILL
    # What the journal held when the worker died: none of it may ever run again.
    journaled = {run_id: completed_steps(store, run_id) for run_id in runs}
    workers.start("w-rescuer")

    run_ids = list(runs)
    wait_until(
        lambda: statuses(client, run_ids) == {"succeeded": len(runs)},
        40,
        lambda: f"runs by status: {statuses(client, run_ids)}",
    )

    executions = collections.Counter(
        (e["run"], e["step"], e["worker"]) for e in ledger.entries("step")
    )
    for run_id, (body, where, k, seed) in runs.items():
        case = f"{body} body parked {where} step {k}"
        before_kill = {f"s{j}" for j in range(1, (k if where == "after" else k - 1) + 1)}
        assert journaled[run_id] == before_kill, case
        run = client.get(run_id)
        assert run.result == expected_values(seed), case
        # The worker held many runs when it died: none is charged for it (see recovery).
        assert run.attempt == 0, f"{case}: the kill was charged to the run"
        assert completed_steps(store, run_id) == {f"s{j}" for j in range(1, STEPS + 1)}, case
        for j in range(1, STEPS + 1):
            step = f"s{j}"
            by_doomed = executions[(run_id, step, "w-doomed")]
            by_rescuer = executions[(run_id, step, "w-rescuer")]
            assert by_doomed + by_rescuer >= 1, f"{case}: {step} never ran"
            assert by_doomed <= 1 and by_rescuer <= 1, f"{case}: {step} ran twice on a worker"
            if step in before_kill:
                assert by_rescuer == 0, f"{case}: journaled {step} ran again after the kill"
            else:
                assert by_rescuer == 1, f"{case}: {step} was not run by the rescuer"
        # Only the step the worker died inside ran twice (at least once, as promised).
        twice = {
            s
            for s in (f"s{j}" for j in range(1, STEPS + 1))
            if sum(executions[(run_id, s, w)] for w in ("w-doomed", "w-rescuer")) > 1
        }
        assert twice == ({f"s{k}"} if where == "in" else set()), case
        retried = [e for e in client.events(run_id) if e.event_type == "retried"]
        assert [e.data["reason"] for e in retried] == ["lease_expired"], case


# -- a durable loop resumes from its last committed state -------------------------------


def test_a_worker_killed_inside_a_loop_resumes_from_the_last_committed_state(
    store: Store, client: Client, workers: Workers, ledger: Ledger
) -> None:
    doomed = workers.start("w-doomed")
    payload = {"iterations": 12, "park_worker": "w-doomed", "park_at": 8}
    run_id = client.start("durable.loop.v1", payload).id
    wait_until(lambda: ledger.entries("parked"), 30, lambda: f"never parked:\n{doomed.log()}")
    assert doomed.stop(signal.SIGKILL) == -signal.SIGKILL
    # Iterations 0 to 8 are journaled; the states before 3 and 6 are committed, and the
    # trim after iteration 5 deleted iterations 0 to 2.
    journaled = completed_steps(store, run_id)
    assert journaled == {"items/~3", "items/~6"} | {f"items/~{n}/work" for n in range(3, 9)}
    rescuer = workers.start("w-rescuer")

    run = wait_until(
        lambda: client.get(run_id).is_terminal and client.get(run_id),
        40,
        lambda: f"run is {client.get(run_id).status}:\n{rescuer.log()}",
    )
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == 12
    steps = collections.Counter(e["step"] for e in ledger.entries("step"))
    assert steps == {f"work-{n}": 1 for n in range(12)}, "a journaled step ran again"
    # The rescuer started from the state committed before iteration 6: iterations 6 to
    # 8 ran again (their steps replayed), none before.
    resumed = [e["iteration"] for e in ledger.entries("iteration", worker="w-rescuer")]
    assert resumed == list(range(6, 13))
    # The trim after iteration 11 left iterations 9 to 12 (and the result).
    assert completed_steps(store, run_id) == {"items/~9", "items/~12", "items"} | {
        f"items/~{n}/work" for n in range(9, 12)
    }


# -- SIGKILL during the compensations ------------------------------------------------------


def test_a_worker_killed_during_compensations_never_reruns_a_journaled_one(
    store: Store, client: Client, workers: Workers, ledger: Ledger
) -> None:
    """Parked inside compensation k (they run u3, u2, u1): the rescuer replays the body
    without running a step or registering anything again, skips the compensations
    journaled before the kill, runs the rest, and the run fails with its own error."""
    doomed = workers.start("w-doomed")
    cases = {
        client.start(f"durable.saga.{body}.v1", {"park_worker": "w-doomed", "park_step": k}).id: (
            body,
            k,
        )
        for body in ("sync", "async")
        for k in (3, 2, 1)
    }
    wait_until(
        lambda: len(ledger.entries("parked")) == len(cases),
        30,
        lambda: f"parked: {len(ledger.entries('parked'))} of {len(cases)}\n{doomed.log()}",
    )
    assert doomed.stop(signal.SIGKILL) == -signal.SIGKILL
    journaled = {run_id: completed_steps(store, run_id) for run_id in cases}
    workers.start("w-rescuer")
    run_ids = list(cases)
    wait_until(
        lambda: statuses(client, run_ids) == {"failed": len(cases)},
        40,
        lambda: f"runs by status: {statuses(client, run_ids)}",
    )

    undone = collections.Counter((e["run"], e["step"], e["worker"]) for e in ledger.entries("undo"))
    done = collections.Counter((e["run"], e["step"]) for e in ledger.entries("step"))
    for run_id, (body, k) in cases.items():
        case = f"{body} body parked in compensation u{k}"
        before = {f"rollback/u{j}" for j in range(k + 1, 4)}
        assert {s for s in journaled[run_id] if s.startswith("rollback/")} == before, case
        run = client.get(run_id)
        assert "RollbackError: roll the saga back" in (run.last_error or ""), case
        assert all(done[(run_id, f"s{j}")] == 1 for j in (1, 2, 3)), case
        assert {f"rollback/u{j}" for j in (1, 2, 3)} <= completed_steps(store, run_id), case
        for j in (1, 2, 3):
            by_doomed = undone[(run_id, f"u{j}", "w-doomed")]
            by_rescuer = undone[(run_id, f"u{j}", "w-rescuer")]
            assert by_doomed == (1 if j >= k else 0), f"{case}: u{j} on the doomed worker"
            assert by_rescuer == (1 if j <= k else 0), f"{case}: u{j} on the rescuer"
        outcomes = next(e for e in client.events(run_id) if e.event_type == "failed").data
        assert [o["outcome"] for o in outcomes["rollback"]] == ["completed"] * 3, case


# -- a durable sleep outlives its worker -------------------------------------------------


def test_a_sleeping_run_is_resumed_by_a_worker_started_later_not_before_its_time(
    store: Store, client: Client, workers: Workers, ledger: Ledger
) -> None:
    first = workers.start("w-first")
    # Long enough that stopping one worker and starting the next ends before the wake-up,
    # even on a loaded machine (4 s was not, under a load of 13).
    run_id = client.start("durable.nap.v1", {"seconds": 8}).id

    def sleeping() -> bool:
        run = client.get(run_id)
        return run.status is RunStatus.PENDING and (run.waiting_for or {}).get("kind") == "sleep"

    wait_until(sleeping, 15, lambda: f"the run never slept:\n{first.log()}")
    assert first.stop(signal.SIGTERM) == 0
    [nap] = store.sql(
        "select output from workflow_step where run_id = ? and step_name = 'nap'", run_id
    )
    until = datetime.fromisoformat(
        json.loads(nap[0])["until"] if store.kind == "sqlite" else nap[0]["until"]
    )
    second = workers.start("w-second")
    ready_at = datetime.now(UTC)

    wait_until(
        lambda: client.get(run_id).is_terminal,
        30,
        lambda: f"the run did not finish: {client.get(run_id).status}\n{second.log()}",
    )
    run = client.get(run_id)
    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"before": 1, "after": 2, "worker": "w-second"}
    assert ready_at < until, "the second worker came up too late to test an early wake-up"

    steps = [(e["step"], e["worker"]) for e in ledger.entries("step", run=run_id)]
    assert steps == [("before", "w-first"), ("after", "w-second")]
    events = client.events(run_id)
    [resumed] = [e for e in events if e.event_type == "resumed"]
    assert resumed.created_at >= until, f"resumed at {resumed.created_at}, before {until}"
    assert resumed.data["kind"] == "sleep"
    [after_started] = store.sql(
        "select started_at from workflow_step where run_id = ? and step_name = 'after'", run_id
    )
    assert as_time(after_started[0]) >= until
    leased_by = [e.data["worker_id"] for e in events if e.event_type == "leased"]
    assert leased_by == ["w-first", "w-second"]


# -- a chain of continue-as-new outlives its worker ----------------------------------------


def test_a_worker_killed_mid_chain_loses_no_link_and_starts_none_twice(
    store: Store, client: Client, workers: Workers, ledger: Ledger
) -> None:
    """Chains of continue-as-new (``durable_app.chain``), each parked in the middle of its
    second run: inside its step, or after it with the continue not yet recorded. The
    worker is killed; a rescuer finishes every chain, each number once in the chain."""
    doomed = workers.start("w-doomed")
    firsts: dict[str, tuple[str, str]] = {}
    for body in ("sync", "async"):
        for where in ("in", "after"):
            payload = {"n": 1, "until": 4, "park_worker": "w-doomed", "park_where": where}
            firsts[client.start(f"durable.chain.{body}.v1", {**payload, "park_step": 2}).id] = (
                body,
                where,
            )
    wait_until(
        lambda: len(ledger.entries("parked")) == len(firsts),
        30,
        lambda: f"parked: {len(ledger.entries('parked'))} of {len(firsts)}\n{doomed.log()}",
    )
    assert doomed.stop(signal.SIGKILL) == -signal.SIGKILL
    workers.start("w-rescuer")

    for first, (body, where) in firsts.items():
        case = f"{body} body parked {where} run 2"
        last = client.wait(first, timeout=40)
        assert (last.status, last.result) == (RunStatus.SUCCEEDED, {"n": 4}), case
        chain = [client.get(first)]
        while chain[-1].continued_as is not None:
            chain.append(client.get(chain[-1].continued_as))
        assert [run.payload["n"] for run in chain] == [1, 2, 3, 4], case
        assert [run.continued_from for run in chain] == [None, *(r.id for r in chain[:-1])]
        runs = {run.id for run in chain}
        # Every link's step ran once, but the one the worker died inside (at least once).
        done = collections.Counter(e["step"] for e in ledger.entries("step") if e["run"] in runs)
        assert done == {"n1": 1, "n2": 2 if where == "in" else 1, "n3": 1, "n4": 1}, case
    # No run was started twice: four per chain, no other.
    assert store.count() == 4 * len(firsts)
