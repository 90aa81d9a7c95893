"""Topics: subscriptions of workflow types to topic patterns, and publishing events, on
both stores and through both clients; the matching rules; once per event and type, also
from several processes at once; and the publishing statement of docs/topics.md, run as
written against each store."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Store, poller_thread
from test_cli import finish
from test_client import AsyncFace, Producer

from simpleworkflow import App, Client, Published, RunStatus, Subscription, errors, observe
from simpleworkflow.admin import Admin, AsyncAdmin

ROOT = Path(__file__).resolve().parents[2]
INVOICE = "billing.invoice.v1"
LABEL = "shipping.label.v1"
AUDIT = "audit.record.v1"

#: One type per pattern, so that which patterns matched shows in the types started.
PATTERNS = {
    "orders.created": "match.exact.v1",
    "orders.*": "match.star.v1",
    "*.created": "match.leading.v1",
    "orders.*.created": "match.middle.v1",
    "orders.#": "match.deep.v1",
    "#": "match.all.v1",
    "order_items.*": "match.underscore.v1",
    "orders": "match.root.v1",
}
#: topic -> the patterns that match it (``#`` matches them all, and is left out here).
MATCHES = {
    "orders.created": {"orders.created", "orders.*", "*.created", "orders.#"},
    "orders.shipped": {"orders.*", "orders.#"},
    "orders.eu.created": {"orders.*.created", "orders.#"},
    "orders.created.eu": {"orders.#"},
    "orders": {"orders"},
    "users.created": {"*.created"},
    "ordersx.created": {"*.created"},
    "a.orders.created": set(),
    "order_items.added": {"order_items.*"},
    "orderxitems.added": set(),  # '_' is a character, not LIKE's wildcard
    "orders-eu.created": {"*.created"},
}


def expected_types(topic: str) -> list[str]:
    return sorted(PATTERNS[p] for p in MATCHES[topic] | {"#"})


@pytest.fixture(params=["sync", "async"])
def producer(request: pytest.FixtureRequest, store: Store) -> Iterator[Producer]:
    face: Client | AsyncFace
    face = store.client() if request.param == "sync" else AsyncFace(store.async_client())
    try:
        yield face
    finally:
        face.close()


def subscribe_all(store: Store, patterns: dict[str, str]) -> None:
    with Admin(store.url, schema=store.schema) as admin:
        for pattern, type_name in patterns.items():
            admin.subscribe(pattern, type_name)


# -- what publish does ---------------------------------------------------------------------


def test_publish_starts_one_run_of_each_subscribed_type_with_the_payload(
    store: Store, producer: Producer
) -> None:
    admin = Admin(backend=producer.backend)
    admin.subscribe("orders.created", INVOICE)
    admin.subscribe("orders.*", LABEL, priority=10, max_attempts=5)
    admin.subscribe("users.*", AUDIT)

    published = producer.publish("orders.created", {"order_id": 7}, event_id="order-7")
    assert isinstance(published, Published)
    assert (published.topic, published.event_id) == ("orders.created", "order-7")
    assert [run.type for run in published.runs] == [INVOICE, LABEL]
    assert published.started == published.runs
    invoice, label = published.runs
    assert all(run.created and run.status is RunStatus.PENDING for run in published.runs)
    assert invoice.payload == label.payload == {"order_id": 7}
    assert (invoice.priority, invoice.max_attempts) == (100, 3)
    assert (label.priority, label.max_attempts) == (10, 5)
    assert invoice.idempotency_key == f"topic:orders.created:{INVOICE}:order-7"
    assert label.idempotency_key == f"topic:orders.created:{LABEL}:order-7"
    # the runs are stored as returned, with their audit trail's created event
    assert [producer.get(run.id) for run in published.runs] == published.runs
    assert [e.event_type for e in producer.events(invoice.id)] == ["created"]
    assert store.count() == 2 and store.count("workflow_event") == 2
    assert published.to_dict()["started"] == 2
    assert json.loads(json.dumps(published.to_dict()))["runs"][1]["type"] == LABEL


@pytest.mark.parametrize("topic", sorted(MATCHES))
def test_matching_rules(store: Store, topic: str) -> None:
    subscribe_all(store, PATTERNS)
    with store.client() as client:
        matching = client.admin.subscriptions(topic=topic)
        published = client.publish(topic, {"topic": topic})
    assert sorted(sub.workflow_type for sub in matching) == expected_types(topic)
    assert [run.type for run in published.runs] == expected_types(topic)


def test_a_type_subscribed_through_two_matching_patterns_runs_once_with_the_most_generous_options(
    producer: Producer,
) -> None:
    with Admin(backend=producer.backend) as admin:
        admin.subscribe("orders.*", INVOICE, priority=50, max_attempts=2)
        admin.subscribe("orders.created", INVOICE, priority=80)  # default attempts: 3
        admin.subscribe("orders.#", INVOICE, priority=90, max_attempts=1)
    (run,) = producer.publish("orders.created", event_id="e1").runs
    assert (run.type, run.priority, run.max_attempts) == (INVOICE, 50, 3)
    (shipped,) = producer.publish("orders.shipped", event_id="e1").runs
    assert (shipped.priority, shipped.max_attempts) == (50, 2)


def test_publishing_an_event_again_starts_nothing_and_returns_its_runs(
    store: Store, producer: Producer
) -> None:
    with Admin(backend=producer.backend) as admin:
        admin.subscribe("orders.*", INVOICE)
        admin.subscribe("orders.#", LABEL)
    first = producer.publish("orders.created", {"v": 1}, event_id="evt-1")
    again = producer.publish("orders.created", {"v": 2}, event_id="evt-1")
    assert [run.id for run in again.runs] == [run.id for run in first.runs]
    assert [run.created for run in again.runs] == [False, False] and again.started == []
    assert [run.payload for run in again.runs] == [{"v": 1}, {"v": 1}]  # the first's, kept
    assert store.count() == 2 and store.count("workflow_event") == 2
    # the same id on another topic is another event; another id on this topic too
    assert len(producer.publish("orders.shipped", event_id="evt-1").started) == 2
    assert len(producer.publish("orders.created", event_id="evt-2").started) == 2
    assert store.count() == 6


def test_without_an_event_id_each_publish_is_a_new_event(producer: Producer) -> None:
    with Admin(backend=producer.backend) as admin:
        admin.subscribe("orders.created", INVOICE)
    one = producer.publish("orders.created")
    two = producer.publish("orders.created")
    assert one.event_id != two.event_id
    assert [run.payload for run in one.runs] == [{}]
    assert one.runs[0].idempotency_key == f"topic:orders.created:{INVOICE}:{one.event_id}"
    assert two.started[0].id != one.started[0].id


def test_no_matching_subscription_starts_nothing_and_writes_nothing(
    store: Store, producer: Producer
) -> None:
    nothing = producer.publish("orders.created", {"order_id": 7}, event_id="e1")
    assert (nothing.runs, nothing.started, nothing.event_id) == ([], [], "e1")
    with Admin(backend=producer.backend) as admin:
        admin.subscribe("users.*", INVOICE)
    assert producer.publish("orders.created", event_id="e1").runs == []
    assert store.count() == 0 and store.count("workflow_event") == 0


def test_a_subscription_added_later_gets_an_event_published_again_and_nothing_else(
    producer: Producer,
) -> None:
    with Admin(backend=producer.backend) as admin:
        admin.subscribe("orders.created", INVOICE)
        first = producer.publish("orders.created", event_id="e1")
        admin.subscribe("orders.*", LABEL)
        again = producer.publish("orders.created", event_id="e1")
    assert [(run.type, run.created) for run in again.runs] == [(INVOICE, False), (LABEL, True)]
    assert again.runs[0].id == first.runs[0].id


def test_a_purged_run_frees_its_event_a_soft_deleted_one_does_not(
    store: Store, client: Client
) -> None:
    client.admin.subscribe("orders.created", INVOICE)
    (run,) = client.publish("orders.created", event_id="e1").runs
    client.delete(run.id)
    (found,) = client.publish("orders.created", event_id="e1").runs
    assert (found.id, found.created, found.deleted_at is not None) == (run.id, False, True)
    finish(store, run.id)
    assert client.admin.purge(0) == 1
    (fresh,) = client.publish("orders.created", event_id="e1").runs
    assert fresh.created and fresh.id != run.id


def test_publish_tells_observers_of_each_run_once_committed(store: Store) -> None:
    seen: list[tuple[str, bool, int]] = []

    class Recorder(observe.Observer):
        def run_created(self, event: observe.RunCreated) -> None:
            stored = store.sql("select count(*) from workflow_run where id = ?", event.run.id)
            seen.append((event.run.type, event.created, stored[0][0]))

    with store.client(observers=[Recorder()]) as client:
        client.admin.subscribe("orders.*", INVOICE)
        client.admin.subscribe("orders.*", LABEL)
        client.publish("orders.created", event_id="e1")
        client.publish("orders.created", event_id="e1")
        client.publish("users.created", event_id="e1")  # no subscription: no hook
        with pytest.raises(errors.InvalidArgument):
            client.publish("Orders.created")
    assert seen == [(INVOICE, True, 1), (LABEL, True, 1), (INVOICE, False, 1), (LABEL, False, 1)]


def test_a_published_run_wakes_an_idle_worker_and_runs(store: Store) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow(INVOICE)
    def invoice(payload: dict[str, Any]) -> dict[str, Any]:
        return {"invoiced": payload["order_id"]}

    with store.client() as client:
        client.admin.subscribe("orders.created", INVOICE)
        # a poll interval far longer than the wait: only a wake-up gets the run claimed
        with poller_thread(app, poll_interval=600):
            (run,) = client.publish("orders.created", {"order_id": 7}).runs
            done = client.wait(run.id, timeout=60)
    assert (done.status, done.result) == (RunStatus.SUCCEEDED, {"invoiced": 7})


# -- refused input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "says"),
    [
        ("", "it is empty"),
        ("Orders.created", "upper-case"),
        ("orders..created", "empty segment"),
        (".orders", "empty segment"),
        ("orders.*", "wildcards belong in subscription patterns"),
        ("orders.#", "wildcards belong in subscription patterns"),
        ("orders.cre%ted", "must start with a letter or digit"),
        ("orders/created", "must start with a letter or digit"),
        ("_orders", "must start with a letter or digit"),
        ("orders created", "must start with a letter or digit"),
        ("o" * 201, "at most 200 characters"),
        (7, "must be a string"),
    ],
)
def test_bad_topics_are_refused_and_nothing_is_written(
    store: Store, producer: Producer, topic: Any, says: str
) -> None:
    with Admin(backend=producer.backend) as admin:
        admin.subscribe("#", INVOICE)
        with pytest.raises(errors.InvalidArgument, match=says):
            admin.subscriptions(topic=topic)
    with pytest.raises(errors.InvalidArgument, match=says):
        producer.publish(topic)
    assert store.count() == 0


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("orders.#.created", "'#' may only be the last segment"),
        ("#.created", "'#' may only be the last segment"),
        ("orders.*.#", "'#' cannot be combined with '*'"),
        ("order*", "a wildcard must be a whole segment"),
        ("orders.cre#", "a wildcard must be a whole segment"),
        ("orders.>", "must start with a letter or digit"),
        ("orders.%", "must start with a letter or digit"),
        ("Orders.*", "upper-case"),
        ("orders.", "empty segment"),
        ("", "it is empty"),
        ("*" + ".x" * 100, "at most 200 characters"),
        (None, "must be a string"),
    ],
)
def test_bad_patterns_are_refused_and_nothing_is_written(
    store: Store, pattern: Any, says: str
) -> None:
    with Admin(store.url, schema=store.schema) as admin:
        with pytest.raises(errors.InvalidArgument, match=says):
            admin.subscribe(pattern, INVOICE)
        with pytest.raises(errors.InvalidArgument, match=says):
            admin.unsubscribe(pattern, INVOICE)
        assert admin.subscriptions() == []


def test_bad_event_ids_types_and_options_are_refused(store: Store, client: Client) -> None:
    client.admin.subscribe("orders.*", INVOICE)
    for event_id in ("", "e" * 101, "nul\x00", "\ud800", 7):
        with pytest.raises(errors.InvalidArgument, match="event id must be 1 to 100"):
            client.publish("orders.created", event_id=event_id)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidPayload):
        client.publish("orders.created", {"x": float("nan")})
    with pytest.raises(errors.PayloadTooLarge):
        Client(store.url, schema=store.schema, max_payload_bytes=10).publish(
            "orders.created", {"text": "x" * 100}
        )
    with pytest.raises(errors.InvalidTypeName):
        client.admin.subscribe("orders.*", "billing.invoice")
    for options, says in [
        ({"priority": "high"}, "priority must be an integer"),
        ({"priority": 2**31}, "priority must be an integer"),
        ({"max_attempts": 0}, "max_attempts must be an integer from 1 to 10000"),
        ({"max_attempts": True}, "max_attempts must be an integer"),
    ]:
        with pytest.raises(errors.InvalidArgument, match=says):
            client.admin.subscribe("orders.*", LABEL, **options)
    assert [sub.workflow_type for sub in client.admin.subscriptions()] == [INVOICE]
    assert store.count() == 0


# -- managing subscriptions --------------------------------------------------------------


def test_subscribe_unsubscribe_and_list(store: Store) -> None:
    with Admin(store.url, schema=store.schema) as admin:
        first = admin.subscribe("orders.*", INVOICE)
        assert isinstance(first, Subscription)
        assert (first.pattern, first.workflow_type, first.priority, first.max_attempts) == (
            "orders.*",
            INVOICE,
            100,
            None,
        )
        changed = admin.subscribe("orders.*", INVOICE, priority=5, max_attempts=9)
        assert (changed.priority, changed.max_attempts) == (5, 9)
        assert changed.created_at == first.created_at and changed.updated_at >= first.updated_at
        admin.subscribe("orders.#", LABEL)
        admin.subscribe("users.created", INVOICE)
        listed = admin.subscriptions()
        assert [(s.pattern, s.workflow_type) for s in listed] == [
            ("orders.#", LABEL),
            ("orders.*", INVOICE),
            ("users.created", INVOICE),
        ]
        assert listed[1] == changed
        assert [s.pattern for s in admin.subscriptions(type=INVOICE)] == [
            "orders.*",
            "users.created",
        ]
        assert [s.pattern for s in admin.subscriptions(topic="orders.eu.created")] == ["orders.#"]
        assert listed[0].to_dict()["pattern"] == "orders.#"
        assert admin.unsubscribe("orders.*", INVOICE) is True
        assert admin.unsubscribe("orders.*", INVOICE) is False
        assert admin.unsubscribe("orders.#", INVOICE) is False  # the pattern is another type's
        assert [s.pattern for s in admin.subscriptions()] == ["orders.#", "users.created"]


def test_the_async_admin_manages_subscriptions_too(store: Store) -> None:
    import asyncio

    async def scenario() -> list[str]:
        async with AsyncAdmin(store.url, schema=store.schema) as admin:
            await admin.subscribe("orders.*", INVOICE, priority=3)
            await admin.subscribe("orders.#", LABEL)
            assert await admin.unsubscribe("orders.#", LABEL)
            return [s.pattern for s in await admin.subscriptions(topic="orders.created")]

    assert asyncio.run(scenario()) == ["orders.*"]


def test_a_subscription_inserted_with_plain_sql_matches_like_one_made_by_the_admin(
    store: Store, client: Client
) -> None:
    store.sql(
        "insert into workflow_subscription (pattern, workflow_type, priority) values (?, ?, ?)",
        "orders.*",
        INVOICE,
        7,
    )
    (sub,) = client.admin.subscriptions(topic="orders.created")
    assert (sub.workflow_type, sub.priority, sub.max_attempts) == (INVOICE, 7, None)
    assert client.admin.subscriptions(topic="orders.eu.created") == []
    (run,) = client.publish("orders.created").runs
    assert (run.type, run.priority) == (INVOICE, 7)


# -- several processes at once -------------------------------------------------------------

PROCESSES = 4
EVENTS = 25
# Names that a byte order and a language's collation sort apart ('.' before '_' in bytes):
# every publisher must take an event's keys in one order, or two of them deadlock.
RACE_TYPES = {
    "orders.*": INVOICE,
    "orders.#": LABEL,
    "#": AUDIT,
    "*.created": "audit_log.entry.v1",
    "orders.created": "auditlog.entry.v1",
}


def _publisher(
    index: int, url: str, schema: str, statement: str | None, barrier: Any, results: Any
) -> None:
    """Publish every event once, through a client or (``statement``) the documented SQL;
    report ``(event, type, run id, created)`` for each run it was told of."""
    from simpleworkflow import Client

    try:
        seen: list[tuple[str, str, str, bool]] = []
        with Client(url, schema=schema) as client:
            client.admin.subscriptions()  # connect (and check the schema) before the race
            with SQLPublisher(url, schema, statement) as run_sql:
                barrier.wait(timeout=60)
                for n in range(EVENTS):
                    event = f"order-{n}"
                    if statement is None:
                        for run in client.publish("orders.created", {"n": n}, event_id=event).runs:
                            seen.append((event, run.type, run.id, bool(run.created)))
                    else:
                        for run_id, type_name in run_sql(event, json.dumps({"n": n})):
                            seen.append((event, type_name, str(run_id), True))
        results.put(("ok", index, seen))
    except BaseException as exc:  # report it to the test instead of dying silently
        results.put(("error", index, f"{type(exc).__name__}: {exc}"))


class SQLPublisher:
    """A plain connection that runs the documented statement for one event at a time."""

    def __init__(self, url: str, schema: str, statement: str | None) -> None:
        self.url, self.schema, self.statement = url, schema, statement
        self.conn: Any = None

    def __enter__(self) -> Callable[[str, str], list[tuple[Any, ...]]]:
        if self.statement is None:
            return lambda event, payload: []
        if self.url.startswith("sqlite"):
            self.conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=60)
        else:
            self.conn = psycopg.connect(self.url, autocommit=True, cursor_factory=psycopg.RawCursor)
            self.conn.execute(f'set search_path to "{self.schema}"')
        return self.run

    def run(self, event: str, payload: str) -> list[tuple[Any, ...]]:
        assert self.statement is not None
        if isinstance(self.conn, sqlite3.Connection):
            with self.conn:  # commits
                return list(self.conn.execute(self.statement, ("orders.created", event, payload)))
        return list(self.conn.execute(self.statement, ("orders.created", event, payload)))

    def __exit__(self, *exc: object) -> None:
        if self.conn is not None:
            self.conn.close()


def test_one_event_published_by_several_processes_at_once_starts_one_run_per_type(
    store: Store,
) -> None:
    """Clients and the documented SQL statement, released together, publish the same
    events: each type gets exactly one run per event, created once, and every client is
    given that run."""
    subscribe_all(store, RACE_TYPES)
    # The statement as documented, on the test's schema instead of "workflow".
    statement = documented_statement(store.kind).replace("workflow.workflow_", "workflow_")
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
    processes = [
        ctx.Process(
            target=_publisher,
            args=(i, store.url, store.schema, statement if i % 2 else None, barrier, results),
        )
        for i in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=240) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    failed = [outcome for outcome in outcomes if outcome[0] != "ok"]
    assert not failed, failed

    stored = {
        (str(run_id), type_name, key)
        for run_id, type_name, key in store.sql(
            "select id, type, idempotency_key from workflow_run"
        )
    }
    assert len(stored) == EVENTS * len(RACE_TYPES)
    runs = {(key.rsplit(":", 1)[1], type_name): run_id for run_id, type_name, key in stored}
    created: dict[str, int] = {}
    for _, index, seen in outcomes:
        if index % 2 == 0:  # a client is told of every run, whoever started it
            assert len(seen) == EVENTS * len(RACE_TYPES)
        for event, type_name, run_id, was_created in seen:
            assert runs[(event, type_name)] == run_id
            created[run_id] = created.get(run_id, 0) + was_created
    assert sorted(created.values()) == [1] * len(stored)  # each run created exactly once
    assert store.count("workflow_event") == len(stored)  # one created event each


# -- the documented statement, as written -------------------------------------------------


def documented_statement(kind: str) -> str:
    """The publishing statement of docs/topics.md for a store, exactly as printed there."""
    heading = {
        "postgres": "-- publish an event on Postgres",
        "sqlite": "-- publish an event on SQLite",
    }
    text = (ROOT / "docs" / "topics.md").read_text()
    blocks = text.split("```sql\n")[1:]
    found = [block.split("```")[0] for block in blocks if block.startswith(heading[kind])]
    assert len(found) == 1, f"docs/topics.md should hold one {heading[kind]!r} block"
    return found[0]


@pytest.fixture(params=["sqlite", "postgres"])
def default_store(
    request: pytest.FixtureRequest, tmp_path: Path, make_database: Callable[[], str]
) -> Store:
    """A migrated store whose Postgres schema is the default one, ``workflow``, which the
    documented statement names."""
    if request.param == "sqlite":
        return Store("sqlite", f"sqlite:///{tmp_path / 'shop.db'}").migrate()
    return Store("postgres", make_database(), schema="workflow").migrate()


def publish_with_documented_sql(store: Store, topic: str, event_id: str, payload: str) -> list[Any]:
    """Run the documented statement as a producer in another language would: the text as
    printed, its parameters bound by the driver."""
    statement = documented_statement(store.kind)
    if store.kind == "sqlite":
        with sqlite3.connect(store.url.removeprefix("sqlite:///")) as conn:
            return list(conn.execute(statement, (topic, event_id, payload)))
    with psycopg.connect(store.url, autocommit=True, cursor_factory=psycopg.RawCursor) as conn:
        return list(conn.execute(statement, (topic, event_id, payload)))


def test_the_documented_statement_publishes_as_the_client_does(default_store: Store) -> None:
    subscribe_all(default_store, PATTERNS)
    for n, topic in enumerate(sorted(MATCHES)):
        rows = publish_with_documented_sql(default_store, topic, f"e{n}", json.dumps({"n": n}))
        assert sorted(type_name for _, type_name in rows) == expected_types(topic), topic
    with default_store.client() as client:
        for n, topic in enumerate(sorted(MATCHES)):
            # the same events through the client: found, not started again
            published = client.publish(topic, {"n": -1}, event_id=f"e{n}")
            assert [run.type for run in published.runs] == expected_types(topic)
            assert published.started == []
            assert {run.payload["n"] for run in published.runs} == {n}


def test_the_documented_statement_gives_runs_the_options_the_client_gives(
    default_store: Store,
) -> None:
    with Admin(default_store.url, schema=default_store.schema) as admin:
        admin.subscribe("orders.*", INVOICE, priority=50, max_attempts=2)
        admin.subscribe("orders.created", INVOICE, priority=80)
        admin.subscribe("orders.#", LABEL, priority=7, max_attempts=9)
    rows = publish_with_documented_sql(default_store, "orders.created", "by-sql", "{}")
    with default_store.client() as client:
        by_sql = sorted((client.get(str(run_id)) for run_id, _ in rows), key=lambda r: r.type)
        by_client = client.publish("orders.created", event_id="by-client").runs
    options = [(run.type, run.priority, run.max_attempts) for run in by_client]
    assert options == [(INVOICE, 50, 3), (LABEL, 7, 9)]
    assert [(run.type, run.priority, run.max_attempts) for run in by_sql] == options
    assert [run.idempotency_key for run in by_sql] == [
        f"topic:orders.created:{INVOICE}:by-sql",
        f"topic:orders.created:{LABEL}:by-sql",
    ]
    if default_store.kind == "postgres":  # the column default: time-ordered there too
        assert {uuid.UUID(run.id).version for run in by_sql} == {7}


def test_the_documented_statement_starts_nothing_twice_nor_after_the_client(
    default_store: Store,
) -> None:
    subscribe_all(default_store, {"orders.*": INVOICE, "orders.#": LABEL})
    created = publish_with_documented_sql(default_store, "orders.created", "e1", '{"a": 1}')
    assert sorted(type_name for _, type_name in created) == [INVOICE, LABEL]
    assert publish_with_documented_sql(default_store, "orders.created", "e1", "{}") == []
    assert publish_with_documented_sql(default_store, "users.created", "e2", "{}") == []
    with default_store.client() as client:
        published = client.publish("orders.created", event_id="e1")
        assert {run.id for run in published.runs} == {str(run_id) for run_id, _ in created}
        assert [run.payload for run in published.runs] == [{"a": 1}, {"a": 1}]
        by_client = client.publish("orders.shipped", event_id="e3")
        assert publish_with_documented_sql(default_store, "orders.shipped", "e3", "{}") == []
        for run in published.runs:
            assert [e.event_type for e in client.events(run.id)] == ["created"]
    assert len(by_client.started) == 2
    assert default_store.count() == 4
