"""The cron scheduler as a worker service: every worker may run one, and each due tick of
a schedule starts exactly one run however many do, with no leader.

A pass reads the due schedules with one indexed query (``next_tick_at <= now`` by the
database's clock). For each it works out the ticks to start (``schedules.due``: the
missed-tick policy, the catch-up cap) and, in one transaction, moves ``next_tick_at`` on
by compare-and-set from the value it read, then inserts the ticks' runs. A scheduler
that raced another finds the value moved and starts nothing; and each run's idempotency
key (``schedule:<name>:<tick>``) would make a second insert return the first run anyway.
Between passes it sleeps until the earliest next tick, at most :data:`MAX_SLEEP`, so a
schedule created or changed elsewhere is seen within that.

Schedules declared with ``@app.schedule`` are written to the store when a worker starts
(:func:`declare`); see docs/schedules.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from simpleworkflow import errors, names, observe, outage, schedules
from simpleworkflow.backends import Backend
from simpleworkflow.backends.ops import ATOMIC, Op
from simpleworkflow.backends.records import NewRun
from simpleworkflow.models import Run, Schedule, Unreadable, unreadable_fields
from simpleworkflow.schedule_runs import tick_run
from simpleworkflow.schedules import ScheduleSpec

_log = logging.getLogger("simpleworkflow.worker")

#: The longest sleep between two reads of the schedules.
MAX_SLEEP = 10.0
#: Schedules handled per read; a full batch is followed by another read at once.
BATCH = 100
#: The pause after the store could not be reached.
RETRY_PAUSE = 1.0


@dataclass(frozen=True, slots=True)
class Fired:
    """What one transaction did for a schedule: ``moved`` its next tick (else another
    scheduler had), started or found ``runs``, or met a key held by another type."""

    moved: bool
    runs: list[Run] = field(default_factory=list)
    conflict: str | None = None


def fire(
    backend: Backend, schedule: Schedule, due: schedules.Due, news: list[tuple[str, NewRun]]
) -> Op[Fired]:
    """Move the schedule's next tick on from the value read, then start the ticks' runs,
    in one transaction: nothing starts unless this scheduler moved the tick."""
    yield ATOMIC
    last = due.ticks[-1] if due.ticks else None
    moved = yield from backend.advance_schedule(
        schedule.name, schedule.next_tick_at, due.next_at, last
    )
    if not moved or not news:
        return Fired(moved=moved)
    try:
        runs = yield from backend.create_runs(news)
    except errors.IdempotencyConflict as exc:  # a run of another type holds a tick's key
        return Fired(moved=True, conflict=str(exc))
    return Fired(moved=True, runs=runs)


def tick_runs(
    schedule: Schedule, ticks: Iterable[datetime], trace_context: dict[str, str] | None = None
) -> list[tuple[str, NewRun]]:
    """A run for each tick (:func:`~simpleworkflow.schedule_runs.tick_run`), each with a
    new id; ``trace_context`` is what the observers injected (the trace the runs continue)."""
    return [(names.new_run_id(), tick_run(schedule, tick, trace_context)) for tick in ticks]


class Scheduler:
    """Starts the due ticks of every schedule in the store, then sleeps until the next.

    The runs it starts reach ``observers`` as a client's do (``around_start``, then
    ``run_created`` for each), so metrics count them and traces begin at the tick."""

    name = "scheduler"

    def __init__(
        self,
        backend: Backend,
        unavailable: outage.Outage | None = None,
        max_sleep: float = MAX_SLEEP,
        observers: observe.Observer | None = None,
    ) -> None:
        self.backend = backend
        self.max_sleep = max_sleep
        self._outage = unavailable
        self.observers = (
            observers
            if isinstance(observers, observe.Observers)
            else observe.Observers([] if observers is None else [observers])
        )

    async def run(self) -> None:
        while True:
            await asyncio.sleep(await self.pass_once())

    async def pass_once(self) -> float:
        """Start what is due; return how long to sleep before the next pass."""
        try:
            due, now, next_due = await self.backend.execute_async(
                self.backend.due_schedules(BATCH), readonly=True
            )
            for schedule in due:
                await self._start(schedule, now)
        except errors.StoreUnavailable as exc:
            if self._outage is not None:
                self._outage.failed(exc)
            return RETRY_PAUSE
        if self._outage is not None:
            self._outage.ended()
        if due:  # their next ticks may come before next_due: read again
            return 0.0
        if not isinstance(next_due, datetime):  # none, or one it cannot read
            return self.max_sleep
        return min(max((next_due - now).total_seconds(), 0.0), self.max_sleep)

    async def _start(self, schedule: Schedule, now: datetime) -> None:
        unreadable = {
            name: value
            for name, value in unreadable_fields(schedule).items()
            if name in ("payload", "next_tick_at", "last_tick_at", "priority", "max_attempts")
        }
        if unreadable:
            named = "; ".join(f"{k} holds {v.raw!r} ({v.reason})" for k, v in unreadable.items())
            await self._break(schedule, f"cannot be read: {named}")
            return
        try:
            if schedule.next_tick_at is None:  # written with plain SQL: plan its first tick
                check_row(schedule)
                first = schedules.next_tick(schedule.cron, schedule.timezone, now)
                op = self.backend.advance_schedule(schedule.name, None, first, None)
                await self.backend.execute_async(op)
                return
            due = schedules.due(
                schedule.cron, schedule.timezone, schedule.missed, schedule.next_tick_at, now
            )
        except errors.InvalidArgument as exc:
            await self._break(schedule, str(exc))
            return
        try:
            fired = await self._fire(schedule, due)
        except errors.StoreUnavailable:
            raise
        except Exception as exc:  # the store refused its runs: a value written by hand
            _log.exception("schedule %s: starting its runs failed", schedule.name)
            await self._break(schedule, f"its runs cannot be started: {exc}"[:500])
            return
        if not fired.moved:
            return
        if due.skipped:
            _log.warning(
                "schedule %s: %d missed tick(s) before %s skipped (missed=%s; at most %d "
                "caught up)",
                schedule.name,
                due.skipped,
                schedules.iso(now - schedules.GRACE),
                schedule.missed,
                schedules.MAX_CATCH_UP,
            )
        if fired.conflict is not None:
            _log.warning(
                "schedule %s: a tick's run was not started: %s", schedule.name, fired.conflict
            )
        if any(run.created for run in fired.runs):
            self.backend.notify_local("wake", schedule.workflow_type)

    async def _fire(self, schedule: Schedule, due: schedules.Due) -> Fired:
        """:func:`fire` inside the observers' ``around_start`` (a batch when several ticks
        are due), and ``run_created`` for each run it started or found."""
        observers = self.observers
        if not due.ticks or not observers:
            return await self.backend.execute_async(
                fire(self.backend, schedule, due, tick_runs(schedule, due.ticks))
            )
        one = schedule.workflow_type if len(due.ticks) == 1 else None
        with observers.around_start(one):
            news = tick_runs(schedule, due.ticks, observers.trace_context())
            fired = await self.backend.execute_async(fire(self.backend, schedule, due, news))
            for run in fired.runs:
                observers.run_created(observe.RunCreated(run, bool(run.created)))
        return fired

    async def _break(self, schedule: Schedule, error: str) -> None:
        """Pause a schedule that cannot be read, once, and say so."""
        old: Any = schedule.next_tick_at
        if isinstance(old, Unreadable):  # its raw text, as the store reads it back
            old = old.raw
        op = self.backend.break_schedule(schedule.name, old, error)
        if await self.backend.execute_async(op):
            _log.warning("schedule %s paused: %s", schedule.name, error)


def check_row(schedule: Schedule) -> None:
    """Refuse a row written by hand that the scheduler could not plan."""
    schedules.check_cron(schedule.cron)
    schedules.check_timezone(schedule.timezone)
    schedules.check_missed(schedule.missed)


def declare_op(
    backend: Backend, declared: Mapping[str, ScheduleSpec], types: Iterable[str]
) -> Op[list[str]]:
    """Write the app's schedules (created, or changed to the code's definition); return
    the names of schedules once declared in code for ``types`` that the code no longer
    declares. Those are kept, and go on starting runs, until deleted."""
    yield ATOMIC
    now = backend.now()
    for spec in declared.values():
        yield from backend.upsert_schedule(spec, spec.next_tick(now), in_code=True)
    mine = set(types)
    stored = yield from backend.list_schedules()
    return [
        found.name
        for found in stored
        if found.in_code and found.workflow_type in mine and found.name not in declared
    ]


async def declare(
    backend: Backend, declared: Mapping[str, ScheduleSpec], types: Iterable[str]
) -> None:
    """:func:`declare_op`, and a warning naming the schedules gone from the code."""
    gone = await backend.execute_async(declare_op(backend, declared, types))
    if gone:
        _log.warning(
            "schedule(s) %s, declared in code for this worker's types, are no longer "
            "declared by its app; they go on starting runs until deleted "
            "(`simpleworkflow schedules delete NAME`)",
            ", ".join(gone),
        )
