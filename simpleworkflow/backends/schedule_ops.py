"""Schedule verbs: cron schedules in the store, and the scheduler's read and its
compare-and-set.

What a tick is and which ticks are due is :mod:`simpleworkflow.schedules`' arithmetic;
starting a tick's runs is ``create_runs`` in the same transaction as
:meth:`ScheduleOps.advance_schedule` (see ``worker/scheduler.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from simpleworkflow.backends.core import StoreCore, read_int
from simpleworkflow.backends.ops import ATOMIC, Op
from simpleworkflow.models import Schedule
from simpleworkflow.schedules import ScheduleSpec


class ScheduleOps(StoreCore):
    def upsert_schedule(
        self, spec: ScheduleSpec, next_tick_at: datetime, *, in_code: bool = False
    ) -> Op[Schedule]:
        """Create the schedule, or give the one of that name this definition (its pause
        kept; ``next_tick_at`` taken only if the cron expression or time zone changed)."""
        rows = yield self.stmt(
            "upsert_schedule", **spec.params(), next_tick_at=next_tick_at, in_code=in_code
        )
        return self.schedule_from_row(rows[0])

    def get_schedule(self, name: str) -> Op[Schedule | None]:
        rows = yield self.stmt("get_schedule", name=name)
        return self.schedule_from_row(rows[0]) if rows else None

    def list_schedules(self, *, type: str | None = None) -> Op[list[Schedule]]:
        """Every schedule by name, or those that start ``type``."""
        rows = yield self.stmt("list_schedules", type=type)
        return [self.schedule_from_row(row) for row in rows]

    def set_schedule_paused(
        self, name: str, paused: bool, plan: Callable[[Schedule], datetime]
    ) -> Op[Schedule | None]:
        """Pause or resume a schedule; a resumed one's next tick is ``plan(schedule)``.
        ``None``: no such schedule."""
        yield ATOMIC  # the tick planned from the row read belongs to that row
        found = yield from self.get_schedule(name)
        if found is None:
            return None
        next_tick_at = found.next_tick_at if paused or not found.paused else plan(found)
        rows = yield self.stmt(
            "set_schedule_paused", name=name, paused=paused, next_tick_at=next_tick_at
        )
        return self.schedule_from_row(rows[0]) if rows else None

    def delete_schedule(self, name: str) -> Op[bool]:
        """Delete a schedule; ``False`` if there was none. Runs it started go on."""
        rows = yield self.stmt("delete_schedule", name=name)
        return bool(rows)

    def due_schedules(self, limit: int) -> Op[tuple[list[Schedule], datetime, datetime | None]]:
        """The schedules due (or not planned yet), earliest first, at most ``limit``; the
        database's clock; and the earliest tick after it (``None``: no schedule waits)."""
        rows = yield self.stmt("due_schedules", limit=limit)
        clock = (yield self.stmt("next_schedule_tick"))[0]
        return (
            [self.schedule_from_row(row) for row in rows],
            self.decode_time(clock["db_now"]),
            self.read_time(clock["next_due"]),
        )

    def advance_schedule(
        self, name: str, old: datetime | None, next_tick_at: datetime, last_tick_at: datetime | None
    ) -> Op[bool]:
        """Move the schedule's next tick from ``old`` to ``next_tick_at``; ``False`` when
        it no longer is ``old`` (another scheduler moved it, or it was paused)."""
        rows = yield self.stmt(
            "advance_schedule",
            name=name,
            old=old,
            next_tick_at=next_tick_at,
            last_tick_at=last_tick_at,
        )
        return bool(rows)

    def break_schedule(self, name: str, old: datetime | None, error: str) -> Op[bool]:
        """Pause a schedule the scheduler cannot read, saying why."""
        rows = yield self.stmt("break_schedule", name=name, old=old, error=error)
        return bool(rows)

    def schedule_from_row(self, row: Mapping[str, Any]) -> Schedule:
        return Schedule(
            name=row["name"],
            workflow_type=row["workflow_type"],
            cron=row["cron"],
            timezone=row["timezone"],
            payload=self.read_json(row["payload"]),
            missed=row["missed"],
            priority=read_int(row["priority"]),
            max_attempts=read_int(row["max_attempts"]),
            paused=bool(row["paused"]),
            next_tick_at=self.read_time(row["next_tick_at"]),
            last_tick_at=self.read_time(row["last_tick_at"]),
            in_code=bool(row["in_code"]),
            error=row["error"],
            created_at=self.read_time(row["created_at"]),
            updated_at=self.read_time(row["updated_at"]),
        )
