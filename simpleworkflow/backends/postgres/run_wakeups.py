"""Readers waiting on one run woken by its writer's notification rather than by their next
poll: a value's reader (``client.wait_value``; ``set_value`` notifies channel
``simpleworkflow_value``) and a stream's (``client.read_stream``; each batch written
notifies ``simpleworkflow_stream``), the payload being the run's id.

A waker holds a connection of its own that listens; a reader waits on it between reads,
for at most the pause it would have slept. Listening starts before the reader's first
read, so a write committed after that read is heard. A stream's waker that fails is
closed and its reader polls on (a lost notification costs one pause); a value's waker is
*strict*: a connection that cannot open or breaks is the store's outage
(``StoreUnavailable``), as on the pool's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import psycopg

from simpleworkflow import errors

VALUE_CHANNEL = "simpleworkflow_value"
STREAM_CHANNEL = "simpleworkflow_stream"

#: ``notices(seconds)``: whether a write of the run was heard within that time.
Notices = Callable[[float], bool]
AsyncNotices = Callable[[float], Awaitable[bool]]


class Waker:
    """Waits for a notification about one run, on a listening connection of its own.
    ``unavailable`` (what the reader waits for, for the message) makes it strict."""

    def __init__(
        self, conninfo: str, channel: str, run_id: str, *, unavailable: str | None = None
    ) -> None:
        self._run_id, self._unavailable = run_id, unavailable
        with _translated(unavailable):
            self._conn: psycopg.Connection[Any] | None = psycopg.connect(conninfo, autocommit=True)
        try:
            with _translated(unavailable):
                self._conn.execute(f"listen {channel}")
        except BaseException:
            self.close()
            raise

    def wait(self, seconds: float) -> bool:
        """Whether the run was written within ``seconds`` (returning as soon as it is)."""
        if self._conn is None:
            time.sleep(seconds)
            return False
        deadline = time.monotonic() + seconds
        try:
            with _translated(self._unavailable):
                while (left := deadline - time.monotonic()) > 0:
                    for note in self._conn.notifies(timeout=left, stop_after=1):
                        if note.payload == self._run_id:
                            return True
        except psycopg.Error:
            if self._unavailable is not None:
                raise
            self.close()  # a lenient waker: polling goes on
        return False

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class AsyncWaker:
    """:class:`Waker` on an asyncio connection."""

    def __init__(
        self, conn: psycopg.AsyncConnection[Any], run_id: str, unavailable: str | None
    ) -> None:
        self._run_id, self._unavailable = run_id, unavailable
        self._conn: psycopg.AsyncConnection[Any] | None = conn

    @classmethod
    async def open(
        cls, conninfo: str, channel: str, run_id: str, *, unavailable: str | None = None
    ) -> AsyncWaker:
        with _translated(unavailable):
            conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        waker = cls(conn, run_id, unavailable)
        try:
            with _translated(unavailable):
                await conn.execute(f"listen {channel}")
        except BaseException:
            await waker.close()
            raise
        return waker

    async def wait(self, seconds: float) -> bool:
        if self._conn is None:
            await asyncio.sleep(seconds)
            return False
        deadline = time.monotonic() + seconds
        try:
            with _translated(self._unavailable):
                while (left := deadline - time.monotonic()) > 0:
                    async for note in self._conn.notifies(timeout=left, stop_after=1):
                        if note.payload == self._run_id:
                            return True
        except psycopg.Error:
            if self._unavailable is not None:
                raise
            await self.close()
        return False

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


@contextlib.contextmanager
def listening(conninfo: str, run_id: str) -> Iterator[Notices]:
    """Hear of sets of ``run_id``'s values until the block ends (strict)."""
    waker = Waker(conninfo, VALUE_CHANNEL, run_id, unavailable=_VALUES)
    try:
        yield waker.wait
    finally:
        waker.close()


@contextlib.asynccontextmanager
async def listening_async(conninfo: str, run_id: str) -> AsyncIterator[AsyncNotices]:
    """:func:`listening`, awaited."""
    waker = await AsyncWaker.open(conninfo, VALUE_CHANNEL, run_id, unavailable=_VALUES)
    try:
        yield waker.wait
    finally:
        await waker.close()


_VALUES = "a run's values"


@contextlib.contextmanager
def _translated(unavailable: str | None) -> Iterator[None]:
    """For a strict waker, a broken listening connection is the store's outage."""
    try:
        yield
    except psycopg.OperationalError as exc:
        if unavailable is None:
            raise
        raise errors.StoreUnavailable(
            f"lost or could not open the connection that waits for {unavailable}: {exc}; "
            "check that Postgres is up, then wait again"
        ) from exc
