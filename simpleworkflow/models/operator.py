"""What operators and apps set up, as read back from a store: the registry of workflow
types, rate limits, subscriptions to topics, cron schedules, and the payload index."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from simpleworkflow.models.values import to_dict

#: The optional payload index's name, in the store's schema (docs/performance.md).
PAYLOAD_INDEX_NAME = "idx_workflow_run_payload"


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """One row of ``workflow_registry``: which runtime may run a type, and whether it may."""

    workflow_name: str
    intent_type: str
    runtime: str
    is_enabled: bool
    description: str | None
    created_at: datetime
    updated_at: datetime
    #: How long its runs are kept after they finish unless they chose at start; ``None``:
    #: the sweeper's default.
    retention: timedelta | None = None
    #: At most this many of its runs leased at once across the fleet; ``None``: no limit.
    concurrency: int | None = None
    #: At most this many leased at once per concurrency key; ``None``: no limit.
    key_concurrency: int | None = None
    #: The name of the rate limit its claims obey; ``None``: none.
    rate_limit: str | None = None


@dataclass(frozen=True, slots=True)
class RateLimit:
    """One row of ``workflow_rate_limit``: at most ``max_runs`` claims per ``period``
    seconds of the types that name it, counted apart for each concurrency key if
    ``per_key``."""

    name: str
    max_runs: int
    period: float
    per_key: bool
    created_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, times as ISO 8601, as the CLI and API print it."""
        return to_dict(self)


@dataclass(frozen=True, slots=True)
class Subscription:
    """One row of ``workflow_subscription``: ``workflow_type`` runs once for every event
    published on a topic that ``pattern`` matches, with these start options."""

    pattern: str
    workflow_type: str
    priority: int
    #: ``None``: the schema's default (3).
    max_attempts: int | None
    created_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, times as ISO 8601, as the CLI and API print it."""
        return to_dict(self)


@dataclass(frozen=True, slots=True)
class Schedule:
    """One row of ``workflow_schedule``: ``workflow_type`` starts at every tick of
    ``cron`` in ``timezone``, with ``payload`` plus the tick (see docs/schedules.md)."""

    name: str
    workflow_type: str
    cron: str
    timezone: str
    payload: Any
    #: What becomes of ticks no scheduler started in time: ``skip``, ``once``, ``each``.
    missed: str
    priority: int
    #: ``None``: the schema's default (3).
    max_attempts: int | None
    paused: bool
    #: The next tick to start (UTC); ``None`` until a scheduler plans a row written by hand.
    next_tick_at: datetime | None
    #: The latest tick a run was started for.
    last_tick_at: datetime | None
    #: Declared with ``@app.schedule``; workers of the app write it again when they start.
    in_code: bool
    #: Why the scheduler paused it, if it did (a cron or time zone it cannot read).
    error: str | None
    created_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, times as ISO 8601, as the CLI and API print it."""
        return to_dict(self)


@dataclass(frozen=True)
class PayloadIndex:
    """The payload index as it stands after an action.

    ``present``: the index exists; ``valid``: it serves queries (a ``create index
    concurrently`` that was interrupted leaves an invalid index behind, which costs
    writes and serves nothing); ``size_bytes``: its size on disk (0 when absent);
    ``changed``: this call created or dropped it; ``rebuilt``: this call found an invalid
    index and dropped it before building it again.
    """

    present: bool
    valid: bool
    size_bytes: int
    changed: bool = False
    rebuilt: bool = False

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self, ("index", *_INDEX_FIELDS), index=PAYLOAD_INDEX_NAME)


_INDEX_FIELDS = tuple(f.name for f in fields(PayloadIndex))
