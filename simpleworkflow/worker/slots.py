"""Handler slots, and how far ahead of them a worker claims.

A worker runs at most ``concurrency`` handlers at once. Each claim is one statement and
each batch of outcomes one transaction, whatever their size, so claiming only for the
slots that are free makes a worker with few slots and quick handlers pay a claim and a
commit per handful of runs (10 slots drained no-op runs at half the rate of 100). So a
worker whose recent handlers were quick claims ahead: up to ``claim_batch`` runs held
at once, the ones beyond the free slots waiting in the worker, in claim order, for a
slot. Only as many wait as the recent handler durations say will start within
:data:`AHEAD_WAIT`: slow handlers (or none measured yet) mean no claim-ahead at all, so a
run never sits leased here while another worker could have started it much sooner.
Waiting runs are leased like running ones (heartbeats renew them), and are given back at
once when the worker shuts down, or dropped when cancelled (see ``running``).
"""

from __future__ import annotations

import asyncio
from collections import deque

#: How soon a run claimed ahead is expected to start, at the most (seconds).
AHEAD_WAIT = 0.05
#: Handlers that return within this (seconds, on average) are quick: outcomes written
#: in a moment wait for theirs (see ``groupcommit``).
QUICK = 0.005
#: Weight of the newest handler duration in the running mean.
SMOOTHING = 0.1


class Slots:
    """``size`` slots; waiters take them in turn, unless stopped first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.busy = 0  # slots held by running handlers (or handed to a waiter)
        self.waiting = 0  # waiters still waiting
        self.closed = False  # no slot is handed out any more (shutdown)
        self._waiters: deque[asyncio.Future[bool]] = deque()

    def take_now(self) -> bool:
        """Take a slot if one is free and no one waits for it."""
        if self.busy < self.size and not self.waiting and not self.closed:
            self.busy += 1
            return True
        return False

    def waiter(self) -> asyncio.Future[bool]:
        """A place in the queue: True once a slot is this waiter's, False if it was
        stopped (see :meth:`stop`) or the slots closed first."""
        waiter = asyncio.get_running_loop().create_future()
        if self.closed:
            waiter.set_result(False)
            return waiter
        self._waiters.append(waiter)
        self.waiting += 1
        return waiter

    def stop(self, waiter: asyncio.Future[bool]) -> None:
        """Give up ``waiter``'s place (it was cancelled, or its lease lost)."""
        if not waiter.done():
            waiter.set_result(False)
            self.waiting -= 1

    def abandon(self, waiter: asyncio.Future[bool]) -> None:
        """``waiter``'s task was cancelled while it waited: its place, or the slot it was
        just given, goes back."""
        if waiter.cancelled():
            self.waiting -= 1
        elif waiter.result():
            self.give_back()

    def give_back(self) -> None:
        """A handler returned: its slot goes to the next waiter, if any."""
        while self._waiters and not self.closed:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)  # the slot changes hands: busy stays
                self.waiting -= 1
                return
        self.busy -= 1

    def close(self) -> None:
        """Hand out no more slots; every waiter is told False."""
        self.closed = True
        while self._waiters:
            self.stop(self._waiters.popleft())


class Pace:
    """How many runs to claim ahead of the free slots, from recent handler durations."""

    def __init__(self, concurrency: int, claim_batch: int) -> None:
        self._concurrency = concurrency
        self._room = max(claim_batch - concurrency, 0)
        self._mean: float | None = None  # seconds: a running mean of handler durations

    def handled(self, seconds: float) -> None:
        """A handler returned after ``seconds``."""
        mean = self._mean
        self._mean = seconds if mean is None else mean + (seconds - mean) * SMOOTHING

    def quick(self) -> bool:
        """Whether handlers return within a few milliseconds, as far as seen so far."""
        return self._mean is not None and self._mean < QUICK

    def ahead(self) -> int:
        """Runs that may wait for a slot: as many as start within :data:`AHEAD_WAIT`,
        at the rate the slots get through them."""
        if not self._room or self._mean is None:
            return 0
        starts = self._concurrency * AHEAD_WAIT / max(self._mean, 1e-6)
        return min(self._room, int(starts))
