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

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Final

if TYPE_CHECKING:
    from simpleworkflow.models import Run

_log = logging.getLogger("simpleworkflow.observe")

#: ``AttemptFinished.outcome``: what became of the attempt.
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"  # for good: no attempt follows
RETRIED: Final = "retried"  # failed; the run is due again after a backoff
SUSPENDED: Final = "suspended"  # waits for a sleep, a signal, a child or a step retry
CANCELLED: Final = "cancelled"
LEASE_LOST: Final = "lease_lost"  # another worker may hold the run now
STOPPED: Final = "stopped"  # the worker stopped under it: the run is due again
#: ended ``succeeded`` and carried on by a new run (``AttemptFinished.continued_as``)
CONTINUED: Final = "continued_as_new"

#: ``RunSuspended.kind``: what a suspended run waits for.
SLEEP: Final = "sleep"
SIGNAL: Final = "signal"
CHILD: Final = "child"
RETRY: Final = "retry"  # a step's retry, after its backoff
THROTTLE: Final = "throttle"  # a rate limit's next window (ctx.rate_limit)
ANY: Final = "any"  # several of the above (a race or a gather): the first one wakes it

#: The most a trace context stored with a run may take, as JSON: W3C allows 512
#: characters of ``tracestate``, and baggage of a few kilobytes.
MAX_TRACE_CONTEXT_BYTES: Final = 8192


@dataclass(frozen=True, slots=True)
class RunCreated:
    """A client stored a run; ``created`` is False when an idempotency key found it.
    ``committed`` is False when it was written inside the caller's transaction
    (``connection=``), which may still roll back."""

    run: Run
    created: bool = True
    committed: bool = True


@dataclass(frozen=True, slots=True)
class SignalDelivered:
    """A client stored a signal for ``run_id`` (a run waiting for it is woken);
    ``committed`` as in :class:`RunCreated`."""

    run_id: str
    event: str
    committed: bool = True


@dataclass(frozen=True, slots=True)
class RunClaimed:
    """A worker leased ``run``; ``queued_for`` is seconds from due to claimed."""

    run: Run
    worker_id: str
    queued_for: float


@dataclass(frozen=True, slots=True)
class AttemptStarted:
    """The handler of ``run`` is about to be called (``run.attempt`` counts from 0)."""

    run: Run
    worker_id: str


@dataclass(frozen=True, slots=True)
class AttemptFinished:
    """One attempt ended: ``outcome`` is one of the constants above.

    ``error`` is the exception's message for ``failed`` and ``retried``; ``retry_in``
    the seconds until the run is due again for ``retried``; ``waits`` the audit events of
    what a ``suspended`` run waits for (``"sleeping"``, ``"waiting, sleeping"``);
    ``continued_as`` the successor of a run that ``continued_as_new``."""

    run: Run
    worker_id: str
    outcome: str
    duration: float
    error: str | None = None
    retry_in: float | None = None
    waits: str | None = None
    #: For ``continued_as_new``: the id of the run that carries this one on.
    continued_as: str | None = None


@dataclass(frozen=True, slots=True)
class StepStarted:
    """Step ``step`` of ``run`` starts its ``attempt`` (from 1) in this attempt of the run."""

    run: Run
    step: str
    attempt: int


@dataclass(frozen=True, slots=True)
class StepCompleted:
    run: Run
    step: str
    attempt: int
    duration: float


@dataclass(frozen=True, slots=True)
class StepFailed:
    """A step's attempt raised; ``retrying`` says whether its policy retries it."""

    run: Run
    step: str
    attempt: int
    duration: float
    error: BaseException
    retrying: bool


@dataclass(frozen=True, slots=True)
class StepRetried:
    """A failed step is retried after ``delay`` seconds (in this attempt or a later one)."""

    run: Run
    step: str
    attempt: int
    delay: float


@dataclass(frozen=True, slots=True)
class RunSuspended:
    """``run`` gave its lease back until what it waits for happens (``until``: at the latest).

    ``waiting_for`` is what the run stores (see docs/schema.md): the wait's step name, the
    signal's event, the child's id ..."""

    run: Run
    kind: str
    until: datetime | None
    waiting_for: Any = None


@dataclass(frozen=True, slots=True)
class RunResumed:
    """A suspended run was claimed again; ``kind`` is what it had waited for."""

    run: Run
    kind: str


@dataclass(frozen=True, slots=True)
class SignalConsumed:
    """``run`` took signal ``event`` that it waited for."""

    run: Run
    event: str


@dataclass(frozen=True, slots=True)
class LeaseLost:
    """A worker stopped ``run``'s handler: its lease went to another worker, or could not
    be renewed in time (``reason``)."""

    run: Run
    worker_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class LeasesReaped:
    """A worker gave back runs whose leases expired under a crashed or frozen worker."""

    run_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunsDeleted:
    """Retention deleted ``count`` finished runs of ``type``."""

    type: str
    count: int


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


class Observers(Observer):
    """Several observers as one: calls each in the order registered, and logs and
    ignores what one raises. The engine holds one of these (empty: nothing is called)."""

    #: Bumped by every ``add`` anywhere: composites nest, so a cache of which observers
    #: enclose (``_enclosing``) is good only while no composite has changed.
    _generation: ClassVar[int] = 0

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self._observers: list[Observer] = []
        self._complained: set[tuple[int, str]] = set()
        self._enclosers: dict[str, tuple[int, list[Observer]]] = {}
        for observer in observers:
            self.add(observer)

    def add(self, observer: Observer) -> None:
        if not isinstance(observer, Observer):
            raise TypeError(
                f"an observer must be an instance of simpleworkflow.observe.Observer "
                f"(subclass it and override the hooks you need), not {observer!r:.60}"
            )
        self._observers.append(observer)
        Observers._generation += 1

    def __bool__(self) -> bool:
        return bool(self._observers)

    def __iter__(self) -> Iterator[Observer]:
        return iter(self._observers)

    def _each(self, hook: str, event: object) -> None:
        for observer in self._observers:
            try:
                getattr(observer, hook)(event)
            except Exception:
                self._complain(observer, hook)

    def _complain(self, observer: Observer, hook: str) -> None:
        """Log an observer's error with its traceback the first time, then quietly: a
        broken metrics exporter must not flood the log once per run."""
        key = (id(observer), hook)
        level = logging.DEBUG if key in self._complained else logging.WARNING
        self._complained.add(key)
        _log.log(level, "observer %r raised in %s; ignored", observer, hook, exc_info=True)

    def run_created(self, event: RunCreated) -> None:
        self._each("run_created", event)

    def signal_delivered(self, event: SignalDelivered) -> None:
        self._each("signal_delivered", event)

    def run_claimed(self, event: RunClaimed) -> None:
        self._each("run_claimed", event)

    def attempt_started(self, event: AttemptStarted) -> None:
        self._each("attempt_started", event)

    def attempt_finished(self, event: AttemptFinished) -> None:
        self._each("attempt_finished", event)

    def step_started(self, event: StepStarted) -> None:
        self._each("step_started", event)

    def step_completed(self, event: StepCompleted) -> None:
        self._each("step_completed", event)

    def step_failed(self, event: StepFailed) -> None:
        self._each("step_failed", event)

    def step_retried(self, event: StepRetried) -> None:
        self._each("step_retried", event)

    def run_suspended(self, event: RunSuspended) -> None:
        self._each("run_suspended", event)

    def run_resumed(self, event: RunResumed) -> None:
        self._each("run_resumed", event)

    def signal_consumed(self, event: SignalConsumed) -> None:
        self._each("signal_consumed", event)

    def lease_lost(self, event: LeaseLost) -> None:
        self._each("lease_lost", event)

    def leases_reaped(self, event: LeasesReaped) -> None:
        self._each("leases_reaped", event)

    def runs_deleted(self, event: RunsDeleted) -> None:
        self._each("runs_deleted", event)

    def around_attempt(self, run: Run, worker_id: str) -> ContextManager[None]:
        enclosing = self._enclosing("around_attempt")
        if not enclosing:
            return contextlib.nullcontext()
        return self._around("around_attempt", enclosing, lambda o: o.around_attempt(run, worker_id))

    def around_step(self, run: Run, step: str, attempt: int) -> ContextManager[None]:
        enclosing = self._enclosing("around_step")
        if not enclosing:
            return contextlib.nullcontext()
        return self._around("around_step", enclosing, lambda o: o.around_step(run, step, attempt))

    def around_start(self, type: str | None, parent: Run | None = None) -> ContextManager[None]:
        enclosing = self._enclosing("around_start")
        if not enclosing:
            return contextlib.nullcontext()
        return self._around("around_start", enclosing, lambda o: o.around_start(type, parent))

    def around_signal(self, run_id: str, event: str) -> ContextManager[None]:
        enclosing = self._enclosing("around_signal")
        if not enclosing:
            return contextlib.nullcontext()
        return self._around("around_signal", enclosing, lambda o: o.around_signal(run_id, event))

    def inject(self, carrier: dict[str, str]) -> None:
        self._each("inject", carrier)

    def trace_context(self) -> dict[str, str] | None:
        """What the observers ``inject`` here, ready to store: ``None`` when they add
        nothing, or something no store should hold (not text, or too large)."""
        if not self._observers:
            return None
        carrier: dict[str, str] = {}
        self.inject(carrier)
        if not carrier:
            return None
        valid = all(isinstance(k, str) and isinstance(v, str) for k, v in carrier.items())
        if not valid or len(json.dumps(carrier)) > MAX_TRACE_CONTEXT_BYTES:
            if (0, "trace_context") not in self._complained:  # no observer's id is 0
                self._complained.add((0, "trace_context"))
                _log.warning(
                    "observers injected a trace context that is not text or over %d bytes; "
                    "runs are stored without it: %.200r",
                    MAX_TRACE_CONTEXT_BYTES,
                    carrier,
                )
            return None
        return carrier

    def _enclosing(self, hook: str) -> list[Observer]:
        """The observers whose ``hook`` (an ``around_*``) does something. The base class's
        returns a null context: entering it for every attempt and step was most of what
        an observer that only counts cost. Worked out again only after an ``add``."""
        cached = self._enclosers.get(hook)
        if cached is not None and cached[0] == Observers._generation:
            return cached[1]
        found = [o for o in self._observers if _encloses(o, hook)]
        self._enclosers[hook] = (Observers._generation, found)
        return found

    def _around(
        self, hook: str, observers: list[Observer], make: Callable[[Observer], ContextManager[Any]]
    ) -> _Around:
        return _Around(self, hook, observers, make)


class _Around:
    """Every observer's context manager as one, entered outermost first; one that raises
    on the way in or out is skipped, and the user's exception always goes on. A class (not
    a generator over an ExitStack): it encloses every attempt and step, and costs less."""

    __slots__ = ("_entered", "_hook", "_make", "_observers", "_owner")

    def __init__(
        self,
        owner: Observers,
        hook: str,
        observers: list[Observer],
        make: Callable[[Observer], ContextManager[Any]],
    ) -> None:
        self._owner = owner
        self._hook = hook
        self._observers = observers
        self._make = make
        self._entered: list[tuple[Observer, ContextManager[Any]]] = []

    def __enter__(self) -> None:
        for observer in self._observers:
            try:
                manager = self._make(observer)
                manager.__enter__()
            except Exception:
                self._owner._complain(observer, self._hook)
                continue
            self._entered.append((observer, manager))

    def __exit__(self, *exc_info: Any) -> None:  # None: what the user's code raised goes on
        for observer, manager in reversed(self._entered):
            try:
                manager.__exit__(*exc_info)
            except Exception:
                self._owner._complain(observer, self._hook)


def _encloses(observer: Observer, hook: str) -> bool:
    """Whether ``observer``'s ``hook`` (an ``around_*``) is its own, not the base class's
    null context; for a composite, whether one of its observers' is."""
    if isinstance(observer, Observers):
        return any(_encloses(inner, hook) for inner in observer)
    return getattr(getattr(observer, hook), "__func__", None) is not getattr(Observer, hook)
