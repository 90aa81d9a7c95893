"""Reads for the dashboard: outcomes minute by minute, the workers seen through the
leases they hold, and a run's children. Each reads an index made for it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from simpleworkflow.backends.core import StoreCore
from simpleworkflow.backends.ops import Op
from simpleworkflow.models import Run

#: The audit events counted per minute: runs that finished, attempts that failed and
#: will be retried.
OUTCOMES = ("succeeded", "failed", "retried")


@dataclass(frozen=True, slots=True)
class OutcomeCounts:
    """Outcome events per minute: ``counts[(minute, event_type)]``, minutes without any
    left out; ``now`` is the database's current minute (the last of the window)."""

    now: datetime
    counts: Counter[tuple[datetime, str]] = field(default_factory=Counter)


@dataclass(frozen=True, slots=True)
class HolderRow:
    """The leases one worker holds on runs of one type."""

    worker_id: str
    type: str
    runs: int
    #: The soonest its leases run out: the worker must renew by then.
    next_expiry: datetime
    #: The last claim or renewal of one of these leases (a run's ``updated_at``).
    last_renewed: datetime
    #: Leases already run out: the worker died or froze, and a reaper has yet to act.
    expired: int


@dataclass(frozen=True, slots=True)
class ClockState:
    """What a test harness looks at before it moves its clock (``simpleworkflow.testing``)."""

    leased: int  # attempts running (or outcomes not yet written)
    due: int  # runs due now, not yet claimed
    next_run: datetime | None  # the earliest later instant a run is due
    next_tick: datetime | None  # the earliest later tick of a schedule

    @property
    def next_due(self) -> datetime | None:
        """The earliest later instant at which a run or a schedule is due."""
        later = [at for at in (self.next_run, self.next_tick) if at is not None]
        return min(later, default=None)


class InsightOps(StoreCore):
    def outcomes_per_minute(self, minutes: int) -> Op[OutcomeCounts]:
        """Succeeded, failed and retried events per minute over the last ``minutes``."""
        rows = yield self.stmt("outcomes_per_minute", minutes=minutes)
        found = OutcomeCounts(now=self.decode_time(rows[0]["now_minute"]))
        for row in rows:
            if row["minute"] is not None:
                found.counts[self.decode_time(row["minute"]), row["event_type"]] += int(
                    row["events"]
                )
        return found

    def lease_holders(self) -> Op[list[HolderRow]]:
        """Every worker holding a lease, by type, in worker order."""
        rows = yield self.stmt("lease_holders")
        found = []
        for row in rows:
            next_expiry = self.read_time(row["next_expiry"])
            last_renewed = self.read_time(row["last_renewed"])
            if not isinstance(next_expiry, datetime) or not isinstance(last_renewed, datetime):
                continue  # a lease end or renewal written by hand that cannot be read
            found.append(
                HolderRow(
                    worker_id=row["leased_by"],
                    type=row["type"],
                    runs=int(row["runs"]),
                    next_expiry=next_expiry,
                    last_renewed=last_renewed,
                    expired=int(row["expired"] or 0),
                )
            )
        return found

    def list_children(self, run_id: str, limit: int) -> Op[list[Run]]:
        """Up to ``limit`` runs started by ``run_id``, oldest first."""
        rows = yield self.stmt("list_children", id=run_id, limit=limit)
        return [self.run_from_row(row) for row in rows]

    def clock_state(self) -> Op[ClockState]:
        """Whether anything runs or is due now, and when the next thing comes due."""
        row = (yield self.stmt("test_clock_state"))[0]
        run, tick = (row[key] and self.decode_time(row[key]) for key in ("next_run", "next_tick"))
        return ClockState(int(row["leased"]), int(row["due"]), run or None, tick or None)
