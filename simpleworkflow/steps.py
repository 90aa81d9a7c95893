"""Steps: run a step's function once, journal what it returned, retry it when it raises.

A step's function runs only when the journal does not answer it: on the worker's loop
(an ``async def`` function of an async body), in the worker's step pool (a plain
``def`` of an async body), or on the handler's thread (any step of a ``def`` body). Its
observers' ``around_step`` is entered on that same thread, so that a tracer's span is
current while the user's code runs; a step answered by the journal fires no hook.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from simpleworkflow import durations, errors, logs, observe, payloads, races, tracebacks
from simpleworkflow.attempt_state import AttemptState
from simpleworkflow.durable import Durable
from simpleworkflow.models import JournalEntry
from simpleworkflow.replay import answered, gave_up
from simpleworkflow.retry import DEFAULT_STEP_POLICY, RetryPolicy

T = TypeVar("T")


async def run_async(
    state: AttemptState,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    retry: RetryPolicy | None,
) -> Any:
    """Step ``name`` of an async body: its journaled output, or ``fn``'s, now journaled."""
    durable = state.durable
    with durable.calling(), logs.in_step(name):
        entry = await durable.begin(name, "step", state.is_cancelled())
        if entry is not None and answered(entry):
            return journaled(entry)
        attempt = attempt_of(entry)
        if inspect.iscoroutinefunction(fn):  # else it begins on a thread: see beginning()
            while not may_begin(state):  # no await from here to the function's call
                await durable.holding.confirm()
        started_at = durable.db_now()
        began = notify_started(state, name, attempt)
        try:
            with races.not_reading():  # the step's code: what it does happens now
                if inspect.iscoroutinefunction(fn):
                    with state.observers.around_step(state.run, name, attempt):
                        value = await fn(*args, **kwargs)
                else:
                    value = await state.in_thread(
                        beginning(state, enclosed(state, name, attempt, fn)), *args, **kwargs
                    )
            took = time.monotonic() - began
            races.note_now(durable.db_now)
            text = durable.encode(name, value)
        except Exception as exc:
            took = time.monotonic() - began
            races.note_now(durable.db_now)
            outcome = await failed(durable, name, entry, retry, exc)
            notify_failed(state, name, attempt, took, exc, outcome)
            raise outcome from outcome.__cause__  # a StepFailed's: the user's error
        await durable.journal(
            name, "step", value, attempts=attempt, started_at=started_at, text=text
        )
        notify_completed(state, name, attempt, took)
        return value


def run_sync(
    state: AttemptState,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    retry: RetryPolicy | None,
) -> Any:
    """Step ``name`` of a ``def`` body, on its thread; the journal is read and written
    on the worker's loop."""
    with logs.in_step(name):
        durable = state.durable
        entry = state.bridge(durable.begin(name, "step", state.is_cancelled()))
        if entry is not None and answered(entry):
            return journaled(entry)
        attempt = attempt_of(entry)
        begin_on_thread(state)
        started_at = durable.db_now()
        began = notify_started(state, name, attempt)
        try:
            with state.observers.around_step(state.run, name, attempt):
                value = fn(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = state.bridge(_awaited(value))
            took = time.monotonic() - began
            text = durable.encode(name, value)
        except Exception as exc:
            took = time.monotonic() - began
            outcome = state.bridge(failed(durable, name, entry, retry, exc))
            notify_failed(state, name, attempt, took, exc, outcome)
            raise outcome from outcome.__cause__  # a StepFailed's: the user's error
        state.bridge(
            durable.journal(name, "step", value, attempts=attempt, started_at=started_at, text=text)
        )
        notify_completed(state, name, attempt, took)
        return value


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
        "step",
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
    await durable.journal(name, "step", None, attempts=attempts, status="retrying", events=[])
    return durable.suspend(
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
    """``fn`` inside the observers' ``around_step``, entered on the thread that calls it."""
    observers = state.observers
    if not observers:
        return fn

    def call(*args: Any, **kwargs: Any) -> Any:
        with observers.around_step(state.run, name, attempt):
            return fn(*args, **kwargs)

    return call


# The hooks below cost nothing without observers: the events are made only for them.


def notify_started(state: AttemptState, name: str, attempt: int) -> float:
    """Fire ``step_started``; return the monotonic time the step's code starts."""
    if state.observers:
        state.observers.step_started(observe.StepStarted(state.run, name, attempt))
    return time.monotonic()


def notify_completed(state: AttemptState, name: str, attempt: int, took: float) -> None:
    if state.observers:
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
    if not observers and state.step_log is None:
        return
    retrying = isinstance(outcome, errors.Suspend)
    event = observe.StepFailed(state.run, name, attempt, took, exc, retrying)
    if state.step_log is not None:
        state.step_log.step_failed(event)
    if not observers:
        return
    observers.step_failed(event)
    if isinstance(outcome, errors.Suspend):
        observers.step_retried(observe.StepRetried(state.run, name, attempt, outcome.delay))
