"""Reading a run's stream as it is written: pages of items, polled until it ends.

Each poll is one indexed read of the items after the last offset seen (and the run's
status, to know when it has ended); one that finds items goes on at once, one that finds
nothing waits before the next. On Postgres the reader then listens (on the one listening
connection its backend's readers share, from the first empty poll): the writer's
notification, one per batch, wakes it at once, and it polls anyway every
:data:`LISTENING_PAUSE` at most. Elsewhere it
sleeps 10 ms, growing to :data:`LONGEST_PAUSE`. Readers only read: they never hold a lock
a writer waits for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from simpleworkflow import errors, names
from simpleworkflow.backends.ops import Op
from simpleworkflow.models.streams import StreamItem, StreamPage

if TYPE_CHECKING:
    from simpleworkflow.backends import Backend

#: Items read by one poll at most.
PAGE = 500
#: The first pause after a poll that found nothing, and the longest: polling alone ...
FIRST_PAUSE = 0.01
LONGEST_PAUSE = 0.25
#: ... and while a notification wakes the reader (Postgres): a lost one costs this much.
LISTENING_PAUSE = 1.0

_log = logging.getLogger("simpleworkflow.client")

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
    run: Callable[[Op[StreamPage | None]], StreamPage | None],
    read: Reader,
    run_id: str,
    after: int,
    waker: Callable[[], Any] | None = None,
    typed: Callable[[StreamItem], StreamItem] | None = None,
) -> Iterator[StreamItem]:
    """The items after ``after``, read as ``typed`` makes them (a ``type=``) if given."""
    pause, woken = FIRST_PAUSE, None
    try:
        while True:
            page = run(read(after))
            if page is None:
                raise errors.RunNotFound(run_id)
            for item in page.items:
                after = item.offset
                yield item if typed is None else typed(item)
            if page.ended:
                return
            if page.items:
                pause = FIRST_PAUSE
            elif woken is None and waker is not None:
                woken, waker = _opened(waker), None
                continue  # listening now: read once more, what came meanwhile was not heard
            else:
                if woken is not None:
                    woken.wait(pause)
                else:
                    time.sleep(pause)
                pause = min(pause * 1.5, LONGEST_PAUSE if woken is None else LISTENING_PAUSE)
    finally:
        if woken is not None:
            woken.close()


async def follow_async(
    run: Callable[[Op[StreamPage | None]], Awaitable[StreamPage | None]],
    read: Reader,
    run_id: str,
    after: int,
    waker: Callable[[], Awaitable[Any]] | None = None,
    typed: Callable[[StreamItem], StreamItem] | None = None,
) -> AsyncIterator[StreamItem]:
    pause, woken = FIRST_PAUSE, None
    try:
        while True:
            page = await run(read(after))
            if page is None:
                raise errors.RunNotFound(run_id)
            for item in page.items:
                after = item.offset
                yield item if typed is None else typed(item)
            if page.ended:
                return
            if page.items:
                pause = FIRST_PAUSE
            elif woken is None and waker is not None:
                woken, waker = await _opened_async(waker), None
                continue
            else:
                if woken is not None:
                    await woken.wait(pause)
                else:
                    await asyncio.sleep(pause)
                pause = min(pause * 1.5, LONGEST_PAUSE if woken is None else LISTENING_PAUSE)
    finally:
        if woken is not None:
            await woken.close()


def _opened(waker: Callable[[], Any]) -> Any:
    """The store's waker, or ``None`` (polling alone) where it cannot listen."""
    try:
        return waker()
    except Exception as exc:  # a reader polls on rather than fail: the waker only speeds it
        _log.debug("cannot listen for stream writes (%s); polling", exc)
        return None


async def _opened_async(waker: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return await waker()
    except Exception as exc:
        _log.debug("cannot listen for stream writes (%s); polling", exc)
        return None
