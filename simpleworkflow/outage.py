"""Saying once that the store cannot be reached, and once that it answers again.

In an outage every part of a worker fails at once and retries (claims, heartbeats,
journal writes, outcomes): a line per failed call would bury the one fact that matters,
when the outage began and when it ended.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from simpleworkflow import errors

T = TypeVar("T")
#: Pauses between attempts to reach the store: short, since a restarted server answers
#: within seconds and work should resume with it; a wake-up cuts a claim's pause short.
FIRST_PAUSE = 0.05
MAX_PAUSE = 1.0


class Outage:
    """The state of the store as one worker sees it: up, or down since a given time."""

    def __init__(self, log: logging.Logger, where: str) -> None:
        self._log = log
        self._where = where
        self._since: float | None = None
        self._ended_at: float | None = None

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> None:
        began = getattr(exc, "began", None)
        if self._since is None and self._straggler(began):
            # Caught by the outage that has ended (it waited on a connection the network
            # swallowed, to its deadline): no news. Its caller retries like any other.
            self._log.debug("a call begun during the outage failed after it: %s", exc)
            return
        if self._since is None:
            self._since = time.monotonic()
            self._log.warning(
                "cannot reach the store at %s (%s); retrying until it answers", self._where, exc
            )

    def ended(self) -> None:
        if self._since is not None:
            self._ended_at = time.monotonic()
            seconds = self._ended_at - self._since
            self._since = None
            self._log.warning("the store at %s answers again, after %.1fs", self._where, seconds)

    def _straggler(self, began: float | None) -> bool:
        return began is not None and self._ended_at is not None and began < self._ended_at


def next_pause(pause: float) -> float:
    return min(max(pause, FIRST_PAUSE) * 2, MAX_PAUSE)


async def until_available(call: Callable[[], Awaitable[T]], outage: Outage | None = None) -> T:
    """``call()`` again and again while the store cannot be reached, then its result.

    Only for writes that may be repeated (fenced by lease token, upserts) and reads.
    """
    pause = FIRST_PAUSE
    while True:
        try:
            result = await call()
        except errors.StoreUnavailable as exc:
            if outage is not None:
                outage.failed(exc)
            await asyncio.sleep(pause)
            pause = next_pause(pause)
            continue
        if outage is not None:
            outage.ended()
        return result
