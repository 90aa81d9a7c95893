"""Rate limits as people write them (``"10/s"``, ``"600/m"``, ``"5/10s"``) and their
names: pure checks, no I/O. How the claim enforces them: docs/flow-control.md."""

from __future__ import annotations

import re

from simpleworkflow import durations, errors

#: A limit's name: lowercase words joined by dots, dashes or underscores.
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
#: The largest number of runs per period (an int4 column).
MAX_RUNS = 2**31 - 1
#: Periods from a millisecond to a year: a window is counted from the epoch in periods.
MIN_PERIOD, MAX_PERIOD = 0.001, 366 * 86400.0
_UNITS = {"s": "1s", "m": "1m", "h": "1h", "d": "1d"}


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise errors.InvalidArgument(
            "a rate limit's name must be 1 to 100 lowercase letters, digits, '.', '-' or "
            f"'_', starting with a letter or digit (e.g. 'partner-api'), not {name!r:.80}"
        )
    return name


def parse(rate: object) -> tuple[int, float]:
    """``(runs, period in seconds)`` of ``"N/period"``: ``10/s``, ``600/m``, ``5/10s``,
    ``1000/1h``; or of a ``(runs, period)`` pair, the period a duration."""
    if isinstance(rate, tuple) and len(rate) == 2:
        runs, period = rate
        seconds = durations.to_seconds(period, what="the rate's period")
    elif isinstance(rate, str) and rate.count("/") == 1:
        count, _, per = (part.strip() for part in rate.partition("/"))
        try:
            runs = int(count)
        except ValueError:
            raise errors.InvalidArgument(_bad(rate)) from None
        seconds = durations.to_seconds(_UNITS.get(per, per), what="the rate's period")
    else:
        raise errors.InvalidArgument(_bad(rate))
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_RUNS:
        raise errors.InvalidArgument(
            f"a rate limit lets 1 to {MAX_RUNS} runs through per period, not {runs!r}"
        )
    if not MIN_PERIOD <= seconds <= MAX_PERIOD:
        raise errors.InvalidArgument(
            f"a rate limit's period must be from 1ms to 366 days, not {seconds:g} seconds"
        )
    return runs, seconds


def describe(runs: int, period: float) -> str:
    """``10/s``, ``5/10s``: as :func:`parse` reads it back."""
    for unit, seconds in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if period == seconds:
            return f"{runs}/{unit}"
    for unit, seconds in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if period % seconds == 0:
            return f"{runs}/{period / seconds:g}{unit}"
    return f"{runs}/{period:g}s"


def _bad(rate: object) -> str:
    return (
        "a rate is 'N/period', e.g. '10/s', '600/m', '5/10s', or a (runs, period) pair, "
        f"not {rate!r:.80}"
    )
