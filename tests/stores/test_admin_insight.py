"""The admin verbs the dashboard reads, on both stores: outcomes per minute, the workers
seen through their leases, a run's children."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from conftest import Store, poller_thread

from simpleworkflow import App, Client, errors
from simpleworkflow.retry import RetryPolicy


def sql_time(store: Store, moment: datetime) -> str:
    if store.kind == "sqlite":
        return moment.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "milliseconds")
    return moment.isoformat()


def test_throughput_counts_runs_that_finished_and_attempts_that_failed_by_minute(
    store: Store, client: Client
) -> None:
    app = App(
        store.url, schema=store.schema, retry=RetryPolicy(backoff="fixed", base=0.05, jitter=0)
    )

    @app.workflow("insight.ok.v1")
    def ok(payload: dict[str, int]) -> int:
        return payload["n"]

    @app.workflow("insight.bad.v1")
    def bad(payload: dict[str, int]) -> int:
        raise ValueError("no")

    ids = [client.start("insight.ok.v1", {"n": n}).id for n in range(3)]
    ids += [client.start("insight.bad.v1", {"n": n}, max_attempts=2).id for n in range(2)]
    with poller_thread(app):
        for run_id in ids:
            client.wait(run_id, timeout=30)

    minutes = client.admin.throughput(60)
    assert len(minutes) == 60
    assert [m.start for m in minutes] == sorted(m.start for m in minutes)
    assert all(b.start - a.start == timedelta(minutes=1) for a, b in itertools.pairwise(minutes))
    assert sum(m.succeeded for m in minutes) == 3
    assert sum(m.failed for m in minutes) == 2
    assert sum(m.retried for m in minutes) == 2  # each bad run failed once, then for good
    # The window is the database's: an event an hour old is out of it.
    old = sql_time(store, datetime.now(UTC) - timedelta(minutes=90))
    store.sql("update workflow_event set created_at = ? where event_type = 'failed'", old)
    assert sum(m.failed for m in client.admin.throughput(60)) == 0
    assert sum(m.failed for m in client.admin.throughput(120)) == 2
    with pytest.raises(errors.InvalidArgument, match="minutes"):
        client.admin.throughput(0)


def test_workers_are_seen_through_the_leases_they_hold(store: Store, client: Client) -> None:
    assert client.admin.workers() == []
    runs = [client.start(t).id for t in ("a.one.v1", "a.one.v1", "a.two.v1", "a.one.v1")]
    soon = sql_time(store, datetime.now(UTC) + timedelta(seconds=30))
    past = sql_time(store, datetime.now(UTC) - timedelta(seconds=5))
    for run_id, holder, until in zip(
        runs, ("w1", "w1", "w1", "w2"), (soon, soon, soon, past), strict=True
    ):
        store.sql(
            "update workflow_run set status = 'leased', leased_by = ?, lease_until = ? "
            "where id = ?",
            holder,
            until,
            run_id,
        )
    workers = client.admin.workers()
    assert [w.worker_id for w in workers] == ["w1", "w2"]
    first, second = workers
    assert dict(first.runs) == {"a.one.v1": 2, "a.two.v1": 1} and first.held == 3
    assert first.expired == 0 and second.expired == 1 and dict(second.runs) == {"a.one.v1": 1}
    assert first.next_expiry > datetime.now(UTC) > second.next_expiry
    assert first.to_dict()["held"] == 3


def test_children_are_listed_oldest_first(store: Store, client: Client) -> None:
    parent = client.start("family.parent.v1").id
    kids = [client.start("family.child.v1", {"k": k}).id for k in range(3)]
    client.start("family.child.v1")  # not a child
    for kid in kids:
        store.sql("update workflow_run set parent_id = ? where id = ?", parent, kid)
    children = client.admin.children(parent)
    assert sorted(run.id for run in children) == sorted(kids)
    # Oldest first; runs started in the same millisecond, by id.
    assert children == sorted(children, key=lambda run: (run.created_at, run.id))
    assert client.admin.children(parent, limit=2) == children[:2]
    assert client.admin.children(kids[0]) == []
    with pytest.raises(errors.RunNotFound):
        client.admin.children("00000000-0000-7000-8000-000000000000")
