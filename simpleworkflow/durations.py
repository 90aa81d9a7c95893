"""Parsing of human durations such as ``"5m"``, ``"1h30m"`` or ``90``."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from simpleworkflow import errors

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")

Duration = timedelta | float | int | str


def to_seconds(value: Duration, *, what: str = "duration") -> float:
    """Return ``value`` in seconds; strings combine parts like ``"1h30m"`` or ``"250ms"``."""
    if isinstance(value, bool):
        raise errors.InvalidArgument(f"{what} must be a duration, not a boolean")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse(value.strip().lower(), what)
    else:
        raise errors.InvalidArgument(
            f"{what} must be seconds, a timedelta or a string like '5m', not {type(value).__name__}"
        )
    if seconds != seconds or seconds in (float("inf"), float("-inf")) or seconds < 0:
        raise errors.InvalidArgument(f"{what} must be a finite, non-negative duration")
    return seconds


def duration_or_time(text: str, *, what: str) -> float | datetime:
    """Text that is either a duration from now (seconds, or ``"1h"``, ``"3d"``) or an ISO
    8601 time with its offset (``"2030-01-31T09:00:00Z"``), as a deadline may be given."""
    try:
        return to_seconds(text, what=what)
    except errors.InvalidArgument:
        pass
    try:
        moment: datetime | None = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise errors.InvalidArgument(
            f"{what} must be a duration like 1h or 3d, or a time with its offset like "
            f"2030-01-31T09:00:00Z, not {text!r:.80}"
        )
    return moment


def _parse(text: str, what: str) -> float:
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
    if pos != len(text) or not text:
        raise errors.InvalidArgument(
            f"cannot read {what} {text!r}: write a number of seconds or parts like "
            "'30s', '5m', '1h30m', '2d' (units ms, s, m, h, d, w)"
        )
    return total
