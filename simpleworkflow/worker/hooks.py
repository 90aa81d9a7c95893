"""What a worker tells its observers (see ``observe``), built from what it holds.

Kept apart from the code that runs attempts so that reading it is reading the contract:
which hook fires when, and how an attempt's end is named.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from simpleworkflow import observe
from simpleworkflow.backends.base import Continuation, Failure, Lease, Success, Suspension
from simpleworkflow.durable import execution
from simpleworkflow.durable.suspension import FOREVER

if TYPE_CHECKING:
    from simpleworkflow.durable.attempt import AttemptState

#: ``LeaseLost.reason``.
TAKEN = "taken"  # the store says another worker holds the run now
NOT_RENEWED = "not renewed"  # this worker could not renew the lease in time

#: How an attempt stopped from outside is named, by its stop reason (any other: its lease
#: was lost, or a fenced write found it gone).
_STOPPED = {"cancelled": observe.CANCELLED, "shutdown": observe.STOPPED}


def claimed(observers: observe.Observer, lease: Lease, worker_id: str) -> None:
    """``run_claimed``, then ``run_resumed`` if the run had been suspended. Each event is
    built only if an observer overrides its hook (see ``observe.listens``), as below."""
    run = lease.run
    if observe.listens(observers, "run_claimed"):
        queued_for = 0.0
        if lease.claimed_at is not None:
            queued_for = max((lease.claimed_at - run.run_at).total_seconds(), 0.0)
        observers.run_claimed(observe.RunClaimed(run, worker_id, queued_for))
    if lease.was_waiting_for is not None and observe.listens(observers, "run_resumed"):
        observers.run_resumed(observe.RunResumed(run, wait_kind(lease.was_waiting_for)))


def started(observers: observe.Observer, lease: Lease, worker_id: str) -> None:
    """``attempt_started``: the handler is about to be called."""
    if observe.listens(observers, "attempt_started"):
        observers.attempt_started(observe.AttemptStarted(lease.run, worker_id))


@dataclass(frozen=True, slots=True)
class Ending:
    """How an attempt ended, as the worker saw it."""

    outcome: Success | Failure | Suspension | Continuation | None
    stop_reason: str | None  # the attempt's, when it was asked to stop
    recorded: bool  # False: the lease was lost before the outcome was written
    duration: float


def finished(observers: observe.Observer, lease: Lease, worker_id: str, end: Ending) -> None:
    """``attempt_finished``, then ``run_suspended`` if the run now waits."""
    if observe.listens(observers, "attempt_finished"):
        observers.attempt_finished(attempt_finished(lease, worker_id, end))
    if (
        isinstance(end.outcome, Suspension)
        and end.recorded
        and not _stopped(end)
        and observe.listens(observers, "run_suspended")
    ):
        suspension = end.outcome
        kind = wait_kind(suspension.waiting_for)
        observers.run_suspended(
            observe.RunSuspended(lease.run, kind, _until(suspension), suspension.waiting_for)
        )


def attempt_finished(lease: Lease, worker_id: str, end: Ending) -> observe.AttemptFinished:
    outcome = end.outcome
    error = waits = continued_as = None
    retry_in = None
    if outcome is None or _stopped(end):
        name = _STOPPED.get(end.stop_reason or "", observe.LEASE_LOST)
    elif not end.recorded:
        name = observe.LEASE_LOST
    elif isinstance(outcome, Success):
        name = observe.SUCCEEDED
    elif isinstance(outcome, Continuation):
        name, continued_as = observe.CONTINUED, outcome.next_id
    elif isinstance(outcome, Failure):
        name = observe.FAILED if outcome.final else observe.RETRIED
        error = outcome.data.get("error", {}).get("message", "")
        retry_in = None if outcome.final else outcome.delay
    else:
        name, waits = observe.SUSPENDED, outcome.event
    return observe.AttemptFinished(
        lease.run,
        worker_id,
        name,
        end.duration,
        error=error,
        retry_in=retry_in,
        waits=waits,
        continued_as=continued_as,
    )


def worker_error(
    lease: Lease, worker_id: str, exc: Exception, duration: float
) -> observe.AttemptFinished:
    """The end of an attempt the worker itself failed to see through: its run stays
    leased until the lease expires, then is due again."""
    return observe.AttemptFinished(
        lease.run, worker_id, observe.STOPPED, duration, error=f"worker error: {exc!r}"
    )


def _stopped(end: Ending) -> bool:
    """Stopped from outside (cancelled, lease lost, shutdown): nothing was recorded. A
    timeout stops the handler too, but its failure is the outcome."""
    return end.stop_reason not in (None, execution.TIMED_OUT)


def wait_kind(waiting_for: Any) -> str:
    """``sleep``, ``signal``, ``child``, ``retry`` or ``any``, from a run's ``waiting_for``."""
    kind = waiting_for.get("kind") if isinstance(waiting_for, dict) else None
    return kind if isinstance(kind, str) else observe.ANY


def _until(suspension: Suspension) -> datetime | None:
    """When the run is due again at the latest (None: only what it waits for wakes it)."""
    if suspension.run_at is not None:
        return None if suspension.run_at >= FOREVER else suspension.run_at
    return datetime.now(UTC) + timedelta(seconds=suspension.delay)


def lease_lost(
    observers: observe.Observer, state: AttemptState, worker_id: str, reason: str
) -> None:
    """Once per attempt: the lease watch, a renewal found taken, and the attempt's own
    check of its lease's end (which may stop it before the watch fires) all report it."""
    if state.lease_loss_reported:
        return
    state.lease_loss_reported = True
    if observe.listens(observers, "lease_lost"):
        observers.lease_lost(observe.LeaseLost(state.lease.run, worker_id, reason))


def reaped(observers: observe.Observer, run_ids: list[str]) -> None:
    if run_ids and observe.listens(observers, "leases_reaped"):
        observers.leases_reaped(observe.LeasesReaped(tuple(run_ids)))
