"""Idempotency keys reused, as a producer sees it: another payload finds the original run
and says so; another workflow type is a conflict. Both stores, both clients (the
``producer`` fixture of test_client.py), plus the soft delete's and the heartbeat's
audit events, which the two stores must write alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Store
from test_client import AsyncFace, Producer

from simpleworkflow import Client, errors
from simpleworkflow.backends.records import Claim

TYPE = "billing.invoice.send.v1"
OTHER = "billing.invoice.void.v1"


@pytest.fixture(params=["sync", "async"])
def producer(request: pytest.FixtureRequest, store: Store) -> Iterator[Producer]:
    face: Client | AsyncFace
    face = store.client() if request.param == "sync" else AsyncFace(store.async_client())
    try:
        yield face
    finally:
        face.close()


def test_start_says_whether_it_created_the_run_or_found_it(producer: Producer) -> None:
    first = producer.start(TYPE, {"v": 1}, idempotency_key="invoice:7")
    again = producer.start(TYPE, {"v": 2}, idempotency_key="invoice:7")
    assert (first.created, again.created) == (True, False)
    assert again.id == first.id and again.payload == {"v": 1}  # the original, unchanged
    assert producer.get(first.id) == first == again  # created is not part of equality
    assert producer.get(first.id).created is None
    assert producer.start(TYPE).created is True  # no key: always created


def test_start_many_says_which_runs_it_created(store: Store, producer: Producer) -> None:
    held = producer.start(TYPE, {"v": 0}, idempotency_key="invoice:1")
    runs = producer.start_many(
        [
            {"type": TYPE, "payload": {"v": 1}, "idempotency_key": "invoice:1"},
            {"type": TYPE, "payload": {"v": 2}, "idempotency_key": "invoice:2"},
            {"type": TYPE, "payload": {"v": 3}, "idempotency_key": "invoice:2"},
            (TYPE, {"v": 4}),
        ]
    )
    assert [run.created for run in runs] == [False, True, False, True]
    assert [run.payload for run in runs] == [{"v": 0}, {"v": 2}, {"v": 2}, {"v": 4}]
    assert runs[0].id == held.id and runs[1].id == runs[2].id
    assert store.count() == 3


def test_a_key_held_by_another_type_is_a_conflict_and_writes_nothing(
    store: Store, producer: Producer
) -> None:
    held = producer.start(TYPE, idempotency_key="invoice:7")
    with pytest.raises(errors.IdempotencyConflict) as caught:
        producer.start(OTHER, idempotency_key="invoice:7")
    conflict = caught.value
    assert isinstance(conflict, errors.InvalidInput) and isinstance(conflict, ValueError)
    assert (conflict.run_id, conflict.run_type) == (held.id, TYPE)
    assert conflict.idempotency_key == "invoice:7"
    assert held.id in str(conflict) and repr(TYPE) in str(conflict) and repr(OTHER) in str(conflict)
    assert store.count() == 1 and store.count("workflow_event") == 1


@pytest.mark.parametrize("size", [3, 400], ids=["one statement", "chunked"])
def test_a_conflict_in_start_many_stores_none_of_the_batch(
    store: Store, producer: Producer, size: int
) -> None:
    held = producer.start(TYPE, idempotency_key="invoice:7")
    batch: list[Any] = [(TYPE, {"n": n}) for n in range(size)]
    batch[-1] = {"type": OTHER, "idempotency_key": "invoice:7"}
    with pytest.raises(errors.IdempotencyConflict, match=held.id):
        producer.start_many(batch)
    with pytest.raises(errors.IdempotencyConflict):  # two requests of one batch
        producer.start_many(
            [
                {"type": TYPE, "idempotency_key": "invoice:8"},
                {"type": OTHER, "idempotency_key": "invoice:8"},
            ]
        )
    assert store.count() == 1 and store.count("workflow_event") == 1


# -- audit events both stores write alike ------------------------------------------------


def test_a_soft_delete_is_recorded_in_the_audit_trail_once(producer: Producer) -> None:
    run = producer.start(TYPE)
    assert producer.delete(run.id) is True
    assert producer.delete(run.id) is False
    events = producer.events(run.id)
    assert [e.event_type for e in events] == ["created", "deleted"]
    assert events[-1].data == {}


@pytest.mark.parametrize(
    ("seconds", "written"), [(3.0, "3"), (2.5, "2.5"), (30, "30")], ids=["3.0", "2.5", "30"]
)
def test_a_heartbeat_records_the_extension_as_the_same_number_on_both_stores(
    store: Store, client: Client, seconds: float, written: str
) -> None:
    run_id = client.start(TYPE).id
    backend = store.backend()
    try:
        claim = Claim(worker_id="w", types=(TYPE,), limit=1, lease_seconds=30)
        (lease,) = backend.execute(backend.claim(claim))
        backend.execute(backend.heartbeat("w", [(run_id, lease.token)], seconds, True))
    finally:
        backend.close()
    [beat] = [e for e in client.events(run_id) if e.event_type == "heartbeat"]
    assert json.dumps(beat.data["extended_by_seconds"]) == written
    assert beat.data["worker_id"] == "w"
