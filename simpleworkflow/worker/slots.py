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
    """``size`` slots; runs queued for one (claimed ahead) take them in turn, unless
    stopped first.

    A queued run holds no future unless it must wait: the attempts of one claim start
    in one turn of the event loop, in claim order, and a slot given back to the queue
    before the next queued run asks (:meth:`ask`) is simply held for it (``_handed``).
    Only a run that asks and finds none waits on a future of its own."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.busy = 0  # slots held by running handlers (or handed to a queued run)
        self.waiting = 0  # queued runs with no slot yet
        self.closed = False  # no slot is handed out any more (shutdown)
        self._unasked = 0  # queued runs that have not asked for their slot yet
        self._handed = 0  # slots given back for those (never more than them)
        self._waiters: deque[asyncio.Future[bool]] = deque()  # queued runs that asked

    def take_now(self) -> bool:
        """Take a slot if one is free and no one waits for it; else queue for one (the
        run's task then asks for it, :meth:`ask`)."""
        if self.busy < self.size and not self.waiting and not self.closed:
            self.busy += 1
            return True
        self._unasked += 1
        self.waiting += 1
        return False

    def ask(self) -> asyncio.Future[bool] | None:
        """A queued run asks for its slot (once, first thing in its task, the slots not
        closed): None if one was handed to it, else a future that is True once a slot is
        its own, False if it was stopped (see :meth:`stop`) or the slots closed first."""
        self._unasked -= 1
        if self._handed:
            self._handed -= 1
            return None
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    def leave(self) -> None:
        """A queued run that has not asked will not (stopped, or the slots closed): a slot
        held for it goes to the next in turn."""
        self._unasked -= 1
        if self._handed > self._unasked:
            self._handed -= 1
            self.give_back()
        else:
            self.waiting -= 1

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
        """A handler returned: its slot goes to the next queued run, if any."""
        if self.closed:
            self.busy -= 1
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)  # the slot changes hands: busy stays
                self.waiting -= 1
                return
        if self._unasked > self._handed:  # held for the next run to ask
            self._handed += 1
            self.waiting -= 1
            return
        self.busy -= 1

    def close(self) -> None:
        """Hand out no more slots; every waiter is told False (queued runs that have not
        asked find the slots closed, and :meth:`leave`)."""
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
