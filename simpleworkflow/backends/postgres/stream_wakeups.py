"""Readers of a run's streams woken by the writer's notification (``simpleworkflow_stream``,
one per batch written, its payload the run's id) rather than by their next poll.

A waker holds a connection of its own that listens; a reader waits on it between polls,
for at most the pause it would have slept. A notification lost (the connection dropped)
costs only that pause: the reader polls anyway. A waker that fails is closed and the
reader goes on polling.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg

CHANNEL = b"listen simpleworkflow_stream"


class Waker:
    """Waits for a notification about one run, on a listening connection of its own."""

    def __init__(self, conninfo: str, run_id: str) -> None:
        self._run_id = run_id
        self._conn: psycopg.Connection[Any] | None = psycopg.connect(conninfo, autocommit=True)
        self._conn.execute(CHANNEL)

    def wait(self, seconds: float) -> None:
        """Return when the run's stream was written, or after ``seconds``."""
        if self._conn is None:
            time.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        try:
            while (left := deadline - time.monotonic()) > 0:
                for note in self._conn.notifies(timeout=left, stop_after=1):
                    if note.payload == self._run_id:
                        return
        except psycopg.Error:
            self.close()  # polling goes on

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class AsyncWaker:
    """:class:`Waker` on an asyncio connection."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], run_id: str) -> None:
        self._run_id = run_id
        self._conn: psycopg.AsyncConnection[Any] | None = conn

    @classmethod
    async def open(cls, conninfo: str, run_id: str) -> AsyncWaker:
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        await conn.execute(CHANNEL)
        return cls(conn, run_id)

    async def wait(self, seconds: float) -> None:
        if self._conn is None:
            await asyncio.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        try:
            while (left := deadline - time.monotonic()) > 0:
                async for note in self._conn.notifies(timeout=left, stop_after=1):
                    if note.payload == self._run_id:
                        return
        except psycopg.Error:
            await self.close()

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
