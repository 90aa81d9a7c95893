"""The tracing observer: spans for starts, attempts, steps, signals and forks, through the hooks.

An attempt's span starts at ``attempt_started`` and ends at ``attempt_finished`` (or, for
a suspension, at ``run_suspended``, which says what the run waits for), so that its
outcome is on it; ``around_attempt`` makes it current while the handler runs. Steps are
the same with their own hooks. The spans between two hooks are held here, by attempt.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from simpleworkflow import observe
from simpleworkflow.models import Run
from simpleworkflow.tracing import attributes as a

#: What the run's status is after an attempt of each outcome (none: not known here).
_RUN_STATUS = {
    observe.SUCCEEDED: "succeeded",
    observe.FAILED: "failed",
    observe.RETRIED: "pending",
    observe.SUSPENDED: "pending",
    observe.CANCELLED: "cancelled",
    observe.STOPPED: "pending",
    observe.CONTINUED: "succeeded",  # its successor's first attempt links to this one
}
_NUMBERED = re.compile(r"#\d+$")  # a repeated step's number, left out of span names
_NOTHING = contextlib.nullcontext()
#: Tracer providers of the API alone: no SDK has been configured.
_SILENT = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


@dataclass(slots=True)
class _Producing:
    """The start span current in this context, and the runs it stored."""

    span: Span
    batch: bool
    count: int = 0


_producing: contextvars.ContextVar[_Producing | None] = contextvars.ContextVar(
    "simpleworkflow_tracing_start", default=None
)


@dataclass(slots=True)
class _Open:
    """A span started by one hook and ended by another; ``run`` keeps the key's object."""

    run: Run
    span: Span
    start: int  # ns, as given to the span
    end: int | None = None  # ns, once known (a suspension ends at run_suspended)
    notes: dict[str, Any] = field(default_factory=dict)


class TracingObserver(observe.Observer):
    """OpenTelemetry spans for runs: register it on the ``App`` (workers and the app's
    clients) or on a ``Client``. With ``opentelemetry-api`` alone (no SDK configured) its
    spans are no-ops, and the trace context of the caller is still carried to the worker.

    ``tracer_provider`` defaults to the global one; ``propagator`` to the global text-map
    propagator (W3C trace context and baggage unless configured otherwise).
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        *,
        propagator: TextMapPropagator | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(
            "simpleworkflow", _version(), tracer_provider=tracer_provider
        )
        self._provider = tracer_provider
        self._propagator = propagator
        self._lock = threading.Lock()  # step hooks come from handlers' threads
        self._attempts: dict[int, _Open] = {}
        self._steps: dict[tuple[int, str], _Open] = {}
        self._claims: dict[int, tuple[Run, float, str | None]] = {}

    # -- producing: starts and signals ------------------------------------------------

    @contextlib.contextmanager
    def around_start(self, type: str | None, parent: Run | None = None) -> Iterator[None]:
        name = f"start {type}" if type is not None else "start_many"
        span_attributes: dict[str, Any] = {
            a.MESSAGING_SYSTEM: a.SYSTEM,
            a.MESSAGING_OPERATION_TYPE: "send",
            a.MESSAGING_OPERATION_NAME: "start" if type is not None else "start_many",
        }
        if type is not None:
            span_attributes[a.MESSAGING_DESTINATION_NAME] = type
            span_attributes[a.WORKFLOW_NAME] = type
        if parent is not None:
            span_attributes[a.RUN_PARENT_ID] = parent.id
        with self._tracer.start_as_current_span(
            name, kind=SpanKind.PRODUCER, attributes=span_attributes
        ) as span:
            producing = _Producing(span, batch=type is None)
            token = _producing.set(producing)
            try:
                yield
            finally:
                _producing.reset(token)
                if producing.batch:
                    span.set_attribute(a.MESSAGING_BATCH_MESSAGE_COUNT, producing.count)

    def run_created(self, event: observe.RunCreated) -> None:
        producing = _producing.get()
        if producing is None:
            return
        producing.count += 1
        if not producing.batch:
            run = event.run
            producing.span.set_attributes(
                {a.MESSAGING_MESSAGE_ID: run.id, a.RUN_ID: run.id, a.RUN_CREATED: event.created}
            )

    def inject(self, carrier: dict[str, str]) -> None:
        (self._propagator or propagate.get_global_textmap()).inject(carrier)

    @contextlib.contextmanager
    def around_signal(self, run_id: str, event: str) -> Iterator[None]:
        with self._tracer.start_as_current_span(
            f"signal {event}",
            kind=SpanKind.PRODUCER,
            attributes={
                a.MESSAGING_SYSTEM: a.SYSTEM,
                a.MESSAGING_OPERATION_TYPE: "send",
                a.MESSAGING_OPERATION_NAME: "signal",
                a.MESSAGING_DESTINATION_NAME: event,
                a.SIGNAL_EVENT: event,
                a.RUN_ID: run_id,
            },
        ):
            yield

    # -- consuming: attempts ----------------------------------------------------------

    def run_claimed(self, event: observe.RunClaimed) -> None:
        if self._silent():
            return
        with self._lock:
            self._claims[id(event.run)] = (event.run, event.queued_for, None)

    def run_resumed(self, event: observe.RunResumed) -> None:
        if self._silent():
            return
        with self._lock:
            run, queued_for, _ = self._claims.get(id(event.run), (event.run, 0.0, None))
            self._claims[id(event.run)] = (run, queued_for, event.kind)

    def attempt_started(self, event: observe.AttemptStarted) -> None:
        run = event.run
        if run.trace_context is None and self._silent():
            return  # no SDK, and no trace to carry on: nothing to make current or end
        with self._lock:
            claim = self._claims.pop(id(run), None)
        creation, previous = self._extract(run.trace_context)
        links = []
        if creation is not None:
            links.append(Link(creation, {a.LINK_KIND: "creation"}))
        if previous is not None:
            links.append(Link(previous, {a.LINK_KIND: "previous_attempt"}))
        parent = trace.set_span_in_context(trace.NonRecordingSpan(creation)) if creation else None
        start = time.time_ns()
        span = self._tracer.start_span(
            f"process {run.type}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            start_time=start,
        )
        if not span.is_recording() and not span.get_span_context().is_valid:
            return  # no SDK, and no trace to carry on: nothing to make current or end
        if span.is_recording():
            span.set_attributes(_attempt_attributes(run, event.worker_id))
            if claim is not None and claim[0] is run:
                span.set_attribute(a.RUN_QUEUED_FOR, claim[1])
                if claim[2] is not None:
                    span.add_event(a.EVENT_RESUMED, {a.WAIT_KIND: claim[2]}, timestamp=start)
        with self._lock:
            self._attempts[id(run)] = _Open(run, span, start)

    def around_attempt(self, run: Run, worker_id: str) -> ContextManager[Any]:
        return self._using(self._attempts, id(run), run)

    def lease_lost(self, event: observe.LeaseLost) -> None:
        held = self._held(self._attempts, id(event.run), event.run)
        if held is not None:
            held.span.add_event(a.EVENT_LEASE_LOST, {a.LEASE_LOST_REASON: event.reason})

    def attempt_finished(self, event: observe.AttemptFinished) -> None:
        held = self._held(self._attempts, id(event.run), event.run)
        if held is None:
            return
        span = held.span
        held.end = held.start + int(event.duration * 1e9)
        span.set_attribute(a.ATTEMPT_OUTCOME, event.outcome)
        if event.outcome in _RUN_STATUS:
            span.set_attribute(a.RUN_STATUS, _RUN_STATUS[event.outcome])
        if event.outcome in (observe.FAILED, observe.RETRIED):
            span.set_status(Status(StatusCode.ERROR, event.error))
        if event.outcome == observe.SUSPENDED:
            return  # run_suspended follows at once, and says what the run waits for
        self._end(self._attempts, id(event.run), held)

    def run_suspended(self, event: observe.RunSuspended) -> None:
        held = self._held(self._attempts, id(event.run), event.run)
        if held is None:
            return
        waiting_for = event.waiting_for if isinstance(event.waiting_for, dict) else {}
        waits = waiting_for.get("waits") if event.kind == observe.ANY else [waiting_for]
        for wait in waits if isinstance(waits, list) else []:
            if isinstance(wait, dict):
                kind = str(wait.get("kind"))
                name = a.WAIT_EVENTS.get(kind, "workflow.wait")
                held.span.add_event(name, _wait_attributes(kind, wait), timestamp=held.end)
        self._end(self._attempts, id(event.run), held)

    # -- steps --------------------------------------------------------------------------

    def step_started(self, event: observe.StepStarted) -> None:
        if self._silent():
            return  # the attempt's context, current already, is all there is to carry
        start = time.time_ns()
        span = self._tracer.start_span(
            f"step {_NUMBERED.sub('', event.step)}", kind=SpanKind.INTERNAL, start_time=start
        )
        if not span.is_recording() and not span.get_span_context().is_valid:
            return  # as for attempts
        if span.is_recording():
            span.set_attributes(
                {
                    a.WORKFLOW_NAME: event.run.type,
                    a.RUN_ID: event.run.id,
                    a.STEP_NAME: event.step,
                    a.STEP_KIND: "step",
                    a.STEP_ATTEMPT: event.attempt,
                }
            )
        with self._lock:
            self._steps[id(event.run), event.step] = _Open(event.run, span, start)

    def around_step(self, run: Run, step: str, attempt: int) -> ContextManager[Any]:
        return self._using(self._steps, (id(run), step), run)

    def step_completed(self, event: observe.StepCompleted) -> None:
        held = self._held(self._steps, (id(event.run), event.step), event.run)
        if held is not None:
            held.span.set_attribute(a.STEP_OUTCOME, "completed")
            held.end = held.start + int(event.duration * 1e9)
            self._end(self._steps, (id(event.run), event.step), held)

    def step_failed(self, event: observe.StepFailed) -> None:
        held = self._held(self._steps, (id(event.run), event.step), event.run)
        if held is None:
            return
        span = held.span
        held.end = held.start + int(event.duration * 1e9)
        span.set_attribute(a.STEP_OUTCOME, "retried" if event.retrying else "failed")
        span.set_attribute(a.ERROR_TYPE, _qualname(event.error))
        span.set_status(Status(StatusCode.ERROR, f"{type(event.error).__name__}: {event.error}"))
        if not event.retrying:  # else step_retried follows at once, with the delay
            self._end(self._steps, (id(event.run), event.step), held)

    def step_retried(self, event: observe.StepRetried) -> None:
        held = self._held(self._steps, (id(event.run), event.step), event.run)
        if held is not None:
            held.span.set_attribute(a.STEP_RETRY_IN, event.delay)
            self._end(self._steps, (id(event.run), event.step), held)

    # -- signals received ---------------------------------------------------------------

    def signal_consumed(self, event: observe.SignalConsumed) -> None:
        if self._silent():
            return
        span = self._tracer.start_span(
            f"receive {event.event}",
            kind=SpanKind.CONSUMER,
            attributes={
                a.MESSAGING_SYSTEM: a.SYSTEM,
                a.MESSAGING_OPERATION_TYPE: "receive",
                a.MESSAGING_OPERATION_NAME: "receive",
                a.MESSAGING_DESTINATION_NAME: event.event,
                a.SIGNAL_EVENT: event.event,
                a.WORKFLOW_NAME: event.run.type,
                a.RUN_ID: event.run.id,
            },
        )
        span.end()

    # -- what a run publishes, and forks ------------------------------------------------

    def value_set(self, event: observe.ValueSet) -> None:
        held = self._held(self._attempts, id(event.run), event.run)
        if held is not None:
            held.span.add_event(
                a.EVENT_VALUE_SET, {a.VALUE_KEY: event.key, a.STEP_NAME: event.step}
            )

    def stream_appended(self, event: observe.StreamAppended) -> None:
        run = event.run
        held = self._held(self._steps, (id(run), event.step), run) or self._held(
            self._attempts, id(run), run
        )
        if held is not None:
            held.span.add_event(
                a.EVENT_STREAM_APPENDED,
                {
                    a.STREAM_KEY: event.key,
                    a.STREAM_ITEMS: event.items,
                    a.STREAM_FIRST_OFFSET: event.first,
                    a.STREAM_LAST_OFFSET: event.last,
                    a.STEP_NAME: event.step,
                },
            )

    def stream_closed(self, event: observe.StreamClosed) -> None:
        held = self._held(self._attempts, id(event.run), event.run)
        if held is not None:
            held.span.add_event(
                a.EVENT_STREAM_CLOSED, {a.STREAM_KEY: event.key, a.STEP_NAME: event.step}
            )

    def run_forked(self, event: observe.RunForked) -> None:
        """A span of the fork, in the caller's trace (an API request's, a command's): the
        fork stores no trace context, so its first attempt starts a trace of its own."""
        if self._silent():
            return
        run = event.run
        span = self._tracer.start_span(
            f"fork {run.type}",
            kind=SpanKind.PRODUCER,
            attributes={
                a.MESSAGING_SYSTEM: a.SYSTEM,
                a.MESSAGING_OPERATION_TYPE: "send",
                a.MESSAGING_OPERATION_NAME: "fork",
                a.MESSAGING_DESTINATION_NAME: run.type,
                a.MESSAGING_MESSAGE_ID: run.id,
                a.WORKFLOW_NAME: run.type,
                a.RUN_ID: run.id,
                a.RUN_FORKED_FROM: event.forked_from,
                a.STEP_NAME: event.from_step,
            },
        )
        span.end()

    # -- plumbing -----------------------------------------------------------------------

    def _silent(self) -> bool:
        """No SDK: the tracer records nothing, and a span only carries a caller's context
        along. Asked each time: an application may set its provider after making this."""
        provider = self._provider or trace.get_tracer_provider()
        return isinstance(provider, _SILENT)

    def _extract(self, stored: Any) -> tuple[trace.SpanContext | None, trace.SpanContext | None]:
        """The start's span context and the previous attempt's, from a run's trace_context."""
        if not isinstance(stored, dict):
            return None, None
        previous = stored.get("attempt")
        return self._span_context(stored), self._span_context(previous)

    def _span_context(self, carrier: Any) -> trace.SpanContext | None:
        if not isinstance(carrier, Mapping) or "traceparent" not in carrier:
            return None
        text = {k: v for k, v in carrier.items() if isinstance(v, str)}
        found = (self._propagator or propagate.get_global_textmap()).extract(text)
        span_context = trace.get_current_span(found).get_span_context()
        return span_context if span_context.is_valid else None

    def _using(self, spans: dict[Any, _Open], key: Any, run: Run) -> ContextManager[Any]:
        held = self._held(spans, key, run)
        if held is None:
            return _NOTHING
        return trace.use_span(held.span, end_on_exit=False)

    def _held(self, spans: dict[Any, _Open], key: Any, run: Run) -> _Open | None:
        held = spans.get(key)  # a dict read is atomic; writes take the lock
        return held if held is not None and held.run is run else None

    def _end(self, spans: dict[Any, _Open], key: Any, held: _Open) -> None:
        with self._lock:
            if spans.get(key) is held:
                del spans[key]
        held.span.end(end_time=held.end)


def _attempt_attributes(run: Run, worker_id: str) -> dict[str, Any]:
    found: dict[str, Any] = {
        a.MESSAGING_SYSTEM: a.SYSTEM,
        a.MESSAGING_OPERATION_TYPE: "process",
        a.MESSAGING_OPERATION_NAME: "process",
        a.MESSAGING_DESTINATION_NAME: run.type,
        a.MESSAGING_MESSAGE_ID: run.id,
        a.MESSAGING_CLIENT_ID: worker_id,
        a.WORKFLOW_NAME: run.type,
        a.RUN_ID: run.id,
        a.RUN_ATTEMPT: run.attempt + 1,
    }
    if run.code_version is not None:
        found[a.WORKFLOW_VERSION] = run.code_version
    if run.parent_id is not None:
        found[a.RUN_PARENT_ID] = run.parent_id
    return found


def _wait_attributes(kind: str, wait: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {a.WAIT_KIND: kind}
    for key, name in (
        ("step", a.STEP_NAME),
        ("until", a.WAIT_UNTIL),
        ("event", a.SIGNAL_EVENT),
        ("child_id", a.WAIT_CHILD_ID),
    ):
        if isinstance(wait.get(key), str):
            found[name] = wait[key]
    return found


def _qualname(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("simpleworkflow")
    except metadata.PackageNotFoundError:
        return None
