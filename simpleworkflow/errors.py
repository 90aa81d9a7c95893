"""The one error tree of simpleworkflow.

Every error the library raises on purpose derives from :class:`SimpleWorkflowError`,
and each message says what was wrong and what to do about it::

    SimpleWorkflowError
    ├── ConfigurationError          bad database URL, unknown scheme, missing extra
    ├── InvalidInput (ValueError)   refused before anything is stored
    │   ├── InvalidTypeName         not <domain>.<subdomain>.<action>.vN
    │   ├── InvalidPayload          not JSON, NaN, bytes, NUL characters ...
    │   │   └── PayloadTooLarge     over the configured size limit
    │   ├── InvalidArgument         priority, delay, cursor, limit, key, step name, topic ...
    │   │   ├── TypeNotRegistered   pause or resume of a type the registry does not hold
    │   │   ├── ScheduleNotFound    no cron schedule of that name
    │   │   ├── StepNotFound        a fork from a step the run's journal does not hold
    │   │   └── ForkRefused         a fork of an unfinished run, or from a point it cannot be
    │   └── IdempotencyConflict     the key is held by a run of another workflow type
    ├── RunNotFound (LookupError)   no run with that id
    ├── RunFinished                 a signal to a finished run; a value it never set
    ├── RunNotRetryable             an operator's retry of a run that has not failed
    ├── WaitTimeout (TimeoutError)  wait() ran out of time; the run goes on
    ├── SchemaError                 the database schema is missing or older than the code
    ├── StoreUnavailable            the database could not be reached or went away
    ├── PermanentError              raised by a handler: fail the run now, never retry
    │   ├── DeadlineExceeded        the run's deadline passed; no further step starts
    │   ├── ReplayDivergence        the code no longer matches the run's journal
    │   ├── NotAwaited              an async body returned with a durable call not awaited
    │   ├── StepFailed              a step used up its retries
    │   ├── ChildFailed             a child run failed or was cancelled
    │   └── UnreadableRow           a stored row of the run this library cannot read
    ├── RetryAfter                  raised in a step: run it again later, no attempt counted
    ├── HandlerTimeout              a handler ran past its timeout (retried like any error)
    ├── OutcomeRefused              the store refused what an attempt produced; the run fails
    └── WorkerFailed                a worker service kept dying: the worker stopped

    BaseException
    ├── Cancelled                   raised in a handler by ctx.raise_if_cancelled()
    ├── Suspend                     (internal) the run waits: a sleep, a signal, a child
    └── LeaseLost                   (internal) the worker lost the run's lease

``Cancelled``, ``Suspend`` and ``LeaseLost`` derive from ``BaseException`` so that an
``except Exception:`` in a workflow body cannot swallow them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and the noun that agrees with it (``nouns`` when adding an s will not do):
    ``1 run``, ``2 runs``, never ``1 runs``; for every message for people, errors and logs
    and the CLI's lines alike."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


class SimpleWorkflowError(Exception):
    """Base class of every error raised by simpleworkflow."""


class ConfigurationError(SimpleWorkflowError):
    """The library was configured with something it cannot use."""


class InvalidInput(SimpleWorkflowError, ValueError):
    """An argument was refused before anything was written."""


class InvalidTypeName(InvalidInput):
    """A workflow type name does not follow ``<domain>.<subdomain>.<action>.vN``."""


class InvalidPayload(InvalidInput):
    """A payload or result cannot be stored as JSON in every backend."""


class PayloadTooLarge(InvalidPayload):
    """A payload or result is larger than the configured limit."""


class InvalidArgument(InvalidInput):
    """Some other argument (priority, delay, limit, cursor ...) is out of range."""


class TypeNotRegistered(InvalidArgument, LookupError):
    """A registry action named a type the registry does not hold."""

    def __init__(self, name: str) -> None:
        self.type = name
        super().__init__(
            f"{name} is not in the registry (see `simpleworkflow registry list`); a worker "
            "adds its types when it starts, or add it with "
            f"`simpleworkflow registry set {name} --runtime python`"
        )


class ScheduleNotFound(InvalidArgument, LookupError):
    """A schedule action named a schedule that does not exist."""

    def __init__(self, name: str) -> None:
        self.schedule = name
        super().__init__(
            f"no schedule named {name!r} (see `simpleworkflow schedules list`); create it "
            "with `simpleworkflow schedules create` or @app.schedule"
        )


class StepNotFound(InvalidArgument, LookupError):
    """A fork named a step (or a position) that the run's journal does not hold."""

    def __init__(self, run_id: str, step: str | int, steps: list[str]) -> None:
        self.run_id = run_id
        self.step = step
        self.steps = steps
        what = f"position {step}" if isinstance(step, int) else f"step {step!r}"
        known = ", ".join(repr(name) for name in steps) if steps else "none: it has no journal"
        super().__init__(f"run {run_id} has no journal entry at {what}; its steps are {known}")


class ForkRefused(InvalidArgument):
    """A fork that would not be safe: the run has not finished, or the fork point is
    inside a loop, a join or the rollback phase, or the fork would wait for a child that
    is not its own. Nothing was written; the message says which and what to do."""

    def __init__(self, run_id: str, reason: str) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(f"run {run_id} cannot be forked: {reason}")


class IdempotencyConflict(InvalidInput):
    """A start's idempotency key is held by a run of another workflow type; nothing was
    started. ``run_id`` and ``run_type`` name the run that holds the key."""

    def __init__(self, key: str, run_id: str, run_type: str, requested_type: str) -> None:
        self.idempotency_key = key
        self.run_id = run_id
        self.run_type = run_type
        super().__init__(
            f"idempotency key {key!r} is held by run {run_id} of type {run_type!r}, so it "
            f"cannot start a {requested_type!r}; nothing was started. A key stands for one "
            "intent: use another key for this one (e.g. one that names the type)"
        )


class RunNotFound(SimpleWorkflowError, LookupError):
    """No run has the given id (or the id is not a run id at all)."""

    def __init__(self, run_id: str, reason: str = "") -> None:
        self.run_id = run_id
        detail = f" ({reason})" if reason else ""
        super().__init__(
            f"no workflow run with id {run_id!r}{detail}; "
            "check the id, or list runs with `simpleworkflow runs list`"
        )


class RunFinished(SimpleWorkflowError):
    """The run has already succeeded, failed or been cancelled, so it cannot take this (a
    signal), or will never give it (a value waited for); ``status`` says how it ended,
    where known."""

    def __init__(
        self, message: str, *, run_id: str | None = None, status: str | None = None
    ) -> None:
        self.run_id, self.status = run_id, status
        super().__init__(message)


class RunNotRetryable(SimpleWorkflowError):
    """Only a failed or cancelled run can be retried by an operator: this one is pending,
    leased, succeeded or soft-deleted. Nothing was changed; ``status`` says which."""

    def __init__(self, run_id: str, status: str, deleted: bool = False) -> None:
        self.run_id = run_id
        self.status = status
        if deleted:
            why = f"is deleted ({status}), and a deleted run is never claimed again"
        elif status == "succeeded":
            why = "succeeded; start a new run to do the work again"
        else:
            why = f"is {status}: it has not finished, and runs or finishes on its own"
        super().__init__(
            f"run {run_id} cannot be retried: only a failed or cancelled run can be, and "
            f"this one {why}"
        )


class WaitTimeout(SimpleWorkflowError, TimeoutError):
    """``wait()`` gave up before the run reached a terminal state."""


class SchemaError(SimpleWorkflowError):
    """The database schema is missing or older than this version of simpleworkflow."""


class StoreUnavailable(SimpleWorkflowError):
    """The database could not be reached, or the connection broke mid-operation."""

    #: When the failed call began (``time.monotonic()``), where the store knows it: a call
    #: begun before an outage ended that fails after is a straggler of that outage.
    began: float | None = None


class PermanentError(SimpleWorkflowError):
    """Raise (or subclass) in a handler for a failure that no retry can fix: from the
    body or from a step's function, it fails the run at once (seed 004's
    ``CriticalError``); its compensations then run (see ``Context.on_rollback``)."""


class RollbackError(PermanentError):
    """Raise in a body (or a step's function) to fail the run now, without a retry, and
    roll it back: its registered compensations run in reverse order."""


class HandlerTimeout(SimpleWorkflowError, TimeoutError):
    """A handler ran longer than the timeout of its workflow definition."""


class OutcomeRefused(SimpleWorkflowError):
    """The store refused to record what an attempt produced (its result, error or
    suspension) even with its text made storable. Never raised to a caller: the worker
    fails the run with it, as its recorded error, instead of leaving the run to its lease."""


class WorkerFailed(SimpleWorkflowError):
    """A worker stopped because one of its services kept dying (or one it cannot run
    without died): it stopped its handlers and gave their runs back. Raised by
    ``run_async`` (``run`` exits non-zero); restart the process once the cause is fixed."""


class Cancelled(BaseException):
    """The attempt must stop: the run was cancelled, its lease was lost, or the worker stops."""


class DeadlineExceeded(PermanentError):
    """The run's deadline passed: it fails, and no further step starts."""


class ReplayDivergence(PermanentError):
    """Replaying the run met a step its journal does not have at that point (or the same
    name as a different kind of step): the code changed under a running workflow."""


class UnreadableRow(PermanentError):
    """A row of the run (the run itself, its journal, a signal it consumes) holds what
    this library cannot read: a time outside Python's range, JSON text that does not
    parse, a journal entry of an unknown kind or status, written by plain SQL or another
    runtime. The worker fails the run with it, for good; the other runs go on."""

    def __init__(self, message: str, columns: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        #: What could not be read, by column: ``{"raw": ..., "reason": ...}`` each.
        self.columns = columns or {}


class NotAwaited(PermanentError):
    """An async body returned while a durable call it made (``ctx.sleep(...)`` without
    ``await``) had never run: the message names each such call and its line."""


class StepFailed(PermanentError):
    """A step failed on its last attempt (or with an error that is never retried)."""

    def __init__(self, step: str, attempts: int, message: str) -> None:
        self.step = step
        self.attempts = attempts
        super().__init__(f"step {step!r} failed after {plural(attempts, 'attempt')}: {message}")


class StepTimeout(SimpleWorkflowError, TimeoutError):
    """A step's try ran past its ``timeout``: a failed try, retried as the step's policy
    says. An ``async def`` function was cancelled; a ``def`` one's thread cannot be, so it
    runs on unheeded and whatever it returns late is discarded."""

    def __init__(self, step: str, seconds: float) -> None:
        self.step = step
        self.seconds = seconds
        super().__init__(f"step {step!r} did not finish within its {seconds:g}s timeout")


class ChildFailed(PermanentError):
    """A child run this workflow waited for ended failed or cancelled. Retrying the parent
    would meet the same recorded outcome, so it fails the parent unless the body catches it."""

    def __init__(self, child_id: str, status: str, error: str | None) -> None:
        self.child_id = child_id
        self.status = status
        self.error = error
        detail = f": {error.strip().splitlines()[-1]}" if error else ""
        super().__init__(f"child run {child_id} ended {status}{detail}")


class JoinError(SimpleWorkflowError):
    """Branches of a ``ctx.join`` failed. ``errors`` holds each failed branch's exception
    by branch name, ``results`` the results of the branches that succeeded. Uncaught, it
    is a failed attempt of the run, retried as the run's policy says (see
    :class:`PermanentJoinError` for when it is not)."""

    def __init__(self, join: str, errors: dict[str, BaseException], results: dict[str, Any]):
        self.join = join
        self.errors = errors
        self.results = results
        failed = "; ".join(f"{branch}: {type(e).__name__}: {e}" for branch, e in errors.items())
        total = len(errors) + len(results)
        super().__init__(f"join {join!r}: {len(errors)} of {total} branches failed: {failed}")

    @classmethod
    def of(cls, join: str, errors: dict[str, BaseException], results: dict[str, Any]) -> JoinError:
        """A :class:`PermanentJoinError` when every failure is permanent, else a JoinError."""
        permanent = all(isinstance(e, PermanentError) for e in errors.values())
        return (PermanentJoinError if permanent else JoinError)(join, errors, results)


class PermanentJoinError(JoinError, PermanentError):
    """A :class:`JoinError` whose every failed branch failed for good (a ``StepFailed``, a
    ``ChildFailed``, a ``PermanentError``): a retry would replay the same failures, so,
    uncaught, it fails the run at once."""


class RetryAfter(SimpleWorkflowError):
    """Raise in a step to run it again after ``delay`` without counting a failure (for a
    provider's rate limit, say). ``delay`` is seconds, a timedelta or a string like "30s"."""

    def __init__(self, delay: object, message: str = "") -> None:
        self.delay = delay
        super().__init__(message or f"retry after {delay}")


class Suspend(BaseException):
    """Internal: the body must stop here and the run wait (a sleep, a signal, a child, a
    step's backoff). The worker turns it into a suspension of the run."""

    def __init__(
        self,
        step: str,
        event: str,
        *,
        data: dict[str, Any] | None = None,
        waiting_for: dict[str, Any] | None = None,
        run_at: datetime | None = None,
        delay: float = 0.0,
    ) -> None:
        self.step = step
        self.event = event
        self.data = data or {}
        self.waiting_for = waiting_for
        self.run_at = run_at
        self.delay = delay
        super().__init__(f"{event} at step {step!r}")


class RollingBack(BaseException):
    """Internal: the run is rolling back, and its replayed body reached a call its
    journal cannot answer; the body stops there and the compensations run."""


class ContinueAsNew(BaseException):
    """Internal: the body called ``ctx.continue_as_new``; the worker ends the run and
    starts its successor with ``payload`` (JSON text). A ``BaseException``, so that an
    ``except Exception:`` in the body cannot swallow it."""

    def __init__(self, payload: str) -> None:
        self.payload = payload
        super().__init__("continue as new")


class LeaseLost(BaseException):
    """Internal: a fenced write found the lease gone; the attempt is abandoned."""


class ValueNotSet(SimpleWorkflowError, LookupError):
    """A run has set no value of this key (or, waited for, no newer one in time): the
    HTTP API's answer for a value it cannot give (``ctx.set_value``)."""
