"""Ops that commit without waiting for the disk: ``synchronous_commit = off`` for their
own transactions alone, asked by ``Backend.execute(..., wait_for_disk=False)`` (the
worker's claims and heartbeats; why a crash that loses one is safe is in
docs/performance.md, "Claims and heartbeats without waiting for the disk").

A statement on a connection in autocommit mode is a transaction of its own. Sent in
pipeline mode right after ``set_config('synchronous_commit', 'off', true)``, with one
Sync after both, the two run in one implicit transaction: the setting holds for the
statement's commit and ends with it, and the pair costs one round trip, as the
statement alone does. An op that begins with ``ATOMIC`` (or a stream) runs in an
explicit transaction whose first statement turns the wait off: a round trip more.
"""

from __future__ import annotations

from typing import Any, TypeVar

from simpleworkflow.backends import base
from simpleworkflow.backends.postgres import driving

T = TypeVar("T")

#: Transaction-local (``true``): the next commit alone returns before its WAL is flushed.
NO_WAIT = b"select set_config('synchronous_commit', 'off', true)"


def execute(conn: Any, op: base.Op[T]) -> T:
    """Drive ``op`` on a connection of the sync pool (autocommit); each of its
    transactions commits without waiting for the disk."""
    try:
        first = next(op)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    if first is base.ATOMIC or isinstance(first, base.Stream):
        with conn.transaction():
            conn.execute(NO_WAIT)
            return driving.drive(conn, op, first)
    return base.drive(op, lambda statement: _run(conn, statement), first)


async def execute_async(conn: Any, op: base.Op[T]) -> T:
    """:func:`execute` on a connection of the async pool."""
    try:
        statement = next(op)
        if statement is base.ATOMIC or isinstance(statement, base.Stream):
            async with conn.transaction():
                await conn.execute(NO_WAIT)
                return await driving.drive_async(conn, op, statement)
        while True:
            if statement is base.ATOMIC:
                rows: base.Rows = []
            elif isinstance(statement, base.Stream):
                for each in statement.statements:
                    statement.take(await _run_async(conn, each))
                rows = []
            else:
                rows = await _run_async(conn, statement)
            statement = op.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def _run(conn: Any, statement: base.Statement) -> base.Rows:
    with conn.pipeline():
        conn.execute(NO_WAIT)
        cursor = driving.cursor_for(conn, statement)  # the one the op would get otherwise
        cursor.execute(statement.sql, statement.params)
    return cursor.fetchall() if driving.returned_rows(cursor) else []


async def _run_async(conn: Any, statement: base.Statement) -> base.Rows:
    async with conn.pipeline():
        await conn.execute(NO_WAIT)
        cursor = driving.cursor_for(conn, statement)
        await cursor.execute(statement.sql, statement.params)
    return await cursor.fetchall() if driving.returned_rows(cursor) else []
