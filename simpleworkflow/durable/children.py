"""Child runs (``ctx.start_child``, ``ctx.wait_child``): a run that a workflow starts once,
keyed by the parent and the step, and waits for until it finishes.

A child is created before its journal entry is written: a replay that finds no entry (the
attempt ended between the two writes) creates it again under the same key, and gets the
same child back. Waiting suspends the parent until the child finishes (the child's end
wakes its parent); its outcome is then journaled, so a replay raises or returns the same.
A child that continues as new is followed along its chain: the parent gets the outcome
of the chain's last run.
"""

from __future__ import annotations

import json
from typing import Any

from simpleworkflow import errors, observe
from simpleworkflow.backends.records import NewRun
from simpleworkflow.durable import races
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.journal import Durable
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.durable.suspension import FOREVER
from simpleworkflow.models import Run


async def start_child(
    state: AttemptState, name: str, type: str, payload: str, priority: int, max_attempts: int | None
) -> str:
    """Start child ``type`` as step ``name`` (or find the one an earlier attempt started):
    its run id."""
    durable = state.durable
    unique = durable.name(name)
    entry = await durable.begin(unique, JournalKind.CHILD, state.is_cancelled())
    if entry is not None:
        return str(entry.output["child_id"])
    observers = state.observers
    with observers.around_start(type, state.run):
        trace = observers.trace_context()
        child = await create_child(durable, unique, type, payload, priority, max_attempts, trace)
        if observers:
            observers.run_created(observe.RunCreated(child, bool(child.created)))
    data = {"step": unique, "child_id": child.id, "type": type}
    await durable.journal(
        unique,
        JournalKind.CHILD,
        {"child_id": child.id, "type": type},
        events=[{"type": "child_started", "data": data}],
    )
    return child.id


async def wait_child(state: AttemptState, name: str, child_id: str, hint: Any = None) -> Any:
    """The result of child ``child_id`` (read as type ``hint``, if given), waited for as
    step ``name``; raises :class:`~simpleworkflow.errors.ChildFailed` when it failed or
    was cancelled."""
    durable = state.durable
    unique = durable.name(name)
    entry = await durable.begin(unique, JournalKind.CHILD_RESULT, state.is_cancelled())
    if entry is None or entry.status != "completed":
        child = await read_run(durable, unique, child_id)
        if child is None:
            raise errors.RunNotFound(child_id)
        if child.parent_id != state.run.id:
            # Only a run's own children wake it when they finish: waiting for any
            # other run would never end.
            raise durable.refuse(
                errors.InvalidArgument(
                    f"run {child_id} is not a child of this run; wait_child waits only "
                    "for runs started with ctx.start_child in this workflow"
                )
            )
        while child.continued_as is not None:  # a child that continued as new: its chain
            child = await read_run(durable, unique, child.continued_as)
            if child is None:
                raise errors.RunNotFound(child_id)
        if not child.is_terminal:
            # The run of the chain that is under way now wakes the parent when it ends
            # (its successor has the same parent_id).
            raise durable.waits.suspend(
                errors.Suspend(
                    unique,
                    "waiting",
                    data={"child_id": child.id},
                    waiting_for={"kind": "child", "step": unique, "child_id": child.id},
                    run_at=FOREVER,
                )
            )
        races.note(child.updated_at)  # when it finished
        outcome = {
            "status": child.status.value,
            "result": child.result,
            "error": child.last_error,
        }
        await durable.journal(unique, JournalKind.CHILD_RESULT, outcome, events=[])
    else:
        outcome = entry.output
    if outcome["status"] != "succeeded":
        raise errors.ChildFailed(child_id, outcome["status"], outcome.get("error"))
    if hint is None:
        return outcome["result"]
    # The journaled JSON either way: the same value on the first run as on a replay.
    return durable.typed(outcome["result"], hint, f"result of child {child_id}")


async def create_child(
    durable: Durable,
    name: str,
    type: str,
    payload: str,
    priority: int,
    max_attempts: int | None,
    trace_context: dict[str, str] | None = None,
) -> Run:
    """Create the child run that step ``name`` starts, and wake this process's workers.

    Keyed by the parent and the step: a replay that finds no journal entry (the
    attempt ended between this write and its journal's) gets the same child back,
    with ``created`` False, instead of a second one."""
    parent = durable.lease.run.id
    new = NewRun(
        type=type,
        payload=payload,
        idempotency_key=f"child:{parent}:{name}",
        priority=priority,
        max_attempts=max_attempts,
        parent_id=parent,
        trace_context=None if trace_context is None else json.dumps(trace_context),
    )
    backend = durable.backend
    # The key makes a second try after a broken connection find the child the first
    # created, if it did.
    child = await durable.until_available(
        name, lambda: backend.execute_async(backend.create_run(new))
    )
    backend.notify_local("wake", type)
    return child


async def read_run(durable: Durable, name: str, run_id: str) -> Run | None:
    """A run as it stands now (a child waited for), or ``None`` if there is none."""
    backend = durable.backend
    return await durable.until_available(
        name, lambda: backend.execute_async(backend.get_run(run_id), readonly=True)
    )
