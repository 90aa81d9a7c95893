"""Fresh stores for each measurement, and what the benchmark reads from them directly.

Every case starts on an empty store (a new Postgres schema, a new SQLite file) so that
no measurement inherits another's rows. Timings of drains are read from the audit trail
by the database clock (``created_at`` of the ``leased`` and ``succeeded`` events), which
leaves process start-up and the benchmark's own polling out of the figure.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from benchmarks import server
from simpleworkflow import Client, config
from simpleworkflow.backends import Backend, open_backend, queries

_numbers = itertools.count()
NOOP = "bench.noop.v1"
SYNC = "bench.sync.v1"  # NOOP's twin as a plain ``def``
#: Runs per start_many call when loading.
LOAD_BATCH = 10_000
STEPS = "bench.steps.v1"
LATENCY = "bench.latency.v1"
SIGNAL = "bench.signal.v1"


def postgres_version(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(b"select current_setting('server_version')").fetchone()
    return str(row[0]) if row else "unknown"


class BenchStore:
    """One migrated store: a Postgres schema of its own, or a SQLite file of its own."""

    def __init__(self, kind: str, url: str, schema: str) -> None:
        self.kind = kind
        self.url = url
        self.schema = schema
        quoted = queries.quote_schema(schema) if kind == "postgres" else None
        self.q = queries.load("benchmarks.sql", f"{kind}.sql", quoted)
        self._pg: psycopg.Connection[Any] | None = None
        self._lite: sqlite3.Connection | None = None

    @classmethod
    def fresh(
        cls, kind: str, postgres_url: str | None, workdir: Path, synchronous: str = "full"
    ) -> BenchStore:
        """A new, migrated store of ``kind`` (``postgres`` or ``sqlite``); a SQLite file
        runs with ``synchronous`` as its URL says."""
        number = next(_numbers)
        schema = f"bench_{os.getpid()}_{number}"
        if kind == "postgres":
            assert postgres_url is not None
            store = cls(kind, postgres_url, schema)
            store.execute("create_schema")
        else:
            query = "" if synchronous == "full" else f"?synchronous={synchronous}"
            store = cls(kind, f"sqlite:///{workdir / f'{schema}.db'}{query}", "workflow")
        backend = store.backend()
        try:
            backend.migrate()
        finally:
            backend.close()
        return store

    def backend(self) -> Backend:
        return open_backend(self.url, schema=self.schema)

    def client(self) -> Client:
        return Client(self.url, schema=self.schema)

    # -- direct SQL ------------------------------------------------------------------

    def execute(self, name: str, **params: Any) -> list[tuple[Any, ...]]:
        """Run the named benchmark statement (autocommit) and return its rows."""
        sql = self.q[name]
        if self.kind == "postgres":
            if self._pg is None or self._pg.broken:  # a fault benchmark restarted the server
                self._pg = psycopg.connect(self.url, autocommit=True)
            try:
                cursor = self._pg.execute(sql.encode(), params)
            except psycopg.OperationalError:
                if not self._pg.broken:
                    raise
                return self.execute(name, **params)
            return list(cursor.fetchall()) if cursor.description else []
        if self._lite is None:
            self._lite = sqlite3.connect(config.sqlite_path(self.url), timeout=60)
            self._lite.isolation_level = None
        return [tuple(row) for row in self._lite.execute(sql, params).fetchall()]

    def scalar(self, name: str, **params: Any) -> Any:
        rows = self.execute(name, **params)
        return rows[0][0] if rows else None

    def load_runs(self, count: int, type: str = NOOP, payload: str = "{}") -> None:
        """Start ``count`` due runs of ``type``, as producers do: through the client, with
        ``start_many`` (one transaction per 10,000), so that they get the time-ordered
        ids the clients give runs. Each commit wakes waiting workers."""
        value = json.loads(payload)
        with self.client() as client:
            for start in range(0, count, LOAD_BATCH):
                client.start_many([(type, value)] * min(LOAD_BATCH, count - start))

    def last_event(self) -> int:
        return int(self.scalar("last_event"))

    def successes(self, after: int) -> int:
        """Runs that succeeded in the events after ``after``."""
        return int(self.scalar("successes", after=after))

    def window(self, after: int, runs: int) -> float:
        """Seconds from the first claim to the ``runs``-th success, events after ``after``."""
        first = self.scalar("first_claim", after=after)
        last = self.scalar("nth_success", after=after, n=runs - 1)
        if first is None or last is None:
            raise RuntimeError(f"no complete drain of {runs} runs found in the audit trail")
        return max(float(last) - float(first), 1e-6)

    def close(self) -> None:
        """Close the benchmark's connections and drop the store's data."""
        if self._lite is not None:
            self._lite.close()
            self._lite = None
        if self.kind == "postgres":
            self.execute("drop_schema")
            assert self._pg is not None
            self._pg.close()
            self._pg = None
        else:
            path = Path(config.sqlite_path(self.url))
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)


T = TypeVar("T")


def each_store(
    kinds: list[str],
    postgres_url: str | None,
    prefix: str,
    measure: Callable[[BenchStore, Path], T],
) -> dict[str, T]:
    """``measure(store, scratch directory)`` on a fresh store of each kind, in turn; a
    private Postgres is started when none is given and one is needed."""
    results: dict[str, T] = {}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
        if "postgres" in kinds and postgres_url is None:
            postgres_url = stack.enter_context(server.private_postgres())
        for kind in kinds:
            store = BenchStore.fresh(kind, postgres_url, tmp)
            try:
                results[kind] = measure(store, tmp)
            finally:
                store.close()
    return results
