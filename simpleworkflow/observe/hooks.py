"""The observer's hooks: what the engine calls, each a no-op until a subclass overrides it."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager as ContextManager
from typing import TYPE_CHECKING

from simpleworkflow.observe.events import (
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

if TYPE_CHECKING:
    from simpleworkflow.models import Run


class Observer:
    """Hooks the engine calls; each does nothing until a subclass overrides it."""

    def run_created(self, event: RunCreated) -> None:
        pass

    def signal_delivered(self, event: SignalDelivered) -> None:
        pass

    def run_claimed(self, event: RunClaimed) -> None:
        pass

    def attempt_started(self, event: AttemptStarted) -> None:
        pass

    def attempt_finished(self, event: AttemptFinished) -> None:
        pass

    def step_started(self, event: StepStarted) -> None:
        pass

    def step_completed(self, event: StepCompleted) -> None:
        pass

    def step_failed(self, event: StepFailed) -> None:
        pass

    def step_retried(self, event: StepRetried) -> None:
        pass

    def run_suspended(self, event: RunSuspended) -> None:
        pass

    def run_resumed(self, event: RunResumed) -> None:
        pass

    def signal_consumed(self, event: SignalConsumed) -> None:
        pass

    def lease_lost(self, event: LeaseLost) -> None:
        pass

    def leases_reaped(self, event: LeasesReaped) -> None:
        pass

    def runs_deleted(self, event: RunsDeleted) -> None:
        pass

    def value_set(self, event: ValueSet) -> None:
        pass

    def stream_appended(self, event: StreamAppended) -> None:
        pass

    def stream_closed(self, event: StreamClosed) -> None:
        pass

    def run_forked(self, event: RunForked) -> None:
        pass

    def around_attempt(self, run: Run, worker_id: str) -> ContextManager[None]:
        """Entered just before the handler is called, left when it returns or raises."""
        return contextlib.nullcontext()

    def around_step(self, run: Run, step: str, attempt: int) -> ContextManager[None]:
        """Entered just before a step's function is called, left when it returns or raises."""
        return contextlib.nullcontext()

    def around_start(self, type: str | None, parent: Run | None = None) -> ContextManager[None]:
        """Entered before a client stores a run of ``type`` (None: the several runs of a
        ``start_many``), left once ``run_created`` has fired for them or the write failed.
        ``parent`` is the run whose workflow starts a child (on the worker's loop)."""
        return contextlib.nullcontext()

    def around_signal(self, run_id: str, event: str) -> ContextManager[None]:
        """Entered before a client stores signal ``event`` for ``run_id``, left once
        ``signal_delivered`` has fired or the write failed."""
        return contextlib.nullcontext()

    def inject(self, carrier: dict[str, str]) -> None:
        """Add to ``carrier`` what identifies the current trace, as W3C trace context
        (``traceparent``, ``tracestate``; an OpenTelemetry propagator writes exactly this).

        Asked inside ``around_start``: stored with the runs started, a worker continues
        their trace. Asked inside ``around_attempt``: stored with what the attempt gives
        back (a retry, a suspension), for the next attempt to link to."""
