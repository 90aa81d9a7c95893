"""What the admin facade returns besides the engine's records: a type at a glance, what
is under way now, and what a sweep deleted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from simpleworkflow.models import WAITING_STATES, RegistryEntry, RunStatus, to_dict

#: The states counted for every type, in this order: the statuses, then the waiting
#: states of pending runs (a refinement of ``pending``; a run may be in several).
STATES = (*(status.value for status in RunStatus), *WAITING_STATES)


@dataclass(frozen=True, slots=True)
class TypeStats:
    """One workflow type at a glance, as an operator's overview shows it."""

    type: str
    #: Runs not deleted, for every name in :data:`STATES` (zeros included).
    counts: Mapping[str, int]
    #: Seconds since its oldest due pending run became due (how late its queue is);
    #: ``None`` when no run is due. A run sleeping until tomorrow is not late.
    oldest_due: float | None
    #: Its registry entry, ``None`` when no worker or operator has registered it.
    registry: RegistryEntry | None

    @property
    def total(self) -> int:
        """Runs of the type that are not deleted, in any status."""
        return sum(self.counts[status.value] for status in RunStatus)

    @property
    def paused(self) -> bool:
        return self.registry is not None and not self.registry.is_enabled

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, as the CLI and API print it."""
        return to_dict(
            self,
            ("type", "counts", "total", "oldest_due_seconds", "registry"),
            oldest_due_seconds=self.oldest_due,
            registry=None if self.registry is None else registry_dict(self.registry),
        )


def registry_dict(entry: RegistryEntry) -> dict[str, Any]:
    """A JSON-ready registry entry, times as ISO 8601 like every other JSON output and
    the retention in seconds (``None``: the sweeper's default)."""
    return to_dict(entry)


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One type's unfinished runs: what a metrics scrape reports for it."""

    type: str
    #: Pending runs not deleted, due or not (sleeping, waiting, delayed).
    pending: int
    #: Of those, the ones due now: what the workers have yet to claim.
    due: int
    #: Seconds since the oldest due run became due; ``None`` when none is due.
    oldest_due: float | None
    #: Runs a worker holds (in flight).
    leased: int
    #: Of those, the ones whose lease ran out: their worker died or froze, and a reaper
    #: has yet to give them back.
    expired_leases: int
    #: Whether the type is in the registry, and paused there.
    registered: bool
    paused: bool

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, as the CLI and API print it."""
        return to_dict(self, _QUEUE_KEYS, oldest_due_seconds=self.oldest_due)


@dataclass(frozen=True, slots=True)
class Queues:
    """What is under way, read in one statement that touches no finished run."""

    #: Every type with unfinished runs or a registry entry, by name.
    types: tuple[QueueStats, ...]
    #: Leased runs by the worker that holds them (its ``worker_id``).
    holders: Mapping[str, int]

    @property
    def workers(self) -> int:
        """Workers holding at least one lease (an idle worker holds none)."""
        return len(self.holders)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(
            self, ("types", "holders", "workers"), types=[stats.to_dict() for stats in self.types]
        )


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What a sweep deleted, or in a dry run would delete now, by type."""

    #: Runs by type (types with none left out).
    runs: Mapping[str, int]
    dry_run: bool
    #: The retention of runs that chose none and whose type has none, in seconds.
    default_retention: float
    #: The ceiling every retention was held to, in seconds.
    max_retention: float

    @property
    def total(self) -> int:
        return sum(self.runs.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, as ``simpleworkflow sweep --json`` prints it."""
        return to_dict(
            self,
            ("dry_run", "runs", "total", "default_retention_seconds", "max_retention_seconds"),
            runs=dict(sorted(self.runs.items())),
            default_retention_seconds=self.default_retention,
            max_retention_seconds=self.max_retention,
        )


@dataclass(frozen=True, slots=True)
class Minute:
    """What finished in one minute: runs that succeeded or failed for good, and attempts
    that failed and will be retried."""

    start: datetime
    succeeded: int = 0
    failed: int = 0
    retried: int = 0

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


#: What a worker is: ``live`` (seen within its lease, or holding a lease that has not run
#: out), ``stopped`` (it stopped gracefully) or ``gone`` (not seen since a lease ago: it
#: died, froze or lost the database).
WORKER_STATES = ("live", "stopped", "gone")


@dataclass(frozen=True, slots=True)
class Worker:
    """A worker, as it records itself (presence) and as its leases show it.

    A worker of another runtime, or of a version before presence, is seen through its
    leases alone: its presence fields are ``None``."""

    worker_id: str
    #: One of :data:`WORKER_STATES`.
    state: str
    #: Runs it holds, by type (empty for an idle worker).
    runs: Mapping[str, int] = field(default_factory=dict)
    #: The soonest one of its leases runs out, unless it renews it; ``None``: it holds none.
    next_expiry: datetime | None = None
    #: Its last claim or lease renewal (heartbeat), by the database's clock.
    last_renewed: datetime | None = None
    #: Leases of its that ran out: it died or froze, and a reaper has yet to act.
    expired: int = 0
    host: str | None = None
    pid: int | None = None
    runtime: str | None = None
    #: The type prefixes it claims (``billing.%``).
    type_prefixes: tuple[str, ...] = ()
    #: How many runs it may hold at once.
    concurrency: int | None = None
    #: The simpleworkflow version it runs.
    version: str | None = None
    started_at: datetime | None = None
    #: Its last presence write (once per heartbeat interval while it runs).
    last_seen: datetime | None = None
    stopped_at: datetime | None = None

    @property
    def held(self) -> int:
        return sum(self.runs.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, as the CLI and API print it."""
        return to_dict(self, _WORKER_KEYS)


#: The keys of each record's JSON: its fields, how late its queue is in seconds, and what
#: a worker holds in all.
_QUEUE_KEYS = tuple(
    "oldest_due_seconds" if f.name == "oldest_due" else f.name for f in fields(QueueStats)
)
_WORKER_KEYS = tuple(
    key for f in fields(Worker) for key in ((f.name, "held") if f.name == "runs" else (f.name,))
)
