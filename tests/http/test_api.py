"""The HTTP API's contract on both stores, through the ASGI interface: what each endpoint
answers, in the shape its OpenAPI model declares. (The same path through a real server
process: test_api_process.py; bad input: test_api_input.py; tokens: test_api_auth.py.)"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from api_helpers import PREFIX, Api, assert_problem
from conftest import Store, poller_thread
from fastapi import FastAPI
from pydantic import TypeAdapter

from simpleworkflow import App, AsyncClient, Context
from simpleworkflow.server import create_app, router, schemas

TYPE = "content.thumbnail.v1"
OTHER = "billing.invoice.v1"
RUNS = f"{PREFIX}/runs"


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    api = Api(store)
    yield api
    api.close()


def conforms(model: Any, body: Any) -> None:
    """``body`` is what the endpoint's declared response model allows."""
    TypeAdapter(model).validate_python(body)


# -- start ------------------------------------------------------------------------------


def test_start_creates_a_run_and_a_known_key_returns_it_with_200(store: Store, api: Api) -> None:
    first = api.post(RUNS, json={"type": TYPE, "payload": {"id": 1}, "idempotency_key": "k1"})
    assert first.status_code == 201
    body = first.json()
    conforms(schemas.StartedRun, body)
    assert body["type"] == TYPE and body["payload"] == {"id": 1} and body["status"] == "pending"
    assert body["created"] is True and body["attempts_made"] == 0 and body["priority"] == 100
    assert uuid.UUID(body["id"]).version == 7

    again = api.post(RUNS, json={"type": TYPE, "payload": {"id": 2}, "idempotency_key": "k1"})
    assert again.status_code == 200
    assert again.json()["id"] == body["id"] and again.json()["created"] is False
    assert again.json()["payload"] == {"id": 1}  # the run that holds the key, unchanged

    other = api.post(RUNS, json={"type": OTHER, "idempotency_key": "k1"})
    problem = assert_problem(other, 409, "k1", "nothing was started")
    assert problem["type"] == "urn:simpleworkflow:idempotency-conflict"
    assert problem["run_id"] == body["id"] and problem["run_type"] == TYPE
    assert store.count() == 1


def test_start_warns_of_a_type_no_worker_registered_until_one_has(store: Store, api: Api) -> None:
    unknown = api.post(RUNS, json={"type": "shop.unknown.thing.v1"})
    assert unknown.status_code == 201  # started all the same: workers may come later
    conforms(schemas.StartedRun, unknown.json())
    [warning] = unknown.json()["warnings"]
    assert warning.startswith("no worker or runtime has registered shop.unknown.thing.v1")

    batch = api.post(f"{RUNS}/batch", json={"runs": [{"type": "shop.unknown.thing.v1"}]})
    conforms(schemas.StartedRuns, batch.json())
    assert batch.json()["runs"][0]["warnings"] == [warning]
    assert store.count() == 2

    with store.client() as client:
        client.admin.set_runtime("shop.unknown.thing.v1", "python")
    time.sleep(1.1)  # the server reads the registry again for a missing type once a second
    assert api.start("shop.unknown.thing.v1")["warnings"] == []


def test_start_takes_every_start_option(api: Api) -> None:
    later = datetime.now(UTC) + timedelta(hours=2)
    run = api.start(TYPE, priority=5, max_attempts=7, run_at=later.isoformat(), deadline="3d")
    assert run["priority"] == 5 and run["max_attempts"] == 7
    assert abs(datetime.fromisoformat(run["run_at"]) - later) < timedelta(seconds=1)
    created = datetime.fromisoformat(run["created_at"])
    assert abs(datetime.fromisoformat(run["deadline"]) - created - timedelta(days=3)) < timedelta(
        seconds=2
    )
    delayed = api.start(TYPE, delay="5m", deadline="2030-01-31T09:00:00Z")
    assert datetime.fromisoformat(delayed["run_at"]) - datetime.fromisoformat(
        delayed["created_at"]
    ) >= timedelta(minutes=5) - timedelta(seconds=1)
    assert datetime.fromisoformat(delayed["deadline"]) == datetime(2030, 1, 31, 9, tzinfo=UTC)
    assert api.start(TYPE, delay=1.5)["status"] == "pending"
    assert api.start(TYPE)["payload"] == {}  # as Client.start: no payload is {}

    both = api.post(RUNS, json={"type": TYPE, "delay": 5, "run_at": later.isoformat()})
    assert_problem(both, 422, "either run_at or delay")


def test_start_many_starts_all_in_order_or_none(store: Store, api: Api) -> None:
    known = api.start(TYPE, idempotency_key="known")
    response = api.post(
        f"{RUNS}/batch",
        json={
            "runs": [
                {"type": TYPE, "payload": {"n": 1}},
                {"type": OTHER, "payload": {"n": 2}, "priority": 1},
                {"type": TYPE, "idempotency_key": "known"},
            ]
        },
    )
    assert response.status_code == 201
    body = response.json()
    conforms(schemas.StartedRuns, body)
    assert [run["payload"] for run in body["runs"]] == [{"n": 1}, {"n": 2}, {}]
    assert [run["created"] for run in body["runs"]] == [True, True, False]
    assert body["runs"][2]["id"] == known["id"] and body["created"] == 2
    assert body["runs"][1]["priority"] == 1
    assert store.count() == 3

    bad = api.post(
        f"{RUNS}/batch", json={"runs": [{"type": TYPE}, {"type": "Not A Type"}, {"type": TYPE}]}
    )
    assert_problem(bad, 422, "invalid workflow type 'Not A Type'")
    assert store.count() == 3  # the batch was refused whole

    repeat = api.post(f"{RUNS}/batch", json={"runs": [{"type": TYPE, "idempotency_key": "known"}]})
    assert repeat.status_code == 200 and repeat.json()["created"] == 0

    empty = api.post(f"{RUNS}/batch", json={"runs": []})
    assert_problem(empty, 422, "runs")
    too_many = api.post(f"{RUNS}/batch", json={"runs": [{"type": TYPE}] * 1001})
    assert_problem(too_many, 422, "runs")
    assert store.count() == 3


# -- list -------------------------------------------------------------------------------


def listed(api: Api, **params: Any) -> list[str]:
    response = api.get(RUNS, params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    conforms(schemas.RunPageOut, response.json())
    assert response.json()["next_cursor"] is None
    return [run["id"] for run in response.json()["runs"]]


def test_list_filters_by_type_or_prefix_status_and_time(store: Store, api: Api) -> None:
    first = api.start(TYPE)["id"]
    time.sleep(0.01)  # SQLite keeps milliseconds: distinct creation times
    invoice = api.start(OTHER)["id"]
    time.sleep(0.01)
    refund = api.start("billing.refund.v1")["id"]
    store.sql("update workflow_run set status = 'leased' where id = ?", invoice)

    assert listed(api) == [refund, invoice, first]  # newest first
    assert listed(api, type="billing.") == [refund, invoice]
    assert listed(api, type="billing.%") == [refund, invoice]
    assert listed(api, type=OTHER) == [invoice]
    assert listed(api, status="leased") == [invoice]
    assert listed(api, status=["pending", "leased"]) == [refund, invoice, first]
    middle = api.get(f"{RUNS}/{invoice}").json()["created_at"]
    assert listed(api, created_since=middle) == [refund, invoice]
    assert listed(api, created_until=middle) == [first]
    assert listed(api, created_since=middle, created_until=middle) == []


def test_list_finds_the_derived_states_of_waiting_runs(store: Store, api: Api) -> None:
    states = ("sleeping", "signal", "child", "retry", "throttled")
    ids = {state: api.start(TYPE)["id"] for state in states}
    plain = api.start(TYPE)["id"]
    waits = {
        "sleeping": {"kind": "sleep", "step": "nap"},
        "signal": {"kind": "signal", "event": "approved"},
        "child": {"kind": "child", "child_id": plain},
        "throttled": {"kind": "throttle", "rate_limit": "partner-api", "until": "2030-01-01"},
    }
    for state, wait in waits.items():
        store.sql(
            "update workflow_run set waiting_for = ? where id = ?", json.dumps(wait), ids[state]
        )
    store.sql("update workflow_run set attempt = 1 where id = ?", ids["retry"])

    assert listed(api, status="sleeping") == [ids["sleeping"]]
    assert listed(api, status="waiting-signal") == [ids["signal"]]
    assert listed(api, status="waiting-child") == [ids["child"]]
    assert listed(api, status="retrying") == [ids["retry"]]
    assert listed(api, status="throttled") == [ids["throttled"]]
    assert api.get(f"{RUNS}/{ids['throttled']}").json()["waiting_states"] == ["throttled"]
    assert set(listed(api, status=["sleeping", "retrying"])) == {ids["sleeping"], ids["retry"]}
    run = api.get(f"{RUNS}/{ids['signal']}").json()
    assert run["waiting_states"] == ["waiting-signal"]
    assert run["waiting_for"] == waits["signal"]


def test_list_filters_on_payload_content(api: Api) -> None:
    a = api.start(TYPE, {"customer": "c_1", "tags": ["red", "big"]})["id"]
    b = api.start(TYPE, {"customer": "c_2", "tags": ["red"]})["id"]
    assert listed(api, payload_contains='{"customer": "c_1"}') == [a]
    assert listed(api, payload_contains='{"tags": ["red"]}') == [b, a]
    assert listed(api, payload_contains='{"tags": ["big", "red"]}') == [a]
    assert listed(api, payload_contains="{}") == [b, a]
    assert listed(api, payload_contains='{"customer": "nobody"}') == []


def test_list_pages_with_a_cursor(api: Api) -> None:
    started = [api.start(TYPE, {"n": n})["id"] for n in range(5)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.get(RUNS, params=params).json()
        seen += [run["id"] for run in page["runs"]]
        pages += 1
        api.start(TYPE)  # a run started while paging does not shift the later pages
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and seen == started[::-1]


def test_deleted_runs_are_listed_only_when_asked_for(api: Api) -> None:
    kept, gone = api.start(TYPE)["id"], api.start(TYPE)["id"]
    first = api.delete(f"{RUNS}/{gone}")
    assert first.status_code == 200 and first.json() == {"deleted": True}
    assert api.delete(f"{RUNS}/{gone}").json() == {"deleted": False}
    assert listed(api) == [kept]
    assert listed(api, include_deleted="true") == [gone, kept]
    assert api.get(f"{RUNS}/{gone}").json()["deleted_at"] is not None
    assert_problem(api.delete(f"{RUNS}/{uuid.uuid4()}"), 404, "no workflow run")


# -- one run ----------------------------------------------------------------------------


def test_a_run_shows_the_runs_it_continued_from_and_as(store: Store, api: Api) -> None:
    first, second = api.start(TYPE)["id"], api.start(TYPE)["id"]
    store.sql("update workflow_run set continued_as = ? where id = ?", second, first)
    store.sql("update workflow_run set continued_from = ? where id = ?", first, second)
    before, after = api.get(f"{RUNS}/{first}").json(), api.get(f"{RUNS}/{second}").json()
    conforms(schemas.RunOut, before)
    assert (before["continued_as"], before["continued_from"]) == (second, None)
    assert (after["continued_as"], after["continued_from"]) == (None, first)


def test_a_run_shows_its_lease_holder_and_expiry(store: Store, api: Api) -> None:
    run_id = api.start(TYPE)["id"]
    until = datetime.now(UTC) + timedelta(seconds=30)
    store.sql(
        "update workflow_run set status = 'leased', leased_by = 'worker-7', lease_until = ? "
        "where id = ?",
        until.isoformat() if store.kind == "postgres" else until.strftime("%Y-%m-%d %H:%M:%S.%f"),
        run_id,
    )
    body = api.get(f"{RUNS}/{run_id}").json()
    conforms(schemas.RunOut, body)
    assert body["status"] == "leased" and body["leased_by"] == "worker-7"
    assert abs(datetime.fromisoformat(body["lease_until"]) - until) < timedelta(seconds=1)
    assert body["attempts_made"] == 1
    assert_problem(api.get(f"{RUNS}/{uuid.uuid4()}"), 404, "no workflow run")
    assert_problem(api.get(f"{RUNS}/not-a-uuid"), 404, "run ids are UUIDs")


def test_a_workflow_run_through_the_api_its_steps_events_and_signals(store: Store) -> None:
    """A real worker runs a workflow that waits for a signal the API sends."""
    app = App(store.url, schema=store.schema)

    @app.workflow("orders.confirm.v1")
    async def confirm(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        total = await ctx.step("price", lambda: payload["qty"] * 3)
        paid = await ctx.wait_for_event("paid", event="payment.confirmed", timeout="1h")
        return {"total": total, "paid": paid}

    api = Api(store)
    try:
        with poller_thread(app):
            run_id = api.start("orders.confirm.v1", {"qty": 2})["id"]
            waiting = wait_for(api, run_id, lambda run: run["waiting_states"] == ["waiting-signal"])
            assert waiting["waiting_for"]["event"] == "payment.confirmed"
            sent = api.post(
                f"{RUNS}/{run_id}/signals",
                json={"event": "payment.confirmed", "payload": {"ok": 1}},
            )
            assert sent.status_code == 201, sent.text
            conforms(schemas.SignalSentOut, sent.json())
            assert sent.json()["woke"] is True
            done = wait_for(api, run_id, lambda run: run["status"] == "succeeded")
        assert done["result"] == {"total": 6, "paid": {"ok": 1}}

        steps = api.get(f"{RUNS}/{run_id}/steps").json()
        conforms(list[schemas.StepOut], steps)
        first = steps[0]
        assert (first["step_name"], first["kind"], first["status"]) == (
            "price",
            "step",
            "completed",
        )
        for step in steps:
            assert step["started_at"] and step["completed_at"] and step["attempts"] >= 1
            assert step["duration_seconds"] is not None and step["duration_seconds"] >= 0
        events = api.get(f"{RUNS}/{run_id}/events").json()
        conforms(list[schemas.EventOut], events)
        kinds = [event["event_type"] for event in events]
        assert kinds[0] == "created" and kinds[-1] == "succeeded" and "leased" in kinds
        signals = api.get(f"{RUNS}/{run_id}/signals").json()
        conforms(list[schemas.SignalOut], signals)
        assert [(s["event"], s["payload"], s["step_name"]) for s in signals] == [
            ("payment.confirmed", {"ok": 1}, "paid")
        ]
        late = api.post(f"{RUNS}/{run_id}/signals", json={"event": "payment.confirmed"})
        assert_problem(late, 409, "already finished")
        for part in ("steps", "events", "signals"):
            assert_problem(api.get(f"{RUNS}/{uuid.uuid4()}/{part}"), 404, "no workflow run")
    finally:
        api.close()


def wait_for(api: Api, run_id: str, done: Any, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = api.get(f"{RUNS}/{run_id}").json()
        if done(run):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


def test_cancel_retry_and_signal_follow_the_runs_state(store: Store, api: Api) -> None:
    run_id = api.start(TYPE)["id"]
    stored = api.post(f"{RUNS}/{run_id}/signals", json={"event": "nudge", "payload": [1]})
    assert stored.status_code == 201 and stored.json()["woke"] is False
    assert_problem(api.post(f"{RUNS}/{run_id}/retry"), 409, "cannot be retried", "pending")

    cancelled = api.post(f"{RUNS}/{run_id}/cancel", json={"reason": "changed my mind"})
    assert cancelled.status_code == 200
    conforms(schemas.Cancelled, cancelled.json())
    assert cancelled.json()["cancelled"] is True
    assert cancelled.json()["run"]["status"] == "cancelled"
    again = api.post(f"{RUNS}/{run_id}/cancel")  # no body: no reason
    assert again.status_code == 200 and again.json()["cancelled"] is False
    events = api.get(f"{RUNS}/{run_id}/events").json()
    assert {"reason": "changed my mind"} in [
        e["data"] for e in events if e["event_type"] == "cancelled"
    ]
    assert_problem(
        api.post(f"{RUNS}/{run_id}/signals", json={"event": "nudge"}), 409, "already finished"
    )

    retried = api.post(f"{RUNS}/{run_id}/retry")
    assert retried.status_code == 200, retried.text
    conforms(schemas.RunOut, retried.json())
    assert retried.json()["status"] == "pending" and retried.json()["id"] == run_id
    for verb in ("cancel", "retry", "signals"):
        body = {"event": "x"} if verb == "signals" else None
        assert_problem(api.post(f"{RUNS}/{uuid.uuid4()}/{verb}", json=body), 404, "no workflow run")


def test_a_cancel_answers_the_run_as_its_own_transaction_left_it(store: Store) -> None:
    """The run in a cancel's answer is read in the cancel's transaction: another
    operator's retry, committed while the cancel of a leased run waits out its 0.2 s
    before answering, is not in it (a read after the cancel's commit would show the run
    pending again)."""
    with store.client() as client:
        run_id = client.start(TYPE).id
    store.sql(
        "update workflow_run set status = 'leased', leased_by = 'w', lease_token = ?, "
        "lease_until = '2999-01-01 00:00:00' where id = ?",
        str(uuid.uuid4()),
        run_id,
    )

    async def cancel_then_retry_at_once() -> tuple[httpx.Response, str]:
        async with store.async_client() as client, store.async_client() as other:
            transport = httpx.ASGITransport(app=create_app(client))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
                cancel = asyncio.ensure_future(http.post(f"{RUNS}/{run_id}/cancel"))
                while not cancel.done() and (await other.get(run_id)).status.value != "cancelled":
                    await asyncio.sleep(0.002)
                retried = await other.admin.retry(run_id)
                return await cancel, retried.status.value

    answer, status_after_retry = asyncio.run(cancel_then_retry_at_once())
    assert status_after_retry == "pending"
    assert answer.status_code == 200 and answer.json()["cancelled"] is True
    assert answer.json()["run"]["status"] == "cancelled", answer.json()["run"]


# -- types ------------------------------------------------------------------------------


def test_types_index_counts_and_pauses(store: Store, api: Api) -> None:
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    api.start(TYPE, run_at=hour_ago.isoformat())
    done = api.start(TYPE)["id"]
    api.start(OTHER, delay="1d")
    store.sql("update workflow_run set status = 'succeeded' where id = ?", done)

    types = api.get(f"{PREFIX}/types").json()
    conforms(list[schemas.TypeOut], types)
    by_name = {entry["type"]: entry for entry in types}
    assert list(by_name) == [OTHER, TYPE]
    assert by_name[TYPE]["counts"]["pending"] == 1 and by_name[TYPE]["counts"]["succeeded"] == 1
    assert by_name[TYPE]["total"] == 2 and by_name[TYPE]["paused"] is False
    assert by_name[TYPE]["oldest_due_seconds"] >= 3500
    assert by_name[OTHER]["oldest_due_seconds"] is None  # due tomorrow: not late
    assert by_name[TYPE]["registry"] is None

    assert_problem(api.post(f"{PREFIX}/types/{TYPE}/pause"), 404, "not in the registry")
    assert_problem(api.post(f"{PREFIX}/types/Bad.Type/pause"), 422, "invalid workflow type")
    with store.client() as client:
        client.admin.set_runtime(TYPE, "python")
    paused = api.post(f"{PREFIX}/types/{TYPE}/pause")
    assert paused.status_code == 200
    conforms(schemas.RegistryOut, paused.json())
    assert paused.json()["is_enabled"] is False
    entry = {e["type"]: e for e in api.get(f"{PREFIX}/types").json()}[TYPE]
    assert entry["paused"] is True and entry["registry"]["runtime"] == "python"
    assert api.post(f"{PREFIX}/types/{TYPE}/resume").json()["is_enabled"] is True


# -- health, documents, mounting --------------------------------------------------------


def test_health_and_readiness(api: Api) -> None:
    assert api.get("/healthz").json() == {"status": "ok"}
    ready = api.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert ready.json()["schema_version"] >= 6


@pytest.mark.parametrize("empty_store", ["postgres"], indirect=True)
def test_readiness_is_503_without_a_schema(empty_store: Store) -> None:
    api = Api(empty_store)
    try:
        problem = assert_problem(api.get("/readyz"), 503, "simpleworkflow migrate")
        assert problem["type"] == "urn:simpleworkflow:schema-not-current"
        assert api.get("/healthz").status_code == 200  # the process is up all the same
        assert_problem(api.get(RUNS), 503, "simpleworkflow migrate")
    finally:
        api.close()


def test_readiness_is_503_when_the_database_is_unreachable() -> None:
    unreachable = Store("postgres", "postgresql://nobody@127.0.0.1:1/none", "workflow")
    api = Api(unreachable)
    try:
        response = api.get("/readyz")
        problem = assert_problem(response, 503)
        assert problem["type"] == "urn:simpleworkflow:store-unavailable"
        assert response.headers["retry-after"]
    finally:
        api.close()


def test_a_failed_database_is_a_503_that_does_not_say_where_it_is(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The cause (here a SQLite file's path) goes to the server's log, not to whoever
    asked: /readyz answers anyone."""
    where = tmp_path / "no-such-folder" / "secret-name.db"
    caplog.set_level(logging.WARNING, "simpleworkflow.server")
    api = Api(Store("sqlite", f"sqlite:///{where}", ""))
    try:
        for url in (RUNS, "/readyz"):
            response = api.get(url)
            problem = assert_problem(response, 503, "retry shortly")
            assert problem["type"] == "urn:simpleworkflow:store-unavailable"
            assert "secret-name" not in response.text and str(tmp_path) not in response.text
    finally:
        api.close()
    assert "secret-name.db" in caplog.text


def test_openapi_document_and_interactive_docs(api: Api) -> None:
    document = api.get("/openapi.json").json()
    paths = set(document["paths"])
    assert {f"{PREFIX}/runs", f"{PREFIX}/runs/{{run_id}}", f"{PREFIX}/types", "/healthz"} <= paths
    assert all(p.startswith(PREFIX) or p in ("/healthz", "/readyz") for p in paths)
    start = document["paths"][f"{PREFIX}/runs"]["post"]
    assert {"200", "201", "409", "413", "422"} <= set(start["responses"])
    assert "application/problem+json" in start["responses"]["409"]["content"]
    assert "StartRun" in document["components"]["schemas"]
    docs = api.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    assert_problem(api.get("/no/such/path"), 404)


def test_the_router_and_the_app_work_inside_a_users_app(store: Store) -> None:
    """``include_router`` in an app with none of our error handlers, and ``mount``."""

    def users_app(client: AsyncClient) -> FastAPI:
        app = FastAPI()
        app.include_router(router(client))
        app.mount("/workflows", create_app(client))
        return app

    api = Api(store, build=users_app)
    try:
        run = api.start(TYPE)  # through the router
        assert api.get(f"/workflows{RUNS}/{run['id']}").json()["id"] == run["id"]  # the mount
        assert_problem(api.get(f"{RUNS}/{uuid.uuid4()}"), 404, "no workflow run")
        assert_problem(api.post(RUNS, json={"type": "bad"}), 422, "invalid workflow type")
        assert_problem(api.get(f"/workflows{RUNS}/{uuid.uuid4()}"), 404)
        assert api.get("/workflows/openapi.json").status_code == 200
        assert api.get("/healthz").status_code == 200
    finally:
        api.close()


def test_only_the_server_package_imports_the_server_libraries() -> None:
    """The core and the command line (``serve`` included) import without the extra."""
    probe = (
        "import sys, simpleworkflow, simpleworkflow.worker, simpleworkflow.cli, "
        "simpleworkflow.cli.serve; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('fastapi', 'starlette', 'uvicorn', 'pydantic', 'httpx')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


#: A start through ``create_app`` as ``serve`` builds it (FastAPI's telemetry decided by
#: ``serve.opentelemetry_records``), with an SDK tracer provider set first if asked: what
#: the decision was, the answer's status and the spans recorded.
_SERVE_TELEMETRY = """
import json, sys
from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from simpleworkflow.cli import serve
from simpleworkflow.server import create_app

spans = InMemorySpanExporter()
if sys.argv[2] == "sdk":
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
records = serve.opentelemetry_records()
app = create_app(database_url=sys.argv[1], telemetry=None if records else serve.NO_TELEMETRY)
with TestClient(app, base_url="http://127.0.0.1") as http:
    status = http.post("/api/v1/runs", json={"type": "tests.noop.v1", "payload": {}}).status_code
print(json.dumps([records, status, sorted(s.name for s in spans.get_finished_spans())]))
"""


@pytest.mark.parametrize(
    ("provider", "env", "records", "spans"),
    [
        ("none", {}, False, []),
        ("sdk", {}, True, ["POST"]),  # an SDK's provider set before serve builds the app
        ("none", {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"}, True, []),
        ("none", {"FASTAPI_OTEL_AUTO_CONFIGURE": "true"}, True, []),
    ],
)
def test_serve_leaves_fastapis_tracing_on_whenever_opentelemetry_could_record(
    tmp_path: Any, provider: str, env: dict[str, str], records: bool, spans: list[str]
) -> None:
    """``serve`` switches FastAPI's own telemetry off only when nothing could record it:
    with an SDK's provider set, a start through the start lane is still traced."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FASTAPI_"))}
    environ |= env | {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    command = [sys.executable, "-c", _SERVE_TELEMETRY, url, provider]
    out = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == [records, 201, spans]
