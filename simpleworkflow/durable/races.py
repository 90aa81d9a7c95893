"""Who wins a race: the branch whose awaited event happened first, in database time.

A replay meets what happened while the run was suspended all at once: a signal stored
at 10:00, a timer that ran out at 10:02, a child that finished at 10:01. Which branch
of a race finishes first *in the replay* depends on how many reads of the store each
needs (a timer needs none), not on when things happened. So each branch runs with a
:class:`Clock` of its own (a context variable, inherited by the tasks it starts), on
which its durable calls note the database time of what they met. Once a branch has
finished, the race waits for the others only while they are still reading the store
(their answer may lie in the past), never while they run a step's code or the user's
(what they would meet is later than now); then the earliest time wins, the lowest
index on a tie.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from simpleworkflow import errors

#: Later than any time a branch can note: what a branch with no time sorts as.
NEVER = datetime.max.replace(tzinfo=UTC)


class Clock:
    """One branch of a race: the latest time it met, and whether it is reading the store."""

    def __init__(self, parent: Clock | None, changed: asyncio.Event) -> None:
        self.parent = parent
        self.changed = changed  # the race's: set when this branch may have moved on
        self.at: datetime | None = None
        self.started = False
        self.done = False
        self.lost = False
        self._reads = 0
        self._nested: list[Race] = []  # races run inside this branch, until they end

    def reading(self) -> bool:
        """True while the branch may still meet something that happened in the past."""
        if self.done:
            return False
        return not self.started or self._reads > 0 or any(r.reading() for r in self._nested)

    def poke(self) -> None:
        """Have this race, and every race it is nested in, look at its branches again."""
        clock: Clock | None = self
        while clock is not None:
            clock.changed.set()
            clock = clock.parent

    def given_up(self) -> bool:
        """True when this branch, or one it runs in, lost its race."""
        clock: Clock | None = self
        while clock is not None:
            if clock.lost:
                return True
            clock = clock.parent
        return False

    def _count(self, change: int) -> None:
        self._reads += change
        self.poke()


_current: contextvars.ContextVar[Clock | None] = contextvars.ContextVar("race_clock", default=None)


def current() -> Clock | None:
    """The clock of the race branch the caller runs in, if any."""
    return _current.get()


def note(at: datetime | None) -> None:
    """Record that the current branch met something that happened at ``at``."""
    clock = _current.get()
    if clock is not None and at is not None and (clock.at is None or at > clock.at):
        clock.at = at


def note_now(now: Callable[[], datetime]) -> None:
    """:func:`note` the time ``now()``, computed only inside a race."""
    if _current.get() is not None:
        note(now())


def reading() -> contextlib.AbstractContextManager[None]:
    """Around a durable call's reads and writes of the store (not around user code)."""
    clock = _current.get()
    return _NOTHING if clock is None else _Reads(clock, 1)


def not_reading() -> contextlib.AbstractContextManager[None]:
    """Inside :func:`reading`, around what only happens now: a step's own code, say."""
    clock = _current.get()
    return _NOTHING if clock is None else _Reads(clock, -1)


_NOTHING = contextlib.nullcontext()  # outside races: every step pays for these calls


class _Reads:
    """Changes a branch's count of durable calls reading the store, for a ``with`` block."""

    def __init__(self, clock: Clock, change: int) -> None:
        self._clock = clock
        self._change = change

    def __enter__(self) -> None:
        self._clock._count(self._change)

    def __exit__(self, *exc: object) -> None:
        self._clock._count(-self._change)


class Race:
    """The branches of one race, each on its clock, as tasks."""

    def __init__(self, branches: tuple[Awaitable[Any], ...], now: Callable[[], datetime]) -> None:
        self._now = now
        self._parent = _current.get()
        self._changed = asyncio.Event()
        self._decided = False
        self.clocks = [Clock(self._parent, self._changed) for _ in branches]
        if self._parent is not None:
            self._parent._nested.append(self)
        self.tasks: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(self._run(branch, clock))
            for branch, clock in zip(branches, self.clocks, strict=True)
        ]
        for task in self.tasks:
            task.add_done_callback(lambda _: self._changed.set())

    async def _run(self, branch: Awaitable[Any], clock: Clock) -> Any:
        _current.set(clock)  # this task's context only
        clock.started = True
        clock.poke()
        try:
            value = await branch
        except errors.Suspend:
            raise
        except BaseException:
            clock.at = clock.at or self._now()
            raise
        finally:
            clock.done = True
        clock.at = clock.at or self._now()
        return value

    def reading(self) -> bool:
        """For the race this one runs in: True while a branch reads, and from the decision
        until :meth:`close`, by when the ``ctx.race`` call around it reads again (to note
        and journal the winner), so that the outer race never sees a gap."""
        return self._decided or any(clock.reading() for clock in self.clocks)

    async def winner(self) -> int | None:
        """The index of the winning branch, or ``None`` when every branch suspended."""
        while True:
            self._changed.clear()
            finished = [i for i, task in enumerate(self.tasks) if _finished(task)]
            if not finished and all(task.done() for task in self.tasks):
                self._decided = True
                return None
            if finished and not any(clock.reading() for clock in self.clocks):
                self._decided = True
                return min(finished, key=lambda i: (self.clocks[i].at or NEVER, i))
            await self._changed.wait()

    async def close(self, winner: int | None) -> None:
        """Cancel the branches still running; the losers' waits no longer hold."""
        if winner is not None:
            for i, clock in enumerate(self.clocks):
                clock.lost = i != winner
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self._parent is not None:
            self._parent._nested.remove(self)

    def suspensions(self) -> list[errors.Suspend]:
        return [exc for exc in map(suspension, self.tasks) if exc is not None]


def _finished(task: asyncio.Future[Any]) -> bool:
    """Returned or raised: a branch that suspends does not finish the race."""
    return task.done() and suspension(task) is None


def suspension(task: asyncio.Future[Any]) -> errors.Suspend | None:
    if not task.done() or task.cancelled():
        return None
    exc = task.exception()
    return exc if isinstance(exc, errors.Suspend) else None
