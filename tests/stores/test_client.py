"""The producer API, as a user sees it, on every store and through both clients.

Every test runs four times: SQLite and Postgres, each through ``Client`` and through
``AsyncClient`` (driven from this synchronous code by an event loop of its own), because
the two clients are meant to be one implementation with two faces.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import inspect
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pydantic
import pytest
from conftest import Store

from simpleworkflow import AsyncClient, Client, RunStatus, durations, errors
from simpleworkflow.backends.records import HOLD_FRESH_FOR

TYPE = "content.thumbnail.v1"
PLUS_14 = timezone(timedelta(hours=14))
MINUS_14 = timezone(timedelta(hours=-14))


class AsyncFace:
    """An ``AsyncClient`` whose coroutine methods are run to completion on a private loop."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._loop = asyncio.new_event_loop()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run_until_complete(attr(*args, **kwargs))

        return call

    def close(self) -> None:
        self._loop.run_until_complete(self._client.aclose())
        self._loop.close()


# Either a Client or an AsyncFace: both answer the same calls with the same results.
Producer = Any


@pytest.fixture(params=["sync", "async"])
def make_producer(request: pytest.FixtureRequest, store: Store) -> Iterator[Callable[..., Any]]:
    """Open producers on the test's store (closed at teardown)."""
    opened: list[Client | AsyncFace] = []

    def make(**options: Any) -> Producer:
        face: Client | AsyncFace
        if request.param == "sync":
            face = store.client(**options)
        else:
            face = AsyncFace(store.async_client(**options))
        opened.append(face)
        return face

    yield make
    for face in opened:
        face.close()


@pytest.fixture
def producer(make_producer: Callable[..., Producer]) -> Producer:
    return make_producer()


def set_status(store: Store, run_id: str, status: str) -> None:
    """Move a run the way a worker would, behind the client's back."""
    store.sql("update workflow_run set status = ? where id = ?", status, run_id)


# -- start ------------------------------------------------------------------------------


def test_start_returns_the_stored_pending_run(producer: Producer) -> None:
    before = datetime.now(UTC)
    run = producer.start(TYPE, {"content_id": "c_123", "width": 300})

    assert uuid.UUID(run.id)
    assert run.type == TYPE
    assert run.payload == {"content_id": "c_123", "width": 300}
    assert run.status is RunStatus.PENDING
    assert (run.priority, run.attempt, run.max_attempts) == (100, 0, 3)
    assert run.idempotency_key is None
    assert run.leased_by is run.lease_until is run.last_error is run.result is None
    assert run.deleted_at is None
    assert run.created_at.tzinfo is not None
    assert abs(run.created_at - before) < timedelta(seconds=5)
    assert abs(run.run_at - run.created_at) < timedelta(seconds=1)  # due at once
    assert producer.get(run.id) == run


def test_started_runs_are_what_the_store_holds_with_every_option(producer: Producer) -> None:
    # start and start_many build the returned run from the request and the few columns the
    # store sends back; it must be the very row a later get() reads.
    options: dict[str, Any] = {
        "priority": -7,
        "delay": 12.345678,
        "max_attempts": 9,
        "deadline": 3600.5,
    }
    payload = {"b": [1, 2.5, None, True], "a": {"nested": "é ✓"}}
    one = producer.start(TYPE, payload, idempotency_key="one", **options)
    many = producer.start_many(
        [
            {"type": TYPE, "payload": payload, "idempotency_key": "two", **options},
            {"type": TYPE, "payload": [3], "run_at": datetime(2030, 1, 2, 3, 4, 5, 6789, UTC)},
            (TYPE, None),
        ]
    )
    for run in [one, *many]:
        assert producer.get(run.id) == run
    assert (one.priority, one.max_attempts, one.idempotency_key) == (-7, 9, "one")
    assert one.deadline is not None and one.deadline > one.run_at > one.created_at


def test_run_ids_grow_with_time(producer: Producer) -> None:
    # Time-ordered ids keep the indexes keyed by run id appending at one end.
    ids = []
    for _ in range(3):  # ids of one millisecond are in random order, so space the calls
        ids.append(producer.start(TYPE).id)
        time.sleep(0.002)
        ids.append(producer.start_many([(TYPE, {})])[0].id)
        time.sleep(0.002)
    assert all(uuid.UUID(run_id).version == 7 for run_id in ids)
    assert ids == sorted(ids)
    # a batch's ids: UUIDv7 text (version, RFC variant, the millisecond of now), distinct
    batch = [run.id for run in producer.start_many([(TYPE, {})] * 300)]
    now_ms = time.time_ns() // 1_000_000
    for run_id in batch:
        parsed = uuid.UUID(run_id)
        assert (parsed.version, parsed.variant, str(parsed)) == (7, uuid.RFC_4122, run_id)
        assert now_ms - 60_000 < parsed.int >> 80 <= now_ms
    assert len(set(batch)) == 300


def test_start_without_payload_stores_an_empty_object(producer: Producer) -> None:
    run = producer.start(TYPE)
    assert run.payload == {}
    assert producer.get(run.id).payload == {}


@pytest.mark.parametrize(
    "payload",
    [
        {"name": "Zoë", "greeting": "こんにちは", "emoji": "😀🎉", "rtl": "שלום"},
        {"matrix": [[1, 2], [3, [4, [5, []]]]], "empty": {}, "none": None},
        ["a", 1, 2.5, True, False, None, {"k": "v"}],
        {"big": 2**62, "negative": -17, "float": 0.1, "small": 1.5e-7, "pi": 3.14159},
        {"backslash": "C:\\temp\\new", "quote": 'say "hi"', "escape": "\\u0000 is text"},
        "a bare string",
        42,
    ],
    ids=["unicode", "nested", "list", "numbers", "escapes", "string", "int"],
)
def test_payload_round_trips(producer: Producer, payload: Any) -> None:
    run = producer.start(TYPE, payload)
    assert run.payload == payload
    assert producer.get(run.id).payload == payload


def test_large_floats_come_back_as_the_same_floats(producer: Producer) -> None:
    """Postgres jsonb read 1e+16 back as an int and 1e+300 as another number (found by
    tests/test_properties_start.py); floats are written out in full, which both keep."""
    payload = {"f": [1e16, -2.5e20, 1e300, 1.7976931348623157e308], "text": "1e+16"}
    for run in (producer.start(TYPE, payload), producer.start_many([(TYPE, payload)])[0]):
        got = producer.get(run.id).payload
        assert got == payload
        assert [type(number) for number in got["f"]] == [float] * 4


@dataclasses.dataclass
class Thumbnail:
    content_id: str
    sizes: list[int]
    when: datetime | None = None


class Invoice(pydantic.BaseModel):
    number: int
    lines: list[str]
    due: datetime


def test_dataclass_and_pydantic_payloads_are_stored_as_plain_json(producer: Producer) -> None:
    from_dataclass = producer.start(TYPE, Thumbnail("c_1", [64, 128]))
    assert producer.get(from_dataclass.id).payload == {
        "content_id": "c_1",
        "sizes": [64, 128],
        "when": None,
    }

    due = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    from_model = producer.start("billing.invoice.v1", Invoice(number=7, lines=["a"], due=due))
    assert producer.get(from_model.id).payload == {
        "number": 7,
        "lines": ["a"],
        "due": "2030-01-02T03:04:05Z",
    }

    nested = producer.start(TYPE, {"items": [Thumbnail("c_2", [1])], "count": 1})
    assert producer.get(nested.id).payload == {
        "items": [{"content_id": "c_2", "sizes": [1], "when": None}],
        "count": 1,
    }


def test_start_writes_one_created_event_with_the_row(store: Store, producer: Producer) -> None:
    run = producer.start(TYPE, {"x": 1}, priority=7)
    events = producer.events(run.id)
    assert [e.event_type for e in events] == ["created"]
    created = events[0]
    assert created.workflow_id == run.id
    assert created.data["type"] == TYPE
    assert created.data["priority"] == 7
    assert abs(created.created_at - run.created_at) < timedelta(seconds=1)
    assert store.count("workflow_event") == 1


def test_priority_and_max_attempts_are_stored(producer: Producer) -> None:
    run = producer.start(TYPE, priority=-5, max_attempts=10)
    stored = producer.get(run.id)
    assert (stored.priority, stored.max_attempts) == (-5, 10)


@pytest.mark.parametrize(
    ("delay", "seconds"),
    [(30, 30), (2.5, 2.5), ("1h30m", 5400), (timedelta(days=2), 172800), ("250ms", 0.25)],
)
def test_delay_sets_run_at_from_the_database_clock(
    producer: Producer, delay: Any, seconds: float
) -> None:
    run = producer.start(TYPE, delay=delay)
    gap = (run.run_at - run.created_at).total_seconds()
    assert seconds - 2 <= gap <= seconds + 2
    assert producer.get(run.id).run_at == run.run_at


@pytest.mark.parametrize(
    "run_at",
    [
        datetime(2031, 6, 7, 8, 9, 10, tzinfo=UTC),
        datetime(2031, 6, 7, 10, 9, 10, tzinfo=timezone(timedelta(hours=2))),
        datetime(2001, 1, 1, tzinfo=UTC),  # in the past: due now
        durations.EARLIEST,
        durations.EARLIEST.astimezone(PLUS_14),
        durations.LATEST,
        durations.LATEST.astimezone(MINUS_14),
    ],
    ids=["utc", "offset", "past", "earliest", "earliest+14", "latest", "latest-14"],
)
def test_run_at_is_stored_as_the_same_instant(producer: Producer, run_at: datetime) -> None:
    run = producer.start(TYPE, run_at=run_at)
    assert run.run_at == run_at
    assert producer.get(run.id).run_at == run_at


def test_repeated_idempotency_key_returns_the_same_run(store: Store, producer: Producer) -> None:
    first = producer.start(TYPE, {"v": 1}, idempotency_key="content:c_123:thumbnail:300x300")
    again = producer.start(
        TYPE, {"v": 2}, idempotency_key="content:c_123:thumbnail:300x300", priority=1
    )
    assert again == first
    assert again.payload == {"v": 1} and again.priority == 100
    assert store.count("workflow_run") == 1
    assert [e.event_type for e in producer.events(first.id)] == ["created"]
    assert store.count("workflow_event") == 1


def test_distinct_idempotency_keys_make_distinct_runs(store: Store, producer: Producer) -> None:
    a = producer.start(TYPE, idempotency_key="a")
    b = producer.start(TYPE, idempotency_key="b")
    c = producer.start(TYPE)
    d = producer.start(TYPE)
    assert len({a.id, b.id, c.id, d.id}) == 4
    assert (a.idempotency_key, b.idempotency_key, c.idempotency_key) == ("a", "b", None)
    assert store.count("workflow_run") == 4


# -- get --------------------------------------------------------------------------------


def test_get_unknown_id_raises_run_not_found(producer: Producer) -> None:
    missing = str(uuid.uuid4())
    with pytest.raises(errors.RunNotFound) as caught:
        producer.get(missing)
    assert caught.value.run_id == missing
    assert isinstance(caught.value, LookupError)


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "", "12345", "g" * 32, 42, None])
def test_get_malformed_id_raises_run_not_found(producer: Producer, bad_id: Any) -> None:
    with pytest.raises(errors.RunNotFound):
        producer.get(bad_id)


def test_get_accepts_any_spelling_of_a_uuid(producer: Producer) -> None:
    run = producer.start(TYPE)
    assert producer.get(run.id.upper()).id == run.id
    assert producer.get(uuid.UUID(run.id)).id == run.id
    assert producer.get(run.id.replace("-", "")).id == run.id


@pytest.mark.parametrize("verb", ["events", "cancel", "delete", "wait"])
def test_other_verbs_on_unknown_runs_raise_run_not_found(producer: Producer, verb: str) -> None:
    for bad in [str(uuid.uuid4()), "nope"]:
        with pytest.raises(errors.RunNotFound):
            getattr(producer, verb)(bad)


# -- list -------------------------------------------------------------------------------


def types_listed(producer: Producer, **filters: Any) -> set[str]:
    page = producer.list(limit=1000, **filters)
    assert page.next_cursor is None
    return {run.type for run in page.runs}


PREFIX_TYPES = [
    "billing.invoice.v1",
    "billing.payment.refund.v2",
    "billings.invoice.v1",
    "bill_ing.invoice.v1",
    "billxing.invoice.v1",
    "content.thumbnail.v1",
]


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("billing.%", {"billing.invoice.v1", "billing.payment.refund.v2"}),
        ("billing.", {"billing.invoice.v1", "billing.payment.refund.v2"}),
        ("billing", {"billing.invoice.v1", "billing.payment.refund.v2"}),
        ("billing.payment.%", {"billing.payment.refund.v2"}),
        ("billing.invoice.v1", {"billing.invoice.v1"}),
        ("bill_ing.%", {"bill_ing.invoice.v1"}),  # `_` is not a wildcard
        ("bill%", {t for t in PREFIX_TYPES if t.startswith("bill")}),
        ("content.%", {"content.thumbnail.v1"}),
        ("nothing.%", set()),
        ("%", set(PREFIX_TYPES)),
    ],
)
def test_list_filters_by_type_prefix(producer: Producer, prefix: str, expected: set[str]) -> None:
    for type_ in PREFIX_TYPES:
        producer.start(type_)
    assert types_listed(producer, type_prefix=prefix) == expected


@pytest.mark.parametrize("prefix", ["Billing.%", "billing..", "bill ing", "billing.%.v1", 7])
def test_list_refuses_a_malformed_type_prefix(producer: Producer, prefix: Any) -> None:
    with pytest.raises(errors.InvalidArgument):
        producer.list(type_prefix=prefix)


def test_list_filters_by_status(store: Store, producer: Producer) -> None:
    pending, leased, done, cancelled = (producer.start(TYPE) for _ in range(4))
    set_status(store, leased.id, "leased")
    set_status(store, done.id, "succeeded")
    producer.cancel(cancelled.id)

    def ids(status: Any) -> set[str]:
        return {run.id for run in producer.list(status=status).runs}

    assert ids("pending") == {pending.id}
    assert ids(RunStatus.LEASED) == {leased.id}
    assert ids(["succeeded", "cancelled"]) == {done.id, cancelled.id}
    assert ids(("pending", RunStatus.LEASED)) == {pending.id, leased.id}
    assert ids("failed") == set()
    assert ids(None) == {pending.id, leased.id, done.id, cancelled.id}
    with pytest.raises(errors.InvalidArgument):
        producer.list(status="running")


def test_list_filters_by_creation_time(producer: Producer) -> None:
    runs = []
    for _ in range(3):
        runs.append(producer.start(TYPE))
        time.sleep(0.01)  # SQLite keeps milliseconds: make the three times distinct
    first, second, third = runs
    assert first.created_at < second.created_at < third.created_at

    def ids(**window: Any) -> list[str]:
        return [run.id for run in producer.list(**window).runs]

    assert ids(created_after=second.created_at) == [third.id, second.id]
    assert ids(created_before=second.created_at) == [first.id]
    assert ids(created_after=first.created_at, created_before=third.created_at) == [
        second.id,
        first.id,
    ]
    assert ids(created_after=third.created_at + timedelta(seconds=1)) == []
    with pytest.raises(errors.InvalidArgument):
        producer.list(created_after=datetime(2020, 1, 1))  # naive


def test_list_filters_on_payload_content_as_jsonb_containment(producer: Producer) -> None:
    """``payload_contains`` means what Postgres ``@>`` means, on both stores."""
    a = producer.start(TYPE, {"customer": "c_1", "tags": ["red", "big"], "n": 1})
    b = producer.start(TYPE, {"customer": "c_2", "tags": ["red"], "nested": {"x": 1, "y": 2}})
    c = producer.start(TYPE, ["red", 1])
    d = producer.start(TYPE, {"customer": "c_1", "n": 1.0, "flag": True})

    def ids(pattern: Any) -> set[str]:
        return {run.id for run in producer.list(payload_contains=pattern).runs}

    assert ids({"customer": "c_1"}) == {a.id, d.id}
    assert ids({"tags": ["red"]}) == {a.id, b.id}
    assert ids({"tags": ["big", "red"]}) == {a.id}  # order does not matter
    assert ids({"nested": {"x": 1}}) == {b.id}
    assert ids({"n": 1}) == {a.id, d.id}  # numbers compare as numbers
    assert ids({"flag": 1}) == set()  # true is not 1
    assert ids("red") == {c.id}  # a top-level array contains its scalar elements
    assert ids({}) == {a.id, b.id, d.id}
    assert ids(None) == {a.id, b.id, c.id, d.id}  # no filter
    assert {r.id for r in producer.list(payload_contains={"customer": "c_1"}, limit=1).runs} <= {
        a.id,
        d.id,
    }
    for bad in [{"x": float("nan")}, {"x": "nul\x00"}, {"x": "\ud800"}, {1, 2}]:
        with pytest.raises(errors.InvalidPayload):
            producer.list(payload_contains=bad)


def test_deleted_runs_are_hidden_unless_asked_for(producer: Producer) -> None:
    kept, deleted = producer.start(TYPE), producer.start(TYPE)
    assert producer.delete(deleted.id) is True
    assert producer.delete(deleted.id) is False

    assert [run.id for run in producer.list().runs] == [kept.id]
    everything = {run.id: run for run in producer.list(include_deleted=True).runs}
    assert set(everything) == {kept.id, deleted.id}
    assert everything[deleted.id].deleted_at is not None
    assert everything[kept.id].deleted_at is None
    assert producer.get(deleted.id).deleted_at is not None  # still readable by id


def walk(producer: Producer, **filters: Any) -> list[list[str]]:
    """Every page of a listing, as lists of ids."""
    pages, cursor = [], None
    while True:
        page = producer.list(cursor=cursor, **filters)
        pages.append([run.id for run in page.runs])
        cursor = page.next_cursor
        if cursor is None:
            return pages
        assert len(pages) < 100, "the cursor does not advance"


def test_cursor_pagination_walks_every_run_once_newest_first(
    store: Store, producer: Producer
) -> None:
    started = [producer.start(TYPE, {"n": n}) for n in range(23)]
    # Runs created in the same instant must still page in a stable order, so give a
    # third of them one shared time. Ties on created_at are broken by id on Postgres and
    # by insertion order on SQLite, whose clock has only millisecond precision.
    tied = [run.id for run in started[6:14]]
    marks = ", ".join("?" * len(tied))
    store.sql(
        f"update workflow_run set created_at = (select created_at from workflow_run "
        f"where id = ?) where id in ({marks})",
        tied[0],
        *tied,
    )
    stored = [(producer.get(run.id), n) for n, run in enumerate(started)]
    tie = (lambda r, n: n) if store.kind == "sqlite" else (lambda r, n: r.id)
    ordered = sorted(stored, key=lambda rn: (rn[0].created_at, tie(*rn)), reverse=True)
    newest_first = [r.id for r, _ in ordered]

    pages = walk(producer, limit=5)
    assert [len(page) for page in pages] == [5, 5, 5, 5, 3]
    assert [run_id for page in pages for run_id in page] == newest_first

    exact = walk(producer, limit=23)
    assert exact == [newest_first]  # no empty page after an exactly full one


def test_pagination_is_stable_while_runs_are_added(producer: Producer) -> None:
    before = [producer.start("billing.invoice.v1").id for _ in range(7)]
    for _ in range(3):
        producer.start(TYPE)  # filtered out

    first = producer.list(type_prefix="billing.%", limit=3)
    newcomer = producer.start("billing.invoice.v1")
    seen = [run.id for run in first.runs]
    cursor = first.next_cursor
    while cursor:
        page = producer.list(type_prefix="billing.%", limit=3, cursor=cursor)
        seen += [run.id for run in page.runs]
        cursor = page.next_cursor
    assert sorted(seen) == sorted(before)
    assert newcomer.id not in seen


@pytest.mark.parametrize(
    "arguments",
    [
        {"limit": 0},
        {"limit": 1001},
        {"limit": "10"},
        {"cursor": "garbage"},
        {"cursor": "e30"},
        # JSON nested past the parser's depth was a RecursionError, not a refusal.
        {"cursor": base64.urlsafe_b64encode(b"[" * 5000).decode()},
        {"cursor": base64.urlsafe_b64encode(b'[["2030-01-01"], "x"]').decode()},
    ],
)
def test_list_refuses_bad_paging(producer: Producer, arguments: dict[str, Any]) -> None:
    with pytest.raises(errors.InvalidArgument):
        producer.list(**arguments)


# -- cancel -----------------------------------------------------------------------------


def test_cancel_a_pending_run(store: Store, producer: Producer) -> None:
    run = producer.start(TYPE)
    assert producer.cancel(run.id, reason="customer left") is True
    cancelled = producer.get(run.id)
    assert cancelled.status is RunStatus.CANCELLED
    assert cancelled.updated_at >= run.updated_at
    events = producer.events(run.id)
    assert [e.event_type for e in events] == ["created", "cancelled"]
    assert events[1].data == {"reason": "customer left"}

    assert producer.cancel(run.id) is False
    assert [e.event_type for e in producer.events(run.id)] == ["created", "cancelled"]


def test_cancel_a_leased_run(store: Store, producer: Producer) -> None:
    run = producer.start(TYPE)
    set_status(store, run.id, "leased")
    assert producer.cancel(run.id) is True
    assert producer.get(run.id).status is RunStatus.CANCELLED
    assert producer.events(run.id)[-1].data == {}


def test_a_cancel_of_a_run_a_worker_holds_returns_after_the_worker_may_begin_a_step(
    store: Store, producer: Producer
) -> None:
    """What a worker knew from before the commit lets it begin a step for 0.2 s at most:
    the cancel returns no sooner (docs/durable.md#cancellation)."""
    run = producer.start(TYPE)
    store.sql(
        "update workflow_run set status = 'leased', leased_by = 'w', lease_token = ?, "
        "lease_until = '2999-01-01 00:00:00' where id = ?",
        str(uuid.uuid4()),
        run.id,
    )
    began = time.monotonic()
    assert producer.cancel(run.id) is True
    assert time.monotonic() - began >= HOLD_FRESH_FOR
    assert producer.get(run.id).status is RunStatus.CANCELLED


@pytest.mark.parametrize("status", ["succeeded", "failed"])
def test_cancel_a_finished_run_changes_nothing(
    store: Store, producer: Producer, status: str
) -> None:
    run = producer.start(TYPE)
    set_status(store, run.id, status)
    assert producer.cancel(run.id) is False
    assert producer.get(run.id).status == status
    # the status set by plain SQL left its event (migrations 0023, 0018); the cancel none
    assert [e.event_type for e in producer.events(run.id)] == ["created", status]


@pytest.mark.parametrize("reason", ["a\x00b", "a\udc80b", 7], ids=["nul", "surrogate", "int"])
def test_a_cancel_reason_no_store_can_hold_is_refused(
    store: Store, producer: Producer, reason: Any
) -> None:
    run = producer.start(TYPE)
    with pytest.raises(errors.InvalidArgument, match="reason"):
        producer.cancel(run.id, reason=reason)
    assert producer.get(run.id).status is RunStatus.PENDING
    assert [e.event_type for e in producer.events(run.id)] == ["created"]


# -- wait -------------------------------------------------------------------------------


def test_wait_returns_a_finished_run(producer: Producer) -> None:
    run = producer.start(TYPE)
    producer.cancel(run.id)
    waited = producer.wait(run.id, timeout=5)
    assert waited.id == run.id
    assert waited.status is RunStatus.CANCELLED


def test_wait_times_out_on_a_pending_run(producer: Producer) -> None:
    run = producer.start(TYPE)
    began = time.monotonic()
    with pytest.raises(errors.WaitTimeout) as caught:
        producer.wait(run.id, timeout=0.2)
    assert isinstance(caught.value, TimeoutError)
    assert time.monotonic() - began < 5
    assert producer.get(run.id).status is RunStatus.PENDING  # the run goes on


def test_wait_sees_a_run_finished_elsewhere(store: Store, producer: Producer) -> None:
    run = producer.start(TYPE)
    worker = threading.Timer(0.2, set_status, (store, run.id, "succeeded"))
    worker.start()
    try:
        assert producer.wait(run.id, timeout="30s").status is RunStatus.SUCCEEDED
    finally:
        worker.join()


# -- bad input: refused the same way on every store, and nothing is written -------------

NUL = "\x00"


class Opaque:
    pass


YEAR_0 = datetime(1, 1, 1, tzinfo=PLUS_14)  # 0000-12-31T10:00:00Z
YEAR_10000 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=MINUS_14)  # 10000-01-01T13:59:59Z
JUST_LATE = durations.LATEST + timedelta(seconds=1)


BAD_STARTS: list[tuple[str, dict[str, Any], type[errors.InvalidInput], str | None]] = [
    ("uppercase", {"type": "Content.Thumbnail.v1"}, errors.InvalidTypeName, "lowercase"),
    ("no-version", {"type": "content.thumbnail"}, errors.InvalidTypeName, "version"),
    ("one-segment", {"type": "a.v1"}, errors.InvalidTypeName, "'a.v1'"),
    ("bad-version", {"type": "content.thumbnail.version1"}, errors.InvalidTypeName, None),
    ("empty-type", {"type": ""}, errors.InvalidTypeName, None),
    ("space", {"type": "content. thumbnail.v1"}, errors.InvalidTypeName, None),
    ("newline", {"type": "content.thumbnail.v1\n"}, errors.InvalidTypeName, None),
    ("int-type", {"type": 7}, errors.InvalidTypeName, "string"),
    ("none-type", {"type": None}, errors.InvalidTypeName, "string"),
    ("long-type", {"type": "a" * 200 + ".b.v1"}, errors.InvalidTypeName, "limit is 200"),
    ("nan", {"payload": {"x": float("nan")}}, errors.InvalidPayload, r'payload\["x"\]'),
    ("inf", {"payload": [1, float("-inf")]}, errors.InvalidPayload, r"payload\[1\]"),
    ("bytes", {"payload": {"blob": b"\x00\x01"}}, errors.InvalidPayload, "bytes"),
    ("set", {"payload": {"tags": {"a", "b"}}}, errors.InvalidPayload, "set"),
    ("object", {"payload": {"thing": Opaque()}}, errors.InvalidPayload, "Opaque"),
    ("nul-value", {"payload": {"a": {"b": f"x{NUL}y"}}}, errors.InvalidPayload, '"b"'),
    ("nul-key", {"payload": {f"k{NUL}": 1}}, errors.InvalidPayload, "key"),
    ("nul-in-list", {"payload": ["ok", f"{NUL}"]}, errors.InvalidPayload, r"payload\[1\]"),
    ("surrogate", {"payload": {"s": "\ud800"}}, errors.InvalidPayload, "surrogate"),
    ("huge-int", {"payload": {"n": 10**5000}}, errors.InvalidPayload, "integer"),
    ("1MiB", {"payload": {"s": "x" * (1024 * 1024)}}, errors.PayloadTooLarge, "limit"),
    ("priority-str", {"priority": "1"}, errors.InvalidArgument, "priority"),
    ("priority-float", {"priority": 1.5}, errors.InvalidArgument, "priority"),
    ("priority-bool", {"priority": True}, errors.InvalidArgument, "priority"),
    ("priority-int8", {"priority": 2**31}, errors.InvalidArgument, "priority"),
    ("attempts-0", {"max_attempts": 0}, errors.InvalidArgument, "max_attempts"),
    ("attempts-neg", {"max_attempts": -3}, errors.InvalidArgument, "max_attempts"),
    ("attempts-str", {"max_attempts": "3"}, errors.InvalidArgument, "max_attempts"),
    ("key-empty", {"idempotency_key": ""}, errors.InvalidArgument, "idempotency_key"),
    ("key-int", {"idempotency_key": 5}, errors.InvalidArgument, "idempotency_key"),
    ("key-long", {"idempotency_key": "k" * 513}, errors.InvalidArgument, "idempotency_key"),
    ("key-nul", {"idempotency_key": f"a{NUL}b"}, errors.InvalidArgument, "idempotency_key"),
    ("key-surrogate", {"idempotency_key": "a\udc80b"}, errors.InvalidArgument, "surrogate"),
    (
        "both-times",
        {"delay": 5, "run_at": datetime(2030, 1, 1, tzinfo=UTC)},
        errors.InvalidArgument,
        "either",
    ),
    ("naive-run-at", {"run_at": datetime(2030, 1, 1)}, errors.InvalidArgument, "timezone"),
    ("run-at-string", {"run_at": "2030-01-01"}, errors.InvalidArgument, "timezone"),
    ("negative-delay", {"delay": -1}, errors.InvalidArgument, "delay"),
    ("nan-delay", {"delay": float("nan")}, errors.InvalidArgument, "delay"),
    ("bad-delay", {"delay": "5 parsecs"}, errors.InvalidArgument, "delay"),
    ("endless-delay", {"delay": 1e12}, errors.InvalidArgument, "delay"),
    ("delay-999999999d", {"delay": "999999999d"}, errors.InvalidArgument, "delay.*100 years"),
    # Year 0 and year 10000 in UTC: no store could give them back (issue 24).
    ("run-at-year-0", {"run_at": YEAR_0}, errors.InvalidArgument, "run_at.*0002-01-01"),
    ("run-at-year-10000", {"run_at": YEAR_10000}, errors.InvalidArgument, "run_at.*9998-12-31"),
    ("run-at-year-1", {"run_at": datetime(1, 6, 1, tzinfo=UTC)}, errors.InvalidArgument, "run_at"),
    ("run-at-just-late", {"run_at": JUST_LATE}, errors.InvalidArgument, "run_at"),
    ("deadline-year-0", {"deadline": YEAR_0}, errors.InvalidArgument, "deadline.*0002-01-01"),
    ("deadline-year-10000", {"deadline": YEAR_10000}, errors.InvalidArgument, "deadline"),
    ("deadline-999999999d", {"deadline": "999999999d"}, errors.InvalidArgument, "deadline"),
    ("deadline-1e300", {"deadline": 1e300}, errors.InvalidArgument, "deadline.*100 years"),
    ("deadline-huge-int", {"deadline": 10**400}, errors.InvalidArgument, "deadline"),
    (
        "debounce-999999999d",
        {"debounce": ("k", "999999999d")},
        errors.InvalidArgument,
        "debounce window.*100 years",
    ),
    (
        "max-wait-999999999d",
        {"debounce": {"key": "k", "window": "1s", "max_wait": "999999999d"}},
        errors.InvalidArgument,
        "debounce max_wait",
    ),
    ("retention-999999999d", {"retention": "999999999d"}, errors.InvalidArgument, "retention"),
]


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [case[1:] for case in BAD_STARTS],
    ids=[case[0] for case in BAD_STARTS],
)
def test_bad_start_is_refused_and_stores_nothing(
    store: Store,
    producer: Producer,
    arguments: dict[str, Any],
    error: type[errors.InvalidInput],
    message: str | None,
) -> None:
    call: dict[str, Any] = {"type": TYPE, "payload": {}, **arguments}
    with pytest.raises(error, match=message) as caught:
        producer.start(call.pop("type"), call.pop("payload"), **call)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, errors.SimpleWorkflowError)
    assert store.count("workflow_run") == 0
    assert store.count("workflow_event") == 0


def test_an_unknown_start_option_is_refused_and_stores_nothing(
    store: Store, producer: Producer
) -> None:
    """A misspelt option fails as a misspelt keyword would, in ``start`` and in
    ``start_many``'s dicts alike, rather than being ignored."""
    with pytest.raises(
        TypeError, match=r"'prority'.* the options are concurrency_key, deadline, debounce, delay"
    ):
        producer.start(TYPE, {}, prority=5)
    with pytest.raises(TypeError, match="'prority'"):
        producer.start_many([(TYPE, {}), {"type": TYPE, "prority": 5}])
    with pytest.raises(TypeError, match="'type'"):
        producer.start_many([{"payload": {}}])
    assert store.count("workflow_run") == 0


def test_payload_limit_is_configurable(store: Store, make_producer: Callable[..., Any]) -> None:
    small = make_producer(max_payload_bytes=100)
    exactly = {"s": "x" * (100 - len('{"s":""}'))}  # 100 bytes of compact JSON
    small.start(TYPE, exactly)
    with pytest.raises(errors.PayloadTooLarge, match="101 bytes"):
        small.start(TYPE, {"s": exactly["s"] + "x"})
    with pytest.raises(errors.PayloadTooLarge):
        small.start(TYPE, {"s": "é" * 20})  # 20 characters, 120 bytes of JSON
    assert store.count("workflow_run") == 1

    roomy = make_producer(max_payload_bytes=4 * 1024 * 1024)
    roomy.start(TYPE, {"s": "x" * (2 * 1024 * 1024)})
    assert store.count("workflow_run") == 2


def test_default_limit_lets_a_payload_just_under_1mib_through(producer: Producer) -> None:
    text = "x" * (1024 * 1024 - len('{"s":""}'))
    run = producer.start(TYPE, {"s": text})
    assert producer.get(run.id).payload == {"s": text}


# -- start_many and deadlines ---------------------------------------------------------


def test_start_many_starts_runs_in_order_with_one_created_event_each(
    store: Store, producer: Producer
) -> None:
    existing = producer.start(TYPE, {"n": -1}, idempotency_key="taken")
    runs = producer.start_many(
        [
            (TYPE, {"n": 0}),
            {"type": TYPE, "payload": {"n": 1}, "priority": 5, "delay": 60},
            {"type": TYPE, "payload": {"n": 2}, "idempotency_key": "fresh"},
            {"type": TYPE, "payload": {"n": 3}, "idempotency_key": "fresh"},
            {"type": TYPE, "payload": {"n": 4}, "idempotency_key": "taken"},
        ]
    )
    assert [run.payload for run in runs] == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 2}, {"n": -1}]
    assert runs[1].priority == 5 and runs[1].run_at - runs[1].created_at >= timedelta(seconds=59)
    assert runs[2].id == runs[3].id and runs[4].id == existing.id
    assert store.count() == 4  # existing + three new rows
    for run in runs:
        assert [e.event_type for e in producer.events(run.id)] == ["created"]


def test_the_runs_start_and_start_many_return_are_the_runs_read_back(
    store: Store, client: Client, producer: Producer
) -> None:
    """What a start returns is built from the request and the few values the store sends
    back, not read: every field must still be what a read finds, and the run frozen."""
    client.admin.set_runtime(TYPE, "python")
    client.admin.set_retention(TYPE, "7d")
    requests: list[Any] = [
        (TYPE, {"n": 0}),
        (TYPE, None),
        {
            "type": TYPE,
            "payload": [1, "two"],
            "priority": 7,
            "run_at": datetime(2031, 1, 1, tzinfo=UTC),
        },
        {"type": TYPE, "idempotency_key": "k", "max_attempts": 9, "deadline": "1h"},
        {"type": TYPE, "concurrency_key": "c", "retention": "2d", "delay": 30},
    ]
    runs = [*producer.start_many(requests), producer.start(TYPE, {"one": True}, priority=3)]
    for run in runs:
        assert run.created is True
        assert run == producer.get(run.id)
        assert dataclasses.asdict(run) == dataclasses.asdict(producer.get(run.id)) | {
            "created": True
        }
        with pytest.raises(dataclasses.FrozenInstanceError):
            run.priority = 1  # type: ignore[misc]
    assert [run.payload for run in runs] == [{"n": 0}, {}, [1, "two"], {}, {}, {"one": True}]
    assert runs[0].retention == timedelta(days=7) and runs[4].retention == timedelta(days=2)


def test_start_many_refuses_a_bad_request_and_stores_nothing(
    store: Store, producer: Producer
) -> None:
    with pytest.raises(errors.InvalidTypeName):
        producer.start_many([(TYPE, {}), ("Not A Type", {})])
    with pytest.raises(errors.InvalidArgument):
        producer.start_many([])
    with pytest.raises(errors.InvalidArgument):
        producer.start_many(["content.thumbnail.v1"])
    # A large batch is written in chunks, checked as they go: a bad request far down
    # rolls back the chunks already written.
    batch: list[Any] = [(TYPE, {"n": n}) for n in range(1000)]
    batch[900] = (TYPE, {"bad": float("nan")})
    with pytest.raises(errors.InvalidPayload, match=r'payload\["bad"\] is NaN'):
        producer.start_many(batch)
    for bad in ({"run_at": YEAR_0}, {"deadline": YEAR_10000}, {"deadline": "999999999d"}):
        with pytest.raises(errors.InvalidArgument, match=r"run_at|deadline"):
            producer.start_many([(TYPE, {}), {"type": TYPE, **bad}])
    assert store.count() == 0
    assert store.count("workflow_event") == 0
    assert len(producer.start_many(batch[:300])) == 300  # the connection is fine after it


def test_a_large_start_many_keeps_order_and_idempotency_across_chunks(
    store: Store, producer: Producer
) -> None:
    taken = producer.start(TYPE, {"n": -1}, idempotency_key="k-700")
    batch: list[Any] = [
        {"type": TYPE, "payload": {"n": n}, "idempotency_key": f"k-{n % 600}"} for n in range(1000)
    ]
    batch[700]["idempotency_key"] = "k-700"
    runs = producer.start_many(batch)
    assert [run.payload["n"] for run in runs[:600]] == list(range(600))
    assert [run.id for run in runs[600:]] == [
        taken.id if n == 700 else runs[n % 600].id for n in range(600, 1000)
    ]
    assert store.count() == 601


def test_deadline_is_stored_from_a_duration_or_a_datetime(producer: Producer) -> None:
    relative = producer.start(TYPE, deadline="1h")
    assert relative.deadline is not None
    assert abs((relative.deadline - relative.created_at) - timedelta(hours=1)) < timedelta(
        seconds=2
    )
    when = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert producer.start(TYPE, deadline=when).deadline == when
    with pytest.raises(errors.InvalidArgument):
        producer.start(TYPE, deadline=datetime(2031, 1, 2))  # naive
