"""Parsing of human durations such as ``"5m"``, ``"1h30m"`` or ``90``."""

from __future__ import annotations

import re
from datetime import timedelta

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
