"""The worker's LISTEN connection: wake-ups and cancellations, and the claim that follows.

One connection per worker listens on the ``simpleworkflow`` channel; the triggers on
``workflow_run`` notify it (``wake <schema> <type> [<due epoch>]``, ``cancel <schema>
<run id>``). After each batch of notifications the worker may run an op on this same
connection (``after``), so that an idle worker's claim goes out from the task that read
the notification: no hop to the claim loop's task, no task for the call, no pool
checkout (0.15 ms of Python of an idle pick-up), and a server process that has just run
rather than one idle since the last run. The connection's session holds the claim's
settings, so the claim goes alone rather than in a pipeline behind them (psycopg's
pipeline costs Python on every call, docs/performance.md); any other op resets them first.

A lost connection is opened again (at most a second apart, so wake-ups come back within
a second of the server); after every (re)connection a ``wake`` without a type is
delivered, since notifications sent while disconnected are lost and the worker must look
itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg

from simpleworkflow.backends import base
from simpleworkflow.backends.postgres import driving, loading
from simpleworkflow.backends.postgres.liveness import Liveness, cut

T = TypeVar("T")
_log = logging.getLogger("simpleworkflow.postgres")

#: The longest pause between two attempts to listen again.
LISTEN_PAUSE = 1.0


async def listen(
    connect: Callable[[], Awaitable[psycopg.AsyncConnection[Any]]],
    schema: str,
    liveness: Liveness,
    call_timeout: float,
    on_message: Callable[[str, str], None],
    after: base.AfterWake | None = None,
) -> None:
    """Deliver ``schema``'s notifications until cancelled (see the module's docstring)."""
    pause = 0.1
    while True:
        try:
            conn = await connect()
        except psycopg.OperationalError as exc:
            _log.debug("cannot listen for wake-ups (%s); retrying in %.1fs", exc, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, LISTEN_PAUSE)
            continue
        try:
            loading.guard(conn)  # the ops run on it read rows as the pool's do
            await conn.execute(b"listen simpleworkflow")
            pause = 0.1
            on_message("wake", "")
            with liveness.standing(conn):  # half-open: cut by the next probe
                runner = _Runner(conn, liveness, call_timeout)
                while True:
                    # The generator holds the connection while it waits: it ends after the
                    # first batch, and what comes during ``after`` waits in psycopg.
                    async for note in conn.notifies(stop_after=1):
                        kind, _, rest = note.payload.partition(" ")
                        schema_of, _, value = rest.partition(" ")
                        if schema_of == schema:
                            on_message(kind, value)
                    if after is not None:
                        await after(runner)
        except psycopg.OperationalError as exc:
            _log.debug("wake-up connection lost (%s); reconnecting", exc)
        finally:
            await conn.close()


class _Runner:
    """Runs an op on the listening connection, in autocommit as on the pool's. Past
    ``call_timeout`` its socket is shut down (the op fails, the listener reconnects);
    after the liveness probe's delay the server is asked whether its session still
    exists, as for the pool's calls.

    A stream that says which session settings make its first statement redundant (the
    claim's, ``Stream.session``) runs without it once the connection holds them: the
    claim goes alone, not in a pipeline, whose Python psycopg spends on every call. Any
    other op first resets them, so that nothing but such streams ever runs with them."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], liveness: Liveness, timeout: float):
        self._conn = conn
        self._liveness = liveness
        self._timeout = timeout
        self._session: base.Statement | None = None  # the settings the session holds

    async def __call__(self, op: base.Op[T], /) -> T:
        conn = self._conn
        deadline = asyncio.get_running_loop().call_later(self._timeout, cut, conn)
        try:
            with self._liveness.watching(conn):
                return await self._drive(op)
        finally:
            deadline.cancel()

    async def _drive(self, op: base.Op[T]) -> T:
        conn = self._conn
        try:
            first = next(op)
            if not isinstance(first, base.Stream) or first.session is None:
                if self._session is not None:
                    self._session = None
                    await conn.execute(b"reset all")
                return await driving.execute_async(conn, _then(first, op))
            if first.session != self._session:
                self._session = None
                await conn.execute(first.session.sql, first.session.params)
                self._session = first.session
            statements = iter(first.statements)
            next(statements)  # the settings the session holds
            for statement in statements:
                cursor = driving.cursor_for(conn, statement)
                await cursor.execute(statement.sql, statement.params)
                first.take(await cursor.fetchall() if driving.returned_rows(cursor) else [])
            return await driving.drive_async(conn, op, op.send([]))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


def _then(first: base.Statement, op: base.Op[T]) -> base.Op[T]:
    """``op`` again, its first statement already taken out."""
    rows = yield first
    while True:
        try:
            statement = op.send(rows)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        rows = yield statement
