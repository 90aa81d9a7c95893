"""A run and what is read about it: its status, events, signals and journal, pages of
runs, and what a publish or a signal did."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from simpleworkflow.models.values import (
    AS_IS,
    Unreadable,
    json_ready,
    to_dict,
    unreadable_fields,
)


class RunStatus(enum.StrEnum):
    """The five statuses of a run; the values are the strings stored in the database."""

    PENDING = "pending"
    LEASED = "leased"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


#: What the schema gives a run started without ``max_attempts`` (``coalesce(..., 3)``).
DEFAULT_MAX_ATTEMPTS = 3

TERMINAL_STATUSES = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})

#: States of a pending run that say what it waits for, by the kind of wait in its
#: ``waiting_for`` (``retrying`` also covers a run due again after a failed attempt;
#: ``throttled``, a run a rate limit pushed to its next window, at a claim or at a step).
#: ``Client.list(status=...)`` and ``runs list --status`` accept them besides the statuses.
WAITING_STATES = {
    "sleeping": "sleep",
    "waiting-signal": "signal",
    "waiting-child": "child",
    "retrying": "retry",
    "throttled": "throttle",
}
_STATE_OF_WAIT = {kind: state for state, kind in WAITING_STATES.items()}


@dataclass(frozen=True, slots=True)
class Run:
    """One row of ``workflow_run``. A column whose stored value cannot be read (written
    by plain SQL or another runtime) holds an :class:`Unreadable` instead of its type;
    :attr:`unreadable` lists them."""

    id: str
    type: str
    payload: Any
    status: RunStatus
    priority: int
    run_at: datetime
    idempotency_key: str | None
    attempt: int
    max_attempts: int
    leased_by: str | None
    lease_until: datetime | None
    last_error: str | None
    result: Any
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None
    #: What a suspended run waits for: a signal, a child run, or the time in ``run_at``;
    #: on a run cancelled while suspended, what it was waiting for.
    waiting_for: Any = None
    parent_id: str | None = None
    deadline: datetime | None = None
    #: The code version of the handler the run started on (set at its first claim).
    code_version: str | None = None
    #: The W3C trace context the run continues (``traceparent``, ``tracestate``), stored
    #: by a tracing producer; under ``attempt``, that of the attempt that last gave the
    #: run back. ``None`` when nobody traced it (see docs/tracing.md).
    trace_context: dict[str, Any] | None = None
    #: How long the run is kept after it finishes, fixed when it was created: its own,
    #: else its type's of then; ``None``: the sweeper's default (see docs/retention.md).
    retention: timedelta | None = None
    #: The key whose per-key concurrency limit the run counts against (a customer id,
    #: say; see docs/flow-control.md); ``None``: only its type's limit.
    concurrency_key: str | None = None
    #: Continue-as-new (docs/durable.md): the run that carried this one on, which ended
    #: ``succeeded`` with result ``{"continued_as": id}``; ``None`` for any other run.
    continued_as: str | None = None
    #: The run this one carries on (it called ``ctx.continue_as_new``); ``None`` if none.
    continued_from: str | None = None
    #: A fork (``admin.fork``, docs/admin.md): the run this one was forked from, and the
    #: journal entry it was forked at; ``None`` on every other run.
    forked_from: str | None = None
    forked_at_step: str | None = None
    #: Set only on what ``start`` and ``start_many`` return: True when the call created
    #: the run, False when its idempotency key was held already and the run that holds it
    #: came back. ``None`` on runs read back. Not part of the run's equality.
    created: bool | None = dataclasses.field(default=None, compare=False)

    @property
    def is_terminal(self) -> bool:
        """Finished; never for a status this version does not know (see
        :attr:`status_text`)."""
        return isinstance(self.status, RunStatus) and self.status.is_terminal

    @property
    def status_text(self) -> str:
        """The status as listings show it: its value, or ``unreadable: <raw>`` for a
        status this version does not know (written with SQLite's checks off, or by a
        newer runtime), which no worker claims or recovers."""
        return self.status.value if isinstance(self.status, RunStatus) else str(self.status)

    @property
    def unreadable(self) -> dict[str, Unreadable]:
        """The columns whose stored value could not be read, by name (empty for a
        healthy row): shown as such by listings, and the end of the run for a worker."""
        return unreadable_fields(self)

    @property
    def lease_expired(self) -> bool:
        """A leased run whose lease has run out, by this machine's clock: its worker died
        or stalled, and no worker has recovered the run yet (within about a second,
        while one runs for its type). Not held by anyone, whatever ``leased_by`` says."""
        if self.status is not RunStatus.LEASED or not isinstance(self.lease_until, datetime):
            return False
        return self.lease_until < datetime.now(UTC)

    @property
    def attempts_made(self) -> int:
        """Attempts made so far, the one under way included: what people mean by "attempt",
        and what every surface shows (the CLI, the API, the dashboard).

        The stored ``attempt`` counts *failed* attempts (the seed's contract, which other
        runtimes write). An attempt under way (leased, or suspended in a durable sleep or
        wait, which goes on in the next claim) counts, as does the one that succeeded or
        was cut short by a cancellation (the run was leased, or suspended: a cancel keeps
        ``waiting_for``); a run never started has made none.
        """
        if not isinstance(self.attempt, int):  # a count that cannot be read
            return 0
        if self.status in (RunStatus.SUCCEEDED, RunStatus.LEASED):
            return self.attempt + 1
        if self.status is RunStatus.PENDING:
            return self.attempt + self._suspended_in_attempt
        if self.status is RunStatus.CANCELLED:
            return self.attempt + (self.leased_by is not None or self._suspended_in_attempt)
        return self.attempt  # failed: the last failure is counted

    @property
    def _suspended_in_attempt(self) -> bool:
        """Suspended (or cancelled while suspended) in an attempt that goes on later."""
        return self.waiting_for is not None and not self._throttled_unstarted

    @property
    def _throttled_unstarted(self) -> bool:
        """Throttled at a claim with no attempt under way: a rate limit held back its
        start (or its next attempt), not a wait inside an attempt."""
        wait = self.waiting_for
        return (
            isinstance(wait, dict)
            and wait.get("kind") == "throttle"
            and "step" not in wait
            and wait.get("resumes") is None
        )

    @property
    def waiting_states(self) -> list[str]:
        """What a pending run waits for, as :data:`WAITING_STATES` names it (several for a
        run suspended in several waits at once); empty for a run that waits for nothing."""
        if self.status is not RunStatus.PENDING:
            return []
        if not isinstance(self.waiting_for, dict):
            return ["retrying"] if isinstance(self.attempt, int) and self.attempt > 0 else []
        waits = self.waiting_for.get("waits")
        kinds = (
            [w.get("kind") for w in waits if isinstance(w, dict)] if isinstance(waits, list) else []
        )
        kinds = kinds or [self.waiting_for.get("kind")]
        return list(dict.fromkeys(_STATE_OF_WAIT[k] for k in kinds if k in _STATE_OF_WAIT))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (times as ISO 8601 strings, the retention in seconds), as
        the CLI and API print it: every column, and ``attempts_made``. The stored
        ``attempt`` is named ``failed_attempts`` there, for what it counts: an ``attempt``
        of 0 beside ``attempts_made`` of 1 read as two answers to one question."""
        out: dict[str, Any] = {}
        unreadable = {}
        for key, name in _RUN_KEYS:  # one pass: every API answer and listing row pays
            value = getattr(self, name)
            if type(value) not in AS_IS:
                if isinstance(value, Unreadable):
                    unreadable[name] = value.to_dict()
                value = json_ready(value)
            out[key] = value
        if self.created is None:
            del out["created"]  # a run read back, not one a start returned
        if unreadable:
            out["unreadable"] = unreadable
        out["status"] = self.status_text
        out["attempts_made"] = self.attempts_made
        return out


#: A run's keys in its JSON, each with its field: its columns, the stored ``attempt`` as
#: ``failed_attempts``.
_RUN_KEYS = tuple(
    ("failed_attempts" if f.name == "attempt" else f.name, f.name) for f in dataclasses.fields(Run)
)


class _Unsealed:
    """:class:`Run`'s slots without its frozen guard: :func:`created_run` fills one with
    plain attribute writes, then makes it a ``Run`` (same slots, so Python allows it)."""

    __slots__ = Run.__slots__


def run_draft() -> Any:
    """A blank object with :class:`Run`'s slots, to fill field by field (every one of
    them) and hand to :func:`sealed_run`: a sixth of what ``Run(...)`` costs, for the
    readers of many rows (a claim of a hundred runs)."""
    return _Unsealed()


def sealed_run(draft: Any) -> Run:
    """The :class:`Run` that ``draft`` (from :func:`run_draft`) becomes, frozen."""
    draft.__class__ = Run
    return draft  # type: ignore[no-any-return]  # a Run now (typing.cast is a call)


def created_run(
    *,
    id: str,
    type: str,
    payload: Any,
    priority: int,
    run_at: datetime,
    idempotency_key: str | None,
    max_attempts: int,
    created_at: datetime,
    updated_at: datetime,
    parent_id: str | None,
    deadline: datetime | None,
    trace_context: dict[str, Any] | None,
    retention: Any,
    concurrency_key: str | None,
) -> Run:
    """A pending run just inserted (``created`` True), equal to the ``Run(...)`` of the
    same fields. What ``start`` and ``start_many`` return for each run they write: a
    frozen dataclass's ``__init__`` pays an ``object.__setattr__`` call per field (28),
    about 3 µs a run, where writing the slots directly costs a sixth of that."""
    run = run_draft()
    run.id = id
    run.type = type
    run.payload = payload
    run.status = RunStatus.PENDING
    run.priority = priority
    run.run_at = run_at
    run.idempotency_key = idempotency_key
    run.attempt = 0
    run.max_attempts = max_attempts
    run.leased_by = run.lease_until = run.last_error = run.result = None
    run.created_at = created_at
    run.updated_at = updated_at
    run.deleted_at = run.waiting_for = run.code_version = None
    run.parent_id = parent_id
    run.deadline = deadline
    run.trace_context = trace_context
    run.retention = retention
    run.concurrency_key = concurrency_key
    run.continued_as = run.continued_from = run.forked_from = run.forked_at_step = None
    run.created = True
    return sealed_run(run)


@dataclass(frozen=True, slots=True)
class Event:
    """One row of the audit trail, ``workflow_event``."""

    id: int
    workflow_id: str
    event_type: str
    data: Any
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


@dataclass(frozen=True, slots=True)
class Signal:
    """A signal sent to a run: still stored, or consumed by the wait named ``step_name``."""

    id: int
    run_id: str
    event: str
    payload: Any
    created_at: datetime
    consumed_at: datetime | None
    step_name: str | None

    @property
    def consumed(self) -> bool:
        return self.consumed_at is not None

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of a listing; pass ``next_cursor`` back to get the next page."""

    runs: list[Run]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Published:
    """What ``publish`` did: the run of each workflow type subscribed to the topic, by
    type. A run's ``created`` is True when this call started it, False when an earlier
    publish of the same event (same topic and event id) had. No runs: no subscription
    matches the topic, and nothing was written."""

    topic: str
    event_id: str
    runs: list[Run]

    @property
    def started(self) -> list[Run]:
        """The runs this call started (the others were started for the event before)."""
        return [run for run in self.runs if run.created]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, as the CLI and API print it."""
        return to_dict(
            self,
            ("topic", "event_id", "started", "runs"),
            started=len(self.started),
            runs=[run.to_dict() for run in self.runs],
        )


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
class SignalSent:
    """What ``signal()`` did: the stored signal's id, and whether it woke a waiting run."""

    signal_id: int
    woke: bool


@dataclass(frozen=True, slots=True)
class RunValue:
    """A value a run published (``ctx.set_value``): the last one set for ``key``.
    ``version`` counts the sets of the key (1 for the first), so a reader can wait for
    the next one; ``step_name`` is the journal entry of the set that wrote it."""

    run_id: str
    key: str
    value: Any
    version: int
    step_name: str
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)
