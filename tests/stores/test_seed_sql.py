"""The SQL contract: the statements of seed 000 (sections 6 and 7) run as written, and
every status they (or any plain SQL) change leaves its one event, on both stores.

A producer or worker in another language needs nothing but these statements, so they run
here verbatim, against a schema literally named ``workflow``, with only ``:run_id`` and
``:worker_id`` turned into driver placeholders. Each test then checks that the statement
did what the seed says, and that the Python client sees the result.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from conftest import Store, poller_thread
from psycopg.rows import dict_row
from worker_app import wait_until

from simpleworkflow import App, Client, RunStatus
from simpleworkflow.backends import open_backend
from simpleworkflow.retry import RetryPolicy

# -- the statements, exactly as seed 000 writes them ------------------------------------

CREATE = """
insert into workflow.workflow_run (
  type,
  payload,
  idempotency_key
) values (
  'content.thumbnail.v1',
  '{"content_id":"c_123", "width": 300, "height": 300}',
  'content:c_123:thumbnail:300x300'
)
on conflict (idempotency_key) do nothing
returning id;
"""

CANCEL = """
update workflow.workflow_run
set status = 'cancelled', updated_at = now()
where id = :run_id
  and status in ('pending', 'leased');
"""

CLAIM = """
select id, type, payload, attempt, max_attempts
from workflow.workflow_run
where status = 'pending'
  and (type like 'billing.%' or type like 'payment.%')
  and run_at <= now()
  and deleted_at is null
order by priority asc, created_at asc
for update skip locked
limit 1;
"""

LEASE = """
update workflow.workflow_run
set status = 'leased',
    leased_by = :worker_id,
    lease_until = now() + interval '30 seconds',
    updated_at = now()
where id = :run_id;
"""

HEARTBEAT = """
update workflow.workflow_run
set lease_until = now() + interval '30 seconds',
    updated_at = now()
where id = :run_id and status = 'leased';
"""

CHECK_CANCELLATION = """
select status from workflow.workflow_run where id = :run_id;
"""

LOG_EVENT = """
insert into workflow.workflow_event (workflow_id, event_type, data)
values (:run_id, 'heartbeat', '{"extended_by_seconds": 30}');
"""

WORKER = "billing-worker-1"


def bind(statement: str) -> bytes:
    """The seed's ``:name`` parameters as psycopg placeholders; nothing else changes."""
    for name in ("run_id", "worker_id"):
        statement = statement.replace(f":{name}", f"%({name})s")
    return statement.encode()


Connect = Callable[[], psycopg.Connection[dict[str, Any]]]


@pytest.fixture(scope="module")
def seed_database(make_database: Callable[[], str]) -> str:
    return make_database()


@pytest.fixture
def connect(seed_database: str) -> Iterator[Connect]:
    """A fresh ``workflow`` schema, migrated; then a factory of plain connections to it."""
    with psycopg.connect(seed_database, autocommit=True) as admin:
        admin.execute("drop schema if exists workflow cascade")
    backend = open_backend(seed_database, schema="workflow")
    try:
        backend.migrate()
    finally:
        backend.close()

    opened: list[psycopg.Connection[dict[str, Any]]] = []

    def open_connection() -> psycopg.Connection[dict[str, Any]]:
        conn = psycopg.connect(seed_database, autocommit=True, row_factory=dict_row)
        opened.append(conn)
        return conn

    yield open_connection
    for conn in opened:
        conn.close()


@pytest.fixture
def client(connect: Connect, seed_database: str) -> Iterator[Client]:
    with Client(seed_database, schema="workflow") as client:
        yield client


def row(conn: psycopg.Connection[dict[str, Any]], run_id: Any) -> dict[str, Any]:
    found = conn.execute(
        "select * from workflow.workflow_run where id = %s", (str(run_id),)
    ).fetchone()
    assert found is not None
    return found


# -- producers ----------------------------------------------------------------------------


def test_create_returns_an_id_once(connect: Connect, client: Client) -> None:
    conn = connect()
    first = conn.execute(bind(CREATE)).fetchall()
    assert len(first) == 1
    run_id = str(first[0]["id"])
    assert uuid.UUID(run_id)

    assert conn.execute(bind(CREATE)).fetchall() == []  # the key is taken: nothing returned
    assert conn.execute("select count(*) as n from workflow.workflow_run").fetchone() == {"n": 1}

    run = client.get(run_id)
    assert run.type == "content.thumbnail.v1"
    assert run.payload == {"content_id": "c_123", "width": 300, "height": 300}
    assert run.status is RunStatus.PENDING
    assert (run.priority, run.attempt, run.max_attempts) == (100, 0, 3)
    assert run.idempotency_key == "content:c_123:thumbnail:300x300"
    assert [r.id for r in client.list(type_prefix="content.%").runs] == [run_id]
    # The Python producer honours a key taken by a SQL producer, and the other way round.
    again = client.start(
        "content.thumbnail.v1", {"other": True}, idempotency_key="content:c_123:thumbnail:300x300"
    )
    assert again.id == run_id


def test_sql_insert_after_python_start_is_a_no_op(connect: Connect, client: Client) -> None:
    run = client.start(
        "content.thumbnail.v1",
        {"content_id": "c_123"},
        idempotency_key="content:c_123:thumbnail:300x300",
    )
    conn = connect()
    assert conn.execute(bind(CREATE)).fetchall() == []
    assert client.get(run.id).payload == {"content_id": "c_123"}


@pytest.mark.parametrize(
    ("status", "changed"),
    [
        ("pending", True),
        ("leased", True),
        ("succeeded", False),
        ("failed", False),
        ("cancelled", False),
    ],
)
def test_cancel_affects_only_pending_and_leased_runs(
    connect: Connect, client: Client, status: str, changed: bool
) -> None:
    conn = connect()
    run = client.start("billing.invoice.v1")
    conn.execute("update workflow.workflow_run set status = %s where id = %s", (status, run.id))
    before = row(conn, run.id)

    cursor = conn.execute(bind(CANCEL), {"run_id": run.id})

    assert cursor.rowcount == (1 if changed else 0)
    after = row(conn, run.id)
    assert after["status"] == ("cancelled" if changed else status)
    assert (after["updated_at"] > before["updated_at"]) is changed
    assert client.get(run.id).status == after["status"]


# -- workers --------------------------------------------------------------------------------


@pytest.fixture
def backlog(client: Client, connect: Connect) -> dict[str, str]:
    """Runs of every kind a claim must pick from or step over, by name."""
    conn = connect()
    made = {
        "old_low": client.start("billing.invoice.v1", priority=100).id,
        "future": client.start("billing.invoice.v1", priority=1, delay="1h").id,
        "deleted": client.start("payment.card.refund.v1", priority=1).id,
        "other_prefix": client.start("content.thumbnail.v1", priority=1).id,
        "lookalike": client.start("billings.invoice.v1", priority=1).id,
        "leased": client.start("billing.invoice.v1", priority=1).id,
        "finished": client.start("payment.card.charge.v1", priority=1).id,
        "first": client.start("payment.card.charge.v1", priority=30).id,
        "second": client.start("billing.invoice.send.v1", priority=30).id,
    }
    client.delete(made["deleted"])
    conn.execute(
        "update workflow.workflow_run set status = 'leased' where id = %s", (made["leased"],)
    )
    conn.execute(
        "update workflow.workflow_run set status = 'succeeded' where id = %s", (made["finished"],)
    )
    return made


def claim_and_lease(conn: psycopg.Connection[dict[str, Any]]) -> dict[str, Any] | None:
    """One worker step as the seed writes it: claim, then lease, in one transaction."""
    with conn.transaction():
        claimed = conn.execute(bind(CLAIM)).fetchone()
        if claimed is not None:
            conn.execute(bind(LEASE), {"run_id": claimed["id"], "worker_id": WORKER})
    return claimed


def test_claim_takes_due_runs_by_priority_then_age(
    connect: Connect, backlog: dict[str, str]
) -> None:
    conn = connect()
    by_id = {run_id: name for name, run_id in backlog.items()}
    claimed = []
    while (found := claim_and_lease(conn)) is not None:
        claimed.append(by_id[str(found["id"])])
    assert claimed == ["first", "second", "old_low"]


def test_claim_returns_the_columns_a_worker_needs(connect: Connect, client: Client) -> None:
    run = client.start("billing.invoice.v1", {"invoice": 9}, max_attempts=5)
    claimed = connect().execute(bind(CLAIM)).fetchone()
    assert claimed == {
        "id": uuid.UUID(run.id),
        "type": "billing.invoice.v1",
        "payload": {"invoice": 9},
        "attempt": 0,
        "max_attempts": 5,
    }


def test_claim_skips_a_run_locked_by_another_transaction(
    connect: Connect, backlog: dict[str, str]
) -> None:
    worker_a, worker_b = connect(), connect()
    with worker_a.transaction(force_rollback=True):
        held = worker_a.execute(bind(CLAIM)).fetchone()
        assert held is not None and str(held["id"]) == backlog["first"]
        # worker A has not leased it yet, but holds the row lock: B must not wait or take it
        other = worker_b.execute(bind(CLAIM)).fetchone()
        assert other is not None and str(other["id"]) == backlog["second"]
    # A gave up without leasing: the run is claimable again.
    again = worker_b.execute(bind(CLAIM)).fetchone()
    assert again is not None and str(again["id"]) == backlog["first"]


def test_lease_marks_the_run_as_held(connect: Connect, client: Client) -> None:
    conn = connect()
    run = client.start("billing.invoice.v1")
    claimed = claim_and_lease(conn)
    assert claimed is not None and str(claimed["id"]) == run.id

    leased = client.get(run.id)
    assert leased.status is RunStatus.LEASED
    assert leased.leased_by == WORKER
    assert leased.lease_until is not None
    assert leased.lease_until - leased.updated_at == timedelta(seconds=30)
    assert conn.execute(bind(CLAIM)).fetchone() is None  # no longer claimable


def test_heartbeat_extends_a_lease(connect: Connect, client: Client) -> None:
    conn = connect()
    run = client.start("billing.invoice.v1")
    claim_and_lease(conn)
    conn.execute(
        "update workflow.workflow_run set lease_until = now() + interval '1 second' where id = %s",
        (run.id,),
    )
    short = row(conn, run.id)

    cursor = conn.execute(bind(HEARTBEAT), {"run_id": run.id})

    assert cursor.rowcount == 1
    extended = row(conn, run.id)
    assert extended["lease_until"] > short["lease_until"]
    assert extended["lease_until"] - extended["updated_at"] == timedelta(seconds=30)
    assert client.get(run.id).lease_until == extended["lease_until"]


@pytest.mark.parametrize("status", ["pending", "cancelled", "succeeded"])
def test_heartbeat_ignores_runs_that_are_not_leased(
    connect: Connect, client: Client, status: str
) -> None:
    conn = connect()
    run = client.start("billing.invoice.v1")
    conn.execute("update workflow.workflow_run set status = %s where id = %s", (status, run.id))
    before = row(conn, run.id)
    cursor = conn.execute(bind(HEARTBEAT), {"run_id": run.id})
    assert cursor.rowcount == 0
    assert row(conn, run.id) == before


def test_worker_sees_a_producer_cancel(connect: Connect, client: Client) -> None:
    conn = connect()
    run = client.start("billing.invoice.v1")
    claim_and_lease(conn)
    check = bind(CHECK_CANCELLATION)
    assert conn.execute(check, {"run_id": run.id}).fetchall() == [{"status": "leased"}]

    assert client.cancel(run.id) is True

    assert conn.execute(check, {"run_id": run.id}).fetchall() == [{"status": "cancelled"}]
    # ...and a cancelled run takes no more heartbeats.
    assert conn.execute(bind(HEARTBEAT), {"run_id": run.id}).rowcount == 0


def test_logged_event_is_read_by_the_client(connect: Connect, client: Client) -> None:
    conn = connect()
    run = client.start("billing.invoice.v1")
    conn.execute(bind(LOG_EVENT), {"run_id": run.id})
    events = client.events(run.id)
    assert [e.event_type for e in events] == ["created", "heartbeat"]
    assert events[1].data == {"extended_by_seconds": 30}
    assert events[1].workflow_id == run.id


def test_cancel_through_sql_is_seen_by_the_client(connect: Connect, client: Client) -> None:
    run = client.start("billing.invoice.v1")
    assert connect().execute(bind(CANCEL), {"run_id": run.id}).rowcount == 1
    assert client.get(run.id).status is RunStatus.CANCELLED
    assert client.wait(run.id, timeout=1).status is RunStatus.CANCELLED


# -- the audit trail of plain SQL (migrations: Postgres 0023, SQLite 0018) ---------------


def sql_events(client: Client, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.event_type, e.data) for e in client.events(run_id)]


def test_each_transition_of_the_seed_sql_leaves_one_event(connect: Connect, client: Client) -> None:
    conn = connect()
    run = client.start("billing.invoice.v1")
    claimed = claim_and_lease(conn)
    assert claimed is not None and str(claimed["id"]) == run.id
    assert conn.execute(bind(HEARTBEAT), {"run_id": run.id}).rowcount == 1  # no transition
    assert conn.execute(bind(CANCEL), {"run_id": run.id}).rowcount == 1
    assert conn.execute(bind(CANCEL), {"run_id": run.id}).rowcount == 0  # nothing changed
    assert sql_events(client, run.id) == [
        ("created", {"type": "billing.invoice.v1", "priority": 100, "run_at": ANY_TIME}),
        (
            "leased",
            {
                "source": "sql",
                "from": "pending",
                "worker_id": WORKER,
                "attempt": 1,
                "lease_until": ANY_TIME,
            },
        ),
        ("cancelled", {"source": "sql", "from": "leased", "worker_id": WORKER}),
    ]


class _AnyTime:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and "T" in other


ANY_TIME: Any = _AnyTime()


TYPE = "billing.invoice.v1"


@pytest.fixture
def store_client(store: Store) -> Iterator[Client]:
    """A client of the ``store`` fixture's store (``client`` here is the seed schema's)."""
    with Client(store.url, schema=store.schema) as client:
        yield client


@pytest.mark.parametrize(
    ("sets", "event", "extra"),
    [
        ("status = 'succeeded'", "succeeded", {"attempt": 1}),
        (
            "status = 'failed', last_error = 'boom'",
            "failed",
            {"attempt": 0, "error": {"message": "boom"}},
        ),
        (
            "status = 'pending', attempt = attempt + 1, last_error = 'boom'",
            "retried",
            {"attempt": 1, "error": {"message": "boom"}, "retry_at": ANY_TIME},
        ),
        ("status = 'pending'", "released", {}),
        ("status = 'cancelled'", "cancelled", {}),
    ],
)
def test_another_runtimes_status_change_leaves_one_event(
    store: Store, store_client: Client, sets: str, event: str, extra: dict[str, Any]
) -> None:
    client = store_client
    run = client.start(TYPE)
    store.sql("update workflow_run set status = 'leased', leased_by = 'go-1' where id = ?", run.id)
    store.sql(f"update workflow_run set {sets} where id = ?", run.id)
    store.sql(f"update workflow_run set {sets} where id = ?", run.id)  # no change: no event
    events = client.events(run.id)
    assert [e.event_type for e in events] == ["created", "leased", event]
    assert events[-1].data == {"source": "sql", "from": "leased", "worker_id": "go-1", **extra}
    if event in ("failed", "cancelled", "succeeded"):  # an operator sets it going again
        store.sql("update workflow_run set status = 'pending' where id = ?", run.id)
        last = client.events(run.id)[-1]
        assert (last.event_type, last.data["from"]) == ("retried_by_operator", event)


def test_the_python_runtime_logs_each_of_its_transitions_once(
    store: Store, store_client: Client
) -> None:
    app = App(store.url, schema=store.schema, retry=RetryPolicy(base=0.01))
    calls: list[int] = []

    @app.workflow(TYPE)
    def flaky(payload: dict[str, Any]) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("once")
        return "done"

    client = store_client
    run = client.start(TYPE)
    cancelled = client.start(TYPE, delay="1h")
    with poller_thread(app, poll_interval=0.05):
        assert client.wait(run.id, timeout=20).status is RunStatus.SUCCEEDED
        assert client.cancel(cancelled.id) is True
        client.admin.retry(cancelled.id)
        wait_until(lambda: client.get(cancelled.id).status is RunStatus.SUCCEEDED, 20, "not run")
    kinds = ["created", "leased", "started", "retried", "leased", "started", "succeeded"]
    assert [e.event_type for e in client.events(run.id)] == kinds
    assert [e.event_type for e in client.events(cancelled.id)] == [
        "created",
        "cancelled",
        "retried_by_operator",
        "leased",
        "started",
        "succeeded",
    ]
    for run_id in (run.id, cancelled.id):
        assert not [e for e in client.events(run_id) if "source" in e.data]


# -- created events and wake-ups: the library's starts write their own (Postgres 0030) ---


PLAIN_INSERT = """
insert into workflow.workflow_run (type, payload, run_at)
values ('plain.now.v1', '{}', now()), ('plain.now.v1', '{}', now()),
       ('plain.later.v1', '{}', now() + interval '1 hour')
returning id
"""


def test_every_insert_leaves_one_created_event_and_wakes_each_type(
    connect: Connect, client: Client
) -> None:
    """Plain SQL gets them from the insert trigger; the library's starts write them in
    their own statement, which the trigger then leaves alone: one each, never two."""
    listener = connect()
    listener.execute("listen simpleworkflow")
    plain = [str(r["id"]) for r in connect().execute(PLAIN_INSERT).fetchall()]
    started = [client.start("lib.one.v1").id, client.start("lib.later.v1", delay=3600).id]
    started += [r.id for r in client.start_many([("lib.many.v1", {}), ("lib.many.v1", {})])]
    wakes = sorted(note.payload for note in listener.notifies(timeout=1))
    for run_id in plain + started:
        run = client.get(run_id)
        assert sql_events(client, run_id) == [
            ("created", {"type": run.type, "priority": run.priority, "run_at": ANY_TIME})
        ]
    due = {w.split(" ")[2]: w.split(" ")[3:] for w in wakes}
    assert len(wakes) == len(due) == 5  # one per type: the two due now of one type as one
    assert due["plain.now.v1"] == due["lib.one.v1"] == due["lib.many.v1"] == []
    for later in ("plain.later.v1", "lib.later.v1"):
        assert 3590 < float(due[later][0]) - time.time() < 3610
    assert all(w.startswith("wake workflow ") for w in wakes)
