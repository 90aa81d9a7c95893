"""Group commit: what many concurrent callers write goes to the store a batch at a time.

Callers queue an item and wait; one writer task takes everything queued while the
previous write was in flight and writes it in one transaction. Under load the batches
grow by themselves, and a lone caller waits for no one. Each caller learns whether its
item counted (a fenced write finds its lease gone and writes nothing).

A batch that cannot reach the store is written again until it can: every item is
idempotent (fenced by its lease token, or an upsert of the same value), and a lost
connection is no fault of the attempt that wrote it.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

from simpleworkflow import outage

_log = logging.getLogger("simpleworkflow.worker")
ItemT = TypeVar("ItemT")
#: Turns of the event loop a batch may wait for the items :meth:`GroupCommit.more_coming`
#: announces (each a few microseconds when there is nothing else to do).
GATHER_TURNS = 48
#: How long (seconds) a batch may wait for items that :meth:`GroupCommit.trickling`
#: announces: for the next one, and for all of them.
GATHER_GAP = 0.001
GATHER_TIME = 0.005


class GroupCommit(abc.ABC, Generic[ItemT]):
    #: What an item is, for messages ("the outcome").
    what = "the write"

    def __init__(self, unavailable: outage.Outage | None = None) -> None:
        self._outage = unavailable
        self._queue: list[tuple[ItemT, asyncio.Future[bool]]] = []
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._arrival: asyncio.Future[bool] | None = None  # the gather's, for the next item

    @abc.abstractmethod
    def key(self, item: ItemT) -> Hashable:
        """What ``write`` reports back for an item it wrote."""

    @abc.abstractmethod
    async def write(self, items: list[ItemT]) -> set[Hashable]:
        """Write ``items`` in one transaction; return the keys of those that counted.

        Called again with the same items when it raised ``StoreUnavailable``."""

    async def record(self, item: ItemT) -> bool:
        """Queue ``item`` and wait until it is committed; False if it did not count.

        Raises what the store raised if it refused this item; waits while it cannot be
        reached.
        """
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        self._idle.clear()
        self._ready.set()
        if self._arrival is not None and not self._arrival.done():
            self._arrival.set_result(True)
        return await future

    def more_coming(self) -> bool:
        """Whether more items are about to be queued (a few turns of the loop from now):
        the writer then waits for them, so that they share one transaction."""
        return False

    def trickling(self) -> bool:
        """Whether the items announced come from other threads (a few at a time, as each
        gets the interpreter): the writer then waits for them in the loop's selector."""
        return False

    async def drained(self) -> None:
        """Return once everything queued so far has been written."""
        await self._idle.wait()

    async def run(self) -> None:
        """The writer task: flush whatever is queued, one transaction per batch."""
        while True:
            await self._ready.wait()
            await self._gather()
            self._ready.clear()
            batch, self._queue = self._queue, []
            if batch:
                await self._flush(batch)
            if not self._queue:
                self._idle.set()

    async def _gather(self) -> None:
        """While :meth:`more_coming`, give the loop up to :data:`GATHER_TURNS` turns:
        handlers that run on the loop finish within them. Turning the loop keeps the
        interpreter from other threads (each turn takes it back before a waiting thread
        wakes), so items that come from them (:meth:`trickling`) are waited for in the
        selector instead: each within :data:`GATHER_GAP` of the last, all within
        :data:`GATHER_TIME`."""
        turns, began = 0, 0.0
        while self.more_coming():
            if self.trickling():
                now = time.monotonic()
                began = began or now
                left = GATHER_TIME - (now - began)
                if left <= 0 or not await self._next_item(min(left, GATHER_GAP)):
                    return
            elif turns < GATHER_TURNS:
                await asyncio.sleep(0)
                turns += 1
            else:
                return

    async def _next_item(self, within: float) -> bool:
        """Whether an item is queued within ``within`` seconds."""
        loop = asyncio.get_running_loop()
        arrival: asyncio.Future[bool] = loop.create_future()
        self._arrival = arrival
        timer = loop.call_later(within, _answer, [(arrival, False)])
        try:
            return await arrival
        finally:
            timer.cancel()
            self._arrival = None

    async def _flush(self, batch: list[tuple[ItemT, asyncio.Future[bool]]]) -> None:
        items = [item for item, _ in batch]
        try:
            accepted = await outage.until_available(lambda: self.write(items), self._outage)
        except Exception as exc:
            # The store refused the batch for a reason retrying cannot cure. Write the
            # items one by one, so that one bad item fails alone and its caller gets the
            # error. Letting the error end this task would leave every later caller waiting.
            if len(batch) > 1:
                for entry in batch:
                    await self._flush([entry])
                return
            _log.error("cannot record %s of %s: %r", self.what, self.key(batch[0][0]), exc)
            if not batch[0][1].done():
                batch[0][1].set_exception(exc)
            return
        answers = [(future, self.key(item) in accepted) for item, future in batch]
        if self._queue:
            # The next batch is queued: its write is sent first (the writer goes on to it
            # in this turn of the loop), then the callers of this one go on, rather than
            # that write waiting behind what they do next (their next steps, say).
            asyncio.get_running_loop().call_soon(_answer, answers)
        else:
            _answer(answers)


def _answer(answers: list[tuple[asyncio.Future[bool], bool]]) -> None:
    for future, counted in answers:
        if not future.done():
            future.set_result(counted)
