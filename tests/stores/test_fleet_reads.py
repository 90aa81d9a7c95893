"""The admin's fleet reads outside Python: ``simpleworkflow workers``, ``throughput`` and
``runs children`` (in-process, as tests/test_cli.py runs the others), and
``GET /api/v1/workers``, ``/throughput`` and ``/runs/{id}/children`` (over ASGI, bodies
checked against their declared models), on both stores."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from api_helpers import PREFIX, Api
from conftest import Store
from pydantic import TypeAdapter
from test_cli import run_cli

from simpleworkflow import Client
from simpleworkflow.backends.presence_ops import Presence
from simpleworkflow.server.insight import ThroughputOut, WorkersOut
from simpleworkflow.server.schemas import RunOut


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    api = Api(store)
    yield api
    api.close()


def sql_time(store: Store, moment: datetime) -> str:
    if store.kind == "sqlite":
        return moment.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "milliseconds")
    return moment.isoformat()


def fleet(store: Store, client: Client) -> str:
    """An idle worker, a busy one holding a run, and one that stopped; a parent run with
    two children, and three outcomes. Returns the parent's id."""
    backend = client.backend
    for worker_id, pid in (("idle", 21), ("busy", 22), ("done", 23)):
        me = Presence(worker_id, "host-b", pid, "python", ("fleet.%",), 2, "0.1.0")
        backend.execute(backend.worker_seen(me, 30, starting=True))
    backend.execute(backend.worker_stopped("done", 23))
    held = client.start("fleet.job.v1").id
    store.sql(
        "update workflow_run set status = 'leased', leased_by = 'busy', lease_until = ? "
        "where id = ?",
        sql_time(store, datetime.now(UTC) + timedelta(seconds=30)),
        held,
    )
    parent = client.start("fleet.parent.v1").id
    for n in range(2):
        child = client.start("fleet.child.v1", {"n": n}).id
        store.sql("update workflow_run set parent_id = ? where id = ?", parent, child)
    for event in ("succeeded", "succeeded", "failed"):
        store.sql(
            "insert into workflow_event (workflow_id, event_type) values (?, ?)", parent, event
        )
    return parent


def test_the_cli_lists_workers_throughput_and_children(
    store: Store, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = fleet(store, client)
    shown = run_cli(store, capsys, "workers")
    assert shown.code == 0, shown.err
    header, *lines = shown.out.splitlines()
    assert header.split() == [
        "WORKER",
        "STATE",
        "HOST",
        "PID",
        "CLAIMS",
        "HELD",
        "RUNS",
        "LAST",
        "SEEN",
    ]
    assert [line.split()[:2] for line in lines] == [
        ["busy", "live"],
        ["idle", "live"],
        ["done", "stopped"],
    ]
    assert lines[0].split()[5:7] == ["1/2", "fleet.job.v1:1"]
    assert lines[1].split()[5:7] == ["0/2", "idle"]
    listed = run_cli(store, capsys, "workers", "--json", "--gone-within", "0").json()
    assert [w["worker_id"] for w in listed["workers"]] == ["busy", "idle"]
    assert listed["workers"][0]["runs"] == {"fleet.job.v1": 1}
    bad = run_cli(store, capsys, "workers", "--gone-within", "soon")
    assert bad.code == 2 and "gone_within" in bad.err

    minutes = run_cli(store, capsys, "throughput", "--minutes", "5", "--json").json()["minutes"]
    assert len(minutes) == 5
    assert (minutes[-1]["succeeded"], minutes[-1]["failed"]) == (2, 1)
    text = run_cli(store, capsys, "throughput").out.splitlines()
    assert text[0].split()[:3] == ["MINUTE", "(UTC)", "SUCCEEDED"] and len(text) == 2
    assert text[1].split()[2:] == ["2", "1", "0"]
    assert run_cli(store, capsys, "throughput", "--minutes", "0").code == 2

    kids = run_cli(store, capsys, "runs", "children", parent, "--json").json()["children"]
    assert [kid["payload"] for kid in kids] == [{"n": 0}, {"n": 1}]
    assert len(run_cli(store, capsys, "runs", "children", parent).out.splitlines()) == 3
    assert "started no child" in run_cli(store, capsys, "runs", "children", kids[0]["id"]).out
    missing = run_cli(store, capsys, "runs", "children", "00000000-0000-7000-8000-000000000000")
    assert missing.code == 2


def test_the_api_serves_workers_throughput_and_children(
    store: Store, client: Client, api: Api
) -> None:
    parent = fleet(store, client)
    response = api.get(f"{PREFIX}/workers")
    assert response.status_code == 200, response.text
    body = response.json()
    TypeAdapter(WorkersOut).validate_python(body)
    states = {w["worker_id"]: (w["state"], w["held"]) for w in body["workers"]}
    assert states == {"busy": ("live", 1), "idle": ("live", 0), "done": ("stopped", 0)}
    live = api.get(f"{PREFIX}/workers", params={"gone_within": "0"}).json()
    assert [w["worker_id"] for w in live["workers"]] == ["busy", "idle"]
    assert api.get(f"{PREFIX}/workers", params={"gone_within": "-1"}).status_code == 422

    response = api.get(f"{PREFIX}/throughput", params={"minutes": 3})
    assert response.status_code == 200, response.text
    TypeAdapter(ThroughputOut).validate_python(response.json())
    minutes = response.json()["minutes"]
    assert len(minutes) == 3 and (minutes[-1]["succeeded"], minutes[-1]["failed"]) == (2, 1)
    assert api.get(f"{PREFIX}/throughput", params={"minutes": 0}).status_code == 422

    response = api.get(f"{PREFIX}/runs/{parent}/children", params={"limit": 1})
    assert response.status_code == 200, response.text
    TypeAdapter(list[RunOut]).validate_python(response.json())
    assert [kid["payload"] for kid in response.json()] == [{"n": 0}]
    unknown = api.get(f"{PREFIX}/runs/00000000-0000-7000-8000-000000000000/children")
    assert unknown.status_code == 404
