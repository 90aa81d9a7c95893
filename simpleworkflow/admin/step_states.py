"""What a journaled call is doing, in the one vocabulary the API, the CLI and the
dashboard show: ``completed``, ``failed``, ``retrying`` (and when), ``waiting`` (and for
what), ``running``, or ``stopped`` (its run ended first).

The journal stores only ``completed`` and ``retrying``: a step that gave up, a step
between tries and a wait not yet answered are all ``retrying`` rows. Read alone, that
word hides a failure; this module tells them apart, from the row and its run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from simpleworkflow.durable import replay
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.models import JournalEntry, Run, RunStatus, to_dict

#: A wait with no timeout is journaled as lasting until this year.
_FOREVER_YEAR = 9999


class StepStatus(enum.StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    RETRYING = "retrying"
    WAITING = "waiting"
    RUNNING = "running"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class StepState:
    """A call's status; ``at``: when a retrying step tries next, or when a wait or a
    sleep ends (``None``: not known, or never); ``waiting_for``: what a waiting call
    waits for, in words; ``error``: why a failed step gave up."""

    status: StepStatus
    at: datetime | None = None
    waiting_for: str | None = None
    error: str | None = None

    def describe(self) -> str:
        """The status with its when or what for, on one line: ``retrying at ...``."""
        text = self.status.value
        if self.waiting_for:
            text += f" for {self.waiting_for}"
        if self.at is not None:
            text += f" until {_moment(self.at)}" if self.waiting_for else f" at {_moment(self.at)}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def step_state(entry: JournalEntry, run: Run, now: datetime) -> StepState:
    """The state of journaled call ``entry`` of ``run``, as of ``now``."""
    if replay.gave_up(entry):
        return StepState(StepStatus.FAILED, error=str(entry.output["gave_up"]))
    if entry.status == "completed":
        return _completed(entry, run, now)
    if run.is_terminal:
        return StepState(StepStatus.STOPPED)
    if entry.kind != JournalKind.STEP:
        return _waiting(entry)
    if run.status is RunStatus.LEASED:
        return StepState(StepStatus.RUNNING)  # its next try is due, and the run is held
    return StepState(StepStatus.RETRYING, at=run.run_at)


def _completed(entry: JournalEntry, run: Run, now: datetime) -> StepState:
    """A sleep is journaled complete as it begins, with the time it ends."""
    if entry.kind == JournalKind.SLEEP and not run.is_terminal:
        until = journaled_time(
            entry.output.get("until") if isinstance(entry.output, dict) else None
        )
        if until is not None and until > now:
            return StepState(StepStatus.WAITING, at=until, waiting_for="a timer")
    return StepState(StepStatus.COMPLETED)


def _waiting(entry: JournalEntry) -> StepState:
    output = entry.output if isinstance(entry.output, dict) else {}
    until = journaled_time(output.get("until"))
    if until is not None and until.year >= _FOREVER_YEAR:
        until = None
    event = output.get("event")
    what = f"signal {event!r}" if isinstance(event, str) else entry.kind
    return StepState(StepStatus.WAITING, at=until, waiting_for=what)


def journaled_time(value: Any) -> datetime | None:
    """A time a journal entry's output holds as ISO 8601 text; ``None`` for anything else."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _moment(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
