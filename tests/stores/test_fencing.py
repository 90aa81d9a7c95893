"""Journal writes are fenced as strictly as outcomes, on both stores (forced interleavings).

A second connection runs a cancel, or a lease rescue, in a transaction it keeps open while
the worker's journal write (a step, a batch of steps, a consumed signal) is attempted; then
it commits. The write must wait for it and then find the lease gone: nothing is journaled,
and no event lands in the audit trail after the run's terminal event.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from conftest import Store
from psycopg.rows import dict_row

from simpleworkflow import Client, config
from simpleworkflow.backends import Backend
from simpleworkflow.backends.base import LOST, Op, Rows, Statement, drive
from simpleworkflow.backends.records import Claim, Failure, Lease, StepRecord
from simpleworkflow.models import Event

TYPE = "test.fencing.v1"
NO_TOKEN = "00000000-0000-4000-8000-000000000000"


def claim(backend: Backend, count: int) -> list[Lease]:
    request = Claim(worker_id="w", types=(TYPE,), limit=count, lease_seconds=30)
    leases = backend.execute(backend.claim(request))
    assert len(leases) == count
    return sorted(leases, key=lambda lease: lease.run.id)


def step(lease: Lease, name: str) -> StepRecord:
    events = [
        {"type": "step_started", "data": {"step": name}},
        {"type": "step_completed", "data": {"step": name}},
    ]
    output = json.dumps(name)
    return StepRecord(lease.run.id, lease.token, name, "step", 0, output, 1, events=events)


@contextlib.contextmanager
def held_open(store: Store, backend: Backend, op: Op[Any]) -> Iterator[Any]:
    """Run ``op`` on a connection of its own in a transaction that commits only when the
    block ends: its row locks and changes stay uncommitted meanwhile."""
    if store.kind == "postgres":
        conn: Any = psycopg.connect(store.url, row_factory=dict_row)  # a transaction at once

        def run(statement: Statement) -> Rows:
            cursor = conn.execute(statement.sql, statement.params)
            return cursor.fetchall() if cursor.description else []

    else:
        conn = sqlite3.connect(config.sqlite_path(store.url), isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("begin immediate")

        def run(statement: Statement) -> Rows:
            cursor = conn.execute(statement.sql, statement.params)
            return [dict(row) for row in cursor.fetchall()] if cursor.description else []

    try:
        yield drive(op, run)
        conn.execute("commit")
    finally:
        conn.close()


class Attempt(threading.Thread):
    """A journal write made from another thread, as the worker makes it."""

    def __init__(self, backend: Backend, op: Op[Any]) -> None:
        super().__init__(daemon=True)
        self._backend, self._op = backend, op
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._backend.execute(self._op)
        except BaseException as exc:
            self.error = exc

    def outcome(self) -> Any:
        self.join(30)
        assert not self.is_alive(), "the journal write never finished"
        if self.error is not None:
            raise self.error
        return self.result


def attempt_while_held(store: Store, attempt: Attempt) -> None:
    """Start the journal write and let it reach the held lock before the block commits.

    On Postgres, wait until the write waits for a lock (or has finished: unfenced, it
    does not wait). SQLite's writer waits for the database lock; the write may come after
    the commit instead, which must give the same result."""
    attempt.start()
    if store.kind == "sqlite":
        time.sleep(0.3)
        return
    deadline = time.monotonic() + 10
    while attempt.is_alive() and time.monotonic() < deadline:
        waiting = store.sql("select count(*) from pg_locks where not granted")[0][0]
        if waiting:
            return
        time.sleep(0.01)


def trail(client: Client, run_id: str) -> list[Event]:
    return [e for e in client.events(run_id) if e.event_type != "heartbeat"]


def assert_ends_with(client: Client, run_id: str, terminal: str) -> None:
    events = [e.event_type for e in trail(client, run_id)]
    assert events[-1] == terminal, f"events after {terminal}: {events}"


def rescue(backend: Backend) -> Op[list[Failure]]:
    """The reaper's op: expired leases become failed attempts (final: max_attempts 1)."""

    def decide(row: Any) -> Failure:
        data = {"reason": "lease_expired", "error": {"type": "LeaseExpired", "message": "x"}}
        return Failure(str(row["id"]), str(row["lease_token"]), True, 0.0, "expired", data)

    return backend.reap_expired([TYPE], 100, decide)


def expire(store: Store, run_id: str) -> None:
    store.sql("update workflow_run set lease_until = '2000-01-01 00:00:00' where id = ?", run_id)


Interference = Callable[[Store, Backend, str], Op[Any]]


def cancel(store: Store, backend: Backend, run_id: str) -> Op[Any]:
    return backend.cancel_run(run_id, "raced")


def rescue_expired(store: Store, backend: Backend, run_id: str) -> Op[Any]:
    expire(store, run_id)
    return rescue(backend)


INTERFERENCES = {"cancelled": cancel, "failed": rescue_expired}


@pytest.mark.parametrize("terminal", sorted(INTERFERENCES))
def test_a_step_is_not_journaled_once_a_pending_cancel_or_rescue_commits(
    store: Store, client: Client, backend: Backend, terminal: str
) -> None:
    run_id = client.start(TYPE, max_attempts=1).id
    (lease,) = claim(backend, 1)
    write = Attempt(backend, backend.record_step(step(lease, "charge")))
    with held_open(store, backend, INTERFERENCES[terminal](store, backend, run_id)):
        attempt_while_held(store, write)
    assert write.outcome() is False
    assert client.steps(run_id) == []
    assert_ends_with(client, run_id, terminal)


@pytest.mark.parametrize("terminal", sorted(INTERFERENCES))
def test_a_batch_of_steps_skips_only_the_run_a_pending_cancel_or_rescue_ends(
    store: Store, client: Client, backend: Backend, terminal: str
) -> None:
    ids = [client.start(TYPE, max_attempts=1).id for _ in range(3)]
    leases = claim(backend, 3)
    hit = leases[1].run.id  # locked between two runs the batch journals
    batch = [step(lease, name) for lease in reversed(leases) for name in ("a", "b")]
    write = Attempt(backend, backend.record_steps(batch))
    with held_open(store, backend, INTERFERENCES[terminal](store, backend, hit)):
        attempt_while_held(store, write)
    others = {lease.run.id for lease in leases} - {hit}
    assert write.outcome() == {(run_id, name) for run_id in others for name in ("a", "b")}
    assert client.steps(hit) == []
    assert_ends_with(client, hit, terminal)
    for run_id in set(ids) - {hit}:
        assert [s.step_name for s in client.steps(run_id)] == ["a", "b"]


@pytest.mark.parametrize("terminal", sorted(INTERFERENCES))
def test_a_signal_is_not_consumed_once_a_pending_cancel_or_rescue_commits(
    store: Store, client: Client, backend: Backend, terminal: str
) -> None:
    run_id = client.start(TYPE, max_attempts=1).id
    (lease,) = claim(backend, 1)
    client.signal(run_id, "approve", {"by": "ann"})
    record = StepRecord(run_id, lease.token, "approval", "wait", 0, None, 1)
    write = Attempt(backend, backend.consume_signal(record, "approve", None))
    with held_open(store, backend, INTERFERENCES[terminal](store, backend, run_id)):
        attempt_while_held(store, write)
    assert write.outcome() in (None, (False, None))
    assert client.steps(run_id) == []
    consumed = store.sql(
        "select count(*) from workflow_signal where run_id = ? and consumed_at is not null",
        run_id,
    )
    assert consumed[0][0] == 0
    assert_ends_with(client, run_id, terminal)


def test_a_journal_write_that_commits_first_comes_before_the_cancel(
    store: Store, client: Client, backend: Backend
) -> None:
    """The other order: a step journaled first keeps its place, before ``cancelled``."""
    run_id = client.start(TYPE).id
    (lease,) = claim(backend, 1)
    assert backend.execute(backend.record_step(step(lease, "charge"))) is True
    assert client.cancel(run_id)
    assert backend.execute(backend.record_step(step(lease, "refund"))) is False
    events = [e.event_type for e in trail(client, run_id)]
    assert events[-3:] == ["step_started", "step_completed", "cancelled"]
    assert [s.step_name for s in client.steps(run_id)] == ["charge"]


def test_a_batch_waits_out_a_heartbeat_and_journals_the_step(
    store: Store, client: Client, backend: Backend
) -> None:
    """A run locked by a write that keeps the lease (a heartbeat) is journaled after it."""
    for _ in range(2):
        client.start(TYPE)
    leases = claim(backend, 2)
    busy = leases[0]
    write = Attempt(backend, backend.record_steps([step(lease, "a") for lease in leases]))
    extend = backend.heartbeat("w", [(busy.run.id, busy.token)], 30, True)
    with held_open(store, backend, extend):
        attempt_while_held(store, write)
    assert write.outcome() == {(lease.run.id, "a") for lease in leases}


def test_a_batch_holds_no_run_while_it_waits_for_another(
    store: Store, client: Client, backend: Backend
) -> None:
    """No deadlock with a transaction that locks the batch's runs in the other order: the
    batch skips the locked run and waits for it alone, holding nothing else."""
    for _ in range(2):
        client.start(TYPE)
    first, second = claim(backend, 2)
    write = Attempt(backend, backend.record_steps([step(first, "a"), step(second, "a")]))

    def second_then_first() -> Op[None]:
        yield from backend.heartbeat("w", [(second.run.id, second.token)], 30, False)
        attempt_while_held(store, write)
        yield from backend.heartbeat("w", [(first.run.id, first.token)], 30, False)

    with held_open(store, backend, second_then_first()):
        pass
    assert write.outcome() == {(first.run.id, "a"), (second.run.id, "a")}


def test_a_lease_that_ran_out_in_the_store_takes_no_write_before_it_is_rescued(
    store: Store, client: Client, backend: Backend
) -> None:
    """The store's own clock fences too: once ``lease_until`` has passed, the lease's
    journal writes, signal takes and heartbeats are refused, even though no reaper has
    rescued the run yet and its token still matches (a worker whose own fencing failed,
    or a heartbeat delayed past the lease, cannot revive it)."""
    run_id = client.start(TYPE).id
    (lease,) = claim(backend, 1)
    client.signal(run_id, "approve", {"by": "ann"})
    expire(store, run_id)
    assert backend.execute(backend.record_step(step(lease, "charge"))) is False
    assert backend.execute(backend.record_steps([step(lease, "refund")])) == set()
    record = StepRecord(run_id, lease.token, "approval", "wait", 0, None, 1)
    assert backend.execute(backend.consume_signal(record, "approve", None)) in (None, (False, None))
    states = backend.execute(backend.heartbeat("w", [(run_id, lease.token)], 30, True))
    assert states == {run_id: LOST}
    assert backend.execute(backend.lease_states([(run_id, lease.token)])) == {run_id: LOST}
    assert client.steps(run_id) == []
    assert [s.consumed_at for s in client.signals(run_id)] == [None]
    assert (
        str(store.sql("select lease_until from workflow_run where id = ?", run_id)[0][0]) < "2001"
    )
    assert "heartbeat" not in [e.event_type for e in trail(client, run_id)]
