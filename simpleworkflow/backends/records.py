"""The plain data that crosses the backend interface, and the op protocol itself.

An *op* is a generator that yields the SQL statements it needs and receives each one's
rows; a backend drives it inside one transaction (see :func:`drive`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, TypeVar

from simpleworkflow.models import Run, iso, shown

T = TypeVar("T")
Rows = list[dict[str, Any]]

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
class Statement:
    """One SQL statement with its named parameters."""

    sql: str
    params: Mapping[str, Any] = field(default_factory=dict)


Op = Generator[Statement, Rows, T]


#: Yielded first by an op whose statements must commit together (a row lock held from
#: one statement to the next, say). Other ops run each statement on its own, which on
#: Postgres saves the round trips of BEGIN and COMMIT.
ATOMIC = Statement("-- the statements that follow form one transaction")


@dataclass(frozen=True, slots=True)
class Stream(Statement):
    """Many statements, yielded as one: each one's rows go to ``take``, in order.

    The op builds each statement only when the driver asks for it, so a driver may send
    one and let the op build the next and take the rows of the last meanwhile (Postgres
    pipeline mode): the client's Python and the server's work overlap. The op receives
    no rows for the stream itself.
    """

    statements: Iterator[Statement] = field(kw_only=True)
    take: Callable[[Rows], None] = field(kw_only=True)


def stream_in_turn(stream: Stream, run: Callable[[Statement], Rows]) -> None:
    """Drive a stream one statement at a time, for drivers that cannot overlap."""
    for statement in stream.statements:
        stream.take(run(statement))


def drive(
    op: Op[T],
    run: Callable[[Statement], Rows],
    first: Statement | None = None,
    stream: Callable[[Stream], None] | None = None,
) -> T:
    """Feed each statement an op yields to ``run`` until the op returns.

    ``first`` is a statement already taken from the op; ``ATOMIC`` markers are answered
    here, since the caller decided about the transaction before driving. ``stream``
    drives a :class:`Stream` (by default one statement after the other).
    """
    try:
        statement = next(op) if first is None else first
        while True:
            if statement is ATOMIC:
                rows: Rows = []
            elif isinstance(statement, Stream):
                if stream is None:
                    stream_in_turn(statement, run)
                else:
                    stream(statement)
                rows = []
            else:
                rows = run(statement)
            statement = op.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


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
class Outcomes:
    """Everything a worker has to record, written together in one transaction."""

    succeeded: list[Success] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    released: list[Release] = field(default_factory=list)
    suspended: list[Suspension] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.succeeded or self.failed or self.released or self.suspended)


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
        return {
            "name": self.name,
            "max_runs": shown(self.max_runs),
            "period": shown(self.period),
            "per_key": self.per_key,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
        }


@dataclass(frozen=True, slots=True)
class ServiceLease:
    """The fleet-wide lease a service (the retention sweeper) holds while it works:
    ``holder`` keeps it by renewing it for ``seconds`` at every transaction."""

    name: str
    holder: str
    seconds: float


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
        return {
            "pattern": self.pattern,
            "workflow_type": self.workflow_type,
            "priority": shown(self.priority),
            "max_attempts": shown(self.max_attempts),
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
        }


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
        return {
            "name": self.name,
            "workflow_type": self.workflow_type,
            "cron": self.cron,
            "timezone": self.timezone,
            "payload": shown(self.payload),
            "missed": self.missed,
            "priority": shown(self.priority),
            "max_attempts": shown(self.max_attempts),
            "paused": self.paused,
            "next_tick_at": _iso(self.next_tick_at),
            "last_tick_at": _iso(self.last_tick_at),
            "in_code": self.in_code,
            "error": self.error,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
        }


_iso = iso


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One row of the step journal: a completed step, or one still retrying.

    ``started_at`` is when the call first started (its first attempt, or the start of a
    wait), ``completed_at`` when it completed; both by the database's clock, and ``None``
    on entries the worker has not read back from the store."""

    step_name: str
    kind: str
    position: int
    status: str  # "completed" or "retrying"
    output: Any
    attempts: int
    completed_at: datetime | None = None
    started_at: datetime | None = None

    @property
    def duration(self) -> float | None:
        """Seconds from the call's start to its completion (a step's retries, a wait's
        waiting included); ``None`` until it completes. A sleep is journaled, with the
        time it ends (``output["until"]``), as it begins: its duration is about 0."""
        started, completed = self.started_at, self.completed_at
        if not isinstance(started, datetime) or not isinstance(completed, datetime):
            return None  # not completed, or a time that cannot be read
        return (completed - started).total_seconds()


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


@dataclass(frozen=True, slots=True)
class SignalSent:
    """What ``signal()`` did: the stored signal's id, and whether it woke a waiting run."""

    signal_id: int
    woke: bool
