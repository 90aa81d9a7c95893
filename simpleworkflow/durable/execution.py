"""One attempt of one run: call the handler, and turn what happened into an outcome."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import functools
from collections.abc import Awaitable, Mapping
from typing import Any

from simpleworkflow import errors, payloads
from simpleworkflow.backends.base import Continuation, Failure, Lease, Success, Suspension
from simpleworkflow.codec import payload_hint
from simpleworkflow.durable import compensations, continuation, tracebacks
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.context import Context
from simpleworkflow.durable.handler_threads import HandlerThreads
from simpleworkflow.handlers import Definition
from simpleworkflow.models import Unreadable

MAX_ERROR_CHARS = 16_000
TIMED_OUT = "timeout"  # the stop reason of an attempt that ran past its timeout


async def attempt(
    definition: Definition,
    state: AttemptState,
    executor: HandlerThreads | concurrent.futures.Executor,
    max_result_bytes: int = payloads.DEFAULT_MAX_BYTES,
) -> Success | Failure | Suspension | Continuation | None:
    """Run the handler once. ``None`` means there is nothing to record: it was asked to
    stop, or lost its lease. An outcome that gives the run back carries the attempt's
    trace context, for the next attempt to link to.

    The handler is awaited here, through :func:`call` alone: every level of coroutines
    between the worker and the handler costs each run."""
    lease = state.lease
    deadline = lease.run.deadline
    if deadline is not None and lease.claimed_at is not None and lease.claimed_at >= deadline:
        exc = errors.DeadlineExceeded(f"the run's deadline ({deadline.isoformat()}) has passed")
        return failure(definition, lease, exc, state.worker_id)  # no journal read, no trace
    outcome: Success | Failure | Suspension | Continuation | None
    try:
        value = await call(definition, lease.run.payload, state, executor)
    except _INTERRUPTED as exc:
        outcome = await _interrupted(definition, state, exc)
    else:  # the body returned
        if compensations.rolling_back(state):
            outcome = await compensations.roll_back(state, None)
        elif state.durable.waits.suspended:
            # The body swallowed a suspension (gather(return_exceptions=True) ...): it has
            # not really finished, so it waits and replays like any other.
            outcome = await _suspended(state)
        else:  # the usual end, with no coroutine more
            outcome = _returned(definition, state, value, max_result_bytes)
    if outcome is None:
        return None
    unreadable = state.durable.unreadable
    if unreadable is not None:  # whatever the body made of it
        outcome = unreadable_failure(lease, unreadable, state.worker_id)
    if state.trace_context is not None and isinstance(outcome, Failure | Suspension):
        outcome = dataclasses.replace(outcome, trace=state.trace_context)
    return outcome


#: What a body may raise that :func:`_interrupted` makes an outcome of (else it propagates).
_INTERRUPTED = (
    errors.Suspend,
    errors.ContinueAsNew,
    asyncio.CancelledError,
    errors.Cancelled,
    errors.LeaseLost,
    errors.RollingBack,
    Exception,
)


async def _interrupted(
    definition: Definition, state: AttemptState, exc: BaseException
) -> Success | Failure | Suspension | Continuation | None:
    """The outcome of a body that raised ``exc`` (one of :data:`_INTERRUPTED`): it waits,
    goes on as a new run, stopped, rolls back or failed."""
    if isinstance(exc, errors.Suspend):
        if compensations.rolling_back(state):
            return await compensations.roll_back(state, None)
        return await _suspended(state)
    if isinstance(exc, errors.ContinueAsNew):
        return await continuation.outcome(state, exc)
    if isinstance(exc, asyncio.CancelledError):
        if state.is_cancelled():
            return None
        raise exc  # the worker's own task is cancelled (shutdown)
    if isinstance(exc, errors.Cancelled | errors.LeaseLost):
        return None
    if isinstance(exc, errors.RollingBack):
        return await compensations.roll_back(state, None)
    assert isinstance(exc, Exception)
    return await _raised(definition, state, exc)


async def _raised(
    definition: Definition, state: AttemptState, exc: Exception
) -> Success | Failure | Suspension | None:
    """The outcome of a body that raised ``exc``: a failure, rolled back when final."""
    durable = state.durable
    if compensations.rolling_back(state):
        return await compensations.roll_back(state, None)
    if durable.waits.suspended:
        return await _suspended(state)  # a parallel branch suspended first
    # A durable call that refused its arguments would refuse them on every retry.
    retryable = not durable.refused(exc)
    outcome = failure(definition, state.lease, exc, state.worker_id, retryable=retryable)
    if outcome.final and compensations.pending(state):
        return await compensations.roll_back(state, outcome)
    return outcome


def _returned(
    definition: Definition, state: AttemptState, value: Any, max_result_bytes: int
) -> Success | Failure:
    """The outcome of a body that returned ``value``: its success, unless it left a
    durable call unawaited or returned what cannot be stored."""
    lease = state.lease
    try:
        state.calls.check()
        result = state.durable.payload(value, "result", max_bytes=max_result_bytes)
    except errors.NotAwaited as exc:
        return failure(definition, lease, exc, state.worker_id)
    except errors.InvalidPayload as exc:
        # Retrying would produce the same value: fail now, with the reason.
        return failure(definition, lease, exc, state.worker_id, retryable=False)
    return Success(lease.run.id, lease.token, result, counted=lease.counted)


async def _suspended(state: AttemptState) -> Suspension | None:
    await state.durable.settle()
    return None if state.is_cancelled() else state.durable.waits.suspension()


async def call(
    definition: Definition,
    payload: Any,
    state: AttemptState,
    executor: HandlerThreads | concurrent.futures.Executor,
) -> Any:
    """Call the handler with a :class:`Context` over ``state``: ``async def`` on the loop,
    ``def`` in one of ``executor``'s threads; apply its timeout.

    The observers' ``around_attempt`` encloses the call, entered before the handler
    runs (in the attempt's task, or in a task or thread that copies the context), so
    that a tracer's span is current inside it; what they inject there is the attempt's
    trace context."""
    codec = state.durable.codec = definition.codec
    if codec is not None:  # the payload as the handler's annotation types it
        try:
            payload = codec.decode(payload, payload_hint(definition.fn), what="payload")
        except errors.InvalidPayload as exc:  # the same on every attempt
            raise state.durable.refuse(exc) from None
    args = (payload, Context(state)) if definition.takes_context else (payload,)
    with state.observers.around_attempt(state.run, state.worker_id):
        state.trace_context = state.observers.trace_context()
        if definition.is_async:
            if definition.timeout is None:
                return await _in_this_task(definition.fn(*args), state)
            task = asyncio.ensure_future(definition.fn(*args))
            state.on_stop(task.cancel)
            pending: asyncio.Future[Any] = task
        else:
            call = functools.partial(contextvars.copy_context().run, definition.fn, *args)
            if isinstance(executor, HandlerThreads):
                pending = executor.run(call)
            else:
                pending = asyncio.get_running_loop().run_in_executor(executor, call)
        if definition.timeout is None:
            return await pending
        return await _timed(definition, state, pending)


async def _in_this_task(body: Awaitable[Any], state: AttemptState) -> Any:
    """Await an ``async def`` handler's ``body`` in the attempt's own task: a task of its
    own would cost each run a task's creation, scheduling and wake-up (see
    docs/performance.md, the worker's Python per run). A stop cancels the attempt's task
    only while the body runs in it (:class:`_Stopping`), never what follows."""
    task = asyncio.current_task()
    assert task is not None
    stopping = _Stopping(task)
    state.on_stop(stopping)
    try:
        return await body
    finally:
        stopping.task = None  # a stop from now on cancels nothing
        if stopping.cancelled:
            task.uncancel()  # the body's stop is handled: the worker's code goes on


class _Stopping:
    """The stop callback of a handler awaited in the attempt's task: cancels the task
    while the handler runs. A stop asked from inside the handler's own code (a lease
    check that found the run cancelled) cancels it at the loop's next turn, if the
    handler is still running then: cancelling the running task at once would cancel
    the worker's code after the handler if the handler returned before its next
    ``await``."""

    __slots__ = ("cancelled", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task: asyncio.Task[Any] | None = task
        self.cancelled = False

    def __call__(self) -> None:
        task = self.task
        if task is None:
            return
        if asyncio.current_task() is task:
            task.get_loop().call_soon(self)
            return
        self.cancelled = True
        task.cancel()


async def _timed(definition: Definition, state: AttemptState, pending: asyncio.Future[Any]) -> Any:
    """``pending``'s result, or :class:`~simpleworkflow.errors.HandlerTimeout` once the
    handler's timeout has passed (only a handler that has one pays for this level)."""
    assert definition.timeout is not None
    try:
        return await asyncio.wait_for(pending, definition.timeout)
    except TimeoutError:
        # A sync handler's thread cannot be interrupted: ask it to stop, or it would hold
        # a slot of the pool for as long as it runs.
        state.request_stop(TIMED_OUT)
        raise errors.HandlerTimeout(
            f"handler for {definition.type} ran longer than its {definition.timeout:g}s timeout"
        ) from None


def failure(
    definition: Definition,
    lease: Lease,
    exc: BaseException,
    worker_id: str,
    *,
    retryable: bool = True,
) -> Failure:
    """The outcome of a failed attempt: a retry after backoff, or the end of the run."""
    run = lease.run
    failures = run.attempt + 1
    retryable = retryable and definition.retry.retries(exc)
    final = not retryable or failures >= run.max_attempts
    text = payloads.storable(tracebacks.describe(exc, limit=MAX_ERROR_CHARS))
    error: dict[str, Any] = {
        "type": payloads.storable(_qualname(exc)),
        "message": payloads.storable(str(exc))[:2000],
    }
    if final:
        error["traceback"] = text
    data: dict[str, Any] = {"worker_id": worker_id, "error": error}
    if not retryable:
        data["retryable"] = False
    return Failure(
        run_id=run.id,
        token=lease.token,
        final=final,
        delay=0.0 if final else definition.retry.delay(failures),
        error=text,
        data=data,
        counted=lease.counted,
    )


def unreadable_run(lease: Lease, worker_id: str) -> Failure:
    """The end of a run claimed with columns this worker cannot read (see
    ``Run.unreadable``): failed for good, no handler called, naming each column and
    its raw text, so that an operator can fix the row and retry the run."""
    return unreadable_row(lease.run.id, lease.token, lease.run.unreadable, worker_id)


def unreadable_row(
    run_id: str, token: str | None, columns: Mapping[str, Unreadable], worker_id: str | None
) -> Failure:
    """The final failure of run ``run_id`` (leased with ``token``), whose ``columns``
    cannot be read, whatever its retry policy says: no handler ran, and none can."""
    found = {name: value.to_dict() for name, value in columns.items()}
    named = "; ".join(f"{name} holds {c['raw']!r} ({c['reason']})" for name, c in found.items())
    message = (
        f"run {run_id} cannot be read: {named}. It was written by plain SQL or "
        "another runtime; correct the column, then retry the run"
    )
    return _final(run_id, token, errors.UnreadableRow(message, found), worker_id)


def unreadable_failure(lease: Lease, exc: errors.UnreadableRow, worker_id: str) -> Failure:
    """A final failure for ``exc``, whatever the run's retry policy says."""
    return _final(lease.run.id, lease.token, exc, worker_id)


def _final(
    run_id: str, token: str | None, exc: errors.UnreadableRow, worker_id: str | None
) -> Failure:
    error = {"type": _qualname(exc), "message": payloads.storable(str(exc))[:2000]}
    data: dict[str, Any] = {"worker_id": worker_id, "error": error, "retryable": False}
    data["unreadable"] = exc.columns
    text = payloads.storable(f"{_qualname(exc)}: {exc}")[-MAX_ERROR_CHARS:]
    return Failure(run_id=run_id, token=token, final=True, delay=0.0, error=text, data=data)


def _qualname(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
