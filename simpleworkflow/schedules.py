"""Cron schedules: a schedule's definition, checked once, and the arithmetic of its ticks.

Pure functions, no I/O: the admin checks a definition here before storing it, the worker's
scheduler (``worker/scheduler.py``) asks which ticks are due and what each one's run looks
like. Cron expressions are read by ``cronsim`` (Debian cron's rules, DST included, with an
optional first field of seconds), times of day in the schedule's IANA time zone through
``zoneinfo``; every time stored or compared is UTC. See docs/schedules.md.
"""

from __future__ import annotations

import json
import zoneinfo
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cronsim import CronSim, CronSimError

from simpleworkflow import errors, names, payloads

#: What to do about ticks no scheduler started in time (every worker was down, say):
#: ``skip`` them, start ``once`` for the latest of them, or start ``each`` of them.
MISSED_POLICIES = ("skip", "once", "each")
#: A tick is *missed* once it is this late; later ticks all start, whatever the policy.
GRACE = timedelta(seconds=60)
#: The most ticks one schedule starts in one pass; with ``each``, older missed ticks
#: beyond it are skipped (and logged).
MAX_CATCH_UP = 1000
#: What the idempotency key of a scheduled run starts with.
KEY_PREFIX = "schedule:"
#: The payload keys the scheduler writes into every run it starts.
RESERVED_KEYS = ("schedule", "scheduled_for")
MAX_CRON_LENGTH = 200
#: The usual nicknames, as cron tables write them.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Any fixed moment does to check an expression.
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A checked schedule definition: ``workflow_type`` starts at every tick of ``cron``
    in ``timezone``, with ``payload`` (a JSON object, as text) plus the tick."""

    name: str
    workflow_type: str
    cron: str
    timezone: str = "UTC"
    payload: str = "{}"
    missed: str = "skip"
    priority: int = 100
    max_attempts: int | None = None

    def params(self) -> dict[str, Any]:
        """The statement parameters of an upsert, by column."""
        return {
            "name": self.name,
            "type": self.workflow_type,
            "cron": self.cron,
            "timezone": self.timezone,
            "payload": self.payload,
            "missed": self.missed,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
        }

    def next_tick(self, after: datetime) -> datetime:
        """The first tick strictly after ``after``."""
        return next_tick(self.cron, self.timezone, after)


def define(
    name: str,
    type: str,
    *,
    cron: str,
    tz: str = "UTC",
    payload: Mapping[str, Any] | None = None,
    missed: str = "skip",
    priority: int = 100,
    max_attempts: int | None = None,
    codec: payloads.Encoding | None = None,
) -> ScheduleSpec:
    """A :class:`ScheduleSpec`, every part checked; :class:`~simpleworkflow.errors.
    InvalidArgument` (or ``InvalidTypeName``, ``InvalidPayload``) naming what is wrong.
    ``codec``: writes the payload (the app's or the client's)."""
    return ScheduleSpec(
        name=names.validate_schedule_name(name),
        workflow_type=names.validate_type(type),
        cron=check_cron(cron),
        timezone=check_timezone(tz),
        payload=check_payload(payload, codec),
        missed=check_missed(missed),
        priority=names.check_priority(priority),
        max_attempts=names.check_max_attempts(max_attempts),
    )


def check_cron(cron: object) -> str:
    """A cron expression cronsim reads: five fields (minute hour day month weekday), or
    six with seconds first, or an alias such as ``@daily``."""
    if not isinstance(cron, str) or not cron.strip() or len(cron) > MAX_CRON_LENGTH:
        raise errors.InvalidArgument(
            f"a cron expression must be a non-empty string of at most {MAX_CRON_LENGTH} "
            f"characters, not {cron!r:.80}"
        )
    text = " ".join(cron.split())
    try:
        next(CronSim(ALIASES.get(text, text), datetime.now(UTC)))
    except StopIteration:
        raise errors.InvalidArgument(
            f"cron expression {text!r} never ticks (within 50 years: a date such as 30 February)"
        ) from None
    except (CronSimError, ValueError) as exc:
        raise errors.InvalidArgument(
            f"invalid cron expression {text!r}: {exc}; write five fields (minute hour "
            "day-of-month month day-of-week, as '0 2 * * *'), six with seconds first "
            "('*/15 * * * * *'), or @hourly, @daily, @weekly, @monthly, @yearly"
        ) from None
    return text


def check_timezone(tz: object) -> str:
    """An IANA time zone name (``Europe/Berlin``, ``UTC``) that this machine knows."""
    if not isinstance(tz, str) or not tz or len(tz) > 100:
        raise errors.InvalidArgument(f"a time zone must be an IANA name such as 'UTC', not {tz!r}")
    zone(tz)
    return tz


def check_missed(missed: object) -> str:
    if missed not in MISSED_POLICIES:
        raise errors.InvalidArgument(
            f"missed must be one of {', '.join(MISSED_POLICIES)}, not {missed!r}"
        )
    return str(missed)


def check_payload(payload: Mapping[str, Any] | None, codec: payloads.Encoding | None = None) -> str:
    """The static payload as JSON text: an object, without the keys the scheduler adds."""
    if payload is None:
        return "{}"
    if not isinstance(payload, Mapping):
        raise errors.InvalidPayload(
            f"a schedule's payload must be a JSON object (a dict), not {type(payload).__name__}: "
            "each run gets it with the tick added"
        )
    taken = sorted(key for key in RESERVED_KEYS if key in payload)
    if taken:
        raise errors.InvalidPayload(
            f"a schedule's payload cannot hold {', '.join(taken)}: the scheduler sets "
            f"{' and '.join(RESERVED_KEYS)} in every run it starts"
        )
    return payloads.encode(dict(payload), what="schedule payload", codec=codec)


def next_tick(cron: str, tz: str, after: datetime) -> datetime:
    """The first tick of ``cron`` in ``tz`` strictly after ``after``, in UTC."""
    try:
        return _utc(next(_ticks(cron, tz, after)))
    except StopIteration:  # a row written by hand with plain SQL
        raise errors.InvalidArgument(f"cron expression {cron!r} never ticks") from None


@dataclass(frozen=True, slots=True)
class Due:
    """What one pass does for a schedule: start a run for each of ``ticks`` (oldest
    first), leave ``skipped`` missed ticks without one, and plan ``next_at``."""

    ticks: list[datetime] = field(default_factory=list)
    skipped: int = 0
    next_at: datetime = _EPOCH


def due(cron: str, tz: str, missed: str, next_at: datetime, now: datetime) -> Due:
    """The ticks from ``next_at`` (the planned tick) up to ``now`` that start runs.

    Ticks later than ``now - GRACE`` are on time and all start. Older ones were missed:
    ``skip`` starts none of them, ``once`` the latest, ``each`` every one (the latest
    ``MAX_CATCH_UP`` at most). ``next_at`` becomes the first tick after ``now``.
    """
    if next_at > now:
        return Due(next_at=next_at)
    cutoff = now - GRACE
    # the first tick at or after the cutoff (ticks are whole seconds)
    tick = next_at if next_at >= cutoff else next_tick(cron, tz, cutoff - _INSTANT)
    on_time: list[datetime] = []
    while tick <= now and len(on_time) < MAX_CATCH_UP:
        on_time.append(tick)
        tick = next_tick(cron, tz, tick)
    if next_at >= cutoff:
        return Due(ticks=on_time, next_at=tick if tick > now else next_tick(cron, tz, now))
    keep = {"skip": 0, "once": 1}.get(missed, MAX_CATCH_UP)
    late = _latest_before(cron, tz, next_at, cutoff, keep)
    skipped = _count_from(cron, tz, next_at, cutoff) - len(late)
    return Due(ticks=late + on_time, skipped=skipped, next_at=next_tick(cron, tz, now))


#: Less than the gap between two ticks (a second).
_INSTANT = timedelta(microseconds=1)
#: Missed ticks are counted (for the log) up to this many.
COUNT_LIMIT = 100 * MAX_CATCH_UP


def _latest_before(
    cron: str, tz: str, next_at: datetime, cutoff: datetime, limit: int
) -> list[datetime]:
    """Up to ``limit`` of the ticks from ``next_at`` to before ``cutoff``, the latest
    ones, oldest first: found backwards from the cutoff, so a long outage costs no more."""
    found: list[datetime] = []
    if limit <= 0:
        return found
    for tick in _ticks(cron, tz, cutoff, reverse=True):
        moment = _utc(tick)
        if moment < next_at:
            break
        found.append(moment)
        if len(found) >= limit:
            break
    found.reverse()
    return found


def _count_from(cron: str, tz: str, next_at: datetime, before: datetime) -> int:
    """How many ticks from ``next_at`` come before ``before``, up to ``COUNT_LIMIT``."""
    count = 0
    for tick in _ticks(cron, tz, next_at - _INSTANT):
        if _utc(tick) >= before or count >= COUNT_LIMIT:
            break
        count += 1
    return count


def _ticks(cron: str, tz: str, start: datetime, *, reverse: bool = False) -> Iterator[datetime]:
    """cronsim's iterator from ``start`` (strictly after it; with ``reverse``, strictly
    before), read in the schedule's zone."""
    local = start.astimezone(zone(tz))
    try:
        return iter(CronSim(ALIASES.get(cron, cron), local, reverse=reverse))
    except (CronSimError, ValueError) as exc:  # a row written by hand with plain SQL
        raise errors.InvalidArgument(f"invalid cron expression {cron!r}: {exc}") from None


def zone(tz: str) -> zoneinfo.ZoneInfo:
    """The time zone named ``tz``; :class:`~simpleworkflow.errors.InvalidArgument` if this
    machine does not know it."""
    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise errors.InvalidArgument(
            f"unknown time zone {tz!r}: use an IANA name such as 'UTC' or 'Europe/Berlin' "
            "(on a machine without the system's zone files, `pip install tzdata`)"
        ) from None


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


def iso(tick: datetime) -> str:
    """A tick as the scheduler writes it in keys and payloads: ``2026-11-27T01:00:00Z``."""
    return _utc(tick).strftime("%Y-%m-%dT%H:%M:%SZ")


def tick_key(name: str, tick: datetime) -> str:
    """The idempotency key of the run of ``name``'s tick: every scheduler derives the
    same one, so racing schedulers start one run."""
    return f"{KEY_PREFIX}{name}:{iso(tick)}"


def trigger_key(name: str, now: datetime) -> str:
    """The idempotency key of a run of ``name`` triggered by hand at ``now``: one per
    second, so a double click or a retried request starts one run."""
    return f"{KEY_PREFIX}{name}:now:{iso(now)}"


def tick_payload(name: str, tick: datetime, payload: Any, *, triggered: bool = False) -> str:
    """The run's payload as JSON text: the schedule's payload plus its name and tick
    (and ``triggered: true`` for a run started by hand, outside the ticks)."""
    data = dict(payload) if isinstance(payload, Mapping) else {}
    data.update(schedule=name, scheduled_for=iso(tick))
    if triggered:
        data.update(triggered=True)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)
