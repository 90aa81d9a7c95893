"""The frozen events the observer hooks receive, and the values of their fields.

Each point of a run's life the engine reports is one class here, built once and handed to
every observer: frozen, so that no observer can change what the next one sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from simpleworkflow.models import Run

#: ``AttemptFinished.outcome``: what became of the attempt.
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"  # for good: no attempt follows
RETRIED: Final = "retried"  # failed; the run is due again after a backoff
SUSPENDED: Final = "suspended"  # waits for a sleep, a signal, a child or a step retry
CANCELLED: Final = "cancelled"
LEASE_LOST: Final = "lease_lost"  # another worker may hold the run now
STOPPED: Final = "stopped"  # the worker stopped under it: the run is due again
#: ended ``succeeded`` and carried on by a new run (``AttemptFinished.continued_as``)
CONTINUED: Final = "continued_as_new"

#: ``RunSuspended.kind``: what a suspended run waits for.
SLEEP: Final = "sleep"
SIGNAL: Final = "signal"
CHILD: Final = "child"
RETRY: Final = "retry"  # a step's retry, after its backoff
THROTTLE: Final = "throttle"  # a rate limit's next window (ctx.rate_limit)
ANY: Final = "any"  # several of the above (a race or a gather): the first one wakes it


@dataclass(frozen=True, slots=True)
class RunCreated:
    """A client stored a run; ``created`` is False when an idempotency key found it.
    ``committed`` is False when it was written inside the caller's transaction
    (``connection=``), which may still roll back."""

    run: Run
    created: bool = True
    committed: bool = True


@dataclass(frozen=True, slots=True)
class SignalDelivered:
    """A client stored a signal for ``run_id`` (a run waiting for it is woken);
    ``committed`` as in :class:`RunCreated`."""

    run_id: str
    event: str
    committed: bool = True


@dataclass(frozen=True, slots=True)
class RunClaimed:
    """A worker leased ``run``; ``queued_for`` is seconds from due to claimed."""

    run: Run
    worker_id: str
    queued_for: float


@dataclass(frozen=True, slots=True)
class AttemptStarted:
    """The handler of ``run`` is about to be called (``run.attempt`` counts from 0)."""

    run: Run
    worker_id: str


@dataclass(frozen=True, slots=True)
class AttemptFinished:
    """One attempt ended: ``outcome`` is one of the constants above.

    ``error`` is the exception's message for ``failed`` and ``retried``; ``retry_in``
    the seconds until the run is due again for ``retried``; ``waits`` the audit events of
    what a ``suspended`` run waits for (``"sleeping"``, ``"waiting, sleeping"``);
    ``continued_as`` the successor of a run that ``continued_as_new``."""

    run: Run
    worker_id: str
    outcome: str
    duration: float
    error: str | None = None
    retry_in: float | None = None
    waits: str | None = None
    #: For ``continued_as_new``: the id of the run that carries this one on.
    continued_as: str | None = None


@dataclass(frozen=True, slots=True)
class StepStarted:
    """Step ``step`` of ``run`` starts its ``attempt`` (from 1) in this attempt of the run."""

    run: Run
    step: str
    attempt: int


@dataclass(frozen=True, slots=True)
class StepCompleted:
    run: Run
    step: str
    attempt: int
    duration: float


@dataclass(frozen=True, slots=True)
class StepFailed:
    """A step's attempt raised; ``retrying`` says whether its policy retries it."""

    run: Run
    step: str
    attempt: int
    duration: float
    error: BaseException
    retrying: bool


@dataclass(frozen=True, slots=True)
class StepRetried:
    """A failed step is retried after ``delay`` seconds (in this attempt or a later one)."""

    run: Run
    step: str
    attempt: int
    delay: float


@dataclass(frozen=True, slots=True)
class RunSuspended:
    """``run`` gave its lease back until what it waits for happens (``until``: at the latest).

    ``waiting_for`` is what the run stores (see docs/schema.md): the wait's step name, the
    signal's event, the child's id ..."""

    run: Run
    kind: str
    until: datetime | None
    waiting_for: Any = None


@dataclass(frozen=True, slots=True)
class RunResumed:
    """A suspended run was claimed again; ``kind`` is what it had waited for."""

    run: Run
    kind: str


@dataclass(frozen=True, slots=True)
class SignalConsumed:
    """``run`` took signal ``event`` that it waited for."""

    run: Run
    event: str


@dataclass(frozen=True, slots=True)
class LeaseLost:
    """A worker stopped ``run``'s handler: its lease went to another worker, or could not
    be renewed in time (``reason``)."""

    run: Run
    worker_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class LeasesReaped:
    """A worker gave back runs whose leases expired under a crashed or frozen worker."""

    run_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunsDeleted:
    """Retention deleted ``count`` finished runs of ``type``."""

    type: str
    count: int


@dataclass(frozen=True, slots=True)
class ValueSet:
    """``run`` published its value ``key`` (``ctx.set_value``), journaled as ``step``;
    ``at`` is when, by the database's clock as the worker reckons it. Fired once the set
    committed, never on replay. The value itself is not carried, as a signal's payload
    is not: read it with ``client.value``."""

    run: Run
    key: str
    step: str
    at: datetime


@dataclass(frozen=True, slots=True)
class StreamAppended:
    """``items`` items of ``run``'s stream ``key`` committed in one batch, at offsets
    ``first`` to ``last``; ``step`` is the step whose function appended them, or the
    body's journal name for an append from the body. Items a step run again had written
    already are left out: a batch that wrote none fires nothing."""

    run: Run
    key: str
    step: str
    items: int
    first: int
    last: int
    at: datetime


@dataclass(frozen=True, slots=True)
class StreamClosed:
    """``run`` closed its stream ``key`` (``ctx.stream_close``, journaled as ``step``).
    A stream that ends with its run fires nothing: no row is written for it."""

    run: Run
    key: str
    step: str
    at: datetime


@dataclass(frozen=True, slots=True)
class RunForked:
    """An operator forked run ``forked_from`` at its journal entry ``from_step``
    (``admin.fork``): ``run`` is the new run, stored and committed (``run_created``
    fires for it too)."""

    run: Run
    forked_from: str
    from_step: str
