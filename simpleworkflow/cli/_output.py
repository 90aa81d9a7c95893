"""How the commands print: aligned tables and key/value blocks for people, JSON for scripts.

Times are shown in UTC to the second, so that output from machines in different time
zones lines up and can be pasted into a bug report as is.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from simpleworkflow import retention
from simpleworkflow.admin import TypeStats, step_states
from simpleworkflow.models import (
    WAITING_STATES,
    Event,
    JournalEntry,
    Run,
    RunStatus,
    Signal,
    Unreadable,
    iso,
    shown,
)

RUN_COLUMNS = ("ID", "TYPE", "STATUS", "ATTEMPT", "PRIORITY", "RUN_AT (UTC)", "CREATED (UTC)")
EVENT_COLUMNS = ("EVENT", "TIME (UTC)", "TYPE", "DATA")
STEP_COLUMNS = ("#", "STEP", "KIND", "STATUS", "ATTEMPTS", "OUTPUT")
TIMED_STEP_COLUMNS = (
    "#",
    "STEP",
    "KIND",
    "STATUS",
    "ATTEMPTS",
    "STARTED (UTC)",
    "COMPLETED (UTC)",
    "TOOK",
    "OUTPUT",
)
STATS_COLUMNS = (
    "TYPE",
    "REGISTRY",
    *(status.value.upper() for status in RunStatus),
    "OLDEST DUE",
    "WAITING",
)
SIGNAL_COLUMNS = ("SIGNAL", "EVENT", "SENT (UTC)", "STATUS", "PAYLOAD")


def emit_json(document: Any) -> None:
    """Write one JSON document to stdout."""
    json.dump(document, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def when(value: datetime | None) -> str:
    """A time as ``2025-01-31 09:30:00`` in UTC; ``-`` when there is none."""
    if value is None:
        return "-"
    if not isinstance(value, datetime):  # a stored time that cannot be read
        return str(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float | None) -> str:
    """``250ms``, ``4.2s``, ``3m 5s``, ``2h 10m``, ``3d 4h``; ``-`` for none."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    for unit, size, smaller, small_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60)):
        if whole >= size:
            return f"{whole // size}{unit} {whole % size // small_size}{smaller}"
    return f"{whole // 60}m {whole % 60}s"


def compact_json(value: Any) -> str:
    if isinstance(value, Unreadable):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is left ragged."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def status_text(run: Run) -> str:
    """``pending (sleeping)``, ``leased (lease expired)``, ``cancelled (deleted)``: the
    status and what qualifies it."""
    expired = ["lease expired"] if run.lease_expired else []
    notes = [*run.waiting_states, *expired, *(["deleted"] if run.deleted_at else [])]
    return run.status_text + (f" ({', '.join(notes)})" if notes else "")


def run_row(run: Run) -> list[str]:
    status = status_text(run)
    return [
        run.id,
        run.type,
        status,
        f"{run.attempts_made}/{run.max_attempts}",
        str(run.priority),
        when(run.run_at),
        when(run.created_at),
    ]


def runs_table(runs: Sequence[Run]) -> str:
    return table(RUN_COLUMNS, [run_row(run) for run in runs])


def run_fields(run: Run) -> str:
    """Every column of a run, one per line, JSON values compact."""
    pairs = [
        ("id", run.id),
        ("type", run.type),
        ("status", status_text(run)),
        ("attempts", f"{run.attempts_made} of {run.max_attempts}"),
        ("priority", str(run.priority)),
        ("run_at", when(run.run_at)),
        ("idempotency_key", run.idempotency_key or "-"),
        ("leased_by", run.leased_by or "-"),
        ("lease_until", when(run.lease_until)),
        ("last_error", run.last_error or "-"),
        ("payload", compact_json(run.payload)),
        ("result", "-" if run.result is None else compact_json(run.result)),
        ("created_at", when(run.created_at)),
        ("updated_at", when(run.updated_at)),
        ("deleted_at", when(run.deleted_at)),
        *_durable_fields(run),
    ]
    width = max(len(key) for key, _ in pairs)
    return "\n".join(f"{key.ljust(width)}  {value}" for key, value in pairs)


def _durable_fields(run: Run) -> list[tuple[str, str]]:
    """The columns of durable execution, and a retention chosen at start, shown only
    when set (plain runs have none)."""
    kept: Any = run.retention
    if isinstance(kept, timedelta):
        kept = retention.describe(kept.total_seconds())
    pairs = [
        ("waiting_for", None if run.waiting_for is None else compact_json(run.waiting_for)),
        ("parent_id", run.parent_id),
        ("deadline", None if run.deadline is None else when(run.deadline)),
        ("code_version", run.code_version),
        ("trace_context", None if run.trace_context is None else compact_json(run.trace_context)),
        ("retention", None if kept is None else str(kept)),
        ("continued_from", run.continued_from),
        ("continued_as", run.continued_as),
        ("forked_from", run.forked_from),
        ("forked_at_step", run.forked_at_step),
        *((f"unreadable {name}", value.reason) for name, value in run.unreadable.items()),
    ]
    return [(key, value) for key, value in pairs if value is not None]


def step_dict(step: JournalEntry, run: Run, now: datetime) -> dict[str, Any]:
    """A journaled call with its state (``admin.step_states``: the API's and the
    dashboard's too)."""
    state = step_states.step_state(step, run, now)
    return {
        "position": shown(step.position),
        "step_name": step.step_name,
        "kind": step.kind,
        "status": state.status.value,
        "at": iso(state.at),
        "waiting_for": state.waiting_for,
        "attempts": shown(step.attempts),
        "output": shown(step.output),
    }


def timed_step_dict(step: JournalEntry, run: Run, now: datetime) -> dict[str, Any]:
    """A step with its timings: when it started and completed, and the seconds between."""
    return {
        **step_dict(step, run, now),
        "started_at": iso(step.started_at),
        "completed_at": iso(step.completed_at),
        "duration_seconds": step.duration,
    }


def steps_table(steps: Sequence[JournalEntry], run: Run, now: datetime) -> str:
    """The journal: one durable call a line, in the order they first ran."""
    rows = [
        [
            str(s.position),
            s.step_name,
            s.kind,
            step_states.step_state(s, run, now).describe(),
            str(s.attempts),
            _cut(compact_json(s.output)),
        ]
        for s in steps
    ]
    return table(STEP_COLUMNS, rows)


def timed_steps_table(steps: Sequence[JournalEntry], run: Run, now: datetime) -> str:
    """The journal with each call's start, completion and time taken (retries and waits
    included): where a workflow spent its time."""
    rows = [
        [
            str(s.position),
            s.step_name,
            s.kind,
            step_states.step_state(s, run, now).describe(),
            str(s.attempts),
            when(s.started_at),
            when(s.completed_at),
            duration(s.duration),
            _cut(compact_json(s.output), 40),
        ]
        for s in steps
    ]
    return table(TIMED_STEP_COLUMNS, rows)


def stats_table(stats: Sequence[TypeStats]) -> str:
    """One line per type: its runtime, runs by status, how late its queue is, and what
    its pending runs wait for."""
    rows = []
    for item in stats:
        entry = item.registry
        runtime = "-" if entry is None else entry.runtime + (" (paused)" if item.paused else "")
        waiting = [
            f"{item.counts[state]} {state}" for state in WAITING_STATES if item.counts[state]
        ]
        rows.append(
            [
                item.type,
                runtime,
                *(str(item.counts[status.value]) for status in RunStatus),
                duration(item.oldest_due),
                ", ".join(waiting) or "-",
            ]
        )
    return table(STATS_COLUMNS, rows)


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def signals_table(signals: Sequence[Signal]) -> str:
    """The run's signals: which wait consumed each, and which are stored for a later one."""
    rows = [
        [
            str(s.id),
            s.event,
            when(s.created_at),
            f"consumed by {s.step_name}" if s.consumed else "pending",
            _cut(compact_json(s.payload)),
        ]
        for s in signals
    ]
    return table(SIGNAL_COLUMNS, rows)


def events_table(events: Sequence[Event]) -> str:
    rows = [[str(e.id), when(e.created_at), e.event_type, compact_json(e.data)] for e in events]
    return table(EVENT_COLUMNS, rows)
