"""The waits of one attempt, and the suspension they make when the body cannot go on.

A durable call that must wait (a sleep, a signal, a child, a step's backoff, a rate
limit's next window) notes its wait here and raises the ``Suspend`` it was given. The
worker then gives the run back with ``run_at`` at the earliest wake-up time and
``waiting_for`` holding every wait the body is suspended in (parallel branches may wait
for several things at once), so that whichever comes first wakes it. A wait met on a
branch that lost a race is over, and left out.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from simpleworkflow import errors
from simpleworkflow.backends.records import Lease, Suspension
from simpleworkflow.durable import races

#: Far enough to mean "no timeout", and storable in every backend.
FOREVER = datetime(9999, 1, 1, tzinfo=UTC)


class Waits:
    """Every wait the body met, each with the race branch it was met in."""

    def __init__(self, lease: Lease, order: dict[str, int], now: Callable[[], datetime]) -> None:
        self._lease = lease
        self._order = order  # the order in which the code called each name
        self._now = now  # the database's time
        self._waits: list[tuple[errors.Suspend, races.Clock | None]] = []

    def suspend(self, exc: errors.Suspend) -> errors.Suspend:
        """Note the wait ``exc`` stands for; return it, to raise."""
        self._waits.append((exc, races.current()))
        return exc

    def withdraw(self, suspensions: list[errors.Suspend]) -> None:
        """Forget these waits: the branches of a race that lost. (Those met on a losing
        branch's clock are forgotten anyway; this also covers tasks the branch did not
        start itself, such as those of an ``asyncio.gather(...)`` passed as a branch.)"""
        self._waits = [(exc, clock) for exc, clock in self._waits if exc not in suspensions]

    @property
    def suspended(self) -> bool:
        """True when the body waits for something (in a branch that has not lost a race).
        Asked of every attempt that returns: one that met no wait sorts nothing."""
        waits = self._waits
        return bool(waits) and any(clock is None or not clock.given_up() for _, clock in waits)

    def _live(self) -> list[errors.Suspend]:
        live = [exc for exc, clock in self._waits if clock is None or not clock.given_up()]
        return sorted(live, key=lambda exc: self._order.get(exc.step, len(self._order)))

    def suspension(self) -> Suspension:
        """The suspension to record: every wait of this attempt, due at the earliest."""
        waits = self._live() or [exc for exc, _ in self._waits]
        times = [self._wake_time(exc) for exc in waits]
        first = waits[times.index(min(times))]
        waiting_for = first.waiting_for
        if len(waits) > 1:
            waiting_for = {"kind": "any", "waits": [exc.waiting_for for exc in waits]}
            if min(times) < FOREVER:
                waiting_for["until"] = min(times).isoformat()
        return Suspension(
            run_id=self._lease.run.id,
            token=self._lease.token,
            events=[{"type": exc.event, "data": {"step": exc.step, **exc.data}} for exc in waits],
            run_at=first.run_at,
            delay=first.delay,
            waiting_for=waiting_for,
        )

    def _wake_time(self, exc: errors.Suspend) -> datetime:
        if exc.run_at is not None:
            return exc.run_at
        # Delays are bounded where they are given (durations.MAX_SECONDS); past FOREVER
        # one would overflow the datetime, so clamp all the same.
        now = self._now()
        return now + timedelta(seconds=min(exc.delay, (FOREVER - now).total_seconds()))


def whole_ms(when: datetime) -> datetime:
    """``when`` rounded up to the millisecond. SQLite keeps times to the millisecond,
    rounding to the nearest: a wake-up time finer than that could be stored early, and the
    run claimed before its sleep ends, only to suspend again."""
    spare = when.microsecond % 1000
    return when if spare == 0 else when + timedelta(microseconds=1000 - spare)
