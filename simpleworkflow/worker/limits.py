"""Limits declared in code, written to the store when a worker starts.

The app's rate limits (``app.rate_limit``) and its types' limits (``@app.workflow(...,
concurrency=, key_concurrency=, rate_limit=)``) are written in one transaction, after the
registry rows of the worker's types exist. Only what differs from the store is written,
so a worker that finds everything as declared writes nothing (and a concurrency limit is
recounted only when it changed). What the code declares wins at every worker start, as
a schedule's definition does: a value an operator set at run time is replaced, and the
worker says so once, naming both. What the code does not declare is left as stored. See
docs/flow-control.md ("Limits declared in code") for why.

Race-free with many workers starting at once: the transaction first takes the lease lock
a concurrency change needs (the admin's order: no deadlock with ``set_concurrency``),
then locks the declared types' registry rows in name order, and reads only after that;
the second worker to get there finds the first one's values and writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from simpleworkflow import rates
from simpleworkflow.backends import Backend
from simpleworkflow.backends.ops import ATOMIC, Op
from simpleworkflow.limits import RateSpec, TypeLimits
from simpleworkflow.models import RateLimit

_log = logging.getLogger("simpleworkflow.worker")


@dataclass(frozen=True, slots=True)
class Change:
    """One value the worker wrote: ``what`` (``rate limit partner-api``, ``concurrency
    of reports.render.v1``) went from ``old`` (``None``: there was none) to ``new``."""

    what: str
    old: str | None
    new: str


def declare_op(
    backend: Backend, declared: Mapping[str, RateSpec], types: Mapping[str, TypeLimits]
) -> Op[list[Change]]:
    """Write what differs between the code's limits and the store's; return the changes."""
    yield ATOMIC
    changes: list[Change] = []
    if any(t.concurrency is not None or t.key_concurrency is not None for t in types.values()):
        yield backend.stmt("lock_leases")  # as set_registry_concurrency takes it: first
    yield from backend.lock_registry(list(types))
    stored = {limit.name: limit for limit in (yield from backend.list_rate_limits())}
    for spec in sorted(declared.values(), key=lambda s: s.name):
        old = stored.get(spec.name)
        if old is not None and _same(old, spec):
            continue
        yield from backend.set_rate_limit(spec.name, spec.max_runs, spec.period, spec.per_key)
        changes.append(Change(f"rate limit {spec.name}", _described(old), spec.describe()))
    entries = {entry.workflow_name: entry for entry in (yield from backend.list_registry())}
    for name in sorted(types):
        entry, limits = entries.get(name), types[name]
        if entry is None:  # not registered: this worker does not claim it
            continue
        total = entry.concurrency if limits.concurrency is None else limits.concurrency
        each = entry.key_concurrency if limits.key_concurrency is None else limits.key_concurrency
        if (total, each) != (entry.concurrency, entry.key_concurrency):
            yield from backend.set_registry_concurrency(name, total, each)
            if total != entry.concurrency:
                changes.append(Change(f"concurrency of {name}", _n(entry.concurrency), str(total)))
            if each != entry.key_concurrency:
                old_each = _n(entry.key_concurrency)
                changes.append(Change(f"key_concurrency of {name}", old_each, str(each)))
        if limits.rate_limit is not None and limits.rate_limit != entry.rate_limit:
            yield from backend.set_registry_rate_limit(name, limits.rate_limit)
            changes.append(Change(f"rate limit of {name}", entry.rate_limit, limits.rate_limit))
    return changes


async def declare(
    backend: Backend, declared: Mapping[str, RateSpec], types: Mapping[str, TypeLimits]
) -> list[Change]:
    """:func:`declare_op`, then one log line per change: a warning where it replaced a
    value set at run time (or by another version of the code), info where there was none."""
    mine = {name: limits for name, limits in types.items() if limits.declared}
    if not declared and not mine:
        return []
    changes = await backend.execute_async(declare_op(backend, declared, mine))
    for change in changes:
        if change.old is None:
            _log.info("%s set to %s, as declared in code", change.what, change.new)
        else:
            _log.warning(
                "%s was %s in the store (set at run time, or by another version of the code); "
                "set to %s, as declared in code. To keep a value set at run time, leave it "
                "undeclared in the code",
                change.what,
                change.old,
                change.new,
            )
    return changes


def _same(stored: RateLimit, spec: RateSpec) -> bool:
    # A value that cannot be read (written by hand) equals none: the code's replaces it.
    return (stored.max_runs, stored.period, stored.per_key) == (
        spec.max_runs,
        spec.period,
        spec.per_key,
    )


def _described(stored: RateLimit | None) -> str | None:
    if stored is None:
        return None
    if not isinstance(stored.max_runs, int) or not isinstance(stored.period, int | float):
        return f"{stored.max_runs} per {stored.period} s"  # one cannot be read
    rate = rates.describe(stored.max_runs, float(stored.period))
    return rate + (" per key" if stored.per_key else "")


def _n(value: int | None) -> str | None:
    return None if value is None else str(value)
