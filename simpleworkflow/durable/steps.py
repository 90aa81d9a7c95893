"""Steps: run a step's function once, journal what it returned, retry it when it raises.

One skeleton serves every step: plain (``ctx.step``) and transactional
(``ctx.transaction``), of an async body and of a ``def`` one. :func:`_skeleton` is a
generator, as a backend's op is: it decides, and yields what must be done on the worker's
loop (a read or write of the journal, as a coroutine) or marks where the step begins
(:data:`BEGIN`) and where its function runs (:data:`CALL`). Two thin drivers answer
it: :func:`run_async` awaits on the loop, :func:`run_sync` runs on a ``def`` body's thread
and hands loop work over with ``AttemptState.bridge``. What differs between a plain step
and a transactional one (how it waits to begin, calls its function, journals its output)
is a :class:`Step` object: :class:`Plain` here, ``transactional.Transactional``.

A step's function runs only when the journal does not answer it: on the worker's loop
(an ``async def`` function of an async body), in the worker's step pool (a plain
``def`` of an async body), or on the handler's thread (any step of a ``def`` body; one
with a timeout on the loop or in the step pool instead, see ``timeouts``). Its
observers' ``around_step`` is entered on that same thread, so that a tracer's span is
current while the user's code runs; a step answered by the journal fires no hook.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from datetime import datetime
from typing import Any, Protocol, TypeVar

from simpleworkflow import durations, errors, logs, observe, payloads
from simpleworkflow.codec import result_hint
from simpleworkflow.durable import races, streams, timeouts, tracebacks
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.journal import Durable
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.durable.replay import answered, gave_up
from simpleworkflow.models import JournalEntry
from simpleworkflow.retry import DEFAULT_STEP_POLICY, RetryPolicy

T = TypeVar("T")


class _Mark:
    """A point of the skeleton where the driver acts through the :class:`Step`."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: The step is about to begin: wait until it may (see ``holding``), note when it starts.
BEGIN = _Mark("BEGIN")
#: Call the step's function; its value (or exception) goes back into the skeleton.
CALL = _Mark("CALL")
#: What the skeleton yields: work for the worker's loop, or one of the marks.
Request = Coroutine[Any, Any, Any] | _Mark


class Step(Protocol):
    """What differs between kinds of step; one object per call of a step, made by
    ``Context``. The ``*_async`` methods run on the worker's loop (an async body), the
    ``*_sync`` ones on a ``def`` body's thread."""

    name: str
    #: The step's function (its return annotation types its output, with a codec).
    fn: Callable[..., Any]

    @property
    def text(self) -> str | None:
        """The output as journaled (by :meth:`encode`, or the transaction that journals it)."""

    def prepare(self, attempt: int) -> None:
        """Get ready to run attempt ``attempt`` (from 1) of the function; no I/O."""

    async def begin_async(self) -> None: ...

    def begin_sync(self) -> None: ...

    async def call_async(self) -> Any: ...

    def call_sync(self) -> Any: ...

    def encode(self, value: Any) -> None:
        """Check that ``value`` can be journaled (raising makes the step fail)."""

    def journal(self, value: Any) -> Coroutine[Any, Any, None] | None:
        """Journal the step's ``value``: the loop's work to do, or ``None`` if done."""


def _skeleton(
    state: AttemptState, step: Step, retry: RetryPolicy | None
) -> Generator[Request, Any, Any]:
    """Step ``step.name``: its journaled output, or its function's, now journaled."""
    durable, name = state.durable, step.name
    entry = yield durable.begin(name, JournalKind.STEP, state.is_cancelled())
    if entry is not None and answered(entry):
        value = journaled(entry)
        return value if durable.codec is None else typed(durable, step, value)
    attempt = attempt_of(entry)
    rig = durable.backend.rig  # a test's doubles of steps (simpleworkflow.testing)
    if rig is not None:
        step.fn = rig.steps.stand_in(state.run.type, name, step.fn)
    step.prepare(attempt)
    yield BEGIN
    began = notify_started(state, name, attempt)
    try:
        appending = streams.starting(state, name)
        try:
            value = yield CALL
        finally:
            streams.leaving(appending)
        took = time.monotonic() - began
        if (written := streams.finishing(state, name)) is not None:
            yield written  # the step's stream items, all stored before it is journaled
        step.encode(value)
    except Exception as exc:
        took = time.monotonic() - began
        if (written := streams.finishing(state, name)) is not None:
            yield written  # what the failed try appended stays: a retry leaves it out
        outcome = yield failed(durable, name, entry, retry, exc)
        notify_failed(state, name, attempt, took, exc, outcome)
        raise outcome from outcome.__cause__  # a StepFailed's: the user's error
    write = step.journal(value)
    if write is not None:
        yield write
    notify_completed(state, name, attempt, took)
    if durable.codec is not None:  # what every replay returns: the journaled JSON, typed
        assert step.text is not None
        return typed(durable, step, json.loads(step.text))
    return value


async def run_async(state: AttemptState, step: Step, retry: RetryPolicy | None) -> Any:
    """Drive the skeleton in an async body, on the worker's loop."""
    durable = state.durable
    with durable.calling(), logs.in_step(step.name):
        core = _skeleton(state, step, retry)
        reply: Any = None
        failure: BaseException | None = None
        while True:
            try:
                request = core.send(reply) if failure is None else core.throw(failure)
            except StopIteration as stop:
                return stop.value
            reply = failure = None
            try:
                if request is BEGIN:
                    await step.begin_async()
                elif request is CALL:
                    try:
                        with races.not_reading():  # the step's code: what it does happens now
                            reply = await step.call_async()
                    finally:
                        races.note_now(durable.db_now)
                else:
                    assert not isinstance(request, _Mark)
                    reply = await request
            except BaseException as exc:  # back into the skeleton, where it was yielded
                failure = exc


def run_sync(state: AttemptState, step: Step, retry: RetryPolicy | None) -> Any:
    """Drive the skeleton in a ``def`` body, on its thread; the journal is read and
    written on the worker's loop."""
    with logs.in_step(step.name):
        core = _skeleton(state, step, retry)
        reply: Any = None
        failure: BaseException | None = None
        while True:
            try:
                request = core.send(reply) if failure is None else core.throw(failure)
            except StopIteration as stop:
                return stop.value
            reply = failure = None
            try:
                if request is BEGIN:
                    step.begin_sync()
                elif request is CALL:
                    reply = step.call_sync()
                else:
                    assert not isinstance(request, _Mark)
                    reply = state.bridge(request)
            except BaseException as exc:
                failure = exc


class Plain:
    """A plain step (``ctx.step``): its function runs, then its output is journaled in a
    write of its own (the worker's group commit)."""

    __slots__ = (
        "args",
        "attempt",
        "fn",
        "is_coroutine",
        "kwargs",
        "name",
        "started_at",
        "state",
        "text",
        "timeout",
    )

    def __init__(
        self,
        state: AttemptState,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout: float | None = None,
    ) -> None:
        self.state, self.name, self.fn, self.args, self.kwargs = state, name, fn, args, kwargs
        #: Seconds a try may take (see ``timeouts``); ``None``: as long as it takes.
        self.timeout = timeout
        self.attempt = 1
        self.started_at: datetime | None = None
        self.text: str | None = None
        #: Whether ``fn`` is an ``async def``: asked once, by begin_async (an async body).
        self.is_coroutine = False

    def prepare(self, attempt: int) -> None:
        self.attempt = attempt

    async def begin_async(self) -> None:
        state = self.state
        self.is_coroutine = inspect.iscoroutinefunction(self.fn)
        if self.is_coroutine:  # else it begins on a thread: see beginning()
            while not may_begin(state):  # no await from here to the function's call
                await state.durable.holding.confirm()
        self.started_at = state.durable.db_now()

    def begin_sync(self) -> None:
        begin_on_thread(self.state)
        self.started_at = self.state.durable.db_now()

    async def call_async(self) -> Any:
        state, fn, seconds = self.state, self.fn, self.timeout
        if self.is_coroutine:  # begin_async came first, as the skeleton yields BEGIN first
            with state.observers.around_step(state.run, self.name, self.attempt):
                if seconds is None:
                    return await fn(*self.args, **self.kwargs)
                return await timeouts.within(fn(*self.args, **self.kwargs), seconds, self.name)
        call = beginning(state, enclosed(state, self.name, self.attempt, fn))
        if seconds is None:
            return await state.in_thread(call, *self.args, **self.kwargs)
        return await timeouts.within(
            state.in_thread(call, *self.args, **self.kwargs), seconds, self.name
        )

    def call_sync(self) -> Any:
        state = self.state
        if self.timeout is not None:
            return self._timed_sync(self.timeout)
        with state.observers.around_step(state.run, self.name, self.attempt):
            value = self.fn(*self.args, **self.kwargs)
            if inspect.isawaitable(value):
                value = state.bridge(_awaited(value))
        return value

    def _timed_sync(self, seconds: float) -> Any:
        """:meth:`call_sync` with a timeout: the function runs on the worker's loop (an
        ``async def`` one) or in its step pool, so that this thread can stop waiting."""
        state, fn, args, kwargs = self.state, self.fn, self.args, self.kwargs
        if inspect.iscoroutinefunction(fn):
            with state.observers.around_step(state.run, self.name, self.attempt):
                return state.bridge(timeouts.within(fn(*args, **kwargs), seconds, self.name))
        call = beginning(state, enclosed(state, self.name, self.attempt, fn))
        threaded = timeouts.in_thread(state, call, *args, **kwargs)
        return state.bridge(timeouts.within(threaded, seconds, self.name))

    def encode(self, value: Any) -> None:
        self.text = self.state.durable.encode(self.name, value)

    def journal(self, value: Any) -> Coroutine[Any, Any, None]:
        return self.state.durable.journal(
            self.name,
            JournalKind.STEP,
            value,
            attempts=self.attempt,
            started_at=self.started_at,
            text=self.text,
        )


def typed(durable: Durable, step: Step, data: Any) -> Any:
    """A step's journaled output as its function's return annotation types it, through
    the app's codec; data that does not fit fails the run (it would on every replay)."""
    assert durable.codec is not None
    what = f"output of step {step.name!r}"
    try:
        return durable.codec.decode(data, result_hint(step.fn), what=what)
    except errors.InvalidPayload as exc:
        raise durable.refuse(exc) from None


def journaled(entry: JournalEntry) -> Any:
    """A journaled step's output, or its StepFailed again if it gave up."""
    if gave_up(entry):
        raise errors.StepFailed(entry.step_name, entry.attempts, entry.output["gave_up"])
    return entry.output


async def failed(
    durable: Durable,
    name: str,
    entry: JournalEntry | None,
    policy: RetryPolicy | None,
    exc: Exception,
) -> BaseException:
    """Record a failed step attempt. Returns what to raise: a suspension until the
    retry, or :class:`~simpleworkflow.errors.StepFailed` when no attempt is left."""
    policy = policy or DEFAULT_STEP_POLICY
    done = entry.attempts if entry is not None else 0
    # Made storable as a run's errors are: a message the journal or the suspension
    # could not hold would fail this write, and the step would run again as a retry
    # of the whole run.
    error = {
        "type": payloads.storable(type(exc).__name__),
        "message": payloads.storable(str(exc))[:2000],
    }
    if isinstance(exc, errors.RetryAfter):
        # Refused past 100 years, as every duration is: raised in the body, named.
        delay = durations.to_seconds(exc.delay, what="RetryAfter's delay")  # type: ignore[arg-type]
        return await _retry_later(durable, name, done, "step_deferred", delay, {"error": error})
    attempt = done + 1
    limit = policy.max_attempts or DEFAULT_STEP_POLICY.max_attempts or 1
    # An output no store can hold would be the same on every attempt.
    retryable = policy.retries(exc) and not isinstance(exc, errors.InvalidPayload)
    if retryable and attempt < limit:
        data = {"error": error, "attempt": attempt}
        return await _retry_later(
            durable, name, attempt, "step_failed", policy.delay(attempt), data
        )
    message = payloads.storable(f"{type(exc).__name__}: {exc}")[:2000]
    error["traceback"] = payloads.storable(tracebacks.describe(exc, limit=8000))
    data = {"step": name, "attempt": attempt, "final": True, "error": error}
    # Journaled as given up, so that every later replay (after a compensation's
    # sleep or retry, say) raises the same StepFailed instead of running it again.
    await durable.journal(
        name,
        JournalKind.STEP,
        {"gave_up": message},
        attempts=attempt,
        status="retrying",
        events=[{"type": "step_failed", "data": data}],
    )
    failure = errors.StepFailed(name, attempt, message)
    failure.__cause__ = exc
    return failure


async def _retry_later(
    durable: Durable, name: str, attempts: int, event: str, delay: float, data: dict[str, Any]
) -> errors.Suspend:
    await durable.journal(
        name, JournalKind.STEP, None, attempts=attempts, status="retrying", events=[]
    )
    return durable.waits.suspend(
        errors.Suspend(
            name, event, data=data, waiting_for={"kind": "retry", "step": name}, delay=delay
        )
    )


async def _awaited(value: Awaitable[T]) -> T:
    return await value


def attempt_of(entry: JournalEntry | None) -> int:
    """The step's attempt about to run, from 1, counted across the run's attempts as the
    journal counts them (a ``RetryAfter`` does not use one up)."""
    return (entry.attempts if entry is not None else 0) + 1


def may_begin(state: AttemptState) -> bool:
    """Whether a step's function may be called now, right after this returns: the attempt
    was not asked to stop, and knows recently enough that it holds the run (see
    ``holding``). Raises :class:`~simpleworkflow.errors.Cancelled` when asked to stop."""
    if state.is_cancelled():
        raise errors.Cancelled(state.stop_reason or "stop requested")
    return state.durable.holding.fresh()


def begin_on_thread(state: AttemptState) -> None:
    """Return when a step's function may be called on this thread (not the loop's)."""
    while not may_begin(state):
        state.bridge(state.durable.holding.confirm())


def beginning(state: AttemptState, fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, called on a thread of the step pool once it may begin there: the pool may
    start it long after the loop checked."""

    def call(*args: Any, **kwargs: Any) -> T:
        begin_on_thread(state)
        return fn(*args, **kwargs)

    return call


def enclosed(
    state: AttemptState, name: str, attempt: int, fn: Callable[..., Any]
) -> Callable[..., Any]:
    """``fn`` inside the observers' ``around_step``, entered on the thread that calls it
    (``fn`` itself when no observer encloses steps)."""
    observers = state.observers
    if not observers.listens("around_step"):
        return fn

    def call(*args: Any, **kwargs: Any) -> Any:
        with observers.around_step(state.run, name, attempt):
            return fn(*args, **kwargs)

    return call


# The hooks below cost nothing without observers of them: an event is made only for a
# hook an observer overrides (see ``observe.listens``).


def notify_started(state: AttemptState, name: str, attempt: int) -> float:
    """Fire ``step_started``; return the monotonic time the step's code starts."""
    if state.observers.listens("step_started"):
        state.observers.step_started(observe.StepStarted(state.run, name, attempt))
    return time.monotonic()


def notify_completed(state: AttemptState, name: str, attempt: int, took: float) -> None:
    if state.observers.listens("step_completed"):
        state.observers.step_completed(observe.StepCompleted(state.run, name, attempt, took))


def notify_failed(
    state: AttemptState,
    name: str,
    attempt: int,
    took: float,
    exc: Exception,
    outcome: BaseException,
) -> None:
    """Fire ``step_failed`` (the step log's too), then ``step_retried`` when ``outcome``
    is a retry's wait."""
    observers = state.observers
    failed = observers.listens("step_failed")
    if failed or state.step_log is not None:
        retrying = isinstance(outcome, errors.Suspend)
        event = observe.StepFailed(state.run, name, attempt, took, exc, retrying)
        if state.step_log is not None:
            state.step_log.step_failed(event)
        if failed:
            observers.step_failed(event)
    if isinstance(outcome, errors.Suspend) and observers.listens("step_retried"):
        observers.step_retried(observe.StepRetried(state.run, name, attempt, outcome.delay))
