"""Whether an attempt still holds its run, known recently enough to begin a step on.

A worker learns of a cancel by reading the run (SQLite, whose workers hear no
notification from other processes) or by a notification (Postgres), a moment after the
cancel committed. Either way the step that follows begins later, after the hops back to
the worker's loop and thread; a cancel that commits in between could return before the
step begins. So the time before each read or fenced write that found the run held is
noted, a step begins only within ``HOLD_FRESH_FOR`` seconds of it (reading the run again
when it is older), and a cancel of a leased run returns no sooner than
``HOLD_FRESH_FOR`` after its commit (see ``client``): what the worker knew from before
the cancel is too old to begin a step on by the time ``cancel()`` has returned. A chain
of short steps needs no read of its own: each step's journal write is one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from simpleworkflow import errors, outage
from simpleworkflow.backends.ops import Op
from simpleworkflow.backends.records import CANCELLED, HELD, HOLD_FRESH_FOR, Lease
from simpleworkflow.durable.groupcommit import GroupCommit

if TYPE_CHECKING:
    from simpleworkflow.backends import Backend


class Holding:
    """What an attempt last learned of its lease, and when (monotonic seconds)."""

    def __init__(
        self,
        lease: Lease,
        backend: Backend,
        checks: LeaseCheck | None,
        stop: Callable[[str], None] | None,
    ) -> None:
        self._lease = (lease.run.id, lease.token)
        self._backend = backend
        self._checks = checks  # the worker's batched reads, if any
        self._stop = stop  # asks the attempt to stop, with a reason (AttemptState.request_stop)
        self._held_at: float | None = None

    def held_since(self, began: float) -> None:
        """A read or fenced write that began at ``began`` (``time.monotonic()``, taken
        before it was queued) found the lease held."""
        if self._held_at is None or began > self._held_at:
            self._held_at = began

    def fresh(self) -> bool:
        """Whether a step may begin now without reading the run again; safe from any
        thread. Call it right before the step's function, with nothing in between."""
        held = self._held_at
        return held is not None and time.monotonic() - held < HOLD_FRESH_FOR

    async def confirm(self) -> None:
        """Return once the lease is known held recently enough (reading the run when it is
        not); raise :class:`~simpleworkflow.errors.Cancelled` when it is not held."""
        while not self.fresh():
            await self._read()

    async def _read(self) -> None:
        began = time.monotonic()
        if self._checks is not None and await self._checks.record(self._lease):
            self.held_since(began)
            return
        states = await outage.until_available(  # alone, or to learn why it is not held
            lambda: self._backend.execute_async(self.read_op(), readonly=True)
        )
        self.judge(states, began, self._stop)

    def read_op(self) -> Op[dict[str, str]]:
        """The read of the lease's state, to run on a transaction of the caller's."""
        return self._backend.lease_states([self._lease])

    def judge(
        self, states: dict[str, str], began: float, stop: Callable[[str], None] | None
    ) -> None:
        """Note what a read that began at ``began`` found; raise
        :class:`~simpleworkflow.errors.Cancelled` (and ask the attempt to stop, as the
        worker would at its next look) when the lease is not held."""
        state = states.get(self._lease[0])
        if state == HELD:
            self.held_since(began)
            return
        reason = "cancelled" if state == CANCELLED else "lease lost"
        if stop is not None:
            stop(reason)
        raise errors.Cancelled(reason)


class LeaseCheck(GroupCommit[tuple[str, str]]):
    """Whether runs are still leased, ``(run id, token)`` each, read a batch at a time: the
    checks of many runs' next steps share one read (and one hop to the store's thread)."""

    what = "the lease check"

    def __init__(self, backend: Backend, unavailable: outage.Outage | None = None) -> None:
        super().__init__(unavailable)
        self._backend = backend

    def key(self, item: tuple[str, str]) -> Hashable:
        return item[0]

    async def write(self, items: list[tuple[str, str]]) -> set[Hashable]:
        op = self._backend.lease_states(items)
        states = await self._backend.execute_async(op, readonly=True)
        return {run_id for run_id, state in states.items() if state == HELD}
