"""Producer-side observers: clients tell them of each run started and signal sent, once
the write has committed, on both stores and through both clients; an observer that
raises changes nothing for the caller."""

from __future__ import annotations

import asyncio
import logging

import pytest
from conftest import Store

from simpleworkflow import App, AsyncClient, Client, errors, observe

TYPE = "content.thumbnail.v1"


class Recorder(observe.Observer):
    """Writes down each producer hook, and what another connection saw at that moment."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.seen: list[tuple[str, str, object]] = []

    def run_created(self, event: observe.RunCreated) -> None:
        stored = self.store.sql("select count(*) from workflow_run where id = ?", event.run.id)
        self.seen.append(("run_created", event.run.id, (event.created, stored[0][0])))

    def signal_delivered(self, event: observe.SignalDelivered) -> None:
        stored = self.store.sql(
            "select count(*) from workflow_signal where run_id = ?", event.run_id
        )
        self.seen.append(("signal_delivered", event.run_id, (event.event, stored[0][0])))


class Broken(observe.Observer):
    def run_created(self, event: observe.RunCreated) -> None:
        raise RuntimeError("exporter down")

    def signal_delivered(self, event: observe.SignalDelivered) -> None:
        raise RuntimeError("exporter down")


def test_start_tells_observers_once_committed_and_whether_it_created_the_run(
    store: Store,
) -> None:
    recorder = Recorder(store)
    with store.client(observers=[recorder]) as client:
        run = client.start(TYPE, {"n": 1}, idempotency_key="k")
        again = client.start(TYPE, {"n": 2}, idempotency_key="k")
        with pytest.raises(errors.InvalidArgument):
            client.start(TYPE, priority="high")  # type: ignore[arg-type]
    # Another connection already saw the row when the hook ran: the start had committed.
    assert recorder.seen == [
        ("run_created", run.id, (True, 1)),
        ("run_created", run.id, (False, 1)),
    ]
    assert again.id == run.id


def test_start_many_tells_observers_once_per_run_in_order(store: Store) -> None:
    recorder = Recorder(store)
    with store.client() as client:
        existing = client.start(TYPE, idempotency_key="taken")
        client.observe(recorder)
        runs = client.start_many(
            [
                (TYPE, {"n": 0}),
                {"type": TYPE, "idempotency_key": "fresh"},
                {"type": TYPE, "idempotency_key": "fresh"},
                {"type": TYPE, "idempotency_key": "taken"},
            ]
        )
    assert recorder.seen == [
        ("run_created", runs[0].id, (True, 1)),
        ("run_created", runs[1].id, (True, 1)),
        ("run_created", runs[1].id, (False, 1)),
        ("run_created", existing.id, (False, 1)),
    ]


def test_signal_tells_observers_once_stored_and_not_when_refused(store: Store) -> None:
    recorder = Recorder(store)
    with store.client(observers=[recorder]) as client:
        run = client.start(TYPE)
        done = client.start(TYPE)
        client.cancel(done.id)
        client.signal(run.id.upper(), "order.paid", {"amount": 3})
        with pytest.raises(errors.RunFinished):
            client.signal(done.id, "order.paid")
    assert recorder.seen[2:] == [("signal_delivered", run.id, ("order.paid", 1))]


def test_the_async_client_tells_its_observers_too(store: Store) -> None:
    recorder = Recorder(store)

    async def produce() -> list[str]:
        async with AsyncClient(store.url, schema=store.schema, observers=[recorder]) as client:
            runs = await client.start_many([(TYPE, {}), (TYPE, {})])
            await client.signal(runs[0].id, "go")
            return [run.id for run in runs]

    first, second = asyncio.run(produce())
    assert recorder.seen == [
        ("run_created", first, (True, 1)),
        ("run_created", second, (True, 1)),
        ("signal_delivered", first, ("go", 1)),
    ]


def test_an_observer_that_raises_is_logged_and_the_call_still_succeeds(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder(store)
    with (
        caplog.at_level(logging.WARNING, logger="simpleworkflow.observe"),
        store.client(observers=[Broken(), recorder]) as client,
    ):
        run = client.start(TYPE, {"n": 1})
        many = client.start_many([(TYPE, {"n": 2})])
        sent = client.signal(run.id, "go")
        assert client.get(run.id) == run
    assert run.created and many[0].created and sent.signal_id > 0
    assert [hook for hook, _, _ in recorder.seen] == ["run_created"] * 2 + ["signal_delivered"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.args[1] for r in warnings] == ["run_created", "signal_delivered"]  # type: ignore[index]
    assert all(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in warnings)


def test_clients_made_by_the_app_share_its_observers(store: Store) -> None:
    app = App(store.url, schema=store.schema)
    early, late, own = Recorder(store), Recorder(store), Recorder(store)
    app.observe(early)
    client = app.client()
    app.observe(late)  # registered after the client was made: it still hears
    client.observe(own)  # the client's own: the app's workers never call it
    with client:
        run = client.start(TYPE)

    async def produce() -> str:
        async with app.async_client() as async_client:
            return (await async_client.start(TYPE)).id

    other = asyncio.run(produce())
    assert [seen[1] for seen in early.seen] == [run.id, other]
    assert [seen[1] for seen in late.seen] == [run.id, other]
    assert [seen[1] for seen in own.seen] == [run.id]
    assert own not in list(app.observers)


def test_a_client_without_observers_calls_none(store: Store) -> None:
    with Client(store.url, schema=store.schema) as client:
        assert not client.observers
        assert client.start(TYPE).created
