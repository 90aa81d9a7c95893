"""What wakes the claim loop: a slot freed, a notification, a run coming due, a stop.

The claim loop rests between claims for up to its poll interval. Anything that may mean
new work rings :class:`Bell` so that the next claim comes at once rather than at the next
poll; a run known to come due later (a retry, a sleep, a delayed start, a run recovered
from a dead worker) sets a timer for that moment. One timer is kept, for the earliest
due time, over a heap of them.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from datetime import datetime

from simpleworkflow.backends.base import Continuation, Failure, Suspension

MAX_DUE = 4096  # due times kept at most; beyond, the nearest 1024 are kept


class Bell:
    """Wake-ups and the request to stop, for one run of the claim loop at a time.

    A rest waits on a plain future that a ring resolves: the claim loop resumes in the
    loop's next turn, with no task in between (``asyncio.wait_for`` on an event took
    three turns and a task per rest, a tenth of a millisecond of an idle pick-up)."""

    def __init__(self) -> None:
        self.woken = True  # claim at the next turn even if the last claim was not full
        self.stopping = False
        self._waiters: list[asyncio.Future[bool]] = []  # resolved by the next ring
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due: list[float] = []  # loop times at which runs we heard of become due

    def start(self) -> None:
        """Bind to the running loop (each ``run_async`` has its own)."""
        self._loop = asyncio.get_running_loop()
        self._waiters = []

    def ring(self) -> None:
        """Something changed (a slot freed, a stop asked): the loop looks again."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(False)

    def stop(self) -> None:
        self.stopping = True
        self.ring()

    async def rest(self, seconds: float) -> bool:
        """Wait ``seconds`` (then return True), or less if a wake-up or a request to stop
        comes first: after an outage the listener's reconnection is such a wake-up, so the
        next claim follows the server's return at once rather than the end of a pause."""
        assert self._loop is not None
        waiter = self.next_ring()
        timer = self._loop.call_later(seconds, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()

    def next_ring(self) -> asyncio.Future[bool]:
        """A future done at the next ring (not at one that came before this call)."""
        assert self._loop is not None
        waiter = self._loop.create_future()
        self._waiters = [w for w in self._waiters if not w.done()]  # timed out, cancelled
        self._waiters.append(waiter)
        return waiter

    def wake_in(self, delay: float) -> None:
        """Claim now, or when a run becomes due (a retry, a sleep, a delayed start)
        rather than at the next poll."""
        if delay <= 0:
            self.woken = True
            self.ring()
            return
        if self._loop is None or delay == float("inf"):
            return
        heapq.heappush(self._due, self._loop.time() + delay)
        if len(self._due) > MAX_DUE:  # a flood of far-off times: keep the nearest
            self._due = heapq.nsmallest(1024, self._due)
        self._arm()

    def _arm(self) -> None:
        """Keep one timer, set for the earliest due time."""
        if not self._due or self._loop is None:
            return
        first = self._due[0]
        if self._timer is not None:
            if self._timer.when() <= first:
                return
            self._timer.cancel()
        self._timer = self._loop.call_at(first, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        now = self._loop.time() if self._loop is not None else 0.0
        while self._due and self._due[0] <= now + 0.001:
            heapq.heappop(self._due)
        self.wake_in(0.0)
        self._arm()


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(True)


def due_in(outcome: object, now: Callable[[], datetime]) -> float:
    """Seconds until a run this worker just gave back is due again (inf: not at all);
    ``now()`` is the store's time (``Backend.now``), read only for a suspension until a
    time."""
    if isinstance(outcome, Failure) and not outcome.final:
        return max(outcome.delay, 0.001)
    if isinstance(outcome, Suspension):
        if outcome.run_at is not None:
            return max((outcome.run_at - now()).total_seconds(), 0.001)
        return max(outcome.delay, 0.001)
    if isinstance(outcome, Continuation):
        return 0.001  # its successor is due at once
    return float("inf")
