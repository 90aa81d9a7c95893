"""The reaper recovers expired leases of this runtime's types, and only those."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import psycopg
import pytest
from conftest import Store

from simpleworkflow.backends.base import Claim, Failure
from simpleworkflow.worker import recovery

TYPE = "billing.invoice.v1"


def expire_lease(store: Store, run_id: str, worker: str) -> None:
    """Make the run look leased by ``worker`` whose lease ran out a minute ago."""
    when = (
        "now() - interval '1 minute'"
        if store.kind == "postgres"
        else ("strftime('%Y-%m-%d %H:%M:%f', 'now', '-60 seconds')")
    )
    store.sql(
        f"update workflow_run set status = 'leased', leased_by = ?, lease_until = {when} "
        "where id = ?",
        worker,
        run_id,
    )


def retry_now(row: Mapping[str, Any]) -> Failure:
    return Failure(
        run_id=str(row["id"]),
        token=None if row["lease_token"] is None else str(row["lease_token"]),
        final=False,
        delay=0.0,
        error="lease expired",
        data={"reason": "lease_expired"},
    )


def test_expired_lease_of_another_runtimes_type_is_left_to_that_runtime(store: Store) -> None:
    backend = store.backend()
    with store.client() as client:
        run = client.start(TYPE)
        backend.execute(backend.set_registry(TYPE, "go", None))
        expire_lease(store, run.id, "go-worker-1")

        reaped = backend.execute(backend.reap_expired([TYPE], 10, retry_now, "python"))
        assert reaped == []
        assert client.get(run.id).status.value == "leased"

        backend.execute(backend.set_registry(TYPE, "python", None))
        reaped = backend.execute(backend.reap_expired([TYPE], 10, retry_now, "python"))
        assert [f.run_id for f in reaped] == [run.id]
        after = client.get(run.id)
        assert (after.status.value, after.attempt) == ("pending", 1)
        assert [e.event_type for e in client.events(run.id)][-1] == "retried"
    backend.close()


def test_the_reaper_learns_when_the_next_lease_of_its_types_runs_out(store: Store) -> None:
    backend = store.backend()
    with store.client() as client:
        assert backend.execute(backend.next_lease_expiry([TYPE]), readonly=True) is None
        first, second = client.start(TYPE), client.start(TYPE)
        claim = Claim(worker_id="w", types=(TYPE,), limit=1, lease_seconds=30)
        backend.execute(backend.claim(claim))
        due_in = backend.execute(backend.next_lease_expiry([TYPE]), readonly=True)
        # at most the lease, give or take the store's timestamp rounding (SQLite: 1 ms)
        assert due_in is not None and 20 < due_in <= 30.01
        expire_lease(store, second.id, "w-dead")
        due_in = backend.execute(backend.next_lease_expiry([TYPE]), readonly=True)
        assert due_in is not None and -70 < due_in < -50
        # Another runtime's lease is none of its business.
        backend.execute(backend.set_registry(TYPE, "go", None))
        assert backend.execute(backend.next_lease_expiry([TYPE]), readonly=True) is None
        assert client.get(first.id).status.value == "leased"
    backend.close()


def test_an_expired_lease_whose_row_is_locked_is_looked_at_again_soon(store: Store) -> None:
    """A look that finds an expired lease but cannot recover it (its row locked: another
    reaper recording it, or a transaction of the worker that held it, stalled inside it;
    Postgres skips locked rows) comes back in a twentieth of a second, then less often;
    not a whole poll later, which would add up to a second to that run's recovery."""
    if store.kind != "postgres":
        pytest.skip("SQLite locks the whole file: a look waits for the lock, none is skipped")
    backend = store.backend()
    with store.client() as client:
        run = client.start(TYPE)
        expire_lease(store, run.id, "w-stalled")
        with psycopg.connect(store.url) as stalled:
            stalled.execute(f'set search_path to "{store.schema}"'.encode())
            stalled.execute(b"select 1 from workflow_run where id = %s for update", [run.id])
            due_in, recovered = asyncio.run(recovery.look(backend, [TYPE], "python"))
            assert due_in is not None and due_in < 0 and recovered == []
            stalled.rollback()
        assert [recovery.pause(due_in, misses) for misses in range(6)] == [
            0.05, 0.1, 0.2, 0.4, 0.8, recovery.REAP_POLL
        ]  # fmt: skip
        due_in, recovered = asyncio.run(recovery.look(backend, [TYPE], "python"))
        assert [f.run_id for f in recovered] == [run.id]
        assert client.get(run.id).status.value == "pending"
    backend.close()


def test_the_reaper_sleeps_until_the_next_expiry_and_never_past_a_poll() -> None:
    assert recovery.pause(None) == recovery.REAP_POLL  # no lease, or the store away
    assert recovery.pause(0.3) == pytest.approx(0.31)
    assert recovery.pause(30.0) == recovery.REAP_POLL  # leases taken meanwhile end later


def test_the_event_of_a_recovered_lease_names_who_held_it_and_who_recovered_it(
    store: Store,
) -> None:
    backend = store.backend()
    with store.client() as client:
        run = client.start(TYPE)
        expire_lease(store, run.id, "w-dead")
        _, recovered = asyncio.run(recovery.look(backend, [TYPE], "python", "w-alive"))
        assert [f.run_id for f in recovered] == [run.id]
        retried = client.events(run.id)[-1]
        assert retried.event_type == "retried"
        assert (retried.data["worker_id"], retried.data["recovered_by"]) == ("w-dead", "w-alive")
    backend.close()
