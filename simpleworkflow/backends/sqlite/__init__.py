"""The embedded SQLite store: the stdlib ``sqlite3`` in WAL mode, one file, no server.

Several processes may share one file: writes take the database lock up front
(``BEGIN IMMEDIATE``) and wait up to ``busy_timeout`` for it, so concurrent writers queue
instead of failing. Within a process one connection is shared under a lock; async callers
reach it through a worker thread so the event loop never blocks on disk.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from simpleworkflow import errors, matching, wakeups
from simpleworkflow.backends import base, queries

T = TypeVar("T")
_PACKAGE = __name__


class SQLiteBackend(base.Backend):
    """Runs live in the SQLite file at ``path`` (``":memory:"`` for a private database)."""

    name = "sqlite"

    def __init__(self, path: str, *, busy_timeout: float = 30.0) -> None:
        self.path = path
        self.q = queries.load(_PACKAGE, "queries.sql", None)
        self._migrations = queries.migration_files(_PACKAGE)
        self.latest_version = self._migrations[-1][0]
        self._busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._key = os.path.realpath(path) if path != ":memory:" else f"memory:{id(self)}"

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            try:
                conn = sqlite3.connect(
                    self.path,
                    timeout=self._busy_timeout,
                    isolation_level=None,  # we issue BEGIN / COMMIT ourselves
                    check_same_thread=False,
                )
            except sqlite3.Error as exc:
                raise errors.StoreUnavailable(
                    f"cannot open SQLite database {self.path!r}: {exc}; check the path exists "
                    "and is writable"
                ) from exc
            conn.row_factory = sqlite3.Row
            _enable_wal(conn, self.path, self._busy_timeout)
            conn.execute("pragma synchronous = normal")
            conn.execute("pragma foreign_keys = on")
            conn.execute("pragma case_sensitive_like = on")
            # jsonb @> for signal matching, with the same meaning as on Postgres.
            conn.create_function("json_contains", 2, matching.contains_json, deterministic=True)
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    # -- execution -------------------------------------------------------------------

    def execute(self, op: base.Op[T], *, readonly: bool = False) -> T:
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("begin" if readonly else "begin immediate")
                try:
                    result = base.drive(op, lambda st: _run(conn, st))
                except BaseException:
                    conn.execute("rollback")
                    raise
                conn.execute("commit")
                return result
            except sqlite3.OperationalError as exc:
                raise errors.StoreUnavailable(
                    f"SQLite database {self.path!r} failed: {exc}. If it is locked, another "
                    "process held it longer than the busy timeout; retry"
                ) from exc

    async def execute_async(self, op: base.Op[T], *, readonly: bool = False) -> T:
        return await asyncio.to_thread(self.execute, op, readonly=readonly)

    async def listen(self, on_message: Callable[[str, str], None]) -> None:
        loop = asyncio.get_running_loop()

        def deliver(kind: str, value: str) -> None:  # called from the producer's thread
            loop.call_soon_threadsafe(on_message, kind, value)

        wakeups.subscribe(self._key, deliver)
        try:
            await asyncio.Event().wait()
        finally:
            wakeups.unsubscribe(self._key, deliver)

    def notify_local(self, kind: str, value: str) -> None:
        wakeups.publish(self._key, kind, value)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- schema ----------------------------------------------------------------------

    def migrate(self) -> list[int]:
        applied_now: list[int] = []
        with self._lock:
            conn = self._connection()
            # BEGIN IMMEDIATE takes the write lock: a concurrent migrate waits here, then
            # finds every version recorded and does nothing.
            conn.execute("begin immediate")
            try:
                conn.execute(self.q["schema_version_table"])
                done = {row[0] for row in conn.execute(self.q["applied_versions"])}
                for version, filename in self._migrations:
                    if version in done:
                        continue
                    for statement in _split(queries.read(_PACKAGE, filename, None)):
                        conn.execute(statement)
                    conn.execute(self.q["record_version"], {"version": version, "name": filename})
                    applied_now.append(version)
            except BaseException:
                conn.execute("rollback")
                raise
            conn.execute("commit")
        return applied_now

    def migration_sql(self) -> str:
        parts = ["begin immediate;", self.q["schema_version_table"] + ";"]
        for version, filename in self._migrations:
            parts.append(f"-- {filename}")
            parts.append(queries.read(_PACKAGE, filename, None).strip())
            parts.append(
                "insert or ignore into workflow_schema_version (version, name) "
                f"values ({version}, '{filename}');"
            )
        parts.append("commit;")
        return "\n\n".join(parts) + "\n"

    def reference_schema_sql(self) -> str:
        return queries.read(_PACKAGE, "schema.sql", None)

    def schema_version(self) -> base.Op[int | None]:
        rows = yield base.Statement(self.q["schema_exists"], {"table": "workflow_schema_version"})
        if not rows[0]["present"]:
            return None
        rows = yield base.Statement(self.q["applied_versions"])
        return max((row["version"] for row in rows), default=None)

    # -- conversions -----------------------------------------------------------------

    def decode_time(self, value: Any) -> datetime:
        return datetime.fromisoformat(value).replace(tzinfo=UTC)

    def decode_json(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    def encode_params(self, params: dict[str, Any]) -> dict[str, Any]:
        return {key: _encode(value) for key, value in params.items()}


def _enable_wal(conn: sqlite3.Connection, path: str, timeout: float) -> None:
    """Switch the file to WAL, waiting out other processes that hold it meanwhile.

    The switch needs the file to itself and SQLite reports "locked" at once instead of
    calling the busy handler, so two processes opening a new file together would fail.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("pragma journal_mode = wal")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                conn.close()
                raise errors.StoreUnavailable(
                    f"cannot open SQLite database {path!r}: {exc}; retry"
                ) from exc
            time.sleep(0.01)


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        # isoformat, not strftime: strftime writes year 1 as "1", which sorts wrongly
        # and cannot be read back.
        return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "milliseconds")
    if isinstance(value, list | tuple):
        return json.dumps(list(value))
    return value


def _run(conn: sqlite3.Connection, statement: base.Statement) -> base.Rows:
    cursor = conn.execute(statement.sql, statement.params)
    return [dict(row) for row in cursor.fetchall()] if cursor.description else []


def _split(script: str) -> list[str]:
    """Split a script into complete statements (``sqlite3.complete_statement`` decides)."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in pending.splitlines()
    ):
        statements.append(pending.strip())
    return statements
