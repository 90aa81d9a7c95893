"""Continue-as-new (``ctx.continue_as_new``): end the run, and carry it on in a fresh run
of the same type with a new payload and an empty journal.

The call raises ``ContinueAsNew`` out of the body; the attempt's outcome is then a
``Continuation``, which the worker's outbox records like any other outcome, fenced by the
lease: the run ends ``succeeded`` with ``{"continued_as": id}`` and its successor is
inserted in the same transaction, or (the lease lost) nothing is written at all.
"""

from __future__ import annotations

from typing import NoReturn

from simpleworkflow import errors, names
from simpleworkflow.backends.records import Continuation
from simpleworkflow.durable.attempt import AttemptState


async def continue_as_new(state: AttemptState, payload: str) -> NoReturn:
    """Stop the body here: the run continues as a new one with ``payload`` (JSON text)."""
    if state.is_cancelled():
        raise errors.Cancelled(state.stop_reason)
    raise errors.ContinueAsNew(payload)


async def outcome(state: AttemptState, exc: errors.ContinueAsNew) -> Continuation | None:
    """The outcome of a body that continued as new; ``None`` if the attempt was stopped
    meanwhile. Durable calls of parallel branches still under way settle first, so that
    none writes after the run has ended."""
    await state.durable.settle()
    if state.is_cancelled():
        return None
    lease = state.lease
    return Continuation(
        run_id=lease.run.id,
        token=lease.token,
        type=lease.run.type,
        next_id=names.new_run_id(),
        payload=exc.payload,
        trace=state.trace_context,
        counted=lease.counted,
    )
