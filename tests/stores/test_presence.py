"""Worker presence, on both stores: a worker records itself while it runs, idle or not;
the admin lists live and recently gone workers with the runs each holds; gone rows are
deleted by the sweep and by a purge."""

from __future__ import annotations

import os
import socket
import time
from datetime import UTC, datetime, timedelta

import pytest
from conftest import Store, poller_thread

from simpleworkflow import App, Client, errors
from simpleworkflow.backends.presence_ops import FORGET_AFTER, Presence


def sql_time(store: Store, moment: datetime) -> str:
    if store.kind == "sqlite":
        return moment.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "milliseconds")
    return moment.isoformat()


def seen(client: Client, worker_id: str, **fields: object) -> None:
    """Record a worker's presence as its service does, live for 30 s."""
    presence = Presence(
        worker_id=worker_id,
        host=str(fields.get("host", "h1")),
        pid=int(str(fields.get("pid", 1))),
        runtime="python",
        type_prefixes=("a.%",),
        concurrency=4,
        version="9.9",
    )
    backend = client.backend
    backend.execute(backend.worker_seen(presence, 30, starting=True))


def test_an_idle_worker_is_listed_while_it_runs_and_as_stopped_after(
    store: Store, client: Client
) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow("presence.idle.v1")
    def idle(payload: dict[str, int]) -> int:
        return 0

    with poller_thread(app, type_prefixes=["presence.%"], worker_id="idle-1", concurrency=3):
        deadline = time.monotonic() + 10
        while not (workers := client.admin.workers()) and time.monotonic() < deadline:
            time.sleep(0.05)
        [worker] = workers
        assert (worker.worker_id, worker.state, worker.held) == ("idle-1", "live", 0)
        assert (worker.host, worker.pid) == (socket.gethostname(), os.getpid())
        assert worker.type_prefixes == ("presence.%",) and worker.concurrency == 3
        assert worker.runtime == "python" and worker.version is not None
        assert worker.stopped_at is None and worker.next_expiry is None
    [worker] = client.admin.workers()
    assert worker.state == "stopped" and worker.stopped_at is not None
    assert worker.to_dict()["state"] == "stopped"
    assert client.admin.workers(gone_within=0) == []


def test_workers_are_live_stopped_or_gone_and_show_the_runs_they_hold(
    store: Store, client: Client
) -> None:
    seen(client, "w-live")
    seen(client, "w-stopped")
    seen(client, "w-gone")
    seen(client, "w-old")
    backend = client.backend
    backend.execute(backend.worker_stopped("w-stopped", 1))
    backend.execute(backend.worker_stopped("w-live", 2))  # another process: not this one
    now = datetime.now(UTC)
    for worker_id, ago in (("w-gone", 60), ("w-old", 7200)):
        store.sql(
            "update workflow_worker set seen_until = ? where worker_id = ?",
            sql_time(store, now - timedelta(seconds=ago)),
            worker_id,
        )
    run = client.start("a.one.v1").id
    store.sql(
        "update workflow_run set status = 'leased', leased_by = 'w-live', lease_until = ? "
        "where id = ?",
        sql_time(store, now + timedelta(seconds=30)),
        run,
    )
    workers = {w.worker_id: w for w in client.admin.workers()}
    assert {k: w.state for k, w in workers.items()} == {
        "w-live": "live",
        "w-stopped": "stopped",
        "w-gone": "gone",
    }
    live = workers["w-live"]
    assert dict(live.runs) == {"a.one.v1": 1} and live.next_expiry is not None
    assert live.host == "h1" and live.type_prefixes == ("a.%",) and live.version == "9.9"
    assert workers["w-stopped"].held == 0 and workers["w-stopped"].next_expiry is None
    assert "w-old" in {w.worker_id for w in client.admin.workers(gone_within="3h")}
    assert [w.worker_id for w in client.admin.workers(gone_within=0)] == ["w-live"]
    with pytest.raises(errors.InvalidArgument, match="gone_within"):
        client.admin.workers(gone_within=-1)
    # A worker restarted under the same id is live again, from a new start.
    before = workers["w-stopped"].started_at
    seen(client, "w-stopped", pid=7)
    again = {w.worker_id: w for w in client.admin.workers()}["w-stopped"]
    assert again.state == "live" and again.pid == 7 and again.stopped_at is None
    assert again.started_at is not None and before is not None and again.started_at >= before


def test_gone_workers_are_deleted_by_the_sweep_and_by_a_purge(store: Store, client: Client) -> None:
    for worker_id in ("kept", "swept", "purged"):
        seen(client, worker_id)
    now = datetime.now(UTC)
    for worker_id, ago in (("swept", FORGET_AFTER + 60), ("purged", 3600)):
        store.sql(
            "update workflow_worker set seen_until = ? where worker_id = ?",
            sql_time(store, now - timedelta(seconds=ago)),
            worker_id,
        )
    client.admin.sweep()
    assert sorted(r[0] for r in store.sql("select worker_id from workflow_worker")) == [
        "kept",
        "purged",
    ]
    client.admin.purge("30m", type="some.type.v1")  # a purge of one type keeps workers
    assert len(store.sql("select worker_id from workflow_worker")) == 2
    client.admin.purge("30m")
    assert [r[0] for r in store.sql("select worker_id from workflow_worker")] == ["kept"]
