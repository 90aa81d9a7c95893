"""Traces of a workflow, as an OpenTelemetry SDK records them, on both stores.

The workflow (tests/tracing_app.py) has a step that fails once, a sleep, a wait for a
signal and a first attempt that fails at its end: five attempts. The producer starts it
inside a span of its own (a web request, say) and later signals it. The spans must make
one trace: the start's span under the request, every attempt under the start and linked
to it and to the attempt before, steps and the signal received under their attempt, the
sleep and the waits as events. Once with the worker in this process, once in a worker
process of its own that writes its spans to a file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Store, poller_thread, stop_processes
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tracing_app import ORDER, SPANS_ENV, build
from worker_app import wait_until

from simpleworkflow import App, Client, RunStatus
from simpleworkflow.tracing import TracingObserver

TESTS = Path(__file__).parents[1]
Span = dict[str, Any]


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def as_dict(span: ReadableSpan) -> Span:
    """A span as the SDK writes it in JSON: what a worker process sends through its file."""
    return json.loads(span.to_json(indent=None))  # type: ignore[no-any-return]


def produce(client: Client, provider: TracerProvider) -> tuple[str, str]:
    """Start the order inside a request's span, signal it once it waits; return the run
    id and the request's span id. (Each order is new: its step fails the first time.)"""
    order = uuid.uuid4().hex[:8]
    tracer = provider.get_tracer("shop.web")
    with tracer.start_as_current_span("POST /orders") as request:
        run_id = client.start(ORDER, {"order": order}).id
    wait_until(
        lambda: "waiting-signal" in client.get(run_id).waiting_states,
        30,
        lambda: f"the run never waited for its signal: {client.get(run_id)}",
    )
    with tracer.start_as_current_span("POST /approvals"):
        client.signal(run_id, "approve", {"by": "ada"})
    done = client.wait(run_id, timeout=30)
    assert (done.status, done.result) == (
        RunStatus.SUCCEEDED,
        {"charged": f"ch_{order}", "by": "ada"},
    )
    return run_id, f"0x{request.get_span_context().span_id:016x}"


def test_one_trace_from_the_request_through_every_attempt_in_this_process(
    store: Store, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    app = build(App(store.url, schema=store.schema, observers=[TracingObserver(provider)]))
    with app.client() as client, poller_thread(app, poll_interval=0.05):
        run_id, request = produce(client, provider)
    check_trace([as_dict(span) for span in exporter.get_finished_spans()], run_id, request)


def test_one_trace_from_the_request_through_a_worker_process(
    store: Store, provider: TracerProvider, exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    env = {
        **store.env,
        SPANS_ENV: str(spans_file),
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "simpleworkflow", "worker", "tracing_app:app"]
    worker = subprocess.Popen(
        [*command, "--poll-interval", "0.05"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        with Client(store.url, schema=store.schema, observers=[TracingObserver(provider)]) as c:
            run_id, request = produce(c, provider)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
        assert worker.returncode == 0, stderr
    finally:
        stop_processes([worker])
    produced = [as_dict(span) for span in exporter.get_finished_spans()]
    worked = [json.loads(line) for line in spans_file.read_text().splitlines()]
    assert {s["resource"]["attributes"]["service.name"] for s in worked} == {"worker"}
    check_trace(produced + worked, run_id, request)


def check_trace(spans: list[Span], run_id: str, request: str) -> None:
    """The spans of the order's run, parented and linked as docs/tracing.md says."""
    by_name: dict[str, list[Span]] = {}
    for span in sorted(spans, key=lambda s: s["start_time"]):
        by_name.setdefault(span["name"], []).append(span)
    (start,) = by_name[f"start {ORDER}"]
    trace_id = start["context"]["trace_id"]
    assert start["parent_id"] == request
    assert start["kind"] == "SpanKind.PRODUCER"
    assert start["attributes"] == {
        "messaging.system": "simpleworkflow",
        "messaging.operation.type": "send",
        "messaging.operation.name": "start",
        "messaging.destination.name": ORDER,
        "workflow.name": ORDER,
        "messaging.message.id": run_id,
        "workflow.run.id": run_id,
        "workflow.run.created": True,
    }

    attempts = by_name[f"process {ORDER}"]
    outcomes = [span["attributes"]["workflow.attempt.outcome"] for span in attempts]
    assert outcomes == ["suspended", "suspended", "suspended", "retried", "succeeded"]
    assert [s["attributes"]["workflow.run.attempt"] for s in attempts] == [1, 1, 1, 1, 2]
    previous = None
    for attempt in attempts:
        assert attempt["kind"] == "SpanKind.CONSUMER"
        assert attempt["context"]["trace_id"] == trace_id
        assert attempt["parent_id"] == start["context"]["span_id"]
        links = {
            link["attributes"]["workflow.link.kind"]: link["context"] for link in attempt["links"]
        }
        assert links["creation"]["span_id"] == start["context"]["span_id"]
        if previous is None:
            assert "previous_attempt" not in links
        else:
            assert links["previous_attempt"]["span_id"] == previous["context"]["span_id"]
        assert attempt["attributes"]["workflow.run.id"] == run_id
        assert attempt["attributes"]["messaging.destination.name"] == ORDER
        previous = attempt
    assert attempts[3]["status"]["status_code"] == "ERROR"
    assert attempts[4]["attributes"]["workflow.run.status"] == "succeeded"

    # what each suspended attempt waits for, as an event at its end
    events = [[event["name"] for event in attempt["events"]] for attempt in attempts]
    assert "workflow.step_retry_wait" in events[0]
    assert "workflow.sleep" in events[1] and "workflow.resumed" in events[1]
    assert "workflow.wait" in events[2]
    (wait,) = [e for e in attempts[2]["events"] if e["name"] == "workflow.wait"]
    assert wait["attributes"] == {
        "workflow.wait.kind": "signal",
        "workflow.step.name": "approval",
        "workflow.wait.until": wait["attributes"]["workflow.wait.until"],
        "workflow.signal.event": "approve",
    }

    # the step, retried in the next attempt, under its attempt each time
    charges = by_name["step charge"]
    assert [s["attributes"]["workflow.step.outcome"] for s in charges] == ["retried", "completed"]
    assert [s["attributes"]["workflow.step.attempt"] for s in charges] == [1, 2]
    assert [s["parent_id"] for s in charges] == [a["context"]["span_id"] for a in attempts[:2]]
    assert charges[0]["status"]["status_code"] == "ERROR"
    assert charges[0]["attributes"]["error.type"] == "ConnectionError"

    # the signal: sent under the producer's request, received under the attempt that took it
    (sent,) = by_name["signal approve"]
    assert sent["kind"] == "SpanKind.PRODUCER"
    assert sent["attributes"]["workflow.run.id"] == run_id
    (received,) = by_name["receive approve"]
    assert received["kind"] == "SpanKind.CONSUMER"
    assert received["parent_id"] == attempts[3]["context"]["span_id"]
    assert received["context"]["trace_id"] == trace_id
