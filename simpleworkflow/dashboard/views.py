"""What the pages draw, worked out without I/O: a run's timeline, the throughput chart's
series, ages in words, JSON shown to people."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from simpleworkflow.admin import Minute, step_states
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.models import Event, JournalEntry, Run, RunStatus, unreadable_fields

#: Audit events that end an attempt: the run finished, failed and will be retried,
#: suspended in a sleep or a wait, or was given back or cancelled.
_ATTEMPT_ENDS = {
    "succeeded": "succeeded",
    "failed": "failed",
    "retried": "failed",
    "sleeping": "suspended",
    "waiting": "suspended",
    "child_started": "suspended",
    "released": "released",
    "cancelled": "cancelled",
}
#: The smallest bar drawn, in percent of the timeline, so that an instant stays visible.
_MIN_WIDTH = 0.6


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar of a timeline lane, in percent of the timeline's width."""

    label: str
    kind: str
    left: float
    width: float
    start: datetime
    end: datetime | None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Timeline:
    """A run's life from its creation to its end (or now): its attempts on one lane,
    each journaled call on a lane of its own. The gaps between bars are its sleeps,
    waits and retry delays."""

    start: datetime
    end: datetime
    attempts: list[Bar]
    steps: list[Bar]

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def timeline(
    run: Run, steps: Sequence[JournalEntry], events: Sequence[Event], now: datetime
) -> Timeline:
    """The timeline of ``run``, drawn from its journal's start and end times and the
    audit events that start and end its attempts."""
    # What cannot be read (a time out of range, written by hand) is left out of it.
    steps = [entry for entry in steps if not unreadable_fields(entry)]
    events = [event for event in events if isinstance(event.created_at, datetime)]
    updated = run.updated_at if isinstance(run.updated_at, datetime) else now
    end = updated if run.is_terminal else max(now, updated)
    moments = [end, *([run.created_at] if isinstance(run.created_at, datetime) else [])]
    moments += [entry.completed_at for entry in steps if entry.completed_at is not None]
    moments += [event.created_at for event in events]
    start, end = min(moments), max(moments)
    span = max((end - start).total_seconds(), 1e-3)

    def bar(label: str, kind: str, since: datetime, until: datetime | None, detail: str) -> Bar:
        left = (since - start).total_seconds() / span * 100
        stop = end if until is None else until
        width = max((stop - since).total_seconds() / span * 100, _MIN_WIDTH)
        return Bar(
            label,
            kind,
            round(min(left, 100 - _MIN_WIDTH), 3),
            round(width, 3),
            since,
            until,
            detail,
        )

    attempts = [bar(*found) for found in _attempts(events, run)]
    lanes = [bar(*found) for found in _calls(steps, run, events, now)]
    return Timeline(start=start, end=end, attempts=attempts, steps=lanes)


def _attempts(
    events: Iterable[Event], run: Run
) -> list[tuple[str, str, datetime, datetime | None, str]]:
    """``(label, kind, start, end, detail)`` of each claim: from a ``started`` event to
    the event that ended it (``None``: under way). Numbered as ``attempts_made`` counts:
    a claim that resumes a suspended run goes on with the same attempt, and only a
    failure (not a crash the run was not charged for) begins the next."""
    found: list[tuple[str, str, datetime, datetime | None, str]] = []
    began: Event | None = None
    failures = 0
    for event in events:
        if event.event_type == "started":
            began = event
        elif began is not None and event.event_type in _ATTEMPT_ENDS:
            kind = _ATTEMPT_ENDS[event.event_type]
            label = f"attempt {failures + 1}: {event.event_type}"
            found.append((label, kind, began.created_at, event.created_at, _error_of(event)))
            began = None
            if kind == "failed" and _charged(event):
                failures += 1
    if began is not None:
        state = "under way" if run.status is RunStatus.LEASED else run.status_text
        found.append((f"attempt {failures + 1}: {state}", "running", began.created_at, None, ""))
    return found


def _charged(event: Event) -> bool:
    """False for a crash the run was not charged for (it ran beside others)."""
    return not (isinstance(event.data, dict) and event.data.get("charged") is False)


def _calls(
    steps: Iterable[JournalEntry], run: Run, events: Sequence[Event], now: datetime
) -> list[tuple[str, str, datetime, datetime | None, str]]:
    """One bar per journaled call: a step that gave up ends (red) when it gave up, and
    a call its finished run left unanswered ends with the run; neither is drawn as
    still going on."""
    found: list[tuple[str, str, datetime, datetime | None, str]] = []
    for entry in sorted(steps, key=lambda one: one.position):
        if entry.started_at is None:
            continue
        state = step_states.step_state(entry, run, now)
        kind, until = entry.kind, entry.completed_at
        if entry.kind == JournalKind.SLEEP and isinstance(entry.output, dict):
            until = step_states.journaled_time(entry.output.get("until")) or until
        if state.status is step_states.StepStatus.FAILED:
            kind, until = "failed", _gave_up_at(events, entry.step_name) or run.updated_at
        elif until is None and run.is_terminal:
            until = run.updated_at
        tries = f", {entry.attempts} attempts" if entry.attempts > 1 else ""
        detail = f"{entry.kind}, {state.describe()}{tries}"
        found.append((entry.step_name, kind, entry.started_at, until, detail))
    return found


def _gave_up_at(events: Sequence[Event], name: str) -> datetime | None:
    """When step ``name`` gave up: its final ``step_failed`` event."""
    for event in reversed(events):
        data = event.data if isinstance(event.data, dict) else {}
        if event.event_type == "step_failed" and data.get("step") == name and data.get("final"):
            return event.created_at
    return None


def _error_of(event: Event) -> str:
    data = event.data if isinstance(event.data, dict) else {}
    error = data.get("error")
    if isinstance(error, dict):
        return f"{error.get('type', '')}: {error.get('message', '')}"
    return ""


def traceback_of(events: Sequence[Event]) -> str | None:
    """The traceback of the run's last failed attempt, if its audit trail has one."""
    for event in reversed(events):
        data = event.data if isinstance(event.data, dict) else {}
        error = data.get("error")
        if event.event_type in ("failed", "retried") and isinstance(error, dict):
            text = error.get("traceback")
            return text if isinstance(text, str) else None
    return None


def chart_series(minutes: Sequence[Minute]) -> dict[str, list[float]]:
    """The throughput chart's data as uPlot takes it: x in Unix seconds, one list per
    series."""
    return {
        "x": [minute.start.timestamp() for minute in minutes],
        "succeeded": [float(minute.succeeded) for minute in minutes],
        "failed": [float(minute.failed) for minute in minutes],
        "retried": [float(minute.retried) for minute in minutes],
    }


def pretty_json(value: Any) -> str:
    """JSON indented for reading; the template escapes it."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def compact(value: Any, limit: int = 120) -> str:
    """JSON on one line, cut to ``limit`` characters, for a table cell."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def long_texts(value: Any, where: str = "") -> list[tuple[str, str]]:
    """``(path, text)`` of each string in ``value`` that spans lines (a traceback), by
    its path (``error.traceback``): JSON shows its line breaks as ``\\n``, a page shows
    them as lines."""
    if isinstance(value, str):
        return [(where or "value", value)] if "\n" in value else []
    if isinstance(value, dict):
        items = [(f"{where}.{key}" if where else str(key), one) for key, one in value.items()]
    elif isinstance(value, list):
        items = [(f"{where}[{index}]", one) for index, one in enumerate(value)]
    else:
        return []
    return [found for path, one in items for found in long_texts(one, path)]


def age(seconds: float | None) -> str:
    """``"3 s"``, ``"4 min"``, ``"2.5 h"``, ``"3 d"``: how long, in a word."""
    if seconds is None:
        return "—"
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def moment(value: datetime | None) -> str:
    """A time as people read it in a table: in UTC, to the second."""
    if value is None:
        return "—"
    if not isinstance(value, datetime):  # a stored time that cannot be read
        return str(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def step_state(entry: JournalEntry, run: Run) -> step_states.StepState:
    """A journaled call's state, as the API and the CLI show it."""
    return step_states.step_state(entry, run, datetime.now(UTC))
