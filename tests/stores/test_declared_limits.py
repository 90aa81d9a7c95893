"""Limits declared in code (docs/flow-control.md, "Limits declared in code"): checked
when the line runs, written by a worker of the app when it starts, the code's values
winning over values set at run time, undeclared ones left alone; both stores."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
from conftest import Store, poller_thread

from simpleworkflow import App, Client, errors
from simpleworkflow.backends import Backend
from simpleworkflow.worker import limits as declaring
from simpleworkflow.worker.options import RUNTIME

TYPE = "reports.render.v1"


def handler(payload: Any) -> None:
    return None


def declared_app(store: Store | None = None, **options: Any) -> App:
    app = App(None if store is None else store.url, schema=None if store is None else store.schema)
    app.rate_limit("partner-api", "10/s")
    app.workflow(TYPE, rate_limit="partner-api", **options)(handler)
    return app


def declare(backend: Backend, app: App) -> list[declaring.Change]:
    """What a worker of ``app`` does when it starts, after registering its types."""
    types = sorted(app.definitions)
    backend.execute(backend.register_types(types, RUNTIME))
    limits = {name: app.definitions[name].limits for name in types}
    return backend.execute(declaring.declare_op(backend, app.rate_limits, limits))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda app: app.workflow(TYPE, concurrency=0), "concurrency of reports.render.v1"),
        (lambda app: app.workflow(TYPE, key_concurrency=-2), "key_concurrency of"),
        (lambda app: app.workflow(TYPE, concurrency=True), "integer from 1"),
        (lambda app: app.workflow(TYPE, rate_limit="partner-apj"), "does not declare"),
        (lambda app: app.workflow(TYPE, rate_limit="Partner API"), "a rate limit's name"),
        (lambda app: app.rate_limit("partner-api", "10/fortnight"), "period"),
        (lambda app: app.rate_limit("partner-api", "0/s"), "1 to"),
        (lambda app: app.rate_limit("partner-api", "ten a second"), "'N/period'"),
        (lambda app: app.rate_limit("partner-api", "10/s", per_key="yes"), "per_key"),
        (lambda app: app.rate_limit("other", "1/s"), "already declared"),
    ],
)
def test_bad_declarations_fail_where_they_are_written(call: Any, message: str) -> None:
    app = App()
    app.rate_limit("other", "5/s")
    with pytest.raises(errors.InvalidArgument, match=message):
        call(app)
    assert TYPE not in app.definitions  # nothing registered by a refused line


def test_a_type_names_only_limits_declared_above_it() -> None:
    app = App()
    with pytest.raises(errors.InvalidArgument) as refused:
        app.workflow(TYPE, rate_limit="partner-api")
    assert "app.rate_limit('partner-api', '10/s')" in str(refused.value)
    assert "limits use reports.render.v1 partner-api" in str(refused.value)
    app.rate_limit("partner-api", "10/s")
    app.workflow(TYPE, rate_limit="partner-api")(handler)
    assert app.definitions[TYPE].limits.rate_limit == "partner-api"


def test_a_worker_writes_what_the_code_declares(store: Store, client: Client) -> None:
    app = declared_app(store, concurrency=20, key_concurrency=2)
    with poller_thread(app, poll_interval=0.1, lease_duration=10):
        deadline = time.monotonic() + 10
        while not client.admin.rate_limits() and time.monotonic() < deadline:
            time.sleep(0.05)
    [limit] = client.admin.rate_limits()
    assert (limit.name, limit.max_runs, limit.period, limit.per_key) == (
        "partner-api",
        10,
        1,
        False,
    )
    [entry] = [e for e in client.admin.registry() if e.workflow_name == TYPE]
    assert (entry.concurrency, entry.key_concurrency, entry.rate_limit) == (20, 2, "partner-api")


def test_the_code_wins_at_a_start_and_says_what_it_replaced(
    store: Store, backend: Backend, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    app = declared_app(store, concurrency=20)
    assert {c.what for c in declare(backend, app)} == {
        "rate limit partner-api",
        "concurrency of reports.render.v1",
        "rate limit of reports.render.v1",
    }
    assert declare(backend, app) == []  # idempotent: nothing differs, nothing written
    # an operator changes both at run time; the next worker to start puts them back
    client.admin.set_concurrency(TYPE, 5, per_key=3)
    client.admin.set_rate_limit("partner-api", "2/s")
    with caplog.at_level(logging.INFO, logger="simpleworkflow.worker"):
        changes = store_declare(store, app)
    assert sorted((c.what, c.old, c.new) for c in changes) == [
        ("concurrency of reports.render.v1", "5", "20"),
        ("rate limit partner-api", "2/s", "10/s"),
    ]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("concurrency of reports.render.v1 was 5 in the store" in w for w in warned)
    [entry] = [e for e in client.admin.registry() if e.workflow_name == TYPE]
    # key_concurrency was never declared: the operator's value stays
    assert (entry.concurrency, entry.key_concurrency) == (20, 3)
    assert client.admin.rate_limits()[0].max_runs == 10


def store_declare(store: Store, app: App) -> list[declaring.Change]:
    """:func:`declaring.declare`, as the worker awaits it."""
    backend = store.backend()
    limits = {name: app.definitions[name].limits for name in app.definitions}

    async def go() -> list[declaring.Change]:
        try:
            return await declaring.declare(backend, app.rate_limits, limits)
        finally:
            await backend.aclose()

    try:
        return asyncio.run(go())
    finally:
        backend.close()


def test_code_that_declares_nothing_leaves_the_store_alone(
    backend: Backend, client: Client
) -> None:
    client.admin.set_runtime(TYPE, "python")
    client.admin.set_rate_limit("partner-api", "3/m")
    client.admin.set_concurrency(TYPE, 4, per_key=1)
    client.admin.limit_rate(TYPE, "partner-api")
    app = App()
    app.rate_limit("other-api", "1/s")
    app.workflow(TYPE)(handler)
    assert [c.what for c in declare(backend, app)] == ["rate limit other-api"]
    [entry] = [e for e in client.admin.registry() if e.workflow_name == TYPE]
    assert (entry.concurrency, entry.key_concurrency, entry.rate_limit) == (4, 1, "partner-api")
    assert {(r.name, r.max_runs) for r in client.admin.rate_limits()} == {
        ("partner-api", 3),
        ("other-api", 1),
    }


def test_workers_starting_at_once_write_it_once(store: Store) -> None:
    app = declared_app(store, concurrency=20, key_concurrency=2)
    first = store.backend()
    try:
        first.execute(first.register_types([TYPE], RUNTIME))
    finally:
        first.close()
    made: list[list[declaring.Change]] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        backend = store.backend()
        try:
            barrier.wait()
            limits = {TYPE: app.definitions[TYPE].limits}
            made.append(backend.execute(declaring.declare_op(backend, app.rate_limits, limits)))
        finally:
            backend.close()

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(made) == 4
    # one worker wrote each value; the others found it written
    assert sorted(len(changes) for changes in made) == [0, 0, 0, 4]
