"""The bodies of the schedules' endpoints (``/api/v1/schedules``), beside the other
models of ``schemas``."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, StrictInt, StrictStr

from simpleworkflow.server.schemas import JSON, TYPE_PATTERN, _Request


class CreateSchedule(_Request):
    """A cron schedule: ``client.schedules.create``'s arguments (see docs/schedules.md)."""

    type: StrictStr | None = Field(
        default=None,
        description="the workflow type it starts (default: the schedule's name)",
        examples=["billing.invoice.v1"],
        json_schema_extra={"pattern": TYPE_PATTERN, "maxLength": 200},
    )
    cron: StrictStr = Field(
        description="five fields (minute hour day-of-month month day-of-week), six with "
        "seconds first, or @hourly, @daily, @weekly, @monthly, @yearly",
        examples=["0 2 * * *"],
        json_schema_extra={"maxLength": 200},
    )
    tz: StrictStr = Field(default="UTC", description="the IANA time zone of the cron fields")
    payload: dict[str, JSON] | None = Field(
        default=None,
        description="a JSON object each run gets, with `schedule` and `scheduled_for` added",
    )
    missed: Literal["skip", "once", "each"] = Field(
        default="skip", description="ticks no scheduler started within a minute"
    )
    priority: StrictInt = Field(default=100, description="the runs' priority (lower first)")
    max_attempts: StrictInt | None = Field(
        default=None, description="the runs' attempts (default 3)"
    )


class ScheduleOut(BaseModel):
    """A cron schedule, and where its ticks stand."""

    name: str
    workflow_type: str
    cron: str
    timezone: str
    payload: JSON
    missed: str
    priority: int
    max_attempts: int | None
    paused: bool
    next_tick_at: datetime | None = Field(description="the next tick to start (UTC)")
    last_tick_at: datetime | None = Field(description="the latest tick a run was started for")
    in_code: bool = Field(description="declared with @app.schedule")
    error: str | None = Field(description="why the scheduler paused it, if it did")
    created_at: datetime
    updated_at: datetime


class ScheduleDeleted(BaseModel):
    deleted: bool = Field(description="false when there was no such schedule")
