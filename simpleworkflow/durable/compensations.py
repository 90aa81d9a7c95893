"""Compensations: what ``ctx.on_rollback`` registers, and the durable phase that runs them.

A body registers a compensation as it goes, each registration a journal entry of its own
(``on_rollback/<name>``, kind ``on_rollback``), so that every replay registers the same
list in the same order: the function comes from the code, as a step's does, and the
journal says which registrations the run made. When the run fails for good (no attempt
left, a ``PermanentError``, a ``RollbackError``), the error is journaled first (entry
``@rollback``, kind ``rollback``), which makes the phase durable: every later attempt of
the run sees it, replays the body only until it has registered its compensations again
(the first call the journal cannot answer raises ``RollingBack``), and goes on with them.

The compensations then run in reverse order of registration, each as a plain step
``rollback/<name>`` with its own retry policy: journaled, observed and retried as any
step is, so a worker that dies halfway resumes with the first one not journaled. One that
gives up is recorded and the others still run; the run then ends ``failed`` with its
original error, the outcome of each compensation in its ``failed`` event
(``data["rollback"]``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simpleworkflow import errors, payloads
from simpleworkflow.backends.records import Failure, Suspension
from simpleworkflow.durable import scopes, steps
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.durable.replay import COMPENSATION_PATH, ROLLBACK_STEP, Replay
from simpleworkflow.retry import RetryPolicy

#: The path of a compensation's registration in the journal.
REGISTRATION_PATH = "on_rollback/"
#: The stop reason of an attempt that ran past its handler's timeout (``execution``'s).
_TIMED_OUT = "timeout"


@dataclass(frozen=True, slots=True)
class Compensation:
    """A compensation as the body registered it in this attempt."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    retry: RetryPolicy | None


def check(fn: object, retry: object) -> None:
    """Refuse what cannot be a compensation, naming the argument."""
    if not callable(fn):
        raise errors.InvalidArgument(f"on_rollback needs a function to call, not {fn!r:.80}")
    if scope := scopes.current():
        # A later attempt answers a finished loop or join from its journal (a loop from
        # its last committed state) without running the code that registered it.
        raise errors.InvalidArgument(
            f"on_rollback inside a loop or join ({scope.rstrip('/')}): register compensations "
            "in the workflow's body, outside ctx.loop and ctx.join"
        )
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise errors.InvalidArgument(
            f"on_rollback's retry must be a RetryPolicy, not {retry!r:.80}"
        )


async def register(state: AttemptState, name: str, compensation: Compensation) -> None:
    """Register ``compensation`` as journal entry ``name`` (``on_rollback/...``): written
    the first time, met again on every replay."""
    durable = state.durable
    entry = await durable.begin(name, JournalKind.ON_ROLLBACK, state.is_cancelled())
    if entry is None:
        output = {"compensation": step_of(name)}
        await durable.journal(name, JournalKind.ON_ROLLBACK, output, events=[])
    if durable.rollbacks is None:
        durable.rollbacks = {}
    durable.rollbacks[name] = compensation
    replay = durable.replay
    if replay is not None and replay.rolling_back and _all_again(replay, durable.rollbacks):
        raise errors.RollingBack(name)


def _all_again(replay: Replay, registered: dict[str, Any]) -> bool:
    """Every journaled compensation is registered again: what the body does next (the
    work that failed, maybe slowly) is not needed to roll back."""
    return len(registered) >= replay.count(JournalKind.ON_ROLLBACK)


def step_of(registration: str) -> str:
    """The step that runs the compensation registered as ``registration``."""
    return COMPENSATION_PATH + registration.removeprefix(REGISTRATION_PATH)


def pending(state: AttemptState) -> bool:
    """Whether this failed attempt must roll the run back: it registered a compensation,
    or its journal holds one (a body that failed before meeting it again)."""
    durable = state.durable
    if durable.rollbacks:
        return True
    replay = durable.replay
    return replay is not None and bool(replay.of_kind(JournalKind.ON_ROLLBACK))


def rolling_back(state: AttemptState) -> bool:
    """Whether the journal says the run rolls back (an earlier attempt failed for good)."""
    replay = state.durable.replay
    return replay is not None and replay.rolling_back


async def roll_back(state: AttemptState, failed: Failure | None) -> Failure | Suspension | None:
    """Run the run's compensations, and end it ``failed``: with ``failed``, the final
    failure of this attempt, journaled first; or (``None``) with the failure an earlier
    attempt journaled. A suspension when a compensation waits for its retry, or when
    this attempt ran out of time (the next one goes on); ``None`` when it must stop."""
    durable = state.durable
    replay = durable.replay
    assert replay is not None
    if failed is not None:
        kept = {"error": failed.error, "data": failed.data}
        events = [{"type": "rolling_back", "data": {"error": failed.data.get("error")}}]
        try:
            await durable.journal(ROLLBACK_STEP, JournalKind.ROLLBACK, kept, events=events)
        except errors.LeaseLost:
            return None
        replay.rolling_back = True  # a branch of the body still running stops at its next call
    else:
        marker = replay.journaled(ROLLBACK_STEP)
        assert marker is not None
        kept = marker.output
    if state.is_cancelled():  # a cancelled run stops here; one out of time goes on later
        return _later(state) if state.stop_reason == _TIMED_OUT else None
    outcomes = []
    # The compensations are the attempt's code too: a tracer's steps go in its span.
    with state.observers.around_attempt(state.run, state.worker_id):
        for entry in reversed(replay.of_kind(JournalKind.ON_ROLLBACK)):
            outcome = await _compensate(state, entry.step_name)
            if isinstance(outcome, Suspension) or outcome is None:
                return outcome
            outcomes.append(outcome)
    return _failure(state, kept, outcomes)


async def _compensate(state: AttemptState, registration: str) -> dict[str, Any] | Suspension | None:
    """Run one compensation as its step: its outcome, or how the attempt ends."""
    name = step_of(registration)
    registered = (state.durable.rollbacks or {}).get(registration)
    if registered is None:
        message = "the replayed body did not register it again (the code changed under the run)"
        return {"step": name, "outcome": "failed", "error": message}
    step = steps.Plain(state, name, registered.fn, registered.args, registered.kwargs)
    try:
        await steps.run_async(state, step, registered.retry)
    except errors.StepFailed as exc:
        return {"step": name, "outcome": "failed", "error": payloads.storable(str(exc))[:2000]}
    except errors.Suspend:
        await state.durable.settle()
        return None if state.is_cancelled() else state.durable.waits.suspension()
    except (errors.Cancelled, errors.LeaseLost):
        return None
    except asyncio.CancelledError:
        if state.is_cancelled():
            return None
        raise
    return {"step": name, "outcome": "completed"}


def _later(state: AttemptState) -> Suspension:
    """Give the run back at once: the next attempt runs the compensations."""
    lease = state.lease
    events = [{"type": "rolling_back", "data": {"reason": state.stop_reason}}]
    return Suspension(lease.run.id, lease.token, events)


def _failure(state: AttemptState, kept: dict[str, Any], outcomes: list[dict[str, Any]]) -> Failure:
    lease = state.lease
    data = {**kept["data"], "rollback": outcomes}
    failed = [f"compensation {o['step']!r} failed: {o['error']}" for o in outcomes if "error" in o]
    text = "\n".join([kept["error"], *failed])
    return Failure(
        run_id=lease.run.id,
        token=lease.token,
        final=True,
        delay=0.0,
        error=text,
        data=data,
        counted=lease.counted,
    )
