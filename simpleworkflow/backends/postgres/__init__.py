"""The Postgres store: psycopg 3 with its connection pools, sync and async."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

from simpleworkflow import clockwork, config, errors
from simpleworkflow.backends import base, queries
from simpleworkflow.backends.dialect import Dialect
from simpleworkflow.backends.payload_index import Action
from simpleworkflow.backends.postgres import (
    driving,
    indexing,
    listening,
    loading,
    run_wakeups,
    settings,
    unflushed,
)
from simpleworkflow.backends.postgres.deadline import Deadline
from simpleworkflow.backends.postgres.liveness import PROBE_AFTER, Liveness
from simpleworkflow.backends.postgres.rows import ClaimReading, run_from_row
from simpleworkflow.models import PayloadIndex, Run

try:
    import psycopg
    import psycopg_pool
except ImportError as exc:  # pragma: no cover - depends on the install
    raise errors.ConfigurationError(
        "the Postgres backend needs psycopg: pip install 'simpleworkflow[postgres]'"
    ) from exc

T = TypeVar("T")
_log = logging.getLogger("simpleworkflow.postgres")
_PACKAGE = __name__
#: Seconds a pool may take to open once a plain connection succeeded.
CONNECT_TIMEOUT = 10
#: After a failed connection, callers within this many seconds fail at once with its
#: error: in an outage each waits for no other's connect timeout.
RECONNECT_GAP = 0.25

DIALECT = Dialect(
    has_notifications=True,
    skip_locked=True,
    chained_writes=True,
    migrates_on_first_use=False,
    own_statements={
        "consume_signal_journaled": "takes a signal and journals its wait in one statement",
        "migration_lock": "an advisory lock serialises migrations (SQLite's begin immediate)",
        "record_steps": "journals many runs' steps in one statement, skipping locked rows",
        "claim_plain": "the claim without the limits' steps, for types without limits",
        "claim_settings": "sent with the claim: it is planned once per connection",
        "claim_settings_session": "claim_settings held by the listening connection",
        "succeed_runs_plain": "ends leases no claim counted, with no counter to lock",
        "fail_runs_plain": "ends leases no claim counted, with no counter to lock",
        "release_runs_plain": "ends leases no claim counted, with no counter to lock",
        "payload_index_state": "the optional payload index is a Postgres GIN index",
        "payload_index_try_lock": "serialises builds of the payload index, a Postgres index",
        "payload_index_unlock": "releases payload_index_try_lock",
        "create_payload_index": "the payload index is a Postgres GIN index; SQLite has none",
        "drop_payload_index": "the payload index is a Postgres GIN index; SQLite has none",
    },
)


class PostgresBackend(ClaimReading, base.Backend):
    """Runs live in schema ``schema`` (default ``workflow``) of the database at ``url``."""

    name = "postgres"
    dialect = DIALECT

    def __init__(
        self,
        url: str,
        *,
        schema: str = "workflow",
        max_connections: int = 10,
        application_name: str | None = None,
        call_timeout: float = settings.CALL_TIMEOUT,
        probe_after: float = PROBE_AFTER,
    ) -> None:
        self.url = url
        self.application_name = application_name
        self.call_timeout = call_timeout
        self.schema = schema
        self.location = f"{config.mask_url(url)} schema {schema}"
        self._quoted = queries.quote_schema(schema)
        self.q = queries.load(_PACKAGE, "queries.sql", self._quoted)
        # A test harness's clock and step doubles (simpleworkflow.testing); None in use.
        self.rig = clockwork.find(clockwork.postgres_key(url, schema))
        self._migrations = queries.migration_files(_PACKAGE)
        self.latest_version = self._migrations[-1][0]
        self._max_connections = max_connections
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._apool: psycopg_pool.AsyncConnectionPool[Any] | None = None
        self._lock = threading.Lock()
        self._alock: asyncio.Lock | None = None
        self._failed: tuple[float, errors.SimpleWorkflowError] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._abandoned: set[asyncio.Future[Any]] = set()  # calls past their deadline
        # The one connection every reader waiting on a run's values or streams listens on.
        self._wakeups = run_wakeups.Hub(self._conninfo)
        # Finds calls waiting on a connection whose server session is gone (half-open).
        self._liveness = Liveness(
            self._probe_connection, self._drop_current_async_pool, probe_after
        )

    # -- execution -------------------------------------------------------------------

    def _pool_options(self, name: str) -> dict[str, Any]:
        """What both pools are made of; opened lazily, on first use."""
        return {
            "conninfo": self._conninfo(),
            "min_size": 1,
            "max_size": self._max_connections,
            "kwargs": {"autocommit": True},
            "open": False,
            "name": name,
        }

    def _sync_pool_options(self) -> dict[str, Any]:
        return {**self._pool_options("simpleworkflow"), "configure": loading.guard}

    def _async_pool_options(self) -> dict[str, Any]:
        return {**self._pool_options("simpleworkflow-async"), "configure": _guard_async}

    # A pool that cannot connect logs each failure and retries until its timeout, then
    # says only that it timed out. So a pool opens after one plain connection succeeded:
    # a wrong URL, a missing database or role, a server that is down fail at once, with
    # the server's own reason (see _connect_error).
    #
    # A pool whose connection broke is dropped, and the next call opens a new one the same
    # way. A restart breaks every connection of a pool at once, and psycopg_pool replaces
    # them with a backoff that doubles up to minutes: work would resume long after the
    # server did. A fresh pool connects the moment the server answers.

    def _sync_pool(self) -> psycopg_pool.ConnectionPool[Any]:
        with self._lock:
            if self._pool is None:
                with self._connecting():
                    psycopg.connect(self._conninfo()).close()
                pool = psycopg_pool.ConnectionPool(**self._sync_pool_options())
                with _translated("connecting to Postgres"):
                    pool.open(wait=True, timeout=CONNECT_TIMEOUT)
                self._pool = pool
            return self._pool

    async def _async_pool(self) -> psycopg_pool.AsyncConnectionPool[Any]:
        if self._alock is None:
            self._alock = asyncio.Lock()
        async with self._alock:
            if self._apool is None:
                with self._connecting():
                    conn = await psycopg.AsyncConnection.connect(self._conninfo())
                await conn.close()
                pool = psycopg_pool.AsyncConnectionPool(**self._async_pool_options())
                with _translated("connecting to Postgres"):
                    await pool.open(wait=True, timeout=CONNECT_TIMEOUT)
                self._apool = pool
            return self._apool

    def _conninfo(self, *, server: bool = True) -> str:
        """The URL with the library's timeouts and name (see ``settings``)."""
        try:
            return settings.conninfo(self.url, self.application_name, server=server)
        except psycopg.Error as exc:
            raise _connect_error(self.url, exc) from exc

    @contextlib.contextmanager
    def _connecting(self) -> Iterator[None]:
        """Turn a failed first connection into one line naming the cause and the fix;
        repeat it to whoever tries again within ``RECONNECT_GAP``."""
        failed = self._failed
        if failed is not None and time.monotonic() - failed[0] < RECONNECT_GAP:
            raise failed[1]
        try:
            yield
        except psycopg.Error as exc:
            error = _connect_error(self.url, exc)
            self._failed = (time.monotonic(), error)
            raise error from exc
        self._failed = None

    def _drop_pool(self, pool: psycopg_pool.ConnectionPool[Any]) -> None:
        """Forget ``pool`` (one of its connections broke); close it out of the caller's way."""
        with self._lock:
            if self._pool is not pool:
                return
            self._pool = None
        threading.Thread(target=pool.close, kwargs={"timeout": 1.0}, daemon=True).start()

    def _drop_current_async_pool(self) -> None:
        if self._apool is not None:
            self._drop_async_pool(self._apool)

    async def _probe_connection(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self._conninfo(), autocommit=True)

    def _drop_async_pool(self, pool: psycopg_pool.AsyncConnectionPool[Any]) -> None:
        if self._apool is not pool:
            return
        self._apool = None
        task = asyncio.get_running_loop().create_task(pool.close(timeout=1.0))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    # Connections are in autocommit mode: a single-statement op (most of them, thanks to
    # data-modifying CTEs) costs one round trip; ops that start with ATOMIC run inside
    # an explicit transaction.

    def execute(self, op: base.Op[T], *, readonly: bool = False, wait_for_disk: bool = True) -> T:
        """Run ``op``; give up after ``call_timeout`` seconds whatever the network does,
        at once if the server has lost its session (see :class:`~.deadline.Deadline`)."""
        with _translated("talking to Postgres"):
            pool = self._sync_pool()
            with (
                pool.connection(timeout=self.call_timeout) as conn,
                Deadline(conn, self.call_timeout, self._liveness),  # it says why it cut
                _on_broken(conn, lambda: self._drop_pool(pool)),  # and the pool goes
            ):
                if wait_for_disk:
                    return driving.execute(conn, op)
                return unflushed.execute(conn, op)

    async def execute_async(
        self, op: base.Op[T], *, readonly: bool = False, wait_for_disk: bool = True
    ) -> T:
        """Run ``op``; give up after ``call_timeout`` seconds whatever the network does.

        A network that drops packets without a word leaves a call waiting on its socket,
        and cancelling it would wait too (psycopg cancels the query, and rolls back, on
        that same socket). So the call runs as a task of its own: past its deadline the
        caller gets ``StoreUnavailable`` and the pool is replaced, while the task is
        cancelled and left to end when its socket does."""
        began = time.monotonic()
        call = asyncio.get_running_loop().create_task(self._execute_async(op, wait_for_disk))
        try:
            ended = await driving.ended_within(call, self.call_timeout)
        except asyncio.CancelledError:
            self._abandon(call)
            raise
        if not ended:
            self._abandon(call)
            self._drop_current_async_pool()
            late = errors.StoreUnavailable(
                f"Postgres did not answer within {self.call_timeout:g}s; the operation may "
                "or may not have been applied; check the network and the server, then retry"
            )
            late.began = began
            raise late
        try:
            return call.result()
        except errors.StoreUnavailable as exc:
            exc.began = began
            raise

    def _abandon(self, call: asyncio.Future[Any]) -> None:
        """Cancel ``call`` without waiting for it; ``aclose`` makes sure it ends. Its
        outcome is read when it comes, so that asyncio logs no error nobody retrieved."""
        call.add_done_callback(_retrieved)
        if not call.done():
            call.cancel()
            self._abandoned.add(call)
            call.add_done_callback(self._abandoned.discard)

    async def _execute_async(self, op: base.Op[T], wait_for_disk: bool = True) -> T:
        pool = await self._async_pool()
        run = driving.execute_async if wait_for_disk else unflushed.execute_async
        try:  # what _translated does, for a generator less on every call
            return await driving.execute_pooled(
                pool, op, run, self._liveness.watching, lambda: self._drop_async_pool(pool)
            )
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise _unavailable("talking to Postgres", exc) from exc

    # -- transactions of the caller's, and the store's own for transactional steps -----

    def joinable(self, connection: object, *, asynchronous: bool) -> Any:
        return driving.joinable(connection, asynchronous=asynchronous)

    def execute_on(self, connection: Any, op: base.Op[T]) -> T:
        with _translated("talking to Postgres"), driving.schema_missing(self.location):
            return driving.execute_joined(connection, op)

    async def execute_on_async(self, connection: Any, op: base.Op[T]) -> T:
        # No deadline of ours here: abandoning a call would break the caller's transaction.
        with _translated("talking to Postgres"), driving.schema_missing(self.location):
            return await driving.execute_joined_async(connection, op)

    # Only opening the transaction is translated: what the block raises (the step's own
    # statements, a lock timeout say) goes out as psycopg raised it.

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with contextlib.ExitStack() as stack:
            with _translated("opening a transaction on Postgres"):
                pool = self._sync_pool()
                conn = stack.enter_context(pool.connection())
                stack.enter_context(_on_broken(conn, lambda: self._drop_pool(pool)))
                stack.enter_context(self._liveness.standing(conn))  # no deadline here
                stack.enter_context(conn.transaction())
            yield conn

    @contextlib.asynccontextmanager
    async def transaction_async(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with contextlib.AsyncExitStack() as stack:
            with _translated("opening a transaction on Postgres"):
                pool = await self._async_pool()
                conn = await stack.enter_async_context(pool.connection())
                stack.enter_context(_on_broken(conn, lambda: self._drop_async_pool(pool)))
                stack.enter_context(self._liveness.standing(conn))  # no deadline here
                await stack.enter_async_context(conn.transaction())
            yield conn

    def stream_waker(self, run_id: str) -> run_wakeups.Waiter:
        return self._wakeups.waiter(run_wakeups.STREAM_CHANNEL, run_id)

    async def stream_waker_async(self, run_id: str) -> run_wakeups.AsyncWaiter:
        return await self._wakeups.waiter_async(run_wakeups.STREAM_CHANNEL, run_id)

    async def listen(
        self, on_message: Callable[[str, str], None], after: base.AfterWake | None = None
    ) -> None:
        """Deliver this schema's notifications; reconnect when the link drops (see
        ``listening``: ``after`` runs its ops on the listening connection)."""
        await listening.listen(
            self._probe_connection,
            self.schema,
            self._liveness,
            self.call_timeout,
            on_message,
            after,
        )

    def value_notices(self, run_id: str) -> contextlib.AbstractContextManager[Any]:
        return run_wakeups.listening(self._wakeups, run_id)

    def value_notices_async(self, run_id: str) -> contextlib.AbstractAsyncContextManager[Any]:
        return run_wakeups.listening_async(self._wakeups, run_id)

    def close(self) -> None:
        self._wakeups.close()
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    async def aclose(self) -> None:
        await self._liveness.close()
        if self._apool is not None:
            await self._apool.close(timeout=1.0)
            self._apool = None
        await asyncio.gather(*self._closing, return_exceptions=True)
        # A call past its deadline may still wait to cancel its query on a silent
        # socket; cancelled again, psycopg closes its connection and it ends.
        for call in self._abandoned:
            call.cancel()
        if self._abandoned:
            await asyncio.wait(self._abandoned, timeout=1.0)
        self.close()

    # -- schema ----------------------------------------------------------------------

    def _migration_script(self, filename: str) -> str:
        return queries.read(_PACKAGE, filename, self._quoted)

    def migrate(self) -> list[int]:
        applied_now: list[int] = []
        with self._connecting():
            conn = psycopg.connect(self._conninfo(server=False))
        with _translated("migrating Postgres"), conn:
            # One transaction under an advisory lock: a second `migrate` waits, then finds
            # everything applied and does nothing.
            conn.execute(self.q["migration_lock"], {"key": f"simpleworkflow.migrate.{self.schema}"})
            conn.execute(f"create schema if not exists {self._quoted}".encode())
            conn.execute(self.q["schema_version_table"].encode())
            done = {row[0] for row in conn.execute(self.q["applied_versions"].encode())}
            for version, filename in self._migrations:
                if version in done:
                    continue
                conn.execute(self._migration_script(filename).encode())
                conn.execute(self.q["record_version"], {"version": version, "name": filename})
                applied_now.append(version)
        return applied_now

    def payload_index(self, action: Action) -> PayloadIndex:
        with self._connecting():
            conn = psycopg.connect(self._conninfo(server=False), autocommit=True)
        with _translated("changing the payload index"), conn:
            return indexing.apply(conn, self.q, self.schema, action)

    def migration_sql(self) -> str:
        parts = [
            "begin;",
            f"create schema if not exists {self._quoted};",
            self.q["schema_version_table"] + ";",
        ]
        for version, filename in self._migrations:
            parts.append(f"-- {filename}")
            parts.append(self._migration_script(filename).strip())
            parts.append(
                f"insert into {self._quoted}.workflow_schema_version (version, name) "
                f"values ({version}, '{filename}') on conflict do nothing;"
            )
        parts.append("commit;")
        return "\n\n".join(parts) + "\n"

    def reference_schema_sql(self) -> str:
        return queries.read(_PACKAGE, "schema.sql", self._quoted)

    def schema_version(self) -> base.Op[int | None]:
        rows = yield base.Statement(
            self.q["schema_exists"], {"table": f"{self._quoted}.workflow_schema_version"}
        )
        if not rows[0]["present"]:
            return None
        rows = yield base.Statement(self.q["applied_versions"])
        return max((row["version"] for row in rows), default=None)

    # -- conversions -----------------------------------------------------------------

    def decode_time(self, value: Any) -> datetime:
        if not isinstance(value, datetime):  # an Unreadable, from loading
            raise ValueError(f"not a time Python can hold: {value}")
        return value

    def run_from_row(self, row: Mapping[str, Any]) -> Run:
        return run_from_row(row)  # typed by psycopg: nothing to check but the status

    def decode_json(self, value: Any) -> Any:
        # psycopg parses jsonb already; text that reached us from json columns stays text.
        return value

    def encode_params(self, params: dict[str, Any]) -> dict[str, Any]:
        return params


async def _guard_async(conn: Any) -> None:
    loading.guard(conn)


def _retrieved(call: asyncio.Future[Any]) -> None:
    if not call.cancelled():
        call.exception()


@contextlib.contextmanager
def _on_broken(conn: Any, drop: Callable[[], None]) -> Iterator[None]:
    """Call ``drop`` when ``conn`` broke (not when a statement failed on a sound one)."""
    try:
        yield
    except psycopg.OperationalError:
        if conn.broken or conn.closed:
            drop()
        raise


def _connect_error(url: str, exc: psycopg.Error) -> errors.SimpleWorkflowError:
    """What a failed first connection means, in one line: the server's (or libpq's) own
    reason, then what to check. A URL psycopg cannot read is a configuration error."""
    lines = [" ".join(line.split()) for line in str(exc).splitlines() if line.strip()]
    reason = " ".join(line if line[-1] in ".?!:" else f"{line}." for line in lines)
    where = config.mask_url(url)
    if not isinstance(exc, psycopg.OperationalError):
        return errors.ConfigurationError(
            f"cannot use the Postgres URL {where}: {reason} See "
            "https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS "
            "for what it may contain"
        )
    return errors.StoreUnavailable(
        f"cannot connect to Postgres at {where}: {reason} Check the URL (-d/--database-url "
        f"or ${config.ENV_VAR}) and that the server is up and lets this user in"
    )


@contextlib.contextmanager
def _translated(doing: str) -> Iterator[None]:
    """Turn driver errors about the connection into :class:`StoreUnavailable`."""
    try:
        yield
    except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
        raise _unavailable(doing, exc) from exc


def _unavailable(doing: str, exc: Exception) -> errors.StoreUnavailable:
    return errors.StoreUnavailable(
        f"lost or could not open the database connection while {doing}: {exc}. "
        "The operation did not complete (if the connection broke while committing it "
        "may still have been applied); check that Postgres is up, then retry; starts "
        "with an idempotency key are safe to retry"
    )
