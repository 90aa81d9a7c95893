"""The stores' own records: what the client, the worker and the engine hand a store
(a run to create, a claim, outcomes, a journal row) and what it hands back to them (a
lease, a claim's runs, a cancel's runs, a rate limit's token).

The records users see (runs, the registry, schedules ...) are public, in
:mod:`simpleworkflow.models`; the op protocol is :mod:`simpleworkflow.backends.ops`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from simpleworkflow.models import Run

#: What a worker learns about a lease it holds.
HELD, CANCELLED, LOST = "held", "cancelled", "lost"

#: How long a worker's knowledge that it holds a run stays good enough to begin a step
#: on, and how long a cancel of a leased run waits after its commit before it returns.
#: The worker notes the time before each read or fenced write that found the run held; a
#: cancel that it missed committed after that time, so it returns at least this long
#: after it, and a step begins only within this long of it: no step begins once
#: ``cancel()`` has returned (see ``holding``).
HOLD_FRESH_FOR = 0.2


@dataclass(frozen=True, slots=True)
class CancelledRuns:
    """What a cancel did: the ids it cancelled (the run's own first when it was), and
    whether one of them was leased, so that a worker may be about to begin a step."""

    ids: list[str]
    leased: bool


@dataclass(frozen=True, slots=True)
class NewRun:
    """A validated request to start a run; ``payload`` is already JSON text.

    Each field is a parameter of ``create_run`` (and a key of each ``create_runs`` item)
    under its own name, so that a new start option needs no code here beyond its field."""

    type: str
    payload: str
    idempotency_key: str | None = None
    priority: int = 100
    run_at: datetime | None = None
    #: Seconds from now, when ``run_at`` is not given.
    delay: float = 0.0
    max_attempts: int | None = None
    parent_id: str | None = None
    deadline: datetime | None = None
    #: Seconds from now, when ``deadline`` is not given as a time.
    deadline_in: float | None = None
    #: JSON text: the W3C trace context the run continues (see ``observe.Observer.inject``).
    trace_context: str | None = None
    #: Seconds kept after it finishes; ``None``: its type's retention, else the default.
    retention: float | None = None
    #: Counted against its type's per-key concurrency limit (docs/flow-control.md).
    concurrency_key: str | None = None
    #: Debounced (``debounce_run``): the key, the window and the cap, in seconds.
    debounce_key: str | None = None
    debounce_window: float | None = None
    debounce_max_wait: float | None = None

    def params(self) -> dict[str, Any]:
        """The statement parameters, by name."""
        return {name: getattr(self, name) for name in _NEW_RUN_FIELDS}


_NEW_RUN_FIELDS = tuple(f.name for f in fields(NewRun))


class _UnsealedNewRun:
    """:class:`NewRun`'s slots without its frozen guard (see :func:`plain_new_run`)."""

    __slots__ = NewRun.__slots__


def plain_new_run(type: str, payload: str, trace_context: str | None = None) -> NewRun:
    """``NewRun(type, payload, trace_context=...)``, every option at its default, for
    ``start_many``'s ``(type, payload)`` requests: written slot by slot and then made a
    ``NewRun`` (same slots), a quarter of what the frozen ``__init__`` costs."""
    new: Any = _UnsealedNewRun()
    new.type = type
    new.payload = payload
    new.trace_context = trace_context
    new.priority = 100
    new.delay = 0.0
    new.idempotency_key = new.run_at = new.max_attempts = new.parent_id = None
    new.deadline = new.deadline_in = new.retention = new.concurrency_key = None
    new.debounce_key = new.debounce_window = new.debounce_max_wait = None
    new.__class__ = NewRun
    return new  # type: ignore[no-any-return]  # a NewRun now (typing.cast is a call)


@dataclass(frozen=True, slots=True)
class RunQuery:
    """Filters and paging for a listing; ``None`` means "any"."""

    type_like: str | None = None
    #: Stored statuses, and kinds of wait (``sleep``, ``signal``, ``child``, ``retry``) a
    #: pending run is suspended in; a run in any of them is listed.
    statuses: tuple[str, ...] | None = None
    waits: tuple[str, ...] | None = None
    #: Also list pending runs due again after a failed attempt.
    retrying: bool = False
    created_after: datetime | None = None
    created_before: datetime | None = None
    #: JSON text: only runs whose payload contains it, as Postgres ``jsonb @>`` decides.
    payload_contains: str | None = None
    include_deleted: bool = False
    limit: int = 50
    after_created_at: datetime | None = None
    after_id: str | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """A run a worker claimed, with the token that fences every write it makes for it.

    ``claimed_at`` is the database's clock at the claim; ``was_waiting_for`` what the run
    was suspended on before this claim, if anything. ``isolated``: the run is a suspect
    (in a second crash beside others), claimed alone; its worker claims nothing else
    meanwhile.
    """

    run: Run
    token: str
    claimed_at: datetime | None = None
    was_waiting_for: Any = None
    isolated: bool = False
    #: The claim counted this lease against a concurrency limit: its outcome gives it
    #: back. If not, a limit set since counted it, and the store's trigger gives it back.
    counted: bool = True


@dataclass(frozen=True, slots=True)
class Claimed:
    """What one claim did: the runs it ``leases``; ``throttled_for``, the seconds until the
    earliest run it pushed to a rate limit's next window is due (``None``: none), for the
    worker's timer; ``limited``: a type claimed has a limit, so the next claim heeds them."""

    leases: list[Lease]
    throttled_for: float | None = None
    limited: bool = True


@dataclass(frozen=True, slots=True)
class Claim:
    """What a worker asks for: up to ``limit`` due runs of ``types`` it may run."""

    worker_id: str
    types: tuple[str, ...]
    limit: int
    lease_seconds: float
    runtime: str = "python"
    #: The worker holds no run: it may take a suspect, which it then runs alone.
    alone: bool = False
    #: The code version new runs of each type are stamped with.
    versions: Mapping[str, str] = field(default_factory=dict)
    #: ``"type@version"`` for every version this worker can replay.
    known: tuple[str, ...] = ()
    #: Whether the last claim found a limit on any of ``types``. ``False`` sends the
    #: claim without the limits' steps, which leaves out any type limited by then.
    limited: bool = True
    #: Whether the claim's commit waits for the disk (``synchronous_claims``).
    wait_for_disk: bool = True


@dataclass(frozen=True, slots=True)
class Success:
    run_id: str
    token: str
    result: str  # JSON text
    #: As ``Lease.counted``: the outcome gives the lease back to its counters.
    counted: bool = True


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed attempt: retried after ``delay`` seconds, or the end of the run if ``final``.

    ``charged``: the attempt counts against ``max_attempts`` (all but the crash of a
    worker that held other runs too, see ``recovery``). ``suspect``: the run is claimed
    alone from now on; any other failure clears the mark. ``crashes``: its uncharged
    crashes since an attempt last ended otherwise (0 for any other failure).
    """

    run_id: str
    token: str | None
    final: bool
    delay: float
    error: str  # stored in last_error
    data: dict[str, Any]  # event data
    charged: bool = True
    suspect: bool = False
    crashes: int = 0
    #: A crash, no error of the run's: due again at once, keeping its place in the queue
    #: (its ``run_at``, less a millisecond: ahead of the runs due with it) instead of
    #: going behind every run that came due meanwhile.
    keep_place: bool = False
    #: The trace context of the attempt that ends here (W3C entries, from the observers'
    #: ``inject``), stored with the run for the next attempt to link to.
    trace: dict[str, str] | None = None
    counted: bool = True  # as Success's


@dataclass(frozen=True, slots=True)
class Release:
    """Give a leased run back untouched (no attempt counted), e.g. at shutdown; due again
    ``delay`` seconds from now, or at once keeping its place in the queue."""

    run_id: str
    token: str
    delay: float = 0.0
    trace: dict[str, str] | None = None  # as Failure's
    counted: bool = True  # as Success's


@dataclass(frozen=True, slots=True)
class Suspension:
    """A run that gives its lease back until ``run_at`` (or ``delay`` seconds from now).

    ``waiting_for`` is stored on the run for operators, and tells what may wake it early:
    ``{"event": ..., "match": ...}`` for a signal, ``{"child_id": ...}`` for a child, or
    ``{"kind": "any", "waits": [...]}`` for several at once. ``events`` are the audit
    events to write, one per wait: ``{"type": "sleeping", "data": {...}}``.
    """

    run_id: str
    token: str
    events: list[dict[str, Any]]
    run_at: datetime | None = None
    delay: float = 0.0
    waiting_for: dict[str, Any] | None = None
    trace: dict[str, str] | None = None  # as Failure's

    @property
    def event(self) -> str:
        """What the run waits for, in a word or a few (``waiting, sleeping``), for logs."""
        return ", ".join(event["type"] for event in self.events)


@dataclass(frozen=True, slots=True)
class Continuation:
    """A run that continues as new (``ctx.continue_as_new``): it ends ``succeeded`` with
    result ``{"continued_as": next_id}``, and run ``next_id`` of the same type starts with
    ``payload`` and an empty journal, in the same transaction, linked both ways."""

    run_id: str
    token: str
    type: str
    next_id: str
    payload: str  # JSON text
    trace: dict[str, str] | None = None  # as Failure's: the successor's first attempt links to it
    counted: bool = True  # as Success's

    @property
    def result(self) -> str:
        """The result the run ends with (JSON text)."""
        return json.dumps({"continued_as": self.next_id})


@dataclass(frozen=True, slots=True)
class Outcomes:
    """Everything a worker has to record, written together in one transaction."""

    succeeded: list[Success] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    released: list[Release] = field(default_factory=list)
    suspended: list[Suspension] = field(default_factory=list)
    continued: list[Continuation] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.succeeded or self.failed or self.released or self.suspended or self.continued
        )


@dataclass(frozen=True, slots=True)
class ServiceLease:
    """The fleet-wide lease a service (the retention sweeper) holds while it works:
    ``holder`` keeps it by renewing it for ``seconds`` at every transaction."""

    name: str
    holder: str
    seconds: float


@dataclass(frozen=True, slots=True)
class StepRecord:
    """A step to journal, fenced by the lease that ran it."""

    run_id: str
    token: str
    name: str
    kind: str
    position: int
    output: str | None  # JSON text
    attempts: int
    status: str = "completed"
    started_at: datetime | None = None
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RateToken:
    """What a step's try for a token of a rate limit got: ``granted`` (and journaled), or
    not before ``until``, when the limit's next window opens. ``known`` is False for a
    limit that does not exist, ``held`` False for a lease lost: then nothing was taken."""

    granted: bool
    until: datetime | None = None
    known: bool = True
    held: bool = True
