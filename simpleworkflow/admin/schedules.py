"""Cron schedules from Python: :class:`Schedules` blocks, :class:`AsyncSchedules` is awaited.

Reached as ``client.schedules`` (or ``client.admin.schedules``, the same object), on the
client's connections. Each method checks its arguments and builds its op once, in
:class:`ScheduleVerbs`; a face only runs it. The scheduler that starts the runs is a
worker service (``worker/scheduler.py``); see docs/schedules.md.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from simpleworkflow import errors, names, schedules, schema_check
from simpleworkflow.backends import Backend
from simpleworkflow.backends.records import Op, Schedule


class ScheduleVerbs:
    """What both faces share: argument checks and the ops."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

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
        )
        return self.backend.upsert_schedule(spec, spec.next_tick(_now()))

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
            names.validate_schedule_name(name), paused, _plan_from_now
        )

    def _delete_op(self, name: str) -> Op[bool]:
        return self.backend.delete_schedule(names.validate_schedule_name(name))


def _now() -> datetime:
    return datetime.now(UTC)


def _plan_from_now(schedule: Schedule) -> datetime:
    """A resumed schedule's next tick: the first after now (the paused ticks are gone)."""
    return schedules.next_tick(schedule.cron, schedule.timezone, _now())


class Schedules(ScheduleVerbs):
    """Cron schedules, blocking; see docs/schedules.md."""

    def __init__(self, owner: schema_check.Checked) -> None:
        super().__init__(owner.backend)
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

    def delete(self, name: str) -> bool:
        """Delete the schedule; ``False`` if there was none. Runs it started go on."""
        return self._owner._run(self._delete_op(name))


class AsyncSchedules(ScheduleVerbs):
    """Cron schedules, awaited; see :class:`Schedules` for what each method does."""

    def __init__(self, owner: schema_check.AsyncChecked) -> None:
        super().__init__(owner.backend)
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

    async def delete(self, name: str) -> bool:
        """Delete the schedule; ``False`` if there was none."""
        return await self._owner._run(self._delete_op(name))
