"""Concurrency limits (docs/flow-control.md), on both stores: per type, per key, both; the
claim steps over full keys; every way a lease ends gives its slot back; bad input."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
from conftest import Store, poller_thread
from test_claim_plan import claim_params
from worker_app import wait_until

from simpleworkflow import App, Client, errors
from simpleworkflow.backends import Backend
from simpleworkflow.backends.records import (
    Claim,
    Claimed,
    Failure,
    Lease,
    Outcomes,
    Release,
    Success,
    Suspension,
)

TYPE = "limits.task.v1"
OTHER = "limits.other.v1"


@pytest.fixture
def limited(client: Client) -> Client:
    client.admin.set_runtime(TYPE, "python")
    return client


def claim(backend: Backend, limit: int = 100, types: tuple[str, ...] = (TYPE,)) -> list[Lease]:
    return backend.execute(backend.claim(Claim("w", types, limit, lease_seconds=30)))


def keys(leases: list[Lease]) -> Counter[str | None]:
    return Counter(lease.run.concurrency_key for lease in leases)


def counters(store: Store) -> dict[tuple[str, str], int]:
    """The stored counters, which must always equal the leased runs they count."""
    if store.kind == "postgres":  # two rows per counter there: held = taken - returned
        rows = store.sql(
            "select s.workflow_name, s.concurrency_key, s.taken - d.returned "
            "from workflow_concurrency s join workflow_concurrency_returned d "
            "using (workflow_name, concurrency_key)"
        )
    else:
        rows = store.sql("select workflow_name, concurrency_key, held from workflow_concurrency")
    return {(name, key): held for name, key, held in rows if held}


def leased(store: Store) -> dict[tuple[str, str], int]:
    rows = store.sql("select type, concurrency_key from workflow_run where status = 'leased'")
    found: Counter[tuple[str, str]] = Counter()
    for type_name, key in rows:
        found[(type_name, "")] += 1
        if key is not None:
            found[(type_name, key)] += 1
    return dict(found)


def succeed(backend: Backend, leases: list[Lease]) -> None:
    done = [Success(lease.run.id, lease.token, "{}") for lease in leases]
    backend.execute(backend.finish(Outcomes(succeeded=done), "w"))


def test_a_type_limit_caps_its_leased_runs(store: Store, backend: Backend, limited: Client) -> None:
    limited.start_many([(TYPE, {})] * 5)
    entry = limited.admin.set_concurrency(TYPE, 2)
    assert (entry.concurrency, entry.key_concurrency) == (2, None)
    first = claim(backend)
    assert len(first) == 2 and claim(backend) == []
    succeed(backend, first[:1])
    assert len(claim(backend)) == 1
    assert counters(store) == {(TYPE, ""): 2}


def test_a_key_limit_caps_each_key_and_leaves_unkeyed_runs_alone(
    store: Store, backend: Backend, limited: Client
) -> None:
    limited.admin.set_concurrency(TYPE, None, per_key=1)
    limited.start_many(
        [{"type": TYPE, "concurrency_key": "a"}] * 3
        + [{"type": TYPE, "concurrency_key": "b"}] * 2
        + [(TYPE, {})] * 2
    )
    assert keys(claim(backend)) == {"a": 1, "b": 1, None: 2}
    assert claim(backend) == []
    assert counters(store) == {(TYPE, "a"): 1, (TYPE, "b"): 1}


def test_a_full_key_is_stepped_over_not_waited_behind(backend: Backend, limited: Client) -> None:
    """Key a's runs come first in the queue; one claim at a time still reaches key b."""
    limited.admin.set_concurrency(TYPE, None, per_key=1)
    limited.start_many([{"type": TYPE, "concurrency_key": "a", "priority": 1}] * 50)
    limited.start_many([{"type": TYPE, "concurrency_key": "b", "priority": 2}] * 2)
    assert keys(claim(backend, 1)) == {"a": 1}
    assert keys(claim(backend, 1)) == {"b": 1}
    assert claim(backend, 1) == []


def test_priorities_order_the_runs_of_a_key(backend: Backend, limited: Client) -> None:
    limited.admin.set_concurrency(TYPE, None, per_key=1)
    low = limited.start(TYPE, {}, concurrency_key="a", priority=50)
    high = limited.start(TYPE, {}, concurrency_key="a", priority=10)
    [first] = claim(backend)
    assert first.run.id == high.id
    succeed(backend, [first])
    assert [lease.run.id for lease in claim(backend)] == [low.id]


def test_type_and_key_limits_hold_together(store: Store, backend: Backend, limited: Client) -> None:
    limited.admin.set_concurrency(TYPE, 3, per_key=2)
    limited.start_many([{"type": TYPE, "concurrency_key": k} for k in "aaaabbbb"])
    first = claim(backend)
    assert len(first) == 3 and max(keys(first).values()) == 2
    assert claim(backend) == []
    assert counters(store) == leased(store)


def test_one_claim_fills_each_key_and_type_by_what_each_already_holds(
    store: Store, backend: Backend, limited: Client
) -> None:
    """Two limited types in one claim, a key already holding a lease: each key gets its
    room left, then the type its room left, in priority order."""
    limited.admin.set_runtime(OTHER, "python")
    limited.admin.set_concurrency(TYPE, 4, per_key=2)
    limited.admin.set_concurrency(OTHER, None, per_key=1)
    for key, priority, count in (("a", 1, 3), ("b", 2, 3), ("c", 3, 1)):
        limited.start_many([{"type": TYPE, "concurrency_key": key, "priority": priority}] * count)
    limited.start_many([{"type": OTHER, "concurrency_key": k} for k in "aax"])
    assert keys(claim(backend, 1)) == {"a": 1}
    got = Counter(
        (lease.run.type, lease.run.concurrency_key) for lease in claim(backend, types=(TYPE, OTHER))
    )
    # a: 1 more (2 per key); b: 2; c: none, the type's 4 are taken first by priority
    assert got == {(TYPE, "a"): 1, (TYPE, "b"): 2, (OTHER, "a"): 1, (OTHER, "x"): 1}
    expected = leased(store)
    del expected[(OTHER, "")]  # OTHER has no type limit, so no type counter
    assert counters(store) == expected


def test_a_claim_neither_waits_for_a_lease_end_in_flight_nor_counts_it_early(
    store: Store, backend: Backend, limited: Client
) -> None:
    """Postgres keeps each counter in two rows (0017): a lease end not yet committed holds
    the returned row locked; a claim does not wait for it (it never locks that row) and,
    reading returned as its snapshot saw it, still counts that lease as held."""
    if store.kind != "postgres":
        pytest.skip("two rows per counter on Postgres; SQLite serialises its writers")
    limited.admin.set_concurrency(TYPE, 5, per_key=1)
    limited.start_many([{"type": TYPE, "concurrency_key": "a"}] * 2)
    [first] = claim(backend)
    path = f'set search_path to "{store.schema}"'.encode()
    params = claim_params(TYPE)
    with psycopg.connect(store.url) as ending:
        ending.execute(path)
        ending.execute(  # the lease ends; the trigger counts it, uncommitted
            b"update workflow_run set status = 'succeeded', lease_token = null where id = %s",
            (first.run.id,),
        )
        with psycopg.connect(store.url, autocommit=True) as claiming:
            claiming.execute(path)
            claiming.execute(b"set lock_timeout = '10s'")  # were it to wait: an error, not a hang
            rows = claiming.execute(backend.q["claim"].encode(), params).fetchall()
            assert [row[0] for row in rows] == [None]  # no run, only "limited" (a row of nulls)
        ending.commit()
    [second] = claim(backend)
    assert second.run.concurrency_key == "a" and second.run.id != first.run.id
    assert counters(store) == leased(store) == {(TYPE, ""): 1, (TYPE, "a"): 1}


def test_other_types_are_not_held_back(backend: Backend, limited: Client) -> None:
    limited.admin.set_concurrency(TYPE, 1)
    limited.start_many([(TYPE, {})] * 3 + [(OTHER, {})] * 3)
    got = Counter(lease.run.type for lease in claim(backend, types=(TYPE, OTHER)))
    assert got == {TYPE: 1, OTHER: 3}


def test_every_way_a_lease_ends_gives_its_slot_back(
    store: Store, backend: Backend, limited: Client
) -> None:
    limited.admin.set_concurrency(TYPE, 10, per_key=10)
    runs = limited.start_many([{"type": TYPE, "concurrency_key": "k"}] * 7)
    lease = {item.run.id: item for item in claim(backend)}
    assert counters(store) == {(TYPE, ""): 7, (TYPE, "k"): 7}
    a, b, c, d, e, f, g = (lease[run.id] for run in runs)
    backend.execute(
        backend.finish(
            Outcomes(
                succeeded=[Success(a.run.id, a.token, "{}")],
                failed=[
                    Failure(b.run.id, b.token, final=True, delay=0, error="x", data={}),
                    Failure(c.run.id, c.token, final=False, delay=60, error="x", data={}),
                ],
                released=[Release(d.run.id, d.token, delay=60)],
                suspended=[Suspension(e.run.id, e.token, events=[], delay=60)],
            ),
            "w",
        )
    )
    assert counters(store) == leased(store) == {(TYPE, ""): 2, (TYPE, "k"): 2}
    limited.cancel(f.run.id)
    store.sql("delete from workflow_run where id = ?", g.run.id)
    assert counters(store) == leased(store) == {}


def test_lease_ends_are_counted_once_whoever_writes_them(
    store: Store, backend: Backend, limited: Client
) -> None:
    """The outcome statements count a batch's lease ends once per counter and mark the
    runs so that the trigger does not count them again (Postgres, 0020); a lease that
    another writer ends with plain SQL is still counted, even that of a run whose
    previous lease an outcome statement ended."""
    limited.admin.set_concurrency(TYPE, 100, per_key=10)
    limited.start_many(
        [{"type": TYPE, "concurrency_key": k} for k in "aabbbc"] + [{"type": TYPE}] * 2
    )
    a1, a2, b1, b2, b3, c1, n1, _still_leased = sorted(
        claim(backend), key=lambda lease: (lease.run.concurrency_key or "~", lease.run.id)
    )
    backend.execute(
        backend.finish(
            Outcomes(
                succeeded=[Success(x.run.id, x.token, "{}") for x in (a1, b1)],
                failed=[
                    Failure(x.run.id, x.token, final=False, delay=0, error="x", data={})
                    for x in (b2, c1)
                ],
                released=[Release(x.run.id, x.token, delay=0) for x in (a2, n1)],
                suspended=[Suspension(b3.run.id, b3.token, events=[], delay=0)],
            ),
            "w",
        )
    )
    assert counters(store) == leased(store) == {(TYPE, ""): 1}
    again = claim(backend)  # the five given back, due at once
    assert len(again) == 5
    assert (
        counters(store)
        == leased(store)
        == {(TYPE, ""): 6, (TYPE, "a"): 1, (TYPE, "b"): 2, (TYPE, "c"): 1}
    )
    store.sql(
        "update workflow_run set status = 'succeeded', lease_token = null where status = 'leased'"
    )
    assert counters(store) == leased(store) == {}


def test_an_expired_lease_rescued_by_the_reaper_gives_its_slot_back(
    store: Store, backend: Backend, limited: Client
) -> None:
    limited.admin.set_concurrency(TYPE, None, per_key=1)
    limited.start(TYPE, {}, concurrency_key="k")
    limited.start(TYPE, {}, concurrency_key="k")
    [held] = claim(backend)
    store.sql("update workflow_run set lease_until = created_at where id = ?", held.run.id)

    def retry(row: object) -> Failure:
        return Failure(held.run.id, held.token, final=False, delay=0, error="lost", data={})

    assert len(backend.execute(backend.reap_expired([TYPE], 10, retry))) == 1
    assert counters(store) == {}
    assert keys(claim(backend)) == {"k": 1}


def test_setting_a_limit_counts_the_leases_already_held(
    store: Store, backend: Backend, limited: Client
) -> None:
    limited.start_many([{"type": TYPE, "concurrency_key": "a"}] * 4)
    assert len(claim(backend, 3)) == 3  # no limit yet
    limited.admin.set_concurrency(TYPE, None, per_key=2)
    assert counters(store) == {(TYPE, "a"): 3}
    assert claim(backend) == []
    limited.admin.set_concurrency(TYPE, None)  # no limit again: no counters either
    assert counters(store) == {} and len(claim(backend)) == 1


def test_the_limits_are_listed_with_the_registry(limited: Client) -> None:
    limited.admin.set_concurrency(TYPE, 5, per_key=1)
    [entry] = [e for e in limited.admin.registry() if e.workflow_name == TYPE]
    assert (entry.concurrency, entry.key_concurrency) == (5, 1)


@pytest.mark.parametrize("limit", [0, -1, True, 2.5, "3", 2**31])
def test_a_bad_limit_is_refused_and_changes_nothing(limited: Client, limit: object) -> None:
    limited.admin.set_concurrency(TYPE, 4)
    with pytest.raises(errors.InvalidArgument, match="limit must be an integer from 1"):
        limited.admin.set_concurrency(TYPE, limit)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument, match="per_key must be an integer from 1"):
        limited.admin.set_concurrency(TYPE, None, per_key=limit)  # type: ignore[arg-type]
    [entry] = [e for e in limited.admin.registry() if e.workflow_name == TYPE]
    assert entry.concurrency == 4


def test_a_limit_for_a_type_not_registered_is_refused(client: Client) -> None:
    with pytest.raises(errors.TypeNotRegistered):
        client.admin.set_concurrency("not.registered.v1", 1)


@pytest.mark.parametrize("key", ["", 7, "x" * 513, "a\x00b"])
def test_a_bad_concurrency_key_is_refused(store: Store, client: Client, key: object) -> None:
    with pytest.raises(errors.InvalidArgument, match="concurrency_key must be a non-empty"):
        client.start(TYPE, {}, concurrency_key=key)  # type: ignore[arg-type]
    assert store.count() == 0


def test_a_debounced_run_keeps_the_key_of_its_first_call(backend: Backend, limited: Client) -> None:
    limited.admin.set_concurrency(TYPE, None, per_key=1)
    first = limited.start(TYPE, {"n": 1}, concurrency_key="a", debounce=("d", 0.001))
    again = limited.start(TYPE, {"n": 2}, concurrency_key="b", debounce=("d", 0.001))
    assert again.id == first.id and limited.get(first.id).concurrency_key == "a"
    time.sleep(0.05)  # the debounce window passes
    assert [lease.run.payload for lease in claim(backend)] == [{"n": 2}]


def test_runs_started_every_way_after_a_limit_is_set_are_held_by_it(
    store: Store, backend: Backend, limited: Client
) -> None:
    """The counters of new keys come with the runs, whoever inserts them (start,
    start_many, a debounced start, plain SQL), and unkeyed runs still count for their
    type's limit: each key and the type hold no more than their limits."""
    limited.admin.set_concurrency(TYPE, 4, per_key=1)
    limited.start(TYPE, {}, concurrency_key="one")
    limited.start_many([{"type": TYPE, "concurrency_key": k} for k in "bab"] + [(TYPE, {})])
    limited.start(TYPE, {}, concurrency_key="debounced", debounce=("d", 0.001))
    store.sql(
        "insert into workflow_run (id, type, payload, concurrency_key) values (?, ?, '{}', ?)",
        "0190a0a0-0000-7000-8000-000000000001",
        TYPE,
        "sql",
    )
    store.sql("insert into workflow_run (type, payload) values (?, '{}')", TYPE)
    time.sleep(0.05)  # the debounce window passes
    first = claim(backend)
    assert len(first) == 4 and max(keys(first).values()) == 1
    assert counters(store) == leased(store)
    succeed(backend, first)
    second = claim(backend)
    assert len(second) == 4 and max(keys(second).values()) == 1
    assert counters(store) == leased(store)
    assert len({lease.run.id for lease in first + second}) == 8


def test_the_key_is_kept_on_the_run(client: Client) -> None:
    run = client.start(TYPE, {}, concurrency_key="customer-7")
    assert run.concurrency_key == "customer-7"
    assert client.get(run.id).concurrency_key == "customer-7"
    assert client.get(run.id).to_dict()["concurrency_key"] == "customer-7"


def plain_claim(backend: Backend, limit: int = 100) -> Claimed:
    """A claim by a worker whose last claim found no limit (``Claim.limited``)."""
    request = Claim("w", (TYPE,), limit, lease_seconds=30, limited=False)
    return backend.execute(backend.claim_runs(request))


def test_a_claim_says_whether_its_types_have_limits(
    store: Store, backend: Backend, limited: Client
) -> None:
    """Postgres claims runs of types without limits with a plain statement; it leaves out
    a type limited since the worker's last claim, and says so."""
    if store.kind != "postgres":
        pytest.skip("SQLite has the full claim only")
    limited.start_many([{"type": TYPE, "concurrency_key": "a"}] * 4)
    claimed = plain_claim(backend, 1)
    assert claimed.limited is False and [x.counted for x in claimed.leases] == [False]
    limited.admin.set_concurrency(TYPE, None, per_key=2)
    claimed = plain_claim(backend)
    assert claimed.leases == [] and claimed.limited is True  # left to the full claim
    full = backend.execute(backend.claim_runs(Claim("w", (TYPE,), 100, lease_seconds=30)))
    assert [x.counted for x in full.leases] == [True] and full.limited is True
    limited.admin.set_concurrency(TYPE, None)
    limited.admin.set_rate_limit("partner", "100/s")
    limited.admin.limit_rate(TYPE, "partner")
    assert plain_claim(backend).leases == []  # a rate limit is a limit too
    limited.admin.limit_rate(TYPE, None)
    claimed = plain_claim(backend)
    assert len(claimed.leases) == 2 and claimed.limited is False


def test_leases_a_limit_counted_after_their_claim_are_given_back_by_any_outcome(
    store: Store, backend: Backend, limited: Client
) -> None:
    """A limit set while runs claimed without limits are leased counts them (the recount);
    their outcomes, sent as for uncounted leases, still give each slot back, once."""
    limited.start_many([{"type": TYPE, "concurrency_key": k} for k in "aabbc"])
    request = Claim("w", (TYPE,), 100, lease_seconds=30, limited=False)
    leases = backend.execute(backend.claim_runs(request)).leases
    assert len(leases) == 5
    limited.admin.set_concurrency(TYPE, 10, per_key=2)
    assert (
        counters(store)
        == leased(store)
        == {(TYPE, ""): 5, (TYPE, "a"): 2, (TYPE, "b"): 2, (TYPE, "c"): 1}
    )
    a1, a2, b1, b2, c1 = sorted(leases, key=lambda x: (x.run.concurrency_key, x.run.id))
    plain: dict[str, Any] = {"counted": False}
    backend.execute(
        backend.finish(
            Outcomes(
                succeeded=[Success(a1.run.id, a1.token, "{}", **plain)],
                failed=[
                    Failure(b1.run.id, b1.token, final=False, delay=60, error="x", data={}, **plain)
                ],
                released=[Release(c1.run.id, c1.token, delay=60, **plain)],
            ),
            "w",
        )
    )
    assert counters(store) == leased(store) == {(TYPE, ""): 2, (TYPE, "a"): 1, (TYPE, "b"): 1}
    backend.execute(
        backend.finish(
            Outcomes(succeeded=[Success(x.run.id, x.token, "{}", **plain) for x in (a2, b2)]), "w"
        )
    )
    assert counters(store) == leased(store) == {}


def test_a_limit_set_while_a_worker_drains_holds_from_then_on(
    store: Store, limited: Client
) -> None:
    """A worker claiming a type without limits (the plain claim on Postgres) while the
    limit is set: no lease that begins after the limit is set finds the limit full, and
    the counters end equal to the leases (none)."""
    app = App(store.url, schema=store.schema)

    @app.workflow(TYPE)
    async def task(payload: Any) -> None:
        await asyncio.sleep(0.005)

    runs = limited.start_many([{"type": TYPE}] * 400)
    with poller_thread(app, type_prefixes=["limits.%"], concurrency=8, poll_interval=0.2):
        wait_until(lambda: succeeded(limited) >= 40, 30, "the worker drains")
        limited.admin.set_concurrency(TYPE, 2)
        since = max(e.id for run in runs for e in limited.events(run.id))
        wait_until(lambda: succeeded(limited) == len(runs), 60, "the worker drains it all")
    intervals = [span for run in runs for span in lease_spans(limited, run.id)]
    later = [start for start, _ in intervals if start > since]
    assert later, "no lease began after the limit was set"
    for start in later:
        held = sum(1 for a, b in intervals if a <= start < b)
        assert held <= 2, f"{held} leases held when the lease at event {start} began"
    assert counters(store) == leased(store) == {}


def succeeded(client: Client) -> int:
    return client.admin.counts().get(TYPE, {}).get("succeeded", 0)


def lease_spans(client: Client, run_id: str) -> list[tuple[int, int]]:
    """``(leased event id, id of the event that ended that lease)`` for each lease."""
    spans, start = [], None
    for event in client.events(run_id):
        if event.event_type == "leased":
            start = event.id
        elif event.event_type in ("succeeded", "failed", "retried", "released") and start:
            spans.append((start, event.id))
            start = None
    return spans
