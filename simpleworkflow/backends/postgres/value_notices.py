"""Readers waiting for a run's published values (``client.wait_value``) hear of each set
by LISTEN on a connection of their own: ``set_value`` notifies channel
``simpleworkflow_value`` with the run's id as its transaction commits, so a waiting reader
reads the store once per set of the run it waits for, not once per poll."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import psycopg

from simpleworkflow import errors

CHANNEL = "simpleworkflow_value"

#: ``notices(seconds)``: whether a set of the run was heard within that time.
Notices = Callable[[float], bool]
AsyncNotices = Callable[[float], Awaitable[bool]]


@contextlib.contextmanager
def listening(conninfo: str, run_id: str) -> Iterator[Notices]:
    """Listen for sets of ``run_id``'s values until the block ends. Listening starts
    before the block's first read, so a set committed after that read is heard."""
    with _translated():
        conn: psycopg.Connection[Any] = psycopg.connect(conninfo, autocommit=True)
    try:
        with _translated():
            conn.execute(f"listen {CHANNEL}")

        def notices(seconds: float) -> bool:
            with _translated():
                heard = conn.notifies(timeout=max(seconds, 0.0))
                return any(note.payload == run_id for note in heard)

        yield notices
    finally:
        conn.close()


@contextlib.asynccontextmanager
async def listening_async(conninfo: str, run_id: str) -> AsyncIterator[AsyncNotices]:
    """:func:`listening`, awaited."""
    with _translated():
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
    try:
        with _translated():
            await conn.execute(f"listen {CHANNEL}")

        async def notices(seconds: float) -> bool:
            with _translated():
                async for note in conn.notifies(timeout=max(seconds, 0.0)):
                    if note.payload == run_id:
                        return True
                return False

        yield notices
    finally:
        await conn.close()


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """A broken listening connection is the store's outage, as on the pool's."""
    try:
        yield
    except psycopg.OperationalError as exc:
        raise errors.StoreUnavailable(
            f"lost or could not open the connection that waits for a run's values: {exc}; "
            "check that Postgres is up, then wait again"
        ) from exc
