"""Operator verbs: runs counted by state, how late each queue is, a retry, a purge, the
sweep of runs past their retention and the lease of its service (a type's retention is a
registry verb, in ``registry_ops``)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from simpleworkflow.backends.core import StoreCore
from simpleworkflow.backends.ops import ATOMIC, Op
from simpleworkflow.backends.presence_ops import FORGET_AFTER
from simpleworkflow.backends.records import ServiceLease
from simpleworkflow.models import (
    DEFAULT_MAX_ATTEMPTS,
    WAITING_STATES,
    Run,
    RunStatus,
)

_STATE_OF_WAIT = {kind: state for state, kind in WAITING_STATES.items()}
RETRYABLE = frozenset({RunStatus.FAILED, RunStatus.CANCELLED})


@dataclass
class LiveRuns:
    """Unfinished runs as one statement reads them (``live_runs``): by type, pending runs,
    the due ones among them and how many seconds the oldest of those is late; leased
    runs and those whose lease ran out; leased runs by lease holder; and every registered
    type with whether it is enabled."""

    pending: dict[str, int] = field(default_factory=dict)
    due: dict[str, int] = field(default_factory=dict)
    oldest_due: dict[str, float] = field(default_factory=dict)
    leased: Counter[str] = field(default_factory=Counter)
    expired: Counter[str] = field(default_factory=Counter)
    holders: Counter[str] = field(default_factory=Counter)
    registered: dict[str, bool] = field(default_factory=dict)


class AdminOps(StoreCore):
    def count_runs(self) -> Op[dict[str, Counter[str]]]:
        """Runs not deleted, by type then state: each status, and for pending runs also
        the waiting states they are in (:data:`~simpleworkflow.models.WAITING_STATES`),
        which count a run in each of its waits and so overlap one another."""
        rows = yield self.stmt("count_runs")
        counts: dict[str, Counter[str]] = {}
        for row in rows:
            tally = counts.setdefault(row["type"], Counter())
            runs = int(row["runs"])
            tally[row["status"]] += runs
            for kind in (row["waits"] or "").split(","):
                if kind in _STATE_OF_WAIT:
                    tally[_STATE_OF_WAIT[kind]] += runs
        return counts

    def oldest_due(self) -> Op[dict[str, float]]:
        """Seconds since the oldest due pending run of each type became due, by the
        database's clock; types with no due run are left out."""
        rows = yield self.stmt("oldest_due")
        # No seconds: the oldest due time is text SQLite cannot read (written by hand).
        return {
            row["type"]: max(0.0, float(row["seconds"]))
            for row in rows
            if row["seconds"] is not None
        }

    def live_runs(self) -> Op[LiveRuns]:
        """What is under way, read without touching a finished run: see :class:`LiveRuns`."""
        rows = yield self.stmt("live_runs")
        live = LiveRuns()
        for row in rows:
            kind, type_name = row["kind"], row["type"]
            if kind == "pending":
                live.pending[type_name] = int(row["runs"])
                live.due[type_name] = int(row["past"] or 0)
                # The oldest pending run is due when it became due in the past: its age
                # is how late the queue is. Pending runs all in the future: none is late.
                if row["past"] and row["seconds"] is not None:  # as in oldest_due
                    live.oldest_due[type_name] = max(0.0, float(row["seconds"]))
            elif kind == "leased":
                live.leased[type_name] += int(row["runs"])
                live.expired[type_name] += int(row["past"] or 0)
                if row["holder"] is not None:
                    live.holders[row["holder"]] += int(row["runs"])
            else:
                live.registered[type_name] = bool(row["enabled"])
        return live

    def retry_run(self, run_id: str) -> Op[tuple[Run, bool] | None]:
        """Give a failed or cancelled run a new attempt: ``(the run now, True)``; a run in
        another state comes back unchanged with ``False``; ``None`` when there is none.

        The run is pending and due at once, with at least one attempt left; its journal
        stays, except that steps that used up their attempts may run again.
        """
        yield ATOMIC  # the run stays locked from the check to the update
        rows = yield self.stmt("lock_run_row", id=run_id)
        if not rows:
            return None
        run = self.run_from_row(rows[0])
        if run.status not in RETRYABLE or run.deleted_at is not None:
            return run, False
        # A count that cannot be read (written by hand) is written again by the retry.
        attempt = run.attempt if isinstance(run.attempt, int) else 0
        allowed = run.max_attempts if isinstance(run.max_attempts, int) else DEFAULT_MAX_ATTEMPTS
        params: dict[str, Any] = {
            "id": run_id,
            "status": run.status.value,
            "max_attempts": max(allowed, attempt + 1),
        }
        params["data"] = json.dumps(
            {
                "previous_status": run.status.value,
                "last_error": run.last_error,
                "attempt": attempt,
                "max_attempts": params["max_attempts"],
            }
        )
        rows = yield self.stmt("retry_run", **params)
        yield from self.then("retry_run", **params)
        return self.run_from_row(rows[0]), True

    def lock_run(self, run_id: str) -> Op[Run | None]:
        """Run ``run_id``, locked until the transaction ends (the statements that follow
        are one transaction with this read); ``None`` when there is none."""
        yield ATOMIC
        rows = yield self.stmt("lock_run_row", id=run_id)
        return self.run_from_row(rows[0]) if rows else None

    def fork_run(
        self, run_id: str, new_id: str, payload: str | None, step: str, position: int
    ) -> Op[Run]:
        """A new run ``new_id`` forked from run ``run_id`` at journal entry ``step``
        (``admin.fork``; the caller has locked and checked the original): the original's
        type, ``payload`` (JSON text) or else the original's, and the journal entries
        before ``position``, copied in SQL. The original is never written."""
        params: dict[str, Any] = {
            "id": run_id,
            "new_id": new_id,
            "payload": payload,
            "step": step,
            "position": position,
        }
        rows = yield self.stmt("fork_run", **params)
        yield from self.then("fork_run", **params)
        return self.run_from_row(rows[0])

    def list_forks(self, run_id: str, limit: int) -> Op[list[Run]]:
        """The runs forked from ``run_id``, oldest first."""
        rows = yield self.stmt("list_forks", id=run_id, limit=limit)
        return [self.run_from_row(row) for row in rows]

    def purge_runs(self, older_than: float, type: str | None, limit: int) -> Op[Counter[str]]:
        """Delete up to ``limit`` finished (or soft-deleted, unleased) runs unchanged for
        ``older_than`` seconds, with their events, journal and signals; return how many
        of each type went. The last batch of a purge of every type deletes the rows of
        workers gone as long ago too."""
        # Whole milliseconds: SQLite reads "-1e-05 seconds" as no time at all.
        age = round(float(older_than), 3)
        rows = yield self.stmt("purge_runs", older_than=age, type=type, limit=limit)
        if type is None and len(rows) < limit:  # the last batch: workers gone as long ago
            yield self.stmt("forget_workers", older_than=age)
        return Counter(row["type"] for row in rows)

    def sweep_runs(
        self, default: float, ceiling: float, limit: int, lease: ServiceLease | None = None
    ) -> Op[Counter[str] | None]:
        """Delete up to ``limit`` runs past their retention (their own, else their type's,
        else ``default`` seconds; at most ``ceiling``) with their events, journal and
        signals; return how many of each type went. The last batch (short) deletes the
        rows of workers gone for :data:`FORGET_AFTER` too.

        With a ``lease``, first take or renew it in the same transaction, and delete
        nothing (``None``) when another holder has it: one sweeper at a time in a fleet,
        and a sweeper that stalled past its lease stops at its next batch."""
        if lease is not None:
            yield ATOMIC
            if not (yield from self.hold_service_lease(lease)):
                return None
        rows = yield self.stmt("sweep_runs", default=default, ceiling=ceiling, limit=limit)
        if len(rows) < limit:  # the last batch of a sweep
            yield self.stmt("forget_workers", older_than=FORGET_AFTER)
        return Counter(row["type"] for row in rows)

    def count_expired(self, default: float, ceiling: float) -> Op[Counter[str]]:
        """How many runs of each type :meth:`sweep_runs` would delete now; locks nothing."""
        rows = yield self.stmt("count_expired", default=default, ceiling=ceiling)
        return Counter({row["type"]: int(row["runs"]) for row in rows})

    def hold_service_lease(self, lease: ServiceLease) -> Op[bool]:
        """Take or renew ``lease``; ``False`` while another holder has it."""
        rows = yield self.stmt(
            "hold_service_lease", name=lease.name, holder=lease.holder, seconds=lease.seconds
        )
        return bool(rows)

    def release_service_lease(self, lease: ServiceLease) -> Op[None]:
        """Give ``lease`` back, so that another worker need not wait for it to expire."""
        yield self.stmt("release_service_lease", name=lease.name, holder=lease.holder)
