"""Suspects, at the store: a run recovered from a dead worker is an ordinary run after its
first crash beside others and a suspect after its second, claimed alone, and only by a
worker that holds nothing; crashes are charged only to a run that was alone."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import Store
from test_cli import run_cli
from test_reaper import expire_lease

from simpleworkflow import Client
from simpleworkflow.backends import Backend
from simpleworkflow.backends.base import Claim, Failure, Lease, Outcomes, Release, Suspension
from simpleworkflow.server import bodies
from simpleworkflow.worker.recovery import crashed

TYPE = "billing.invoice.v1"
CLAIM = Claim(worker_id="w", types=(TYPE,), limit=10, lease_seconds=30)


def isolate(store: Store, run_id: str) -> bool:
    return bool(store.sql("select isolate from workflow_run where id = ?", run_id)[0][0])


def crashes(store: Store, run_id: str) -> int:
    return int(store.sql("select crashes from workflow_run where id = ?", run_id)[0][0])


def claim(backend: Backend, *, alone: bool, limit: int = 10) -> list[Lease]:
    return backend.execute(backend.claim(dataclasses.replace(CLAIM, alone=alone, limit=limit)))


def crash(store: Store, backend: Backend, *leases: Lease) -> list[Failure]:
    """The worker holding ``leases`` died: they run out and are recovered."""
    for lease in leases:
        expire_lease(store, lease.run.id, "w")
    return backend.execute(backend.reap_expired([TYPE], 10, crashed))


def test_a_first_crash_beside_other_runs_is_not_charged_and_leaves_an_ordinary_run(
    store: Store, client: Client, backend: Backend
) -> None:
    run_id = client.start(TYPE).id
    (lease,) = claim(backend, alone=True)
    assert not lease.isolated
    other = client.start(TYPE).id  # due after it, queued while it ran
    store.sql(
        "update workflow_run set run_at = (select run_at from workflow_run where id = ?) "
        "where id = ?",
        run_id,
        other,
    )  # due with it, even (a batch shares one time)
    [failure] = crash(store, backend, lease)
    assert (failure.charged, failure.suspect, failure.final) == (False, False, False)
    run = client.get(run_id)
    assert (run.status.value, run.attempt) == ("pending", 0)
    assert (isolate(store, run_id), crashes(store, run_id)) == (False, 1)
    [retried] = [e for e in client.events(run_id) if e.event_type == "retried"]
    assert (retried.data["charged"], retried.data["attempt"]) == (False, 0)
    assert (retried.data["crashes"], retried.data["suspect"]) == (1, False)
    # Due at once, in its place in the queue (before the run that came due while it ran),
    # and claimed by a busy worker, beside other runs.
    (first,) = claim(backend, alone=False, limit=1)
    (second,) = claim(backend, alone=False, limit=1)
    assert (first.run.id, second.run.id) == (run_id, other)
    assert not (first.isolated or second.isolated)


def test_a_second_crash_beside_other_runs_makes_a_suspect_uncharged(
    store: Store, client: Client, backend: Backend
) -> None:
    run_id = client.start(TYPE).id
    crash(store, backend, *claim(backend, alone=False))
    [failure] = crash(store, backend, *claim(backend, alone=False))
    assert (failure.charged, failure.suspect, failure.final) == (False, True, False)
    assert (client.get(run_id).attempt, isolate(store, run_id), crashes(store, run_id)) == (
        0,
        True,
        2,
    )
    retried = [e.data for e in client.events(run_id) if e.event_type == "retried"]
    assert [(d["charged"], d["crashes"], d["suspect"]) for d in retried] == [
        (False, 1, False),
        (False, 2, True),
    ]


def test_a_due_suspect_goes_alone_to_an_empty_worker_and_holds_back_other_claims(
    store: Store, client: Client, backend: Backend
) -> None:
    suspect = client.start(TYPE, priority=200).id  # less urgent than the others, even
    for _ in range(2):
        crash(store, backend, *claim(backend, alone=True))
    others = [client.start(TYPE).id for _ in range(3)]

    assert claim(backend, alone=False) == [], "a busy worker claimed while a suspect waits"
    (taken,) = claim(backend, alone=True)
    assert (taken.run.id, taken.isolated) == (suspect, True)
    # Once the suspect is leased, the others are claimable again, never with it.
    assert sorted(lease.run.id for lease in claim(backend, alone=False)) == sorted(others)


def test_a_suspects_own_crash_is_charged_and_its_last_fails_it(
    store: Store, client: Client, backend: Backend
) -> None:
    run_id = client.start(TYPE, max_attempts=2).id
    for _ in range(2):  # beside others, maybe: free
        crash(store, backend, claim(backend, alone=True)[0])
    for attempt in (1, 2):
        (lease,) = claim(backend, alone=True)
        assert lease.isolated
        [failure] = crash(store, backend, lease)
        assert (failure.charged, failure.final) == (True, attempt == 2)
        assert client.get(run_id).attempt == attempt
    run = client.get(run_id)
    assert (run.status.value, run.attempt) == ("failed", 2)
    charged = [e.data["charged"] for e in client.events(run_id) if "charged" in e.data]
    assert charged == [False, False, True, True]


def test_a_suspect_that_ends_an_attempt_otherwise_is_a_run_like_any_other(
    store: Store, client: Client, backend: Backend
) -> None:
    asleep, failing, released = (client.start(TYPE).id for _ in range(3))
    for _ in range(2):
        assert len(crash(store, backend, *claim(backend, alone=False))) == 3
    for _ in range(3):
        (lease,) = claim(backend, alone=True)
        outcome = {
            asleep: Outcomes(
                suspended=[Suspension(asleep, lease.token, [{"type": "sleeping", "data": {}}])]
            ),
            failing: Outcomes(
                failed=[Failure(failing, lease.token, False, 0.0, "boom", {"error": {}})]
            ),
            released: Outcomes(released=[Release(released, lease.token)]),
        }[lease.run.id]
        assert backend.execute(backend.finish(outcome, "w")) == {lease.run.id}
    # A suspension or a handler's error clears the mark and the count; a release says
    # nothing of the run.
    marks = [(isolate(store, r), crashes(store, r)) for r in (asleep, failing, released)]
    assert marks == [(False, 0), (False, 0), (True, 2)]
    assert client.get(failing).attempt == 1


def test_a_run_released_with_a_delay_waits_for_it(
    store: Store, client: Client, backend: Backend
) -> None:
    run_id = client.start(TYPE).id
    (lease,) = claim(backend, alone=True)
    released = Outcomes(released=[Release(run_id, lease.token, delay=60.0)])
    assert backend.execute(backend.finish(released, "w")) == {run_id}
    assert claim(backend, alone=True) == []
    assert (client.get(run_id).status.value, client.get(run_id).attempt) == ("pending", 0)


def test_a_lease_run_out_and_not_yet_recovered_reads_as_expired(
    store: Store, client: Client, backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its worker holds it no more: ``runs show`` and the API say so, not just "leased"."""
    run_id = client.start(TYPE).id
    (lease,) = claim(backend, alone=True)
    assert not client.get(run_id).lease_expired
    assert run_cli(store, capsys, "runs", "show", run_id).out.count("lease expired") == 0
    expire_lease(store, run_id, "w")
    run = client.get(run_id)
    assert (run.status.value, run.lease_expired) == ("leased", True)
    assert "leased (lease expired)" in run_cli(store, capsys, "runs", "show", run_id).out
    assert bodies.run(run)["lease_expired"] is True
    crash(store, backend, lease)  # recovered: pending, held by no one, nothing expired
    assert not client.get(run_id).lease_expired
