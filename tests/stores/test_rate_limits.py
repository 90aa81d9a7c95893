"""Rate limits (docs/flow-control.md), on both stores: runs over a limit stay pending, due
when the next window opens, with a throttled event; per key; bad input."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from conftest import Store

from simpleworkflow import Client, errors
from simpleworkflow.backends import Backend
from simpleworkflow.backends.records import Claim, Lease

TYPE = "rates.task.v1"


@pytest.fixture
def rated(client: Client) -> Client:
    client.admin.set_runtime(TYPE, "python")
    return client


def claim(backend: Backend, limit: int = 100) -> list[Lease]:
    return backend.execute(backend.claim(Claim("w", (TYPE,), limit, lease_seconds=30)))


def test_runs_over_the_limit_wait_for_the_next_window(backend: Backend, rated: Client) -> None:
    limit = rated.admin.set_rate_limit("partner-api", "3/h")
    assert (limit.name, limit.max_runs, limit.period, limit.per_key) == (
        "partner-api",
        3,
        3600,
        False,
    )
    assert rated.admin.limit_rate(TYPE, "partner-api").rate_limit == "partner-api"
    runs = rated.start_many([(TYPE, {"n": n}) for n in range(5)])
    claimed = {lease.run.id for lease in claim(backend)}
    assert len(claimed) == 3
    assert claim(backend) == []  # the others are not due: nothing is claimed and given back
    next_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    next_hour += timedelta(hours=1)
    for run in runs:
        if run.id in claimed:
            continue
        waiting = rated.get(run.id)
        assert waiting.status.value == "pending" and waiting.attempt == 0
        assert abs((waiting.run_at - next_hour).total_seconds()) < 0.01
        [throttled] = [e for e in rated.events(run.id) if e.event_type == "throttled"]
        assert throttled.data["rate_limit"] == "partner-api"


def test_a_window_that_passed_lets_runs_through_again(backend: Backend, rated: Client) -> None:
    rated.admin.set_rate_limit("quick", "2/0.3s")
    rated.admin.limit_rate(TYPE, "quick")
    rated.start_many([(TYPE, {})] * 5)
    assert len(claim(backend)) == 2
    seen = 2
    deadline = time.monotonic() + 10
    while seen < 5 and time.monotonic() < deadline:
        got = claim(backend)
        assert len(got) <= 2
        seen += len(got)
        time.sleep(0.05)
    assert seen == 5


def test_a_limit_per_key_counts_each_key_apart(backend: Backend, rated: Client) -> None:
    rated.admin.set_rate_limit("per-customer", "1/h", per_key=True)
    rated.admin.limit_rate(TYPE, "per-customer")
    rated.start_many(
        [{"type": TYPE, "concurrency_key": k} for k in "aab"] + [(TYPE, {}), (TYPE, {})]
    )
    got = Counter(lease.run.concurrency_key for lease in claim(backend))
    assert got == {"a": 1, "b": 1, None: 1}  # runs without a key share one window


def test_runs_held_back_by_a_concurrency_limit_take_no_token(
    backend: Backend, rated: Client
) -> None:
    rated.admin.set_concurrency(TYPE, 1)
    rated.admin.set_rate_limit("partner-api", "5/h")
    rated.admin.limit_rate(TYPE, "partner-api")
    runs = rated.start_many([(TYPE, {})] * 3)
    assert len(claim(backend)) == 1
    assert all(not any(e.event_type == "throttled" for e in rated.events(r.id)) for r in runs)


def test_a_deleted_limit_throttles_no_more(backend: Backend, rated: Client) -> None:
    rated.admin.set_rate_limit("partner-api", "1/h")
    rated.admin.limit_rate(TYPE, "partner-api")
    assert [limit.name for limit in rated.admin.rate_limits()] == ["partner-api"]
    assert rated.admin.delete_rate_limit("partner-api") is True
    assert rated.admin.delete_rate_limit("partner-api") is False
    rated.start_many([(TYPE, {})] * 3)
    assert len(claim(backend)) == 3


def test_changing_a_limit_keeps_its_name(rated: Client) -> None:
    rated.admin.set_rate_limit("partner-api", "1/h")
    changed = rated.admin.set_rate_limit("partner-api", (20, "1m"), per_key=True)
    assert (changed.max_runs, changed.period, changed.per_key) == (20, 60, True)
    assert rated.admin.limit_rate(TYPE, None).rate_limit is None


@pytest.mark.parametrize(
    ("rate", "message"),
    [
        ("10", "a rate is 'N/period'"),
        ("0/s", "lets 1 to"),
        ("ten/s", "a rate is 'N/period'"),
        ("10/fortnight", "cannot read the rate's period"),
        ("10/0s", "period must be from 1ms"),
        ((True, "1s"), "lets 1 to"),
        (10, "a rate is 'N/period'"),
    ],
)
def test_a_bad_rate_is_refused(rated: Client, rate: object, message: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=message):
        rated.admin.set_rate_limit("partner-api", rate)  # type: ignore[arg-type]
    assert rated.admin.rate_limits() == []


@pytest.mark.parametrize("name", ["", "Partner", "a b", "x" * 101, 7])
def test_a_bad_name_is_refused(rated: Client, name: object) -> None:
    with pytest.raises(errors.InvalidArgument, match="a rate limit's name must be"):
        rated.admin.set_rate_limit(name, "1/s")  # type: ignore[arg-type]


def test_a_type_cannot_name_a_limit_that_does_not_exist(rated: Client) -> None:
    with pytest.raises(errors.InvalidArgument, match="no rate limit named 'nope'"):
        rated.admin.limit_rate(TYPE, "nope")
    rated.admin.set_rate_limit("real", "1/s")
    with pytest.raises(errors.TypeNotRegistered):
        rated.admin.limit_rate("not.registered.v1", "real")


def test_per_key_must_be_a_bool(rated: Client) -> None:
    with pytest.raises(errors.InvalidArgument, match="per_key must be True or False"):
        rated.admin.set_rate_limit("partner-api", "1/s", per_key="yes")  # type: ignore[arg-type]


def test_a_throttled_run_shows_as_throttled_until_claimed(
    store: Store, backend: Backend, rated: Client
) -> None:
    rated.admin.set_rate_limit("partner-api", "1/h")
    rated.admin.limit_rate(TYPE, "partner-api")
    runs = rated.start_many([(TYPE, {"n": n}) for n in range(3)])
    [first] = claim(backend)
    waiting = [rated.get(run.id) for run in runs if run.id != first.run.id]
    for run in waiting:
        assert run.status.value == "pending"
        assert run.waiting_states == ["throttled"]
        assert run.waiting_for["kind"] == "throttle"
        assert run.waiting_for["rate_limit"] == "partner-api"
        assert run.attempts_made == 0  # a rate limit held back its start
    listed = rated.list(status="throttled").runs
    assert {run.id for run in listed} == {run.id for run in waiting}
    [stats] = [s for s in rated.admin.stats() if s.type == TYPE]
    assert (stats.counts["throttled"], stats.counts["pending"]) == (2, 2)
    # its window opens: claimed, it is throttled no more, and it resumed nothing
    rated.admin.set_rate_limit("partner-api", "10/s")
    store.sql("update workflow_run set run_at = created_at where status = 'pending'")
    assert len(claim(backend)) == 2
    assert rated.list(status="throttled").runs == []
    for run in waiting:
        assert "resumed" not in [e.event_type for e in rated.events(run.id)]


def test_a_run_throttled_on_its_way_back_from_a_sleep_still_resumes_it(
    store: Store, backend: Backend, rated: Client
) -> None:
    rated.admin.set_rate_limit("partner-api", "1/h")
    rated.admin.limit_rate(TYPE, "partner-api")
    blocker, sleeper = rated.start_many([(TYPE, {}), (TYPE, {})])
    nap = '{"kind": "sleep", "step": "nap", "until": "2026-01-01T00:00:00+00:00"}'
    store.sql("update workflow_run set waiting_for = ?, attempt = 0 where id = ?", nap, sleeper.id)
    store.sql("update workflow_run set priority = 1 where id = ?", blocker.id)
    assert [lease.run.id for lease in claim(backend)] == [blocker.id]
    throttled = rated.get(sleeper.id)
    assert throttled.waiting_states == ["throttled"]
    assert throttled.waiting_for["resumes"]["kind"] == "sleep"
    assert throttled.attempts_made == 1  # the attempt that slept goes on
    rated.admin.set_rate_limit("partner-api", "10/s")
    store.sql("update workflow_run set run_at = created_at where id = ?", sleeper.id)
    [lease] = claim(backend)
    assert lease.was_waiting_for["kind"] == "sleep"
    [resumed] = [e for e in rated.events(sleeper.id) if e.event_type == "resumed"]
    assert resumed.data["step"] == "nap"
