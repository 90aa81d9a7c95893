"""Time skipping: move a test's clock to the next instant something is due, when nothing
else can happen before it.

The store says what runs and what is due (``Backend.clock_state``, one read); the clock
moves only while no attempt runs, so that no lease runs out under a jump and no attempt
reads two times. After a jump the in-process worker is woken (its timers were set by the
old time) and the cron schedules that came due are fired at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from simpleworkflow import clockwork, errors
from simpleworkflow.backends import Backend
from simpleworkflow.backends.insight_ops import ClockState
from simpleworkflow.worker.scheduler import Scheduler

#: Between two looks at the store while waiting for the worker.
PAUSE = 0.002
#: How long runs may stay due and unclaimed, with nothing running, before they count as
#: held back (a concurrency limit, a type no worker here serves) and time skips past them.
STALL = 0.5


class Skipper:
    """Moves ``clock`` for the store of ``backend``, and wakes the worker after."""

    def __init__(
        self,
        backend: Backend,
        clock: clockwork.Clock | None,
        open_store: Callable[[], Backend],
        wake: Callable[[], None] | None = None,
    ) -> None:
        self.backend = backend
        self.clock = clock
        self._open_store = open_store  # for the scheduler's passes, each on a loop of its own
        self._wake = wake  # on Postgres: a notification (notify_local wakes no one there)

    def state(self) -> ClockState:
        return self.backend.execute(self.backend.clock_state(), readonly=True)

    def wake(self) -> None:
        """Have this process's workers on the store look for work now."""
        self.backend.notify_local("wake", "")
        if self._wake is not None:
            self._wake()

    def now(self) -> datetime:
        return self.backend.now()

    def advance(self, seconds: float, timeout: float) -> datetime:
        """Move the clock ``seconds`` forward, stopping at each instant something comes
        due on the way until what it started is done (as a clock that runs would: a
        cron tick on the way fires, a month's daily reminders all go out); return the
        new now."""
        clock = self._clock()
        deadline = time.monotonic() + timeout
        target = clock.now() + timedelta(seconds=seconds)
        while True:
            state = self.quiet(deadline)
            if state.next_due is None or state.next_due > target:
                self.jump_to(target, state)
                return clock.now()
            self.jump_to(state.next_due, state)

    def jump_to(self, moment: datetime, state: ClockState) -> None:
        """Move the clock to ``moment``; fire the schedules then due (as ``state`` saw
        them) and wake the worker, whose timers were set by the old time."""
        clock = self._clock()
        clock.advance(max((moment - clock.now()).total_seconds(), 0.0))
        if state.next_tick is not None and state.next_tick <= moment:
            asyncio.run(self._tick())
        self.wake()

    async def _tick(self) -> None:
        """One pass of the cron scheduler (a worker's runs one on its own timer too)."""
        backend = self._open_store()
        try:
            await Scheduler(backend).pass_once()
        finally:
            await backend.aclose()
            backend.close()

    def quiet(self, deadline: float) -> ClockState:
        """Wait until no attempt runs and no run due now waits to be claimed (or has
        waited :data:`STALL` seconds: held back); the store's state then."""
        stall = _Stall(self)
        while True:
            state = self.state()
            if stall.over(state):
                return state
            if time.monotonic() > deadline:
                raise errors.WaitTimeout(
                    "attempts still ran or runs were due when the wait ran out: the clock "
                    "moves only while none runs"
                )
            time.sleep(PAUSE)

    def drive(self, done: Callable[[], bool], timeout: float, skip: bool, what: str) -> None:
        """Let the worker work, skipping time whenever nothing else can happen, until
        ``done()``; :class:`WaitTimeout` naming ``what`` past ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        stall = _Stall(self)
        while not done():
            if time.monotonic() > deadline:
                raise errors.WaitTimeout(
                    f"{what} did not happen within {timeout:g}s of wall time (the store's "
                    f"clock reads {self.now().isoformat(timespec='seconds')})"
                )
            state = self.state()
            if skip and self.clock is not None and stall.over(state):
                if state.next_due is not None:
                    self.jump_to(state.next_due, state)
                    stall = _Stall(self)
                elif not state.due and not done():
                    raise errors.WaitTimeout(
                        f"{what} cannot happen: no run is due, ever, without something "
                        "from outside (a signal, a start, a cancel)"
                    )
            time.sleep(PAUSE)

    def _clock(self) -> clockwork.Clock:
        if self.clock is None:
            raise errors.ConfigurationError(
                "this store was opened without the harness's clock: open it through "
                "simpleworkflow.testing.Environment"
            )
        return self.clock


class _Stall:
    """Whether the store is as quiet as it will get: nothing runs, and nothing is due, or
    what is due has waited :data:`STALL` seconds to be claimed (the worker is woken once
    when it starts waiting)."""

    def __init__(self, skipper: Skipper) -> None:
        self._skipper = skipper
        self._since: float | None = None

    def over(self, state: ClockState) -> bool:
        if state.leased:
            self._since = None
            return False
        if not state.due:
            return True
        if self._since is None:
            self._since = time.monotonic()
            self._skipper.wake()
        return time.monotonic() - self._since > STALL
