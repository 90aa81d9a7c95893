"""The run a schedule starts, built in one place: by the scheduler for each tick
(``worker/scheduler.py``) and by ``schedules.trigger`` for a run started by hand
(``admin/schedules.py``), so both get the same payload, type, priority and attempts."""

from __future__ import annotations

import json
from datetime import datetime

from simpleworkflow import schedules
from simpleworkflow.backends.records import NewRun
from simpleworkflow.models import Schedule


def tick_run(
    schedule: Schedule,
    tick: datetime,
    trace_context: dict[str, str] | None = None,
    *,
    triggered: bool = False,
) -> NewRun:
    """The run of ``schedule`` for ``tick``: its payload with its name and the tick, keyed
    by both (a triggered run: by the second it was triggered, and marked ``triggered``);
    ``trace_context`` is what the observers injected (the trace the run continues)."""
    key = (
        schedules.trigger_key(schedule.name, tick)
        if triggered
        else schedules.tick_key(schedule.name, tick)
    )
    return NewRun(
        type=schedule.workflow_type,
        payload=schedules.tick_payload(schedule.name, tick, schedule.payload, triggered=triggered),
        idempotency_key=key,
        priority=schedule.priority,
        max_attempts=schedule.max_attempts,
        trace_context=None if trace_context is None else json.dumps(trace_context),
    )
