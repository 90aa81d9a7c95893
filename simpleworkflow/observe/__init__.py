"""Observers: the one way to watch runs without changing the engine.

Logging, metrics and tracing all want to know when a run is claimed, an attempt ends or
a step is retried. Rather than writing each of them into the worker, the engine calls
the hooks of :class:`Observer` at every point of a run's life, and each concern is an
observer registered on the :class:`~simpleworkflow.App` (worker side) or on a client
(producer side). The core never imports ``prometheus_client`` or OpenTelemetry: those
live in observers of their own.

Hooks are plain methods that receive one frozen event; an observer overrides the ones it
needs. They are called on the thread that runs the code they observe (the worker's event
loop, or a handler's thread for the steps of a ``def`` body), so they must be quick and
thread-safe. An observer that raises is logged and ignored: it never fails a run.

``around_attempt`` and ``around_step`` return context managers that enclose the handler's
and each step's execution, so that a tracer can make its span current while the user's
code runs (context variables carry it into a ``def`` handler's thread); ``around_start``
and ``around_signal`` enclose a client's writes likewise. Inside ``around_start`` and
``around_attempt`` the engine asks for ``inject``: what identifies the trace there (W3C
``traceparent``, ``tracestate``), which it stores with the run, so that the worker that
claims it, in any process, continues that trace.
"""

from simpleworkflow.observe.composite import MAX_TRACE_CONTEXT_BYTES, Observers, listens
from simpleworkflow.observe.events import (
    ANY,
    CANCELLED,
    CHILD,
    CONTINUED,
    FAILED,
    LEASE_LOST,
    RETRIED,
    RETRY,
    SIGNAL,
    SLEEP,
    STOPPED,
    SUCCEEDED,
    SUSPENDED,
    THROTTLE,
    AttemptFinished,
    AttemptStarted,
    LeaseLost,
    LeasesReaped,
    RunClaimed,
    RunCreated,
    RunForked,
    RunResumed,
    RunsDeleted,
    RunSuspended,
    SignalConsumed,
    SignalDelivered,
    StepCompleted,
    StepFailed,
    StepRetried,
    StepStarted,
    StreamAppended,
    StreamClosed,
    ValueSet,
)
from simpleworkflow.observe.hooks import Observer

__all__ = [
    "ANY",
    "CANCELLED",
    "CHILD",
    "CONTINUED",
    "FAILED",
    "LEASE_LOST",
    "MAX_TRACE_CONTEXT_BYTES",
    "RETRIED",
    "RETRY",
    "SIGNAL",
    "SLEEP",
    "STOPPED",
    "SUCCEEDED",
    "SUSPENDED",
    "THROTTLE",
    "AttemptFinished",
    "AttemptStarted",
    "LeaseLost",
    "LeasesReaped",
    "Observer",
    "Observers",
    "RunClaimed",
    "RunCreated",
    "RunForked",
    "RunResumed",
    "RunSuspended",
    "RunsDeleted",
    "SignalConsumed",
    "SignalDelivered",
    "StepCompleted",
    "StepFailed",
    "StepRetried",
    "StepStarted",
    "StreamAppended",
    "StreamClosed",
    "ValueSet",
    "listens",
]
