"""The API's request and response bodies, as typed models: the OpenAPI document is
generated from them, and every response is checked against them before it leaves.

Requests refuse unknown fields and values of the wrong JSON type (``"5"`` is not a
priority); what the engine checks itself (type names, payloads, ranges) is left to the
client, so that the API and ``Client.start`` refuse exactly the same things.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
)

from simpleworkflow import durations, names
from simpleworkflow.admin import STATES
from simpleworkflow.models import RunStatus

#: Runs one batch request may start (``Client.list``'s page limit too).
MAX_BATCH = 1000

#: A duration: seconds as a number, or text such as ``"90s"``, ``"5m"``, ``"1h30m"``.
Duration = StrictInt | StrictFloat | StrictStr
#: A JSON value of any kind: object, array, string, number, boolean or null.
JSON = Any


#: What the engine accepts, written into the document for clients (and generated tests);
#: the engine checks them itself, with messages that say which rule was broken.
TYPE_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+\.v[0-9]+$"
EVENT_PATTERN = r"^[A-Za-z0-9_.:\-]{1,200}$"
_INT4 = names.MAX_PRIORITY


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DebounceIn(_Request):
    """Starts of one type with the same key collapse into one run (docs/flow-control.md)."""

    key: StrictStr = Field(
        description="starts of the type with this key collapse into one run",
        min_length=1,
        max_length=512,
        examples=["user:42"],
    )
    window: Duration = Field(
        description="the run is due this long after the last start (seconds, '30s'); "
        + durations.DURATION_RANGE,
        examples=["30s"],
    )
    max_wait: Duration | None = Field(
        default=None,
        description="but no later than this long after the first start; at least the window",
        examples=["5m"],
    )


class StartRun(_Request):
    """One run to start: ``Client.start``'s arguments."""

    type: StrictStr = Field(
        description="the workflow type: dotted lowercase segments ending in a version",
        examples=["content.thumbnail.v1"],
        json_schema_extra={"pattern": TYPE_PATTERN, "maxLength": 200},
    )
    payload: JSON = Field(
        default=None, description="the run's input, any JSON (default {})", examples=[{"id": 1}]
    )
    idempotency_key: StrictStr | None = Field(
        default=None,
        description="a key already held by a run of this type returns that run (200, "
        "created false) and writes nothing; held by another type it is a 409",
        min_length=1,
        max_length=512,
    )
    priority: StrictInt | None = Field(
        default=None, ge=-_INT4, le=_INT4, description="lower runs earlier (100)"
    )
    delay: Duration | None = Field(
        default=None,
        description="not before this long from now: seconds, or '30s', '5m'; "
        + durations.DURATION_RANGE,
    )
    run_at: AwareDatetime | None = Field(
        default=None,
        description=f"not before this time (ISO 8601 with an offset), {durations.TIME_RANGE}",
    )
    max_attempts: StrictInt | None = Field(
        default=None, ge=1, le=10_000, description="attempts before the run fails (3)"
    )
    deadline: Duration | None = Field(
        default=None,
        description="fail the run if it has not finished by then: a duration from now "
        f"(seconds, '1h', '3d'; {durations.DURATION_RANGE}) or an ISO 8601 time with its offset, "
        f"{durations.TIME_RANGE}",
        examples=["3d", "2030-01-31T09:00:00Z"],
    )
    retention: Duration | None = Field(
        default=None,
        description="keep the run this long after it finishes (seconds, '90d'), instead of "
        "its type's retention or the default; at most the ceiling "
        "($SIMPLEWORKFLOW_MAX_RETENTION_DAYS)",
        examples=["90d"],
    )
    concurrency_key: StrictStr | None = Field(
        default=None,
        description="count the run against its type's per-key concurrency limit under this "
        "key (a customer id, say; see docs/flow-control.md)",
        min_length=1,
        max_length=512,
    )
    debounce: DebounceIn | None = Field(
        default=None,
        description="collapse repeated starts into one run: it takes the last start's "
        "payload and options, and the same id is returned to every caller (created false "
        "for all but the first); not with idempotency_key, run_at or delay",
    )

    def options(self) -> dict[str, Any]:
        """The start options given (``StartOptions``), for ``Client.start``."""
        if self.model_fields_set <= _NO_OPTIONS:
            return {}  # most starts: nothing to dump
        given = self.model_dump(exclude_unset=True, exclude={"type", "payload"})
        options = {name: value for name, value in given.items() if value is not None}
        if isinstance(options.get("deadline"), str):
            options["deadline"] = durations.duration_or_time(options["deadline"], what="deadline")
        return options


_NO_OPTIONS = frozenset({"type", "payload"})


class StartRuns(_Request):
    """Many runs to start in one transaction: all of them, or none."""

    runs: list[StartRun] = Field(min_length=1, max_length=MAX_BATCH)


class CancelRun(_Request):
    reason: StrictStr | None = Field(default=None, description="kept in the cancelled event")


class SendSignal(_Request):
    event: StrictStr = Field(
        description="the signal's name, as the workflow's wait_for_event names it",
        examples=["payment.confirmed"],
        json_schema_extra={"pattern": EVENT_PATTERN},
    )
    payload: JSON = Field(default=None, description="any JSON (default {})")


class UnreadableOut(BaseModel):
    raw: str = Field(description="the stored value, as text")
    reason: str = Field(description="why it cannot be read")


class RunOut(BaseModel):
    """A run as stored, with what it waits for and who holds it."""

    id: str
    type: str
    status: RunStatus
    #: Defined for pending runs only: what they wait for, by name.
    waiting_states: list[
        Literal["sleeping", "waiting-signal", "waiting-child", "retrying", "throttled"]
    ]
    lease_expired: bool = Field(
        description="leased, but its lease has run out (its worker died or stalled) and "
        "no worker has recovered it yet: held by no one"
    )
    payload: JSON
    result: JSON
    last_error: str | None
    priority: int
    run_at: datetime = Field(description="when the run is (or was) due")
    idempotency_key: str | None
    failed_attempts: int = Field(
        description="attempts that failed so far (the stored column `attempt`)"
    )
    attempts_made: int = Field(
        description="attempts made: the one under way (or cut short by a cancel) included"
    )
    max_attempts: int
    leased_by: str | None = Field(description="the worker holding the run's lease")
    lease_until: datetime | None = Field(description="when that lease expires")
    waiting_for: JSON = Field(description="what a suspended run waits for")
    parent_id: str | None
    deadline: datetime | None
    code_version: str | None
    retention: float | None = Field(
        description="seconds kept after it finishes, fixed when it was created: its own, "
        "else its type's of then; null: the default"
    )
    concurrency_key: str | None = Field(
        default=None, description="the key of its type's per-key concurrency limit"
    )
    continued_as: str | None = Field(
        default=None,
        description="continue-as-new: the run that carried this one on (this one ended "
        'succeeded with result {"continued_as": id}); null for any other run',
    )
    continued_from: str | None = Field(
        default=None, description="continue-as-new: the run this one carries on; null if none"
    )
    forked_from: str | None = Field(default=None, description="the run this one was forked from")
    forked_at_step: str | None = Field(
        default=None, description="the journal entry it was forked at: it and later ones ran again"
    )
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None
    unreadable: dict[str, UnreadableOut] | None = Field(
        default=None,
        description="only on a run holding values the server cannot read (written by plain "
        "SQL or another runtime), by column; each such field holds 'unreadable: <raw text>'",
    )


class StartedRun(RunOut):
    """A run a start returned: ``created`` is false when its idempotency key was held
    already and this is the run that holds it."""

    created: bool
    warnings: list[str] = Field(
        default_factory=list,
        description="what may keep the run from running, though it was started: its type "
        "has no row in the registry (no worker or runtime has registered it; a typo?) or "
        "is paused. Empty when there is nothing to say",
    )


class StartedRuns(BaseModel):
    runs: list[StartedRun] = Field(description="in the order requested")
    created: int = Field(description="how many of them this request created")


class RunPageOut(BaseModel):
    runs: list[RunOut] = Field(description="newest first")
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


class Cancelled(BaseModel):
    cancelled: bool = Field(description="false: the run had already finished; nothing changed")
    run: RunOut


class Deleted(BaseModel):
    deleted: bool = Field(description="false: the run was deleted already; nothing changed")


class EventOut(BaseModel):
    """One entry of a run's audit trail."""

    id: int
    workflow_id: str
    event_type: str
    data: JSON
    created_at: datetime


class StepOut(BaseModel):
    """One durable call of a workflow run's journal, with its timings."""

    step_name: str
    kind: str = Field(description="step, sleep, wait, child ...")
    position: int
    status: Literal["completed", "failed", "retrying", "waiting", "running", "stopped"] = Field(
        description="completed; failed (it gave up: no attempt left, or an error no retry "
        "cures); retrying (between tries, the next at `at`); waiting (for `waiting_for`, "
        "until `at` if it times out); running (its next try is due and the run is held); "
        "stopped (its run ended before it finished)"
    )
    at: datetime | None = Field(
        description="when a retrying step tries next, or a waiting call's wait ends"
    )
    waiting_for: str | None = Field(description="what a waiting call waits for, in words")
    output: JSON
    attempts: int
    started_at: datetime | None
    completed_at: datetime | None
    duration_seconds: float | None


class SignalOut(BaseModel):
    """A signal sent to a run, consumed by a wait (``step_name``) or still stored."""

    id: int
    run_id: str
    event: str
    payload: JSON
    created_at: datetime
    consumed_at: datetime | None
    step_name: str | None


class SignalSentOut(BaseModel):
    signal_id: int
    woke: bool = Field(description="the run was waiting for this signal and is due now")


class RegistryOut(BaseModel):
    """A type's registry entry: the runtime that runs it, and whether it is paused."""

    workflow_name: str
    intent_type: str
    runtime: str
    is_enabled: bool
    description: str | None
    created_at: datetime
    updated_at: datetime
    retention: float | None = Field(
        description="seconds its runs are kept after they finish unless they chose; null: "
        "the default"
    )
    concurrency: int | None = Field(
        default=None, description="at most this many of its runs leased at once; null: no limit"
    )
    key_concurrency: int | None = Field(
        default=None, description="at most this many leased at once per concurrency key"
    )
    rate_limit: str | None = Field(
        default=None, description="the rate limit its claims obey (docs/flow-control.md)"
    )


class ConcurrencyIn(_Request):
    """A type's concurrency limits, both set together (see docs/flow-control.md)."""

    concurrency: StrictInt | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="at most this many runs of the type leased at once; null: no limit",
    )
    key_concurrency: StrictInt | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="at most this many leased at once per concurrency key; null: no limit",
    )


class TypeOut(BaseModel):
    """One workflow type at a glance."""

    type: str
    counts: dict[str, int] = Field(
        description=f"runs not deleted by state: {', '.join(STATES)}; the waiting states "
        "refine pending and may overlap"
    )
    total: int
    oldest_due_seconds: float | None = Field(
        description="seconds since the oldest due pending run became due; null: none due"
    )
    paused: bool
    registry: RegistryOut | None


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Ready(BaseModel):
    status: Literal["ready"] = "ready"
    schema_version: int


class Subscribe(_Request):
    """A workflow type to start for every event published on a topic the pattern matches."""

    pattern: StrictStr = Field(
        description="a topic pattern: dotted segments; `*` is one segment, a final `#` one "
        "or more (see docs/topics.md)",
        examples=["orders.*"],
        json_schema_extra={"maxLength": 200},
    )
    type: StrictStr = Field(
        description="the workflow type to start",
        examples=["billing.invoice.v1"],
        json_schema_extra={"pattern": TYPE_PATTERN, "maxLength": 200},
    )
    priority: StrictInt = Field(default=100, description="the runs' priority (lower first)")
    max_attempts: StrictInt | None = Field(
        default=None, description="the runs' attempts (default 3)"
    )


class SubscriptionOut(BaseModel):
    """A subscription of a workflow type to a topic pattern."""

    pattern: str
    workflow_type: str
    priority: int
    max_attempts: int | None
    created_at: datetime
    updated_at: datetime


class Unsubscribed(BaseModel):
    removed: bool = Field(description="false when there was no such subscription")


class Publish(_Request):
    """An event on a topic: one run per subscribed workflow type, once per event id."""

    payload: JSON = Field(default=None, description="the runs' input, any JSON (default {})")
    event_id: StrictStr | None = Field(
        default=None,
        description="the event's id: publishing it again starts nothing new (default: a "
        "new UUID, a new event)",
        json_schema_extra={"maxLength": 100},
    )


class PublishedOut(BaseModel):
    """What a publish did: the run of each subscribed type, started now or found."""

    topic: str
    event_id: str
    started: int = Field(description="how many of the runs this call started")
    runs: list[RunOut]


class RateLimitIn(_Request):
    """A rate limit's rate (see docs/flow-control.md)."""

    rate: StrictStr = Field(
        description="N/period: at most N claims per period", examples=["10/s", "600/m", "5/10s"]
    )
    per_key: StrictBool = Field(default=False, description="count each concurrency key apart")


class RateLimitOut(BaseModel):
    """A named rate limit."""

    name: str
    max_runs: int = Field(description="claims let through per period")
    period: float = Field(description="the period, in seconds")
    per_key: bool
    created_at: datetime
    updated_at: datetime


class LimitDeleted(BaseModel):
    deleted: bool = Field(description="false: there was no such limit")


class TypeRateLimitIn(_Request):
    """The rate limit a type obeys."""

    rate_limit: StrictStr | None = Field(
        description="a rate limit's name; null: obey none", examples=["partner-api"]
    )
