"""Schedules over HTTP on both stores: the endpoints act as ``client.schedules`` does (see
test_schedules.py for the scheduler itself)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from api_helpers import PREFIX, READ_TOKEN, TOKEN, Api, assert_problem
from conftest import Store
from pydantic import TypeAdapter

from simpleworkflow.server import schedule_schemas
from simpleworkflow.server.schemas import StartedRun
from simpleworkflow.web.auth import Auth

INVOICE = "billing.invoice.v1"
SCHEDULES = f"{PREFIX}/schedules"
NIGHTLY = f"{SCHEDULES}/billing.invoice.nightly"


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    api = Api(store)
    yield api
    api.close()


def test_create_read_pause_resume_delete(api: Api) -> None:
    body = {"type": INVOICE, "cron": "0 2 * * *", "tz": "Europe/Berlin", "payload": {"r": 1}}
    made = api.request("PUT", NIGHTLY, json=body)
    assert made.status_code == 200, made.text
    out = TypeAdapter(schedule_schemas.ScheduleOut).validate_python(made.json())
    assert (out.name, out.workflow_type, out.timezone, out.payload) == (
        "billing.invoice.nightly",
        INVOICE,
        "Europe/Berlin",
        {"r": 1},
    )
    assert out.next_tick_at is not None and not out.paused
    assert [s["name"] for s in api.get(SCHEDULES, params={"type": INVOICE}).json()] == [out.name]
    assert api.get(NIGHTLY).json() == made.json()
    assert api.post(f"{NIGHTLY}/pause").json()["paused"] is True
    assert api.post(f"{NIGHTLY}/resume").json()["paused"] is False
    changed = api.request("PUT", NIGHTLY, json={**body, "missed": "each"}).json()
    assert changed["missed"] == "each" and changed["next_tick_at"] == made.json()["next_tick_at"]
    assert api.delete(NIGHTLY).json() == {"deleted": True}
    assert api.delete(NIGHTLY).json() == {"deleted": False}
    assert_problem(api.get(NIGHTLY), 404, "no schedule named")
    assert_problem(api.post(f"{NIGHTLY}/pause"), 404, "no schedule named")


def test_bad_definitions_are_refused_and_store_nothing(store: Store, api: Api) -> None:
    for body, words in (
        ({"type": INVOICE, "cron": "0 99 * * *"}, ["Bad hour"]),
        ({"type": INVOICE, "cron": "@daily", "tz": "Nowhere/Land"}, ["unknown time zone"]),
        ({"type": INVOICE, "cron": "@daily", "payload": {"schedule": 1}}, ["cannot hold"]),
        ({"type": INVOICE, "cron": "@daily", "missed": "all"}, []),
        ({"type": INVOICE, "cron": "@daily", "colour": "red"}, []),
        ({"cron": "@daily"}, ["invalid workflow type"]),  # the name is no type
    ):
        assert_problem(api.request("PUT", NIGHTLY, json=body), 422, *words)
    assert_problem(api.request("PUT", f"{SCHEDULES}/Bad:Name", json={"cron": "@daily"}), 422)
    assert api.get(SCHEDULES).json() == []
    assert store.count("workflow_schedule") == 0


def test_trigger_starts_one_run_now_and_keeps_the_next_tick(store: Store, api: Api) -> None:
    made = api.request("PUT", NIGHTLY, json={"type": INVOICE, "cron": "0 2 * * *"}).json()
    api.post(f"{NIGHTLY}/pause")  # paused, it may still be triggered
    for _ in range(5):  # two requests within one second: a retried request
        time.sleep(1 - time.time() % 1)
        first, again = api.post(f"{NIGHTLY}/trigger"), api.post(f"{NIGHTLY}/trigger")
        if first.json()["payload"] == again.json()["payload"]:
            break
    assert first.status_code == 201, first.text
    run = TypeAdapter(StartedRun).validate_python(first.json())
    assert run.created and run.type == INVOICE and run.status == "pending"
    assert run.payload == {
        "schedule": "billing.invoice.nightly",
        "scheduled_for": run.payload["scheduled_for"],
        "triggered": True,
    }
    assert again.status_code == 200 and again.json()["id"] == run.id
    assert again.json()["created"] is False
    assert store.count("workflow_run") == 1
    after = api.get(NIGHTLY).json()
    assert after["next_tick_at"] == made["next_tick_at"] and after["paused"] is True
    assert_problem(api.post(f"{SCHEDULES}/no.such/trigger"), 404, "no schedule named")
    assert_problem(api.post(f"{SCHEDULES}/Bad:Name/trigger"), 422)
    assert store.count("workflow_run") == 1


def test_trigger_needs_the_write_token(store: Store) -> None:
    api = Api(store, auth=Auth(token=TOKEN, read_token=READ_TOKEN))
    try:
        write = {"Authorization": f"Bearer {TOKEN}"}
        body = {"type": INVOICE, "cron": "@daily"}
        assert api.request("PUT", NIGHTLY, json=body, headers=write).status_code == 200
        read = {"Authorization": f"Bearer {READ_TOKEN}"}
        assert_problem(api.post(f"{NIGHTLY}/trigger", headers=read), 403)
        assert_problem(api.post(f"{NIGHTLY}/trigger"), 401)
        assert store.count("workflow_run") == 0
        assert api.post(f"{NIGHTLY}/trigger", headers=write).status_code == 201
    finally:
        api.close()
