"""The app of the scheduler's process test: one handler, one schedule that ticks every
second, declared in code, so that every worker writes it when it starts and runs the
scheduler (``simpleworkflow worker schedule_app:app``)."""

from __future__ import annotations

from typing import Any

from simpleworkflow import App

TICK_TYPE = "cron.tick.v1"
SCHEDULE = "cron.every-second"

app = App()


@app.schedule(TICK_TYPE, cron="* * * * * *", name=SCHEDULE, missed="each")
def tick(payload: dict[str, Any]) -> dict[str, Any]:
    return {"scheduled_for": payload["scheduled_for"]}
