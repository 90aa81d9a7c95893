"""Group commit (``durable.groupcommit``) with items that come from other threads, as a
plain ``def`` handler's outcome does: they share one write while more are announced, and
an item is never held for items that do not come."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable

import pytest

from simpleworkflow.durable import groupcommit
from simpleworkflow.durable.handler_threads import HandlerThreads


class Batches(groupcommit.GroupCommit[int]):
    """Writes nothing: keeps each batch it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[int]] = []
        self.coming = True  # what more_coming says
        self.from_threads = True  # what trickling says

    def key(self, item: int) -> Hashable:
        return item

    async def write(self, items: list[int]) -> set[Hashable]:
        self.batches.append(items)
        return set(items)

    def more_coming(self) -> bool:
        return self.coming

    def trickling(self) -> bool:
        return self.from_threads


def test_items_from_a_thread_share_one_write_while_more_are_announced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Items 20 ms apart (hundreds of idle turns of the loop): one write, since more were
    announced until the last came."""
    monkeypatch.setattr(groupcommit, "GATHER_GAP", 30.0)
    monkeypatch.setattr(groupcommit, "GATHER_TIME", 60.0)

    async def scenario() -> list[list[int]]:
        box = Batches()
        writer = asyncio.create_task(box.run())
        loop = asyncio.get_running_loop()
        recorded: list[asyncio.Future[bool]] = []

        def record(item: int, last: bool) -> None:
            box.coming = not last
            recorded.append(asyncio.ensure_future(box.record(item)))

        def handlers() -> None:
            for item in range(5):
                threading.Event().wait(0.02)
                loop.call_soon_threadsafe(record, item, item == 4)

        thread = threading.Thread(target=handlers)
        thread.start()
        await asyncio.to_thread(thread.join)
        while len(recorded) < 5:
            await asyncio.sleep(0.01)
        assert await asyncio.wait_for(asyncio.gather(*recorded), 10) == [True] * 5
        writer.cancel()
        return box.batches

    assert asyncio.run(scenario()) == [[0, 1, 2, 3, 4]]


def test_an_item_is_written_when_the_items_announced_do_not_come() -> None:
    """A handler that holds its slot keeps more announced: the item that came is written
    anyway, within a moment, not when that handler returns."""

    async def scenario() -> list[list[int]]:
        box = Batches()
        writer = asyncio.create_task(box.run())
        assert await asyncio.wait_for(box.record(7), 10)
        writer.cancel()
        return box.batches

    assert asyncio.run(scenario()) == [[7]]


def test_the_handler_threads_are_busy_until_every_result_is_settled_or_dropped() -> None:
    async def scenario() -> list[bool]:
        threads = HandlerThreads(1, name="test-busy")
        release = threading.Event()
        seen = [threads.busy()]
        running = threads.run(lambda: release.wait(10))
        queued = threads.run(lambda: None)  # behind the first: the only thread is taken
        seen.append(threads.busy())
        queued.cancel()
        seen.append(threads.busy())  # the first still runs
        release.set()
        assert await running
        seen.append(threads.busy())
        threads.close()
        return seen

    assert asyncio.run(scenario()) == [False, True, True, False]
