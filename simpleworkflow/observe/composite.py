"""Several observers as one: the composite the engine holds, which calls each observer
and logs and ignores what one raises."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager as ContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Final

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
from simpleworkflow.observe.hooks import Observer

if TYPE_CHECKING:
    from simpleworkflow.models import Run

_log = logging.getLogger("simpleworkflow.observe")

#: The most a trace context stored with a run may take, as JSON: W3C allows 512
#: characters of ``tracestate``, and baggage of a few kilobytes.
MAX_TRACE_CONTEXT_BYTES: Final = 8192


class Observers(Observer):
    """Several observers as one: calls each in the order registered, and logs and
    ignores what one raises. The engine holds one of these (empty: nothing is called)."""

    #: Bumped by every ``add`` anywhere: composites nest, so a cache of which observers
    #: override a hook (``_listeners``) is good only while no composite has changed.
    _generation: ClassVar[int] = 0

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self._observers: list[Observer] = []
        self._complained: set[tuple[int, str]] = set()
        self._listening: dict[str, tuple[int, list[Observer]]] = {}
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

    def listens(self, hook: str) -> bool:
        """Whether an observer (in a nested composite too) overrides ``hook``: else the
        engine need not build the event it would be given (see :func:`listens`)."""
        return bool(self._listeners(hook))

    def _each(self, hook: str, event: object) -> None:
        cached = self._listening.get(hook)  # ``_listeners`` inlined: once per event
        if cached is not None and cached[0] == Observers._generation:
            listeners = cached[1]
        else:
            listeners = self._listeners(hook)
        for observer in listeners:
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

    def value_set(self, event: ValueSet) -> None:
        self._each("value_set", event)

    def stream_appended(self, event: StreamAppended) -> None:
        self._each("stream_appended", event)

    def stream_closed(self, event: StreamClosed) -> None:
        self._each("stream_closed", event)

    def run_forked(self, event: RunForked) -> None:
        self._each("run_forked", event)

    def around_attempt(self, run: Run, worker_id: str) -> ContextManager[None]:
        enclosing = self._listeners("around_attempt")
        if not enclosing:
            return contextlib.nullcontext()
        return self._around("around_attempt", enclosing, lambda o: o.around_attempt(run, worker_id))

    def around_step(self, run: Run, step: str, attempt: int) -> ContextManager[None]:
        enclosing = self._listeners("around_step")
        if not enclosing:
            return contextlib.nullcontext()
        return self._around("around_step", enclosing, lambda o: o.around_step(run, step, attempt))

    def around_start(self, type: str | None, parent: Run | None = None) -> ContextManager[None]:
        enclosing = self._listeners("around_start")
        if not enclosing:
            return contextlib.nullcontext()
        return self._around("around_start", enclosing, lambda o: o.around_start(type, parent))

    def around_signal(self, run_id: str, event: str) -> ContextManager[None]:
        enclosing = self._listeners("around_signal")
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

    def watch_starts(self) -> bool:
        """Whether an observer encloses starts (``around_start``) or injects a trace
        context to store with the runs: else a start has nothing to enter or ask."""
        return bool(self._listeners("around_start") or self._listeners("inject"))

    def _listeners(self, hook: str) -> list[Observer]:
        """The observers whose ``hook`` does something: the base class's does nothing (an
        ``around_*`` returns a null context), and calling it, or entering its context, for
        every attempt and step was most of what an observer that only counts cost. Worked
        out again only after an ``add``."""
        cached = self._listening.get(hook)
        if cached is not None and cached[0] == Observers._generation:
            return cached[1]
        found = [o for o in self._observers if listens(o, hook)]
        self._listening[hook] = (Observers._generation, found)
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


def listens(observer: Observer, hook: str) -> bool:
    """Whether ``observer``'s ``hook`` is its own, not the base class's that does nothing;
    for a composite, whether one of its observers' is. The engine builds an event only
    for a hook someone listens to: most runs are watched by an observer or two that each
    override a hook or two. (A composite asks again only after an ``add``: a hook set on
    an instance later is not seen.)"""
    if isinstance(observer, Observers):  # asked for every run: the cache read inlined
        cached = observer._listening.get(hook)
        if cached is not None and cached[0] == Observers._generation:
            return bool(cached[1])
        return bool(observer._listeners(hook))
    return getattr(getattr(observer, hook), "__func__", None) is not getattr(Observer, hook)
