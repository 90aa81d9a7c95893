"""The other ways into a trace: a child started by a ``def`` body, ``start_many``, a run
written with plain SQL, an attempt lost with its worker; and tracing with no SDK, or with
no OpenTelemetry at all, in processes where those are missing.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Store, poller_thread
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext

from simpleworkflow import App, Context, Observer, RunStatus, cli, errors
from simpleworkflow.observe import RunCreated
from simpleworkflow.tracing import TracingObserver

PARENT = "trace.parent.v1"
CHILD = "trace.child.v1"
PLAIN = "trace.plain.v1"
PUBLISHER = "trace.publisher.v1"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    spans = [span for span in exporter.get_finished_spans() if span.name == name]
    return sorted(spans, key=lambda span: span.start_time or 0)


def span_id(span: ReadableSpan | SpanContext | None) -> int:
    """The id of a span, or of a span's parent (a SpanContext)."""
    context = span.context if isinstance(span, ReadableSpan) else span
    assert context is not None
    return context.span_id


def test_a_child_started_by_a_def_body_continues_its_parents_trace(
    store: Store, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    app = App(store.url, schema=store.schema, observers=[TracingObserver(provider)])

    @app.workflow(CHILD)
    async def child(payload: Any) -> str:
        return "shipped"

    @app.workflow(PARENT)
    def parent(payload: Any, ctx: Context) -> Any:  # runs in a thread: durable calls bridged
        ctx.step("pack", lambda: "packed")
        return ctx.wait_child(ctx.start_child(CHILD, {}))

    with app.client() as client, poller_thread(app, poll_interval=0.05):
        run_id = client.start(PARENT).id
        assert client.wait(run_id, timeout=30).result == "shipped"

    (start,) = named(exporter, f"start {PARENT}")
    assert start.parent is None  # nothing was current: the start begins the trace
    trace_id = start.context.trace_id  # type: ignore[union-attr]
    # One attempt, or two if the child had not finished when the parent looked at it.
    attempts = named(exporter, f"process {PARENT}")
    first = attempts[0]
    assert attempts[-1].attributes["workflow.attempt.outcome"] == "succeeded"  # type: ignore[index]
    (pack,) = named(exporter, "step pack")
    assert span_id(pack.parent) == span_id(first)
    (start_child,) = named(exporter, f"start {CHILD}")
    assert span_id(start_child.parent) == span_id(first)
    assert start_child.attributes["workflow.run.parent_id"] == run_id  # type: ignore[index]
    (child_attempt,) = named(exporter, f"process {CHILD}")
    assert span_id(child_attempt.parent) == span_id(start_child)
    assert child_attempt.attributes["workflow.run.parent_id"] == run_id  # type: ignore[index]
    for span in (*attempts, pack, start_child, child_attempt):
        assert span.context.trace_id == trace_id  # type: ignore[union-attr]


def test_start_many_is_one_span_whose_context_every_run_stores(
    store: Store, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    app = App(store.url, schema=store.schema, observers=[TracingObserver(provider)])
    key = f"order-{uuid.uuid4()}"
    with app.client() as client:
        runs = client.start_many(
            [(PLAIN, {}), (PLAIN, {}), {"type": PLAIN, "idempotency_key": key}]
        )
        again = client.start(PLAIN, {}, idempotency_key=key)
    (batch,) = named(exporter, "start_many")
    assert batch.attributes is not None
    assert batch.attributes["messaging.batch.message_count"] == 3
    assert batch.attributes["messaging.operation.name"] == "start_many"
    stored = f"{span_id(batch):016x}"
    assert all(run.trace_context["traceparent"].split("-")[2] == stored for run in runs)  # type: ignore[index]
    # A known key stores nothing: the run keeps the context of the call that stored it.
    assert again.trace_context == runs[2].trace_context
    (single,) = named(exporter, f"start {PLAIN}")
    assert single.attributes is not None and single.attributes["workflow.run.created"] is False


def test_a_run_written_with_sql_continues_the_trace_it_names(
    store: Store,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = App(store.url, schema=store.schema, observers=[TracingObserver(provider)])
    app.workflow(PLAIN)(lambda payload: "done")
    cast = "?::jsonb" if store.kind == "postgres" else "?"
    store.sql(
        f"insert into workflow_run (type, trace_context) values (?, {cast})",
        PLAIN,
        json.dumps({"traceparent": TRACEPARENT}),
    )
    with app.client() as client, poller_thread(app, poll_interval=0.05):
        (run,) = client.list(type_prefix=PLAIN).runs
        assert client.wait(run.id, timeout=30).status is RunStatus.SUCCEEDED
    (attempt,) = named(exporter, f"process {PLAIN}")
    assert attempt.context is not None and attempt.parent is not None
    assert f"{attempt.context.trace_id:032x}" == TRACEPARENT.split("-")[1]
    assert f"{attempt.parent.span_id:016x}" == TRACEPARENT.split("-")[2]
    assert [link.attributes for link in attempt.links] == [{"workflow.link.kind": "creation"}]
    # An operator sees the context with the run.
    assert cli.main(["-d", store.url, "--schema", store.schema, "runs", "show", run.id]) == 0
    assert f'trace_context    {{"traceparent":"{TRACEPARENT}"}}' in capsys.readouterr().out


def test_an_attempt_lost_with_its_worker_is_forgotten_by_the_next_one(
    store: Store, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The run's context names the attempt before; a worker dies holding the run; the
    reaper gives the run back, and the next attempt links to no attempt (the one stored
    is not the one before it)."""
    app = App(store.url, schema=store.schema, observers=[TracingObserver(provider)])
    app.workflow(PLAIN)(lambda payload: "done")
    earlier = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"
    stored = json.dumps({"traceparent": TRACEPARENT, "attempt": {"traceparent": earlier}})
    cast = "?::jsonb" if store.kind == "postgres" else "?"
    past = "2000-01-01 00:00:00" + ("+00" if store.kind == "postgres" else ".000")
    token = str(uuid.uuid4())
    store.sql(
        "insert into workflow_run (type, status, leased_by, lease_until, lease_token, "
        f"trace_context) values (?, 'leased', 'ghost', ?, ?, {cast})",
        PLAIN,
        past,
        token,
        stored,
    )
    with app.client() as client, poller_thread(app, poll_interval=0.05):
        (run,) = client.list(type_prefix=PLAIN).runs
        done = client.wait(run.id, timeout=30)
    assert done.status is RunStatus.SUCCEEDED
    assert done.trace_context == {"traceparent": TRACEPARENT}  # the lost attempt: forgotten
    (attempt,) = named(exporter, f"process {PLAIN}")
    assert [link.attributes for link in attempt.links] == [{"workflow.link.kind": "creation"}]


NO_SDK = """
import asyncio, json, sys, threading
sys.modules["opentelemetry.sdk"] = None  # as if the SDK were not installed

from opentelemetry import context, propagate
from simpleworkflow import App
from simpleworkflow.tracing import TracingObserver

app = App("sqlite:///{db}", observers=[TracingObserver()])

@app.workflow("trace.nosdk.v1")
async def handler(payload, ctx):
    await ctx.step("one", lambda: 1)
    await ctx.sleep("nap", 0.05)
    return "done"

poller = app.poller(poll_interval=0.05)
thread = threading.Thread(target=lambda: asyncio.run(poller.run_async()))
thread.start()
with app.client() as client:
    plain = client.start("trace.nosdk.v1").id
    # A request that came in with a trace context: carried along, though nothing records.
    token = context.attach(propagate.extract({{"traceparent": "{traceparent}"}}))
    carried = client.start("trace.nosdk.v1").id
    context.detach(token)
    runs = [client.wait(run_id, timeout=30) for run_id in (plain, carried)]
poller.stop()
thread.join(15)
print(json.dumps([[run.status.value, run.trace_context] for run in runs]))
"""

NO_OPENTELEMETRY = """
import asyncio, sys, threading
sys.modules["opentelemetry"] = None  # as if the tracing extra were not installed

from simpleworkflow import App
from simpleworkflow.cli import worker

app = App("sqlite:///{db}")

@app.workflow("trace.nootel.v1")
async def handler(payload, ctx):
    await ctx.step("one", lambda: 1)
    return "done"

poller = app.poller(poll_interval=0.05)
thread = threading.Thread(target=lambda: asyncio.run(poller.run_async()))
thread.start()
with app.client() as client:
    run = client.wait(client.start("trace.nootel.v1").id, timeout=30)
poller.stop()
thread.join(15)
try:
    import simpleworkflow.tracing
except ImportError as exc:
    print(run.status.value, run.trace_context, exc)
"""


def test_without_an_sdk_nothing_breaks_and_a_callers_context_still_travels(
    tmp_path: Any,
) -> None:
    script = NO_SDK.format(db=tmp_path / "runs.db", traceparent=TRACEPARENT)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    plain, carried = json.loads(done.stdout)
    assert plain == ["succeeded", None]  # no span anywhere: nothing to store
    assert carried[0] == "succeeded"
    assert carried[1]["traceparent"] == TRACEPARENT  # the caller's, passed through
    assert "Traceback" not in done.stderr


def test_without_opentelemetry_nothing_breaks_and_tracing_says_what_to_install(
    tmp_path: Any,
) -> None:
    script = NO_OPENTELEMETRY.format(db=tmp_path / "runs.db")
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "succeeded None simpleworkflow.tracing needs OpenTelemetry's API: "
        "pip install 'simpleworkflow[tracing]'"
    )


def test_compensations_are_step_spans_of_the_attempt_that_runs_them(
    store: Store, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    app = App(store.url, schema=store.schema, observers=[TracingObserver(provider)])

    @app.workflow("trace.saga.v1")
    async def saga(payload: Any, ctx: Context) -> Any:
        await ctx.step("reserve", lambda: "reserved")
        await ctx.on_rollback("release", lambda: None)
        raise errors.RollbackError("stop")

    with app.client() as client, poller_thread(app, poll_interval=0.05):
        run_id = client.start("trace.saga.v1").id
        assert client.wait(run_id, timeout=30).status is RunStatus.FAILED

    (attempt,) = named(exporter, "process trace.saga.v1")
    (release,) = named(exporter, "step rollback/release")
    assert release.parent is not None and span_id(release.parent) == span_id(attempt)


def test_values_streams_and_forks_are_span_events_and_a_span(
    store: Store, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A set and a close are events of the attempt's span; a step's batch of items an event
    of the step's span; an append from the body one of the attempt's; a fork a span of its
    own, in the trace of whoever forked."""
    tracer = TracingObserver(provider)
    app = App(store.url, schema=store.schema, observers=[tracer])

    def generate(ctx: Context) -> None:
        for token in ("a", "b"):
            ctx.stream_append("tokens", token)

    @app.workflow(PUBLISHER)
    async def publisher(payload: Any, ctx: Context) -> str:
        await ctx.set_value("stage", "writing")
        await ctx.step("generate", generate, ctx)
        await ctx.stream_append("tokens", "end")
        await ctx.stream_close("tokens")
        return "done"

    with app.client() as client:
        with poller_thread(app, poll_interval=0.05):
            run_id = client.start(PUBLISHER).id
            assert client.wait(run_id, timeout=30).status is RunStatus.SUCCEEDED
        # No worker now: the fork stays pending, and its attempt has no span to tell apart.
        with provider.get_tracer("test").start_as_current_span("operator") as operator:
            fork = client.admin.fork(run_id, "generate")

    (attempt,) = named(exporter, f"process {PUBLISHER}")
    (step,) = named(exporter, "step generate")
    # One batch, or two if the buffer's timer cut it (a slow machine): offsets 0 and 1.
    batches = [dict(e.attributes or {}) for e in step.events]
    assert {e.name for e in step.events} == {"workflow.stream_appended"}
    assert {(b["workflow.stream.key"], b["workflow.step.name"]) for b in batches} == {
        ("tokens", "generate")
    }
    assert sum(b["workflow.stream.items"] for b in batches) == 2  # type: ignore[misc]
    offsets = [
        (b["workflow.stream.first_offset"], b["workflow.stream.last_offset"]) for b in batches
    ]
    assert offsets in ([(0, 1)], [(0, 0), (1, 1)])
    assert [(e.name, dict(e.attributes or {})) for e in attempt.events] == [
        (
            "workflow.value_set",
            {"workflow.value.key": "stage", "workflow.step.name": "value:stage"},
        ),
        (
            "workflow.stream_appended",
            {
                "workflow.stream.key": "tokens",
                "workflow.stream.items": 1,
                "workflow.stream.first_offset": 2,
                "workflow.stream.last_offset": 2,
                "workflow.step.name": "@stream:tokens",
            },
        ),
        (
            "workflow.stream_closed",
            {"workflow.stream.key": "tokens", "workflow.step.name": "@stream:tokens#2"},
        ),
    ]
    (forked,) = named(exporter, f"fork {PUBLISHER}")
    assert span_id(forked.parent) == span_id(operator.get_span_context())
    assert forked.attributes is not None
    assert (
        forked.attributes["workflow.run.id"],
        forked.attributes["workflow.run.forked_from"],
        forked.attributes["workflow.step.name"],
        forked.attributes["messaging.operation.name"],
    ) == (fork.id, run_id, "generate", "fork")


class _Injecting(Observer):
    """Adds a trace context to what is stored, and overrides nothing else."""

    def inject(self, carrier: dict[str, str]) -> None:
        carrier["traceparent"] = TRACEPARENT


class _Counting(Observer):
    """Counts the runs started, as the metrics observer does; encloses nothing."""

    def __init__(self) -> None:
        self.created: list[str] = []

    def run_created(self, event: RunCreated) -> None:
        self.created.append(event.run.id)


def test_a_start_stores_what_an_observer_injects_and_counts_with_one_that_only_counts(
    store: Store,
) -> None:
    """A start skips the observers' wrapping when none encloses starts or injects: an
    observer that only injects still has its trace context stored, one that only counts
    still sees every run, sync and async; with only the counter, nothing is stored."""
    counting = _Counting()
    with store.client(observers=[counting, _Injecting()]) as client:
        traced = client.start(PLAIN, {})
    with store.client(observers=[counting]) as client:
        plain = client.start(PLAIN, {})

    async def start_async() -> list[str]:
        async with store.async_client(observers=[_Injecting(), counting]) as client:
            traced = await client.start(PLAIN, {})
        async with store.async_client(observers=[counting]) as client:
            plain = await client.start(PLAIN, {})
        return [traced.id, plain.id]

    traced_async, plain_async = asyncio.run(start_async())
    with store.client() as client:
        for run_id in (traced.id, traced_async):
            assert client.get(run_id).trace_context == {"traceparent": TRACEPARENT}
        for run_id in (plain.id, plain_async):
            assert client.get(run_id).trace_context is None
    assert counting.created == [traced.id, plain.id, traced_async, plain_async]
