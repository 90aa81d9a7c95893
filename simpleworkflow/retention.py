"""How long finished runs are kept, and the sweep that deletes them afterwards.

A run's retention is counted from when it finished (``updated_at`` of its terminal row).
It is fixed when the run is created (the store writes it, for plain SQL inserts too): the
run's own, chosen at start (``retention="90d"``), else its type's of that moment, set in
the registry (``admin.set_retention``); without either, the sweeper's default: 30 days, or
``SIMPLEWORKFLOW_RETENTION_DAYS``. The operator's ceiling,
``SIMPLEWORKFLOW_MAX_RETENTION_DAYS`` (365 days unless set), bounds all three: a longer
retention is refused where it is asked for (at start, in the registry, as a default), and
the sweep clamps whatever the tables hold to it (rows written by plain SQL, or before the
ceiling was lowered), so that no finished run outlives the ceiling.

:class:`Batches` is the loop of every deletion of old runs (the admin's ``sweep`` and
``purge``, the worker's sweeper service): one bounded transaction per batch until a batch
comes back short, each batch told to the observers as ``runs_deleted`` per type.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from simpleworkflow import durations, errors, observe
from simpleworkflow.backends.ops import Op

DAY = 86400.0
DEFAULT_DAYS = 30
MAX_DAYS = 365
DEFAULT_ENV = "SIMPLEWORKFLOW_RETENTION_DAYS"
MAX_ENV = "SIMPLEWORKFLOW_MAX_RETENTION_DAYS"
#: No ceiling may be set beyond the longest duration: every store can subtract it from now.
LIMIT_DAYS = durations.MAX_SECONDS // 86400
#: Runs deleted per transaction: at most this many, so that a transaction holds its row
#: locks for milliseconds (about 10 ms per 1,000 runs on Postgres, see docs/retention.md).
MAX_BATCH = 1000
DEFAULT_BATCH = MAX_BATCH
#: The name of the sweeper's row in ``workflow_service_lease``.
SWEEPER = "sweeper"
#: How often a worker's sweeper runs unless told: every worker runs one (one of a fleet
#: sweeps at a time), so that the tables stop growing without anyone asking.
SWEEP_EVERY = 300.0
SWEEP_ENV = "SIMPLEWORKFLOW_SWEEP_EVERY"
#: What ``$SIMPLEWORKFLOW_SWEEP_EVERY`` may say to start no sweeper in workers.
SWEEP_OFF = ("0", "off")


def _days_from_env(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        days = float(text)
    except ValueError:
        days = math.nan
    if not (0 <= days <= LIMIT_DAYS):  # NaN fails this too
        raise errors.ConfigurationError(
            f"${name} must be a number of days from 0 to {LIMIT_DAYS}, not {text!r}"
        )
    return days


def sweep_every_from_env() -> float | None:
    """How often a worker sweeps when its options do not say: ``$SIMPLEWORKFLOW_SWEEP_EVERY``
    (a duration such as ``"5m"`` or seconds; ``0`` or ``off``: no sweeper, ``None``), else
    every 5 minutes. Read when a worker is made."""
    text = os.environ.get(SWEEP_ENV, "").strip()
    if not text:
        return SWEEP_EVERY
    if text.lower() in SWEEP_OFF:
        return None
    try:
        seconds = durations.to_seconds(text, what=f"${SWEEP_ENV}")
    except errors.InvalidArgument:
        seconds = math.nan
    if not seconds >= 1:  # NaN fails this too
        raise errors.ConfigurationError(
            f"${SWEEP_ENV} must be a duration of at least one second (5m, 1h, 300) or "
            f"off, not {text!r:.40}"
        )
    return seconds


def ceiling() -> float:
    """The operator's ceiling in seconds: ``$SIMPLEWORKFLOW_MAX_RETENTION_DAYS``, else 365
    days; read when called (at a start that asks for a retention, at an admin's sweep,
    when a worker with a sweeper is made)."""
    days = _days_from_env(MAX_ENV, MAX_DAYS)
    if days <= 0:
        raise errors.ConfigurationError(f"${MAX_ENV} must be more than 0 days, not {days:g}")
    return days * DAY


def check(value: durations.Duration | None, *, what: str = "retention") -> float | None:
    """A retention asked for, in whole milliseconds, or ``None`` (the next default down);
    longer than the ceiling is an :class:`~simpleworkflow.errors.InvalidArgument`."""
    if value is None:
        return None
    seconds = round(durations.to_seconds(value, what=what), 3)
    limit = ceiling()
    if seconds > limit:
        raise errors.InvalidArgument(
            f"{what} must be at most {describe(limit)} (the ceiling, ${MAX_ENV}), "
            f"not {describe(seconds)}"
        )
    return seconds


@dataclass(frozen=True, slots=True)
class Policy:
    """The default and the ceiling one sweep applies, in seconds."""

    default: float
    ceiling: float

    @classmethod
    def from_env(cls, default: durations.Duration | None = None) -> Policy:
        """``default`` if given, else ``$SIMPLEWORKFLOW_RETENTION_DAYS``, else 30 days;
        under ``$SIMPLEWORKFLOW_MAX_RETENTION_DAYS`` (a default above it is refused)."""
        limit = ceiling()
        if default is None:
            seconds = _days_from_env(DEFAULT_ENV, DEFAULT_DAYS) * DAY
            if seconds > limit:
                raise errors.ConfigurationError(
                    f"${DEFAULT_ENV} ({describe(seconds)}) is longer than the ceiling "
                    f"${MAX_ENV} ({describe(limit)}); lower one or raise the other"
                )
            return cls(default=seconds, ceiling=limit)
        chosen = check(default, what="the default retention")
        assert chosen is not None
        return cls(default=chosen, ceiling=limit)


def describe(seconds: float) -> str:
    """``"30 days"``, ``"36 hours"``, ``"90 seconds"``: a retention for people."""
    for unit, size in (("day", DAY), ("hour", 3600.0), ("minute", 60.0)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} seconds"


def as_timedelta(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def check_batch(batch_size: object, limit: int) -> int:
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or not (1 <= batch_size <= limit)
    ):
        raise errors.InvalidArgument(
            f"batch_size must be an integer from 1 to {limit}, not {batch_size!r}"
        )
    return batch_size


@dataclass
class Batches:
    """A deletion in progress: ``batch()`` is the op of the next transaction, until a
    batch comes back short (``until_empty``: empty), or ``None`` (a sweeper that lost its
    lease).

    A sweep goes on until a batch finds nothing, since deleting a parent makes its
    children candidates: one sweep takes a whole tree that is past its retention.

    On a store with one writer at a time (SQLite, ``one_writer``) the caller rests
    ``rest`` seconds between batches, as long as the last one took: back to back, the
    batches would keep other processes' writers out (they poll for the lock) for the
    whole deletion, and beyond their busy timeout in a large one."""

    next_op: Callable[[], Op[Counter[str] | None]]
    batch_size: int
    observers: observe.Observer
    until_empty: bool = False
    one_writer: bool = False
    deleted: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    done: bool = False
    rest: float = 0.0
    _started: float = 0.0

    def batch(self) -> Op[Counter[str] | None]:
        self._started = time.monotonic()
        return self.next_op()

    def took(self, gone: Counter[str] | None) -> None:
        """Count a committed batch, and tell the observers what went, per type."""
        self.batches += 1
        self.rest = time.monotonic() - self._started if self.one_writer else 0.0
        if gone is None:
            self.done, self.rest = True, 0.0
            return
        count = sum(gone.values())
        self.deleted.update(gone)
        self.done = count == 0 if self.until_empty else count < self.batch_size
        if self.done:
            self.rest = 0.0
        for type_name, runs in sorted(gone.items()):
            self.observers.runs_deleted(observe.RunsDeleted(type=type_name, count=runs))

    @property
    def total(self) -> int:
        return sum(self.deleted.values())
