"""Flow-control limits declared in code (``@app.workflow(..., concurrency=20)``,
``app.rate_limit("partner-api", "10/s")``): checked once, when the line runs, so that a
typo fails at import and not at a worker's start. Pure data and checks, no I/O; a worker
writes them to the store when it starts (``worker/limits.py``, docs/flow-control.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from simpleworkflow import durations, errors, names, rates

#: The largest concurrency limit (an int4 column).
MAX_CONCURRENCY = 2**31 - 1


@dataclass(frozen=True, slots=True)
class RateSpec:
    """A rate limit as the code declares it: ``max_runs`` claims (and ``ctx.rate_limit``
    calls) per ``period`` seconds, counted per concurrency key if ``per_key``."""

    name: str
    max_runs: int
    period: float
    per_key: bool = False

    @property
    def rate(self) -> str:
        """``10/s``, as the command line prints it."""
        return rates.describe(self.max_runs, self.period)

    def describe(self) -> str:
        return self.rate + (" per key" if self.per_key else "")


@dataclass(frozen=True, slots=True)
class TypeLimits:
    """What a type's declaration says about its limits; ``None`` is *not declared*: the
    stored value (an operator's, or none) is left as it is."""

    concurrency: int | None = None
    key_concurrency: int | None = None
    rate_limit: str | None = None

    @property
    def declared(self) -> bool:
        return any(v is not None for v in (self.concurrency, self.key_concurrency, self.rate_limit))


#: A type whose declaration names no limit.
NO_LIMITS = TypeLimits()


def check_concurrency(what: str, limit: object) -> int | None:
    """A concurrency limit: ``None`` (none) or a number of leased runs, at least 1."""
    return None if limit is None else names.check_int(what, limit, 1, MAX_CONCURRENCY)


def rate_spec(
    name: str, rate: str | tuple[int, durations.Duration], per_key: bool = False
) -> RateSpec:
    """A checked :class:`RateSpec`: the name as ``limits set`` takes it, the rate as
    ``"10/s"``, ``"600/m"``, ``"5/10s"`` or ``(10, "1s")``."""
    checked = rates.check_name(name)
    runs, period = rates.parse(rate)
    if not isinstance(per_key, bool):
        raise errors.InvalidArgument(f"per_key must be True or False, not {per_key!r:.40}")
    return RateSpec(checked, runs, period, per_key)


def type_limits(
    type: str,
    *,
    concurrency: int | None,
    key_concurrency: int | None,
    rate_limit: str | None,
    declared_rates: Mapping[str, RateSpec],
) -> TypeLimits:
    """A checked :class:`TypeLimits` for ``type``. ``rate_limit`` must name a limit the
    app declared already (``app.rate_limit`` above the decorator): a name the code cannot
    check is a typo waiting for the first claim."""
    limits = TypeLimits(
        concurrency=check_concurrency(f"concurrency of {type}", concurrency),
        key_concurrency=check_concurrency(f"key_concurrency of {type}", key_concurrency),
        rate_limit=None if rate_limit is None else rates.check_name(rate_limit),
    )
    if limits.rate_limit is not None and limits.rate_limit not in declared_rates:
        known = ", ".join(sorted(declared_rates)) or "none"
        raise errors.InvalidArgument(
            f"{type} names rate limit {limits.rate_limit!r}, which this app does not declare "
            f"(declared: {known}); declare it first, above the handler: "
            f"app.rate_limit({limits.rate_limit!r}, '10/s'). A limit managed only at run "
            f"time is named with `simpleworkflow limits use {type} {limits.rate_limit}`"
        )
    return limits
