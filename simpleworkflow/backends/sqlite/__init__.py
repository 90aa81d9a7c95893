"""The embedded SQLite store: the stdlib ``sqlite3`` in WAL mode, one file, no server.

Several processes may share one file: writes take the database lock up front
(``BEGIN IMMEDIATE``) and wait up to ``busy_timeout`` for it, so concurrent writers queue
instead of failing. Within a process one connection is shared under a lock; async callers
reach it through a worker thread so the event loop never blocks on disk. The write-ahead
log is copied back into the database file by a thread of its own (:class:`_Checkpointer`),
not inside the commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

from simpleworkflow import clockwork, errors
from simpleworkflow.backends import base, queries
from simpleworkflow.backends.dialect import Dialect
from simpleworkflow.backends.sqlite import joined, matching, wakeups

T = TypeVar("T")
_PACKAGE = __name__
_log = logging.getLogger(__name__)

# After a checkpoint of a WAL this small (pages; SQLite's own threshold), the next waits
# CHECKPOINT_INTERVAL seconds, so that a trickle of writes is not synced one by one. A
# larger WAL is checkpointed again as soon as there are new commits: under sustained
# writes only a checkpointer that catches up lets the writer start the WAL over.
SMALL_WAL_PAGES = 1_000
CHECKPOINT_INTERVAL = 0.1
# Pages in the WAL at which a commit checkpoints by itself after all, should the
# background checkpoints fall behind (SQLite's default is 1,000; pages are 4 KiB).
WAL_BACKSTOP_PAGES = 10_000
#: ``synchronous`` as the URL chose it (see ``config.sqlite_synchronous``): FULL syncs the
#: log at every commit, so nothing acknowledged is lost on a power cut; NORMAL only at
#: checkpoints.
_SYNCHRONOUS = {"full": "pragma synchronous = full", "normal": "pragma synchronous = normal"}

DIALECT = Dialect(
    has_notifications=False,
    skip_locked=False,
    chained_writes=False,
    migrates_on_first_use=True,
    checks_whole_rows=True,
    own_statements={
        "consume_signal": "takes a signal; record_step journals it in the same transaction",
        "fail_unparsable": "fails runs whose JSON breaks the checks, which no claim can lease",
        "fail_unparsable_events": "the failed events of those runs",
    },
)


class SQLiteBackend(base.Backend):
    """Runs live in the SQLite file at ``path`` (``":memory:"`` for a private database)."""

    name = "sqlite"
    dialect = DIALECT

    def __init__(self, path: str, *, busy_timeout: float = 30.0, synchronous: str = "full") -> None:
        self.path = path
        # A pragma takes no parameters: the statement is chosen, never built.
        self._synchronous = _SYNCHRONOUS[synchronous]
        self.location = (
            "a private in-memory database" if path == ":memory:" else os.path.abspath(path)
        )
        self.q = queries.load(_PACKAGE, "queries.sql", None)
        self._migrations = queries.migration_files(_PACKAGE)
        self.latest_version = self._migrations[-1][0]
        self._busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._key = os.path.realpath(path) if path != ":memory:" else f"memory:{id(self)}"
        # A test harness's clock and step doubles (simpleworkflow.testing); None in use.
        self.rig = clockwork.find(self._key)
        if self.rig is not None and self.rig.clock is not None:
            self.q = {name: clockwork.sqlite_text(sql) for name, sql in self.q.items()}
        self._checkpointer: _Checkpointer | None = None
        self._wal = False

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
            self._wal = _enable_wal(conn, self.path, self._busy_timeout)
            if self._wal:
                conn.execute(f"pragma wal_autocheckpoint = {WAL_BACKSTOP_PAGES}")
            # A checkpointer inherited through fork has no thread in this process.
            self._checkpointer = None
            conn.execute(self._synchronous)
            # Statement journals in memory: a batch's event inserts change a few hundred
            # pages, and past 64 KiB SQLite spilled their undo copies to a file in
            # /var/tmp, in every claim and completion.
            conn.execute("pragma temp_store = memory")
            conn.execute("pragma foreign_keys = on")
            conn.execute("pragma case_sensitive_like = on")
            # jsonb @> for signal matching, with the same meaning as on Postgres.
            conn.create_function("json_contains", 2, matching.contains_json, deterministic=True)
            self._rig_connection(conn)
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def _rig_connection(self, conn: sqlite3.Connection) -> None:
        """Give ``conn`` the test clock's function, when a test rigged this store."""
        if self.rig is not None and self.rig.clock is not None:
            name = clockwork.SQLITE_NOW.removesuffix("()")
            conn.create_function(name, 0, self.rig.clock.sql_now)

    # -- execution -------------------------------------------------------------------

    def execute(self, op: base.Op[T], *, readonly: bool = False, wait_for_disk: bool = True) -> T:
        # Every commit waits as the URL's ``synchronous`` option says, wait_for_disk or not.
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
                if not readonly:
                    self._checkpoint_soon()
                return result
            except sqlite3.OperationalError as exc:
                raise errors.StoreUnavailable(
                    f"SQLite database {self.path!r} failed: {exc}. If it is locked, another "
                    "process held it longer than the busy timeout; retry"
                ) from exc

    def _checkpoint_soon(self) -> None:
        """Have the WAL copied back into the database file, off this thread (lock held)."""
        if not self._wal:
            return
        if self._checkpointer is None:
            self._checkpointer = _Checkpointer(self.path, self._busy_timeout)
        self._checkpointer.poke()

    async def execute_async(
        self, op: base.Op[T], *, readonly: bool = False, wait_for_disk: bool = True
    ) -> T:
        return await asyncio.to_thread(self.execute, op, readonly=readonly)

    # -- transactions of the caller's, and the store's own for transactional steps -----

    def joinable(self, connection: object, *, asynchronous: bool) -> Any:
        # Either face takes a sqlite3 connection: see execute_on_async.
        return joined.joinable(connection, self.path)

    def execute_on(self, connection: Any, op: base.Op[T]) -> T:
        self._rig_connection(connection)
        try:
            return joined.execute(connection, op)
        except sqlite3.OperationalError as exc:
            raise errors.StoreUnavailable(
                f"SQLite database {self.path!r} failed: {exc}. If it is locked, another "
                "connection held it longer than the busy timeout of the one given; retry"
            ) from exc

    async def execute_on_async(self, connection: Any, op: base.Op[T]) -> T:
        # sqlite3 has no asynchronous connection, and the caller's may be bound to this
        # thread: the op runs here, as the caller's own statements on it do.
        return self.execute_on(connection, op)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The store's connection in a write transaction: the process's other calls to
        the store, and other processes' writes, wait until the block ends."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("begin immediate")
            except sqlite3.OperationalError as exc:
                raise errors.StoreUnavailable(
                    f"SQLite database {self.path!r} failed: {exc}; retry"
                ) from exc
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("rollback")
                raise
            conn.execute("commit")
            self._checkpoint_soon()

    def transaction_async(self) -> contextlib.AbstractAsyncContextManager[Any]:
        raise errors.InvalidArgument(
            "SQLite has no asynchronous connection: give ctx.transaction a plain def "
            "function (in an async workflow it runs in a thread)"
        )

    async def listen(
        self, on_message: Callable[[str, str], None], after: base.AfterWake | None = None
    ) -> None:
        # Wake-ups come from this process's own commits, on no connection: the claim
        # loop claims (``after`` is not called).
        loop = asyncio.get_running_loop()

        def deliver(kind: str, value: str) -> None:  # called from the producer's thread
            loop.call_soon_threadsafe(on_message, kind, value)

        wakeups.subscribe(self._key, deliver)
        try:
            await asyncio.Event().wait()
        finally:
            wakeups.unsubscribe(self._key, deliver)

    async def watch_changes(self, on_change: Callable[[], None], interval: float) -> None:
        """Call ``on_change()`` when another connection has committed to the file.

        ``PRAGMA data_version`` on a connection of its own changes whenever any other
        connection, in this process or another, commits a change to the database. In WAL
        mode reading it when nothing changed looks at the shared-memory index only (two
        lock calls, no read of the file; after a change, one page from the OS's cache),
        so it is cheap enough to check every few milliseconds on the event loop. This
        process's own writes come from another connection and count as changes too: the
        worker then looks once for work and finds none, which is cheap.
        """
        if self.path == ":memory:":  # private to its connection: no one else writes it
            await asyncio.Event().wait()
            return
        conn = await asyncio.to_thread(self._watch_connection)
        try:
            last = _data_version(conn)
            while True:
                await asyncio.sleep(interval)
                version = _data_version(conn)
                if version != last:
                    last = version
                    on_change()
        finally:
            conn.close()

    def _watch_connection(self) -> sqlite3.Connection:
        try:
            # No busy timeout: the check must never block the event loop. A check that
            # finds the file busy counts as a change (see _data_version).
            conn = sqlite3.connect(
                self.path, timeout=0, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise errors.StoreUnavailable(
                f"cannot open SQLite database {self.path!r}: {exc}"
            ) from exc
        _data_version(conn)  # opens the file now, off the event loop
        return conn

    def notify_local(self, kind: str, value: str) -> None:
        wakeups.publish(self._key, kind, value)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None

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


class _Checkpointer:
    """Copies the write-ahead log back into the database file, on a thread of its own.

    By default SQLite does this inside the commit that takes the WAL past 1,000 pages, and
    a checkpoint syncs the database file. The pages a batch of runs dirties are spread over
    the whole file (the event index is keyed by random run ids), so on a large store such a
    commit took ~30 ms instead of ~1 ms, every few transactions, while the worker waited.
    Here the writer only pokes this thread after its commits; a passive checkpoint on a
    connection of its own then runs alongside the writer (SQLite allows one writer and a
    checkpoint at once). The writer's own automatic checkpoint stays as a backstop, at
    ``WAL_BACKSTOP_PAGES``.
    """

    def __init__(self, path: str, busy_timeout: float) -> None:
        self._path = path
        self._busy_timeout = busy_timeout
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="simpleworkflow-sqlite-checkpoint", daemon=True
        )
        self._thread.start()

    def poke(self) -> None:
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join()

    def _loop(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                if self._stop.is_set():
                    return
                self._wake.clear()
                try:
                    if conn is None:
                        conn = sqlite3.connect(
                            self._path, timeout=self._busy_timeout, isolation_level=None
                        )
                    row = conn.execute("pragma wal_checkpoint(passive)").fetchone()
                    pages = int(row[1])
                except sqlite3.Error as exc:  # the next commit's poke tries again
                    _log.debug("background checkpoint of %s failed: %s", self._path, exc)
                    pages = 0
                if pages < SMALL_WAL_PAGES and self._stop.wait(CHECKPOINT_INTERVAL):
                    return
        finally:
            if conn is not None:
                conn.close()


def _open_hint(path: str) -> str:
    """What to do about a file that would not open."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return (
            "the file or its directory is read-only (SQLite writes the file and its -wal "
            "and -shm files beside it)"
        )
    return "retry"


def _enable_wal(conn: sqlite3.Connection, path: str, timeout: float) -> bool:
    """Switch the file to WAL, waiting out other processes that hold it meanwhile; say
    whether it is in WAL now (an in-memory database cannot be).

    The switch needs the file to itself and SQLite reports "locked" at once instead of
    calling the busy handler, so two processes opening a new file together would fail.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            row = conn.execute("pragma journal_mode = wal").fetchone()
            return row is not None and str(row[0]).lower() == "wal"
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                conn.close()
                raise errors.StoreUnavailable(
                    f"cannot open SQLite database {path!r}: {exc}; {_open_hint(path)}"
                ) from exc
            time.sleep(0.01)


def _data_version(conn: sqlite3.Connection) -> int:
    """The connection's ``data_version``; -1 (a change) when the file is busy."""
    try:
        row = conn.execute("pragma data_version").fetchone()
    except sqlite3.OperationalError:
        return -1
    return int(row[0])


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
