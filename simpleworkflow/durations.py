"""Durations and times as people give them (``"5m"``, ``"1h30m"``, ``90``, an ISO 8601
time), and the one range every time and duration given to simpleworkflow must lie in.

A time outside that range is not merely odd: ``0001-01-01T00:00:00+14:00`` is an instant
of year 0, which Postgres stores but psycopg cannot read back (every worker that claimed
such a run died reading it), and which Python cannot even convert to UTC. So every edge
where a time or a duration comes in (the client's start options, durable calls, the
admin facade, the CLI, the HTTP API) checks it here, and nothing out of range reaches a
store.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from simpleworkflow import errors

#: The earliest and latest instants (UTC) a time given to simpleworkflow may name. Python's
#: ``datetime`` holds years 1 to 9999, and so does psycopg when it reads a time back, in
#: whatever time zone the session has (offsets up to ±14 hours, more for historical local
#: times); SQLite's date functions stop at year 9999 too. A year of margin at each end
#: keeps every such reading inside Python's range, and the latest time stays below the
#: engine's "no wake-up" time (``durable.suspension.FOREVER``, the start of year 9999).
EARLIEST = datetime(2, 1, 1, tzinfo=UTC)
LATEST = datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC)
#: The range as messages and docs write it.
TIME_RANGE = "from 0002-01-01T00:00:00Z to 9998-12-31T23:59:59Z"

#: The longest duration simpleworkflow takes: 100 years (of 366 days), in seconds. Far
#: longer than any delay, sleep, timeout, retention or backoff a workflow needs, and
#: short enough that now plus it (or now minus it, for a purge's age) stays thousands of
#: years inside the range of times above, in every store's arithmetic.
MAX_SECONDS = 100 * 366 * 86400
#: The bound as messages and docs write it.
DURATION_RANGE = f"at most 100 years ({MAX_SECONDS} seconds)"

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")

Duration = timedelta | float | int | str


def to_seconds(value: Duration, *, what: str = "duration") -> float:
    """Return ``value`` in seconds; strings combine parts like ``"1h30m"`` or ``"250ms"``.

    Refused (:class:`~simpleworkflow.errors.InvalidArgument`, naming ``what``): anything
    that is not a duration, a negative one, NaN, and one over :data:`MAX_SECONDS`."""
    if isinstance(value, bool):
        raise errors.InvalidArgument(f"{what} must be a duration, not a boolean")
    try:
        if isinstance(value, timedelta):
            seconds = value.total_seconds()
        elif isinstance(value, int | float):
            seconds = float(value)
        elif isinstance(value, str):
            parsed = _parse(value.strip().lower())
            if parsed is None:
                raise errors.InvalidArgument(
                    f"cannot read {what} {_shown(value)}: write a number of seconds or parts "
                    "like '30s', '5m', '1h30m', '2d' (units ms, s, m, h, d, w)"
                )
            seconds = parsed
        else:
            raise errors.InvalidArgument(
                f"{what} must be seconds, a timedelta or a string like '5m', "
                f"not {type(value).__name__}"
            )
    except OverflowError:  # an int too large for a float
        raise _too_long(what, value) from None
    if seconds != seconds or seconds in (float("inf"), float("-inf")) or seconds < 0:
        raise errors.InvalidArgument(
            f"{what} must be a finite, non-negative duration, not {_shown(value)}"
        )
    if seconds > MAX_SECONDS:
        raise _too_long(what, value)
    return seconds


def _too_long(what: str, value: object) -> errors.InvalidArgument:
    return errors.InvalidArgument(f"{what} must be {DURATION_RANGE}, not {_shown(value)}")


def check_time(value: object, *, what: str) -> datetime:
    """``value`` if it is a timezone-aware ``datetime`` whose instant lies in the range
    (:data:`EARLIEST` to :data:`LATEST`), else :class:`~simpleworkflow.errors.InvalidArgument`
    naming ``what``, the value and the range."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise errors.InvalidArgument(
            f"{what} must be a timezone-aware datetime, e.g. datetime.now(timezone.utc), "
            f"not {_shown(value)}"
        )
    if not in_range(value):
        raise errors.InvalidArgument(
            f"{what} must be a time {TIME_RANGE} (UTC), not {_shown(value.isoformat())}"
        )
    return value


def in_range(moment: datetime) -> bool:
    """Whether an aware ``moment`` lies from :data:`EARLIEST` to :data:`LATEST`."""
    try:
        instant = moment.astimezone(UTC)  # year 0 or 10000 in UTC: OverflowError
    except OverflowError:
        return False
    return EARLIEST <= instant <= LATEST


def parse_time(text: str, *, what: str, naive_utc: bool = False) -> datetime:
    """An ISO 8601 time with its offset (``"2030-01-31T09:00:00Z"``), in the range;
    ``naive_utc``: a time without an offset is taken as UTC (a form's local time input)."""
    moment = _iso(text)
    if moment is not None and moment.tzinfo is None and naive_utc:
        moment = moment.replace(tzinfo=UTC)
    if moment is None or moment.utcoffset() is None:
        raise errors.InvalidArgument(
            f"{what} must be a time with its offset (ISO 8601), like 2030-01-31T09:00:00Z, "
            f"not {_shown(text)}"
        )
    return check_time(moment, what=what)


def duration_or_time(text: str, *, what: str) -> float | datetime:
    """Text that is either a duration from now (seconds, or ``"1h"``, ``"3d"``) or an ISO
    8601 time with its offset (``"2030-01-31T09:00:00Z"``), as a deadline may be given;
    either must lie in its range."""
    if _parse(text.strip().lower()) is not None:
        return to_seconds(text, what=what)
    moment = _iso(text)
    if moment is None or moment.utcoffset() is None:
        raise errors.InvalidArgument(
            f"{what} must be a duration like 1h or 3d, or a time with its offset like "
            f"2030-01-31T09:00:00Z, not {_shown(text)}"
        )
    return check_time(moment, what=what)


def _iso(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except (ValueError, TypeError):
        return None


def _shown(value: object) -> str:
    """A value as a message quotes it, shortened."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _parse(text: str) -> float | None:
    """Seconds of a number or of parts like ``"1h30m"``; ``None`` if it is neither."""
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return total if text and pos == len(text) else None
