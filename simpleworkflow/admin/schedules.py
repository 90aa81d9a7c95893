"""Cron schedules from Python: :class:`Schedules` blocks, :class:`AsyncSchedules` is awaited.

Reached as ``client.schedules`` (or ``client.admin.schedules``, the same object), on the
client's connections. Each method checks its arguments and builds its op once, in
:class:`ScheduleVerbs`; a face only runs it. The scheduler that starts the runs is a
worker service (``worker/scheduler.py``); see docs/schedules.md.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from simpleworkflow import errors, names, observe, schedule_runs, schedules
from simpleworkflow.backends import Backend, op_runner
from simpleworkflow.backends.ops import Op
from simpleworkflow.backends.records import NewRun
from simpleworkflow.codec import Codec
from simpleworkflow.models import Run, Schedule, unreadable_fields

#: A schedule's fields a run started by hand is built from: none may be unreadable.
_RUN_FIELDS = ("payload", "priority", "max_attempts")


class ScheduleVerbs:
    """What both faces share: argument checks and the ops."""

    def __init__(
        self,
        backend: Backend,
        observers: observe.Observers | None = None,
        codec: Codec | None = None,
    ) -> None:
        self.backend = backend
        #: Writes a schedule's payload (its owner's codec).
        self.codec = codec
        #: The owner's observers: a run started by hand reaches them as a client's does.
        self.observers = observe.Observers([]) if observers is None else observers

    def _create_op(
        self,
        name: str,
        type: str | None,
        cron: str,
        tz: str,
        payload: Mapping[str, Any] | None,
        missed: str,
        priority: int,
        max_attempts: int | None,
    ) -> Op[Schedule]:
        spec = schedules.define(
            name,
            name if type is None else type,
            cron=cron,
            tz=tz,
            payload=payload,
            missed=missed,
            priority=priority,
            max_attempts=max_attempts,
            codec=self.codec,
        )
        return self.backend.upsert_schedule(spec, spec.next_tick(self.backend.now()))

    def _found(self, name: str, found: Schedule | None) -> Schedule:
        if found is None:
            raise errors.ScheduleNotFound(name)
        return found

    def _get_op(self, name: str) -> Op[Schedule | None]:
        return self.backend.get_schedule(names.validate_schedule_name(name))

    def _list_op(self, type: str | None) -> Op[builtins.list[Schedule]]:
        return self.backend.list_schedules(type=None if type is None else names.validate_type(type))

    def _pause_op(self, name: str, paused: bool) -> Op[Schedule | None]:
        return self.backend.set_schedule_paused(
            names.validate_schedule_name(name), paused, self._plan_from_now
        )

    def _delete_op(self, name: str) -> Op[bool]:
        return self.backend.delete_schedule(names.validate_schedule_name(name))

    @contextlib.contextmanager
    def _starting(self, schedule: Schedule) -> Iterator[dict[str, str] | None]:
        """The observers' ``around_start``; yields the trace context the run continues."""
        with self.observers.around_start(schedule.workflow_type):
            yield self.observers.trace_context()

    def _trigger_run(self, schedule: Schedule, trace: dict[str, str] | None) -> NewRun:
        """The run a tick would start, for now (the scheduler's own builder), keyed by
        the second: the same request twice within it finds the first run."""
        unreadable = {k: v for k, v in unreadable_fields(schedule).items() if k in _RUN_FIELDS}
        if unreadable:
            named = "; ".join(f"{k} holds {v.raw!r} ({v.reason})" for k, v in unreadable.items())
            raise errors.InvalidArgument(
                f"schedule {schedule.name!r} cannot start a run: {named}; create it again "
                "with `simpleworkflow schedules create`"
            )
        return schedule_runs.tick_run(schedule, self.backend.now(), trace, triggered=True)

    def _triggered(self, run: Run) -> Run:
        """After the commit: wake this process's idle workers, then tell the observers."""
        if run.created:
            self.backend.notify_local("wake", run.type)
        if self.observers:
            self.observers.run_created(observe.RunCreated(run, bool(run.created)))
        return run

    def _plan_from_now(self, schedule: Schedule) -> datetime:
        """A resumed schedule's next tick: the first after now (the paused ticks are gone)."""
        return schedules.next_tick(schedule.cron, schedule.timezone, self.backend.now())


class Schedules(ScheduleVerbs):
    """Cron schedules, blocking; see docs/schedules.md."""

    def __init__(
        self,
        owner: op_runner.Checked,
        observers: observe.Observers | None = None,
        codec: Codec | None = None,
    ) -> None:
        super().__init__(owner.backend, observers, codec)
        self._owner = owner

    def create(
        self,
        name: str,
        type: str | None = None,
        *,
        cron: str,
        tz: str = "UTC",
        payload: Mapping[str, Any] | None = None,
        missed: str = "skip",
        priority: int = 100,
        max_attempts: int | None = None,
    ) -> Schedule:
        """Start a run of ``type`` (default: ``name``, when it is a type) at every tick
        of ``cron`` (five fields, or six with seconds first) in time zone ``tz``, with
        ``payload`` plus ``schedule`` and ``scheduled_for``. ``missed``: ``skip``, ``once``
        or ``each`` (ticks no scheduler started within a minute). Creating a schedule of
        that name again changes it, keeping its pause."""
        op = self._create_op(name, type, cron, tz, payload, missed, priority, max_attempts)
        return self._owner._run(op)

    def list(self, *, type: str | None = None) -> builtins.list[Schedule]:
        """Every schedule by name, or those that start ``type``."""
        return self._owner._run(self._list_op(type), readonly=True)

    def get(self, name: str) -> Schedule:
        """The schedule of that name; :class:`~simpleworkflow.errors.ScheduleNotFound`."""
        return self._found(name, self._owner._run(self._get_op(name), readonly=True))

    def pause(self, name: str) -> Schedule:
        """Start no more runs until resumed; runs already started go on."""
        return self._found(name, self._owner._run(self._pause_op(name, True)))

    def resume(self, name: str) -> Schedule:
        """Start runs again from the next tick after now: ticks of the pause are not
        caught up."""
        return self._found(name, self._owner._run(self._pause_op(name, False)))

    def trigger(self, name: str) -> Run:
        """Start one run of the schedule now, outside its ticks: the payload a tick would
        get (``scheduled_for`` is now, and ``triggered`` is true), its type, priority and
        attempts. Its next tick does not move; a paused schedule may be triggered too.
        Triggered twice within one second, it starts one run (the second finds it)."""
        found = self.get(name)
        with self._starting(found) as trace:
            run = self._owner._run(self.backend.create_run(self._trigger_run(found, trace)))
        return self._triggered(run)

    def delete(self, name: str) -> bool:
        """Delete the schedule; ``False`` if there was none. Runs it started go on."""
        return self._owner._run(self._delete_op(name))


class AsyncSchedules(ScheduleVerbs):
    """Cron schedules, awaited; see :class:`Schedules` for what each method does."""

    def __init__(
        self,
        owner: op_runner.AsyncChecked,
        observers: observe.Observers | None = None,
        codec: Codec | None = None,
    ) -> None:
        super().__init__(owner.backend, observers, codec)
        self._owner = owner

    async def create(
        self,
        name: str,
        type: str | None = None,
        *,
        cron: str,
        tz: str = "UTC",
        payload: Mapping[str, Any] | None = None,
        missed: str = "skip",
        priority: int = 100,
        max_attempts: int | None = None,
    ) -> Schedule:
        """Create or change a schedule; see :meth:`Schedules.create`."""
        op = self._create_op(name, type, cron, tz, payload, missed, priority, max_attempts)
        return await self._owner._run(op)

    async def list(self, *, type: str | None = None) -> builtins.list[Schedule]:
        """Every schedule by name, or those that start ``type``."""
        return await self._owner._run(self._list_op(type), readonly=True)

    async def get(self, name: str) -> Schedule:
        """The schedule of that name; see :meth:`Schedules.get`."""
        return self._found(name, await self._owner._run(self._get_op(name), readonly=True))

    async def pause(self, name: str) -> Schedule:
        """Start no more runs until resumed."""
        return self._found(name, await self._owner._run(self._pause_op(name, True)))

    async def resume(self, name: str) -> Schedule:
        """Start runs again from the next tick after now; see :meth:`Schedules.resume`."""
        return self._found(name, await self._owner._run(self._pause_op(name, False)))

    async def trigger(self, name: str) -> Run:
        """Start one run of the schedule now; see :meth:`Schedules.trigger`."""
        found = await self.get(name)
        with self._starting(found) as trace:
            op = self.backend.create_run(self._trigger_run(found, trace))
            run = await self._owner._run(op)
        return self._triggered(run)

    async def delete(self, name: str) -> bool:
        """Delete the schedule; ``False`` if there was none."""
        return await self._owner._run(self._delete_op(name))
