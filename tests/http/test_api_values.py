"""Values a run publishes over HTTP on both stores: listed, read by key, waited for (a
newer version than ``after``), and the problems for an unknown run, a key never set (409
at once when waited for on an ended run) and a bad key (see tests/stores/test_values.py
for the rules)."""

from __future__ import annotations

import uuid
from typing import Any

from api_helpers import PREFIX, Api, assert_problem
from conftest import Store, poller_thread
from pydantic import TypeAdapter

from simpleworkflow import App, Context
from simpleworkflow.server.values import RunValueOut

RUNS = f"{PREFIX}/runs"


def test_values_listed_read_and_waited_for(store: Store) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow("orders.stages.v1")
    async def stages(payload: Any, ctx: Context) -> Any:
        await ctx.set_value("stage", "priced")
        await ctx.wait_for_event("shipping", event="shipped")  # the first value holds till then
        await ctx.set_value("stage", {"shipped": True})
        return "done"

    api = Api(store)
    try:
        with poller_thread(app):
            run_id = api.start("orders.stages.v1")["id"]
            first = api.get(f"{RUNS}/{run_id}/values/stage", params={"wait": 20})
            assert first.status_code == 200, first.text
            TypeAdapter(RunValueOut).validate_python(first.json())
            assert (first.json()["value"], first.json()["version"]) == ("priced", 1)
            sent = api.post(f"{RUNS}/{run_id}/signals", json={"event": "shipped", "payload": {}})
            assert sent.status_code == 201, sent.text
            params = {"wait": 20, "after": first.json()["version"]}
            second = api.get(f"{RUNS}/{run_id}/values/stage", params=params)
            assert second.status_code == 200, second.text
            assert (second.json()["value"], second.json()["version"]) == ({"shipped": True}, 2)
        listed = api.get(f"{RUNS}/{run_id}/values")
        assert listed.status_code == 200, listed.text
        TypeAdapter(list[RunValueOut]).validate_python(listed.json())
        assert [(v["key"], v["value"]) for v in listed.json()] == [("stage", {"shipped": True})]

        steps = api.get(f"{RUNS}/{run_id}/steps").json()
        assert [(s["step_name"], s["kind"], s["status"]) for s in steps] == [
            ("value:stage", "value", "completed"),
            ("shipping", "wait", "completed"),
            ("value:stage#2", "value", "completed"),
        ]
        none = api.get(f"{RUNS}/{run_id}/values/other")
        assert_problem(none, 404, "has set no value 'other'")
        assert none.json()["type"].endswith("value-not-set")
        # Waiting for a value an ended run never set is answered at once: it sets none now.
        late = api.get(f"{RUNS}/{run_id}/values/stage", params={"wait": 300, "after": 2})
        assert_problem(late, 409, "ended (succeeded) without setting value 'stage' past version 2")
        assert late.json()["type"].endswith("run-finished")
        assert (late.json()["run_id"], late.json()["run_status"]) == (run_id, "succeeded")
        old = api.get(f"{RUNS}/{run_id}/values/stage", params={"after": 2})
        assert_problem(old, 404, "newer than version 2")
        assert_problem(api.get(f"{RUNS}/{run_id}/values/bad key"), 422, "invalid value key")
        assert_problem(api.get(f"{RUNS}/{uuid.uuid4()}/values"), 404, "no workflow run")
        assert_problem(api.get(f"{RUNS}/{uuid.uuid4()}/values/stage"), 404, "no workflow run")
    finally:
        api.close()
