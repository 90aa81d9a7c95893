"""Two runtimes, one database: the registry decides which one runs a type.

The second runtime is played with nothing but SQL, as a Go service would: on Postgres it
claims and leases with seed 000's statements (section 7.2) verbatim, against a schema
literally named ``workflow``; on SQLite with the same statements in SQLite's dialect. A
Python :class:`IntentPoller` works the same database at the same time.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Store
from psycopg.rows import dict_row
from test_seed_sql import CLAIM, LEASE, bind
from test_worker import Ledger, held_for, wait_terminal, working

from simpleworkflow import Client, Context, RunStatus, config
from simpleworkflow.app import App
from simpleworkflow.backends import open_backend

GO_WORKER = "billing-worker-1"
GO_TYPES = ("billing.invoice.v1", "payment.card.v1")  # what the seed's claim selects

# The seed's claim and lease in SQLite's dialect: no schema, no row locks (a write
# transaction holds the whole file), strftime for now().
SQLITE_CLAIM = """
select id, type, payload, attempt, max_attempts
from workflow_run
where status = 'pending'
  and (type like 'billing.%' or type like 'payment.%')
  and run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
  and deleted_at is null
order by priority asc, created_at asc
limit 1
"""
SQLITE_LEASE = """
update workflow_run
set status = 'leased',
    leased_by = :worker_id,
    lease_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+30 seconds'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where id = :run_id
"""

# What the seed leaves to each runtime: registering its types and recording a result.
PG_REGISTER = """
insert into workflow.workflow_registry (workflow_name, runtime) values (%(name)s, 'go')
on conflict (workflow_name) do update set runtime = 'go', updated_at = now()
"""
PG_SUCCEED = """
with done as (
    update workflow.workflow_run
    set status = 'succeeded', result = %(result)s::jsonb, updated_at = now()
    where id = %(run_id)s and status = 'leased' and leased_by = %(worker_id)s
    returning id
)
insert into workflow.workflow_event (workflow_id, event_type, data)
select id, 'succeeded', '{"runtime": "go"}' from done
"""
SQLITE_REGISTER = """
insert into workflow_registry (workflow_name, runtime) values (:name, 'go')
on conflict (workflow_name) do update set runtime = 'go'
"""
SQLITE_SUCCEED = """
update workflow_run
set status = 'succeeded', result = :result,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where id = :run_id and status = 'leased' and leased_by = :worker_id
"""
SQLITE_SUCCEEDED_EVENT = """
insert into workflow_event (workflow_id, event_type, data)
values (:run_id, 'succeeded', '{"runtime": "go"}')
"""


class SqlRuntime:
    """The "Go" runtime: registers its types, claims one run at a time, records results."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def register(self, types: tuple[str, ...]) -> None:
        for name in types:
            self._write([(PG_REGISTER, SQLITE_REGISTER, {"name": name})])

    def claim(self) -> dict[str, Any] | None:
        """Claim and lease the next run, in one transaction, as the seed does."""
        if self.store.kind == "postgres":
            with self._pg() as conn, conn.transaction():
                row = conn.execute(bind(CLAIM)).fetchone()
                if row is not None:
                    conn.execute(bind(LEASE), {"run_id": row["id"], "worker_id": GO_WORKER})
                return row
        with self._sqlite() as lite:
            lite.execute("begin immediate")
            found = lite.execute(SQLITE_CLAIM).fetchone()
            if found is not None:
                lite.execute(SQLITE_LEASE, {"run_id": found["id"], "worker_id": GO_WORKER})
            lite.execute("commit")
            return None if found is None else dict(found)

    def succeed(self, run_id: str, result: Any) -> None:
        params = {"run_id": str(run_id), "worker_id": GO_WORKER, "result": json.dumps(result)}
        self._write([(PG_SUCCEED, SQLITE_SUCCEED, params), (None, SQLITE_SUCCEEDED_EVENT, params)])

    def drain(self) -> list[str]:
        """Run everything this runtime can claim; return the run ids, in claim order."""
        done = []
        while (row := self.claim()) is not None:
            self.succeed(row["id"], {"runtime": "go", "type": row["type"]})
            done.append(str(row["id"]))
        return done

    def _write(self, statements: list[tuple[str | None, str, dict[str, Any]]]) -> None:
        if self.store.kind == "postgres":
            with self._pg() as conn, conn.transaction():
                for pg, _, params in statements:
                    if pg is not None:
                        conn.execute(pg.encode(), params)
            return
        with self._sqlite() as lite:
            lite.execute("begin immediate")
            for _, sql, params in statements:
                lite.execute(sql, params)
            lite.execute("commit")

    def _pg(self) -> psycopg.Connection[dict[str, Any]]:
        return psycopg.connect(self.store.url, autocommit=True, row_factory=dict_row)

    def _sqlite(self) -> contextlib.closing[sqlite3.Connection]:
        conn = sqlite3.connect(config.sqlite_path(self.store.url), timeout=30, isolation_level=None)
        conn.row_factory = sqlite3.Row
        return contextlib.closing(conn)


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A migrated store whose schema is literally ``workflow`` (a fresh database on Postgres)."""
    if request.param == "sqlite":
        store = Store("sqlite", f"sqlite:///{tmp_path / 'shared.db'}")
    else:
        make_database: Callable[[], str] = request.getfixturevalue("make_database")
        store = Store("postgres", make_database(), schema="workflow")
    return store.migrate()


@pytest.fixture
def client(shared: Store) -> Iterator[Client]:
    with shared.client() as client:
        yield client


@pytest.fixture
def app(shared: Store, ledger: Ledger) -> App:
    """Python handlers, including one for a type the Go runtime owns."""
    app = App(shared.url, schema=shared.schema)

    def handle(payload: Any, ctx: Context) -> dict[str, str]:
        ledger.note("ran", ctx)
        return {"runtime": "python"}

    for name in ("billing.invoice.v1", "content.thumbnail.v1", "content.ocr.v1"):
        app.register(name, handle)
    return app


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


def leased_events(client: Client, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in client.events(run_id) if e.event_type == "leased"]


def test_each_runtime_claims_only_its_own_types(
    shared: Store, client: Client, app: App, ledger: Ledger
) -> None:
    go = SqlRuntime(shared)
    go.register(GO_TYPES)
    go_runs = [client.start(t, {"n": i}).id for i in range(3) for t in GO_TYPES]
    python_runs = [client.start("content.thumbnail.v1", {"n": i}).id for i in range(3)]

    # The SQL runtime takes its prefixes' runs and nothing else.
    assert sorted(go.drain()) == sorted(go_runs)
    assert {client.get(r).status for r in python_runs} == {RunStatus.PENDING}

    # The Python worker's prefixes match billing.invoice.v1 and it has a handler for it,
    # but the registry gives that type to Go: the worker leaves it alone.
    more_go = [client.start("billing.invoice.v1", {"n": i}).id for i in range(3)]
    with working(app, type_prefixes=["billing.%", "content.%"]) as poller:
        assert "billing.invoice.v1" in poller.types
        for run_id in python_runs:
            assert wait_terminal(client, run_id).result == {"runtime": "python"}
        for run_id in more_go:
            assert held_for(1.0, client, run_id).status is RunStatus.PENDING
        # Both runtimes at once: the SQL runtime drains while the Python worker polls.
        assert sorted(go.drain()) == sorted(more_go)

    for run_id in go_runs + more_go:
        run = client.get(run_id)
        assert (run.status, run.leased_by) == (RunStatus.SUCCEEDED, GO_WORKER)
        assert run.result == {"runtime": "go", "type": run.type}
        # The seed's lease writes no event of its own: the store logs the change for it.
        [leased] = leased_events(client, run_id)
        assert (leased["source"], leased["from"]) == ("sql", "pending"), leased
        assert ledger.events(run_id) == []
    registry = {e.workflow_name: e.runtime for e in client_registry(shared)}
    assert registry == {
        "billing.invoice.v1": "go",  # the Python worker registered but did not take over
        "payment.card.v1": "go",
        "content.thumbnail.v1": "python",
        "content.ocr.v1": "python",
    }


def test_pausing_a_type_stops_its_claims_until_resumed(
    shared: Store, client: Client, app: App, ledger: Ledger
) -> None:
    backend = open_backend(shared.url, schema=shared.schema)
    try:
        backend.execute(backend.set_registry("content.thumbnail.v1", "python", None))
        paused = backend.execute(backend.enable_registry("content.thumbnail.v1", False))
        assert paused is not None and not paused.is_enabled

        with working(app, type_prefixes=["content.%"]):
            thumbnails = [client.start("content.thumbnail.v1", {"n": i}).id for i in range(3)]
            ocr = client.start("content.ocr.v1").id
            assert wait_terminal(client, ocr).status is RunStatus.SUCCEEDED
            for run_id in thumbnails:
                assert held_for(1.0, client, run_id).status is RunStatus.PENDING
                assert leased_events(client, run_id) == []

            backend.execute(backend.enable_registry("content.thumbnail.v1", True))
            for run_id in thumbnails:
                assert wait_terminal(client, run_id, timeout=10).status is RunStatus.SUCCEEDED

            # Paused again while the worker runs: new runs wait once more.
            backend.execute(backend.enable_registry("content.thumbnail.v1", False))
            later = client.start("content.thumbnail.v1").id
            assert held_for(1.0, client, later).status is RunStatus.PENDING
    finally:
        backend.close()
    assert [ledger.events(r) for r in thumbnails] == [["ran"]] * 3
    assert ledger.events(later) == []


def client_registry(store: Store) -> list[Any]:
    backend = store.backend()
    try:
        return backend.execute(backend.list_registry(), readonly=True)
    finally:
        backend.close()
