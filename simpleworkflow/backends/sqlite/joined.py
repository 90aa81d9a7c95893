"""Ops on the caller's own ``sqlite3`` connection to the store's file, inside the caller's
transaction (``client.start(..., connection=conn)``, see docs/transactions.md).

SQLite has one writer at a time per file, so a caller's transaction and ours can only be
one and the same if they are on one connection: the op runs on the caller's, under a
savepoint, and nothing is committed here. A connection that would autocommit each
statement (``isolation_level=None``, or ``autocommit=True``) outside any transaction
gets a transaction of the op's own instead. One that opens its transactions implicitly
(the ``sqlite3`` default) gets its transaction opened here, as its own first write would
have, and commits it as it would have.
"""

from __future__ import annotations

import os
import sqlite3
from typing import TypeVar

from simpleworkflow import errors
from simpleworkflow.backends import base
from simpleworkflow.backends.sqlite import matching

T = TypeVar("T")


def joinable(connection: object, path: str) -> sqlite3.Connection:
    """``connection`` if it is open on the file at ``path``, else an
    :class:`~simpleworkflow.errors.InvalidArgument` that says why not."""
    if not isinstance(connection, sqlite3.Connection):
        raise errors.InvalidArgument(
            "this client's store is a SQLite file: connection= takes a sqlite3.Connection "
            f"to {path!r}, not {type(connection).__module__}.{type(connection).__qualname__}"
        )
    if path == ":memory:":
        raise errors.InvalidArgument(
            "a private in-memory SQLite store has no other connection: connection= needs "
            "a client on a file"
        )
    try:
        rows = connection.execute("pragma database_list").fetchall()
    except sqlite3.ProgrammingError as exc:  # closed, or made on another thread
        raise errors.InvalidArgument(f"cannot use the connection given: {exc}") from exc
    main = next((str(row[2]) for row in rows if row[1] == "main"), "")
    if not main or not os.path.exists(main) or not os.path.samefile(main, path):
        raise errors.InvalidArgument(
            f"the connection given is open on {main or 'an in-memory database'!r}, not on "
            f"this client's file {os.path.abspath(path)!r}: a transaction can only be "
            "shared on one file"
        )
    return connection


def execute(conn: sqlite3.Connection, op: base.Op[T]) -> T:
    """Drive ``op`` inside ``conn``'s transaction (see the module's docstring)."""
    # Signal matching (send_signal wakes a run whose wait matches) calls this function.
    conn.create_function("json_contains", 2, matching.contains_json, deterministic=True)
    if not conn.in_transaction and _autocommits(conn):
        conn.execute("begin immediate")
        try:
            result = base.drive(op, lambda statement: _run(conn, statement))
        except BaseException:
            conn.execute("rollback")
            raise
        conn.execute("commit")
        return result
    if not conn.in_transaction:
        conn.execute("begin immediate")  # the caller's: sqlite3 commits it at conn.commit()
    conn.execute("savepoint simpleworkflow")
    try:
        result = base.drive(op, lambda statement: _run(conn, statement))
    except BaseException:
        conn.execute("rollback to simpleworkflow")
        conn.execute("release simpleworkflow")
        raise
    conn.execute("release simpleworkflow")
    return result


def _autocommits(conn: sqlite3.Connection) -> bool:
    """Whether ``conn`` commits each statement by itself (``autocommit`` is Python 3.12's;
    before it, and in its legacy mode, ``isolation_level=None`` says so)."""
    mode = getattr(conn, "autocommit", None)
    if isinstance(mode, bool):
        return mode
    return conn.isolation_level is None


def _run(conn: sqlite3.Connection, statement: base.Statement) -> base.Rows:
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row  # the caller's connection may have another
    cursor.execute(statement.sql, statement.params)
    return [dict(row) for row in cursor.fetchall()] if cursor.description else []
