"""A workflow test's world: a fresh store, a client, an in-process worker and a clock the
test controls, all of the real engine.

On SQLite (the default: a file in a temporary folder) the store's statements read the
test's clock wherever they read ``'now'`` (see ``simpleworkflow.clockwork``); on
Postgres (``database_url=``, a schema of its own) wherever they call ``now()`` (see
``pgclock``); the worker's own reads of the time go through ``Backend.now()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from types import TracebackType
from typing import Any

from simpleworkflow import clockwork, config, durations, errors
from simpleworkflow.app import App
from simpleworkflow.backends import open_backend
from simpleworkflow.client import AsyncClient, Client
from simpleworkflow.models import JournalEntry, Run
from simpleworkflow.testing import pgclock
from simpleworkflow.testing.skipping import Skipper
from simpleworkflow.worker import IntentPoller

#: Wall-clock seconds a helper waits by default before it gives up.
TIMEOUT = 30.0


class Environment:
    """Use as a context manager (``with Environment(app) as env:``) or through the pytest
    fixture ``workflow_env``. ``auto_skip`` (default on) jumps the clock to the next due
    instant whenever a helper waits and nothing else can happen first; ``worker=False``
    runs no worker (start one with :meth:`run_worker`); ``worker_options`` go to the
    :class:`~simpleworkflow.IntentPoller` (the harness's worker sweeps no runs away unless
    asked: ``sweep=True``)."""

    def __init__(
        self,
        app: App,
        *,
        database_url: str | None = None,
        directory: str | os.PathLike[str] | None = None,
        auto_skip: bool = True,
        worker: bool = True,
        **worker_options: Any,
    ) -> None:
        self.app = app
        self.auto_skip = auto_skip
        self._given_url = database_url
        self._directory = directory
        self._want_worker = worker
        self._worker_options = {"sweep": False, "poll_interval": 0.05, **worker_options}
        self._cleanups: list[Callable[[], None]] = []
        self.rig = clockwork.Rig()
        self.url = ""
        self.schema: str | None = None
        self.worker: IntentPoller | None = None
        self._client: Client | None = None
        self._skipper: Skipper | None = None
        self._pg_clock: pgclock.PostgresClock | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> Environment:
        try:
            self._open_store()
            self._client = Client(self.url, schema=self.schema, observers=[self.app.observers])
            self._cleanups.append(self._client.close)
            backend = self._client.backend
            clock = self.rig.clock if backend.rig is not None else None
            pg = self._pg_clock
            wake = None if pg is None else (lambda: pg.wake(str(self.schema)))
            self._skipper = Skipper(
                backend, clock, lambda: open_backend(self.url, schema=self.schema), wake
            )
            if self._want_worker:
                self.run_worker()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker, close the clients, remove the store; in reverse order."""
        failures = []
        while self._cleanups:
            try:
                self._cleanups.pop()()
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]

    def _open_store(self) -> None:
        if self._given_url and config.scheme(self._given_url) == "postgres":
            self.schema = f"swtest_{uuid.uuid4().hex[:12]}"
            pg = pgclock.PostgresClock(self._given_url, f"{self.schema}_clock")
            pg.create()
            self._cleanups.append(pg.drop)  # last: the store's defaults use its now()
            self._pg_clock = pg
            if self.rig.clock is not None:
                self.rig.clock.listeners.append(pg.set_offset)
            self.url = pg.rigged_url()
            key = clockwork.postgres_key(self.url, self.schema)
            self._cleanups.append(self._drop_schema)
        else:
            folder = self._directory or tempfile.mkdtemp(prefix="simpleworkflow-test-")
            if self._directory is None:
                self._cleanups.append(lambda: shutil.rmtree(folder, ignore_errors=True))
            path = os.path.join(folder, f"runs-{uuid.uuid4().hex[:8]}.db")
            self.url, key = f"sqlite:///{path}", os.path.realpath(path)
        clockwork.install(key, self.rig)
        self._cleanups.append(lambda: clockwork.uninstall(key))
        backend = open_backend(self.url, schema=self.schema)
        try:
            backend.migrate()
        finally:
            backend.close()

    def _drop_schema(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'drop schema if exists "{self.schema}" cascade'.encode())

    def run_worker(self, **options: Any) -> IntentPoller:
        """Start the in-process worker (on a thread of its own; stopped by :meth:`close`)."""
        if self.worker is not None:
            raise errors.InvalidArgument("the environment's worker runs already")
        worker = IntentPoller(
            self.app,
            database_url=self.url,
            schema=self.schema,
            **{**self._worker_options, **options},
        )
        failure: list[BaseException] = []
        thread = threading.Thread(
            target=lambda: _run_worker(worker, failure), name="simpleworkflow-test-worker"
        )
        thread.start()
        self.worker = worker
        self._cleanups.append(lambda: _stop_worker(worker, thread, failure))
        return worker

    # -- clients ---------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        """A client on the test's store (the app's observers watch it)."""
        if self._client is None:
            raise errors.InvalidArgument("the environment is not open: use it in a with block")
        return self._client

    def async_client(self) -> AsyncClient:
        """A new :class:`AsyncClient` on the test's store, for the test's event loop: use
        it as ``async with env.async_client() as client:`` (its connections belong to
        the loop that opened them, so it is closed there)."""
        return AsyncClient(self.url, schema=self.schema, observers=[self.app.observers])

    # -- the clock ---------------------------------------------------------------------------

    @property
    def clock(self) -> clockwork.Clock:
        if self.rig.clock is None:
            return self._skip()._clock()
        return self.rig.clock

    def now(self) -> datetime:
        """The store's time: the wall clock plus what the test skipped."""
        return self._skip().now()

    def advance(self, duration: durations.Duration, *, timeout: float = TIMEOUT) -> datetime:
        """Move the clock ``duration`` (``"30d"``, seconds, a timedelta) forward, once
        no attempt runs; wake the worker and fire the schedules now due. Returns the new
        time."""
        seconds = durations.to_seconds(duration, what="advance's duration")
        return self._skip().advance(seconds, timeout)

    def _skip(self) -> Skipper:
        if self._skipper is None:
            raise errors.InvalidArgument("the environment is not open: use it in a with block")
        return self._skipper

    # -- running until ---------------------------------------------------------------------

    def start(self, type: str, payload: Any = None, **options: Any) -> Run:
        """Start a run of ``type`` (``Client.start``'s options)."""
        return self.client.start(type, payload, **options)

    def run_until_done(self, run_id: str, *, timeout: float = TIMEOUT, follow: bool = True) -> Run:
        """Let the run go on (skipping time when allowed) until it has ended; return it.
        A run that continued as new is followed to the last of its chain."""
        current = [run_id]

        def done() -> bool:
            run = self.client.get(current[0])
            while follow and run.continued_as is not None:
                run = self.client.get(run.continued_as)
            current[0] = run.id
            return run.is_terminal

        self._skip().drive(done, timeout, self.auto_skip, f"the end of run {run_id}")
        return self.client.get(current[0])

    def run_until_waiting(
        self, run_id: str, kind: str | None = None, *, timeout: float = TIMEOUT
    ) -> Run:
        """Let the run go on until it is suspended in a wait (of ``kind``: ``signal``,
        ``sleep``, ``child``, ``retry``..., any when ``None``) or has ended; return it.
        The clock skips only while the run waits for something else."""

        def done() -> bool:
            run = self.client.get(run_id)
            if run.is_terminal or not isinstance(run.waiting_for, dict):
                return run.is_terminal
            return kind is None or kind in _wait_kinds(run.waiting_for)

        self._skip().drive(done, timeout, self.auto_skip, f"a wait of run {run_id}")
        return self.client.get(run_id)

    def settle(self, *, timeout: float = TIMEOUT) -> None:
        """Run until nothing is due, ever, without something from outside: every run has
        ended or waits for a signal, a child or a cancel, and no schedule is planned."""
        skipper = self._skip()

        def quiet() -> bool:
            state = skipper.state()
            return not state.leased and not state.due and state.next_due is None

        skipper.drive(quiet, timeout, self.auto_skip, "a settled store")

    async def run_until_done_async(self, run_id: str, **options: Any) -> Run:
        """:meth:`run_until_done` for an async test (off the event loop)."""
        return await asyncio.to_thread(self.run_until_done, run_id, **options)

    async def run_until_waiting_async(
        self, run_id: str, kind: str | None = None, **options: Any
    ) -> Run:
        """:meth:`run_until_waiting` for an async test (off the event loop)."""
        return await asyncio.to_thread(self.run_until_waiting, run_id, kind, **options)

    # -- what a test sends and reads ---------------------------------------------------------

    def signal(self, run_id: str, event: str, payload: Any = None) -> None:
        """Send signal ``event`` to the run."""
        self.client.signal(run_id, event, payload)

    def journal(self, run_id: str) -> list[JournalEntry]:
        """The run's journal, in the order its calls first ran."""
        return self.client.steps(run_id)

    def results(self, run_id: str) -> dict[str, Any]:
        """What each journaled call of the run returned, by name (a sleep: its end)."""
        return {entry.step_name: entry.output for entry in self.journal(run_id)}

    def values(self, run_id: str) -> dict[str, Any]:
        """The values the run published, the last of each key."""
        return {found.key: found.value for found in self.client.values(run_id)}

    def stream(self, run_id: str, key: str) -> list[Any]:
        """The items of the run's stream ``key`` stored so far."""
        items: list[Any] = []
        after: int | None = None
        while page := self.client.stream_items(run_id, key, after=after, limit=500):
            items.extend(item.value for item in page)
            after = page[-1].offset
        return items

    # -- standing in for steps ---------------------------------------------------------------

    def fail_step(
        self,
        name: str,
        times: int = 1,
        *,
        error: Callable[[], BaseException] | None = None,
        workflow: str | None = None,
    ) -> clockwork.Double:
        """Make step ``name`` (of every type, or of ``workflow``) raise on its next
        ``times`` tries (``error()``, else a ``RuntimeError``), then run its code."""
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise errors.InvalidArgument(f"times must be a positive integer, not {times!r:.40}")
        double = clockwork.Double(failures=times)
        if error is not None:
            double.error = error
        self.rig.steps.doubles[(workflow, name)] = double
        return double

    def stub_step(self, name: str, value: Any, *, workflow: str | None = None) -> clockwork.Double:
        """Make step ``name`` return ``value`` without running its code (journaled as
        its output, as the code's would be)."""
        double = clockwork.Double(canned=True, value=value)
        self.rig.steps.doubles[(workflow, name)] = double
        return double


def _wait_kinds(waiting_for: dict[str, Any]) -> set[str]:
    waits = waiting_for.get("waits")
    kinds = {waiting_for.get("kind")}
    if isinstance(waits, list):
        kinds |= {w.get("kind") for w in waits if isinstance(w, dict)}
    return {str(kind) for kind in kinds if kind}


def _run_worker(worker: IntentPoller, failure: list[BaseException]) -> None:
    try:
        asyncio.run(worker.run_async())
    except BaseException as exc:  # reported when the environment closes
        failure.append(exc)


def _stop_worker(
    worker: IntentPoller, thread: threading.Thread, failure: list[BaseException]
) -> None:
    deadline = time.monotonic() + 15
    while thread.is_alive() and time.monotonic() < deadline:
        with contextlib.suppress(RuntimeError):  # its loop may not run yet, or be closing
            worker.stop()
        thread.join(0.05)
    if thread.is_alive():
        raise errors.WaitTimeout("the test's worker did not stop within 15s")
    if failure:
        raise failure[0]
