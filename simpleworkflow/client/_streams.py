"""Reading a run's stream as it is written: pages of items, polled until it ends.

Each poll is one indexed read of the items after the last offset seen (and the run's
status, to know when it has ended); a poll that finds nothing waits a little longer
before the next (10 ms, growing to :data:`LONGEST_PAUSE`), one that finds items goes on
at once. Readers only read: they never hold a lock a writer waits for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from simpleworkflow import errors, names
from simpleworkflow.backends.ops import Op
from simpleworkflow.models.streams import StreamItem, StreamPage

if TYPE_CHECKING:
    from simpleworkflow.backends import Backend

#: Items read by one poll at most.
PAGE = 500
#: The longest pause between two polls that found nothing.
LONGEST_PAUSE = 0.25

Reader = Callable[[int], Op[StreamPage | None]]


def reader(backend: Backend, run_id: str, key: str) -> Reader:
    return lambda after: backend.read_stream(run_id, key, after, PAGE)


def checked(run_id: str, key: str, after: int | None) -> tuple[str, str, int]:
    return (
        names.normalize_run_id(run_id),
        names.check_stream_key(key),
        names.check_stream_offset(after),
    )


def follow(
    run: Callable[[Op[StreamPage | None]], StreamPage | None], read: Reader, run_id: str, after: int
) -> Iterator[StreamItem]:
    pause = 0.01
    while True:
        page = run(read(after))
        if page is None:
            raise errors.RunNotFound(run_id)
        for item in page.items:
            after = item.offset
            yield item
        if page.ended:
            return
        if page.items:
            pause = 0.01
        else:
            time.sleep(pause)
            pause = min(pause * 1.5, LONGEST_PAUSE)


async def follow_async(
    run: Callable[[Op[StreamPage | None]], Awaitable[StreamPage | None]],
    read: Reader,
    run_id: str,
    after: int,
) -> AsyncIterator[StreamItem]:
    pause = 0.01
    while True:
        page = await run(read(after))
        if page is None:
            raise errors.RunNotFound(run_id)
        for item in page.items:
            after = item.offset
            yield item
        if page.ended:
            return
        if page.items:
            pause = 0.01
        else:
            await asyncio.sleep(pause)
            pause = min(pause * 1.5, LONGEST_PAUSE)
