"""How an op is driven on a psycopg connection: one of the store's pools', or a caller's.

A pool's connection is in autocommit mode: a single-statement op (most of them, thanks to
data-modifying CTEs) costs one round trip, and an op that starts with ``ATOMIC`` runs
inside an explicit transaction.

A caller's connection (``client.start(..., connection=conn)``, see docs/transactions.md)
is driven inside the caller's transaction, under a savepoint: an op that fails undoes its
own writes and leaves the caller's transaction usable, and nothing is committed here.
Only a connection in autocommit mode outside any transaction gets a transaction of the
op's own, committed at its end, as the store's own connections do.

Rows are dicts whatever row factory the connection has, and JSON columns are parsed
whatever loaders it has (Django's connections load ``jsonb`` as text), so that the
caller's connection needs no setting of ours.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import dict_row
from psycopg.types.json import JsonbLoader, JsonLoader

from simpleworkflow import errors
from simpleworkflow.backends import base
from simpleworkflow.backends.postgres import loading
from simpleworkflow.backends.postgres.rows import Read

T = TypeVar("T")

#: Sent on a caller's connection that is not in autocommit mode and has no transaction
#: open yet: psycopg opens one (BEGIN) before it, which the caller commits or rolls back,
#: and the op's savepoint goes inside it. A transaction block of psycopg's own would
#: commit at its end instead.
_OPEN = b"select 1"

#: Statements of a stream (``base.Stream``) queued before the rows of the first of them
#: are read (the server runs them meanwhile). The last ones are read after the pipeline's
#: Sync, which brings them in with the implicit transaction's commit: a stream of two
#: (the claim and its settings) costs one round trip, not a flush's and then the Sync's.
AHEAD = 2

#: The status of a statement's result that holds rows (a ``select``, a ``returning``).
_ROWS = pq.ExecStatus.TUPLES_OK


def execute(conn: Any, op: base.Op[T]) -> T:
    """Drive ``op`` on a connection of the sync pool (autocommit)."""
    try:
        first = next(op)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    if first is not base.ATOMIC:
        return drive(conn, op, first)
    with conn.transaction():
        return drive(conn, op, first)


async def execute_async(conn: Any, op: base.Op[T]) -> T:
    """Drive ``op`` on a connection of the async pool (autocommit)."""
    try:
        statement = next(op)
        if statement is not base.ATOMIC:
            return await drive_async(conn, op, statement)
        async with conn.transaction():
            return await drive_async(conn, op, statement)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def ended_within(call: asyncio.Future[Any], timeout: float) -> bool:
    """Wait until ``call`` ends or ``timeout`` seconds pass; True if it ended.

    Cancelling the caller cancels only its wait and leaves ``call`` running, as
    ``asyncio.wait_for(asyncio.shield(call), timeout)`` does, for less: one future, one
    timer and one callback, where those two make another future, a second task and their
    callbacks on every call (2 to 4 µs more per call, docs/performance.md)."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    call.add_done_callback(wake)
    timer = loop.call_later(timeout, wake)
    try:
        await waiter
    finally:
        timer.cancel()
        call.remove_done_callback(wake)
    return call.done()


async def execute_pooled(
    pool: Any,
    op: base.Op[T],
    run: Callable[[Any, base.Op[T]], Awaitable[T]],
    watching: Callable[[Any], AbstractContextManager[None]],
    broke: Callable[[], None],
) -> T:
    """``run(conn, op)`` on a connection of the async ``pool``, ``watching`` it; ``broke``
    is called when the connection broke.

    What ``async with pool.connection()`` does, for about 10 µs less per call: its two
    context managers, and the commit it asks for at the end (a lock and a wait, with
    nothing to do on a connection in autocommit mode). As there, a transaction left open
    is committed, or rolled back after an error, before the pool gets the connection back.
    """
    conn = await pool.getconn()
    try:
        try:
            with watching(conn):
                result = await run(conn, op)
        except BaseException as exc:
            if isinstance(exc, psycopg.OperationalError) and (conn.broken or conn.closed):
                broke()
            if _open(conn):
                with contextlib.suppress(Exception):  # a broken one: the pool drops it
                    await conn.rollback()
            raise
        if _open(conn):
            await conn.commit()
        return result
    finally:
        await pool.putconn(conn)


def _open(conn: Any) -> bool:
    """Whether ``conn`` has a transaction to end (or is in an unknown state)."""
    return not conn.closed and conn.pgconn.transaction_status != pq.TransactionStatus.IDLE


def execute_joined(conn: Any, op: base.Op[T]) -> T:
    """Drive ``op`` inside the transaction of a caller's connection (see the module's
    docstring); checked first by :func:`joinable`."""
    if not conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        conn.execute(_OPEN)
    with conn.transaction():  # a savepoint, or the op's own transaction in autocommit
        return drive(conn, op, cursor=_caller_cursor)


async def execute_joined_async(conn: Any, op: base.Op[T]) -> T:
    """:func:`execute_joined` on an ``AsyncConnection``."""
    if not conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        await conn.execute(_OPEN)
    async with conn.transaction():
        try:
            return await drive_async(conn, op, next(op), cursor=_caller_cursor)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


def joinable(connection: object, *, asynchronous: bool) -> Any:
    """``connection`` if an op can join its transaction, else an
    :class:`~simpleworkflow.errors.InvalidArgument` that says why not."""
    want: type[Any] = psycopg.AsyncConnection if asynchronous else psycopg.Connection
    if not isinstance(connection, want):
        if isinstance(connection, psycopg.AsyncConnection | psycopg.Connection):
            is_async = isinstance(connection, psycopg.AsyncConnection)
            face = "an AsyncClient" if is_async else "a Client"
            raise errors.InvalidArgument(
                f"connection= got a psycopg {type(connection).__name__}, which {face} "
                f"takes: this client takes a psycopg.{want.__name__}"
            )
        raise errors.InvalidArgument(
            f"connection= takes a psycopg.{want.__name__} to the client's Postgres database "
            f"(or a SQLAlchemy Connection or Session over psycopg), not "
            f"{type(connection).__module__}.{type(connection).__qualname__}"
        )
    if connection.closed:
        raise errors.InvalidArgument("connection= got a closed connection")
    status = connection.info.transaction_status
    if status == pq.TransactionStatus.INERROR:
        raise errors.InvalidArgument(
            "the connection given is in a failed transaction (a statement in it raised): "
            "roll it back, or back to a savepoint, before writing to it again"
        )
    if status not in (pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS):
        raise errors.InvalidArgument(
            "the connection given is busy with another statement, or broken"
        )
    return connection


@contextlib.contextmanager
def schema_missing(where: str) -> Iterator[None]:
    """Say what a missing table means on a caller's connection: another database."""
    try:
        yield
    except psycopg.errors.UndefinedTable as exc:
        raise errors.SchemaError(
            f"the connection given has no simpleworkflow tables where the client expects "
            f"them ({where}): connect it to the client's database, or migrate that one "
            f"({exc.diag.message_primary})"
        ) from exc


def returned_rows(cursor: Any) -> bool:
    """Whether the statement just run on ``cursor`` returned rows (possibly none): read
    from its result's status, which costs nothing, where ``cursor.description`` builds a
    ``Column`` per column."""
    result = cursor.pgresult
    return result is not None and result.status == _ROWS


def _pool_cursor(conn: Any) -> Any:
    return conn.cursor(row_factory=dict_row)


def cursor_for(
    conn: Any, statement: base.Statement, cursor: Callable[[Any], Any] = _pool_cursor
) -> Any:
    """The cursor ``statement`` is read on: its own (a :class:`~.rows.Read`), else
    ``cursor(conn)``."""
    return statement.cursor(conn) if isinstance(statement, Read) else cursor(conn)


def _caller_cursor(conn: Any) -> Any:
    cursor = conn.cursor(row_factory=dict_row)
    cursor.adapters.register_loader("jsonb", JsonbLoader)  # the cursor's copy only
    cursor.adapters.register_loader("json", JsonLoader)
    loading.guard(cursor)
    return cursor


def drive(
    conn: Any,
    op: base.Op[T],
    first: base.Statement | None = None,
    cursor: Callable[[Any], Any] = _pool_cursor,
) -> T:
    """Feed ``op``'s statements to ``conn`` (in whatever transaction it is in), each on
    a ``cursor(conn)``."""

    def run(statement: base.Statement) -> base.Rows:
        sent = cursor_for(conn, statement, cursor)
        sent.execute(statement.sql, statement.params)
        return sent.fetchall() if returned_rows(sent) else []

    def stream(batch: base.Stream) -> None:
        sent: collections.deque[Any] = collections.deque()
        with conn.pipeline():
            for statement in batch.statements:  # the op builds it meanwhile
                ahead = cursor_for(conn, statement, cursor)
                ahead.execute(statement.sql, statement.params)  # queued behind the last
                sent.append(ahead)
                if len(sent) > AHEAD:
                    batch.take(_rows(sent.popleft()))  # while the server runs the next
        for last in sent:  # in by the pipeline's Sync: no round trip of their own
            batch.take(_rows(last))

    return base.drive(op, run, first, stream)


def _rows(cursor: Any) -> base.Rows:
    """The rows of a statement sent in pipeline mode. Its description is known only once
    its results are in, so fetch first."""
    try:
        return cursor.fetchall()  # type: ignore[no-any-return]
    except psycopg.ProgrammingError:  # a statement that returns no rows
        return []


async def drive_async(
    conn: Any,
    op: base.Op[T],
    statement: base.Statement,
    cursor: Callable[[Any], Any] = _pool_cursor,
) -> T:
    """The async twin of ``base.drive``: the driver's calls must be awaited."""
    try:
        while True:
            if statement is base.ATOMIC:
                statement = op.send([])
                continue
            if isinstance(statement, base.Stream):
                await _stream_async(conn, statement, cursor)
                statement = op.send([])
                continue
            sent = cursor_for(conn, statement, cursor)
            await sent.execute(statement.sql, statement.params)
            rows = await sent.fetchall() if returned_rows(sent) else []
            statement = op.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def _stream_async(conn: Any, batch: base.Stream, cursor: Callable[[Any], Any]) -> None:
    """The async twin of the pipelined ``stream`` in :func:`drive`."""
    sent: collections.deque[Any] = collections.deque()
    async with conn.pipeline():
        for statement in batch.statements:
            ahead = cursor_for(conn, statement, cursor)
            await ahead.execute(statement.sql, statement.params)
            sent.append(ahead)
            if len(sent) > AHEAD:
                batch.take(await _rows_async(sent.popleft()))
    for last in sent:
        batch.take(await _rows_async(last))


async def _rows_async(cursor: Any) -> base.Rows:
    try:
        return await cursor.fetchall()  # type: ignore[no-any-return]
    except psycopg.ProgrammingError:
        return []
