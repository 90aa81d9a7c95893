"""Fixtures shared by every test: a real Postgres and a real SQLite, one suite for both.

Postgres comes from ``SIMPLEWORKFLOW_TEST_POSTGRES_URL`` when set, else a private server
started for the session from the ``pgserver`` wheel. Every test gets its own schema (or
SQLite file), so tests never see each other's runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from worker_app import Ledger

from simpleworkflow import App, AsyncClient, Client, IntentPoller, config
from simpleworkflow.backends import Backend, open_backend

# Workers run the retention sweeper by default. The suite's workers do not (nor the
# worker processes its tests start, which inherit this): a sweep at each worker's start
# would delete runs that tests make look old, and take SQLite's write lock beside the
# work a test times. The tests of the sweeper turn it on (tests/stores/test_retention.py); set
# the variable (SIMPLEWORKFLOW_SWEEP_EVERY=5m) to run the whole suite with it on.
os.environ.setdefault("SIMPLEWORKFLOW_SWEEP_EVERY", "off")

# The folders whose tests start real processes or break the database (docs/architecture.md,
# "Tests"): their tests are marked ``slow``, so that ``pytest -m "not slow"`` runs the
# in-process rest (tests/unit, tests/stores, tests/http) in a fraction of the time.
SLOW_FOLDERS = frozenset({"processes", "faults"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)


def _sendable(text: str) -> str:
    """``text`` with each lone surrogate written as its escape: tests of bad values log
    some (tests/stores/test_error_paths.py), and a report sent from a worker process of
    ``pytest -n`` must be UTF-8 (else that worker dies and the session with it)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport() -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    report.sections = [(title, _sendable(text)) for title, text in report.sections]
    if report.longrepr is not None:
        text = str(report.longrepr)
        if _sendable(text) != text:
            report.longrepr = _sendable(text)
    return report


_schema_numbers = itertools.count()
_database_numbers = itertools.count()


def _start_pgserver(data_dir: str) -> Any:
    import pgserver

    return pgserver.get_server(data_dir, cleanup_mode="stop")  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a Postgres server that lives as long as the test session."""
    url = os.environ.get("SIMPLEWORKFLOW_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    with tempfile.TemporaryDirectory(prefix="simpleworkflow-pg-") as data_dir:
        server = _start_pgserver(data_dir)
        # Room for multi-process tests, and no fsync: a test server need not survive a
        # power cut. Both settings take effect on restart.
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute("alter system set max_connections = 300")
            conn.execute("alter system set fsync = off")
            conn.execute("alter system set synchronous_commit = off")
        server.cleanup()
        server = _start_pgserver(data_dir)
        try:
            yield server.get_uri()
        finally:
            server.cleanup()


@dataclass
class Store:
    """One freshly migrated store: a SQLite file, or a Postgres schema of its own."""

    kind: str
    url: str
    schema: str = "workflow"

    def backend(self) -> Backend:
        return open_backend(self.url, schema=self.schema)

    def migrate(self) -> Store:
        """Bring the store's schema to the latest version; return the store."""
        backend = self.backend()
        try:
            backend.migrate()
        finally:
            backend.close()
        return self

    def client(self, **options: Any) -> Client:
        return Client(self.url, schema=self.schema, **options)

    def async_client(self, **options: Any) -> AsyncClient:
        return AsyncClient(self.url, schema=self.schema, **options)

    def sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run one statement on the store directly (autocommit) and return its rows.

        Tables are named without a schema and parameters are ``?``: the same text works
        on both stores, which lets a test arrange a state the client cannot reach (a
        leased run) or look under the client (count the rows it wrote).
        """
        if self.kind == "sqlite":
            lite = sqlite3.connect(config.sqlite_path(self.url))
            lite.execute("pragma foreign_keys = on")  # as the backend's connections do
            try:
                with lite:  # commits
                    return [tuple(row) for row in lite.execute(statement, params).fetchall()]
            finally:
                lite.close()
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'set search_path to "{self.schema}"'.encode())
            cursor = conn.execute(statement.replace("?", "%s").encode(), params)
            return list(cursor.fetchall()) if cursor.description else []

    def count(self, table: str = "workflow_run") -> int:
        """How many rows ``table`` holds."""
        return int(self.sql(f"select count(*) from {table}")[0][0])

    @property
    def env(self) -> dict[str, str]:
        """Environment for a subprocess that should use this store."""
        return {
            **os.environ,
            "SIMPLEWORKFLOW_DATABASE_URL": self.url,
            "SIMPLEWORKFLOW_SCHEMA": self.schema,
        }


def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "sqlite":
        return Store("sqlite", f"sqlite:///{tmp_path / 'runs.db'}")
    url = request.getfixturevalue("postgres_url")
    store = Store("postgres", url, schema=f"t{os.getpid()}_{next(_schema_numbers)}")

    def drop_schema() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'drop schema if exists "{store.schema}" cascade'.encode())

    request.addfinalizer(drop_schema)
    return store


def every_store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Store, Path]]:
    """A migrated store of each kind with a folder of its own (for its ledger and worker
    logs): for the process tests that run on both stores at once, so that the leases and
    grace periods they wait out are waited out once."""
    for kind in ("sqlite", "postgres"):
        where = tmp_path / kind
        where.mkdir()
        yield make_store(kind, where, request).migrate(), where


@pytest.fixture(params=["sqlite", "postgres"])
def empty_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A store with no schema yet."""
    return make_store(request.param, tmp_path, request)


@pytest.fixture
def store(empty_store: Store) -> Store:
    """A migrated store, parametrised over every backend."""
    return empty_store.migrate()


@pytest.fixture
def client(store: Store) -> Iterator[Client]:
    with store.client() as client:
        yield client


@pytest.fixture
def backend(store: Store) -> Iterator[Backend]:
    """The store's backend, for tests that drive its statements directly."""
    backend = store.backend()
    try:
        yield backend
    finally:
        backend.close()


def with_database(url: str, dbname: str) -> str:
    """``url`` pointing at database ``dbname`` of the same server."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{dbname}"))


@pytest.fixture(scope="session")
def make_database(postgres_url: str) -> Iterator[Callable[[], str]]:
    """A factory of empty Postgres databases (dropped at the end of the session)."""
    made: list[str] = []

    def make() -> str:
        name = f"swtest_{os.getpid()}_{next(_database_numbers)}"
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'create database "{name}"'.encode())
        made.append(name)
        return with_database(postgres_url, name)

    yield make
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for name in made:
            conn.execute(f'drop database if exists "{name}" with (force)'.encode())


@contextlib.contextmanager
def poller_thread(app: App, **options: Any) -> Iterator[IntentPoller]:
    """Run an ``IntentPoller`` for ``app`` on a thread until the block ends, then stop it
    cleanly; an error that ended the poller is raised here. ``poller=`` runs that one."""
    poller = options.pop("poller", None) or IntentPoller(app, **options)
    failure: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(poller.run_async())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=main, name=f"poller-{poller.worker_id}", daemon=True)
    thread.start()
    try:
        yield poller
    finally:
        deadline = time.monotonic() + 15
        while thread.is_alive() and time.monotonic() < deadline:
            # A no-op until the poller's loop runs, so repeat it; the loop may close meanwhile.
            with contextlib.suppress(RuntimeError):
                poller.stop()
            thread.join(0.1)
        assert not thread.is_alive(), "the poller did not stop within 15 s"
    if failure:
        raise failure[0]


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    """A witness file outside the engine, where worker processes' handlers note each run."""
    return Ledger(tmp_path / "ledger.jsonl")


def stop_processes(procs: Iterable[subprocess.Popen[Any]]) -> None:
    """Kill whatever is left of the processes a test started, frozen ones included."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # a stopped process cannot die
            proc.kill()
        proc.wait(10)
