"""IntentPoller: claims due runs by type prefix, runs their handlers, records outcomes.

One event loop does all the bookkeeping: a claim loop that leases as many runs as there
are free slots in one statement, a heartbeat task that extends every held lease in one
statement, a reaper that turns expired leases (crashed workers) into failed attempts,
a listener for wake-ups and cancellations, and the outbox that group-commits outcomes.
Sync handlers run in a thread pool, async ones on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import logging
import os
import random
import signal
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from simpleworkflow import durations, errors, execution, names
from simpleworkflow.app import App, Definition
from simpleworkflow.backends import Backend, open_backend
from simpleworkflow.backends.base import (
    CANCELLED,
    HELD,
    LOST,
    Claim,
    Failure,
    Lease,
    Suspension,
)
from simpleworkflow.client import auto_migrates, needs_migration
from simpleworkflow.context import Context
from simpleworkflow.durable import StepJournal
from simpleworkflow.outbox import Outbox, Release
from simpleworkflow.outcome_log import OutcomeLog
from simpleworkflow.wording import plural

_log = logging.getLogger("simpleworkflow.worker")
RUNTIME = "python"
STOP_WAIT = 1.0  # seconds a handler told to stop at shutdown has before its run is released
# How often a worker on a store without cross-process notifications (SQLite) checks
# whether another process wrote to it: a shared-memory read, so cheap to do this often.
WATCH_INTERVAL = 0.005


@dataclass
class _Active:
    lease: Lease
    ctx: Context
    task: asyncio.Task[None]
    # The handler returned and its outcome is being written: a lease check that reads
    # the run after that write commits finds the lease gone, which is not a lost lease.
    finishing: bool = False


class IntentPoller:
    """A worker for the handlers of ``app`` whose types match ``type_prefixes``.

    ``IntentPoller(type_prefixes=["billing.%"], lease_duration=30, worker_id="w1")``
    works as it stands; register handlers on ``poller.app`` (or pass ``app=``), then
    call :meth:`run` (blocking, handles SIGTERM/SIGINT) or await :meth:`run_async`.
    """

    def __init__(
        self,
        app: App | None = None,
        *,
        type_prefixes: Iterable[str] = ("%",),
        lease_duration: durations.Duration = 30.0,
        worker_id: str | None = None,
        concurrency: int = 10,
        database_url: str | None = None,
        schema: str | None = None,
        poll_interval: durations.Duration = 1.0,
        watch_interval: durations.Duration = WATCH_INTERVAL,
        shutdown_grace: durations.Duration = 30.0,
        heartbeat_events: bool = True,
        backend: Backend | None = None,
    ) -> None:
        self.app = app or App(database_url, schema=schema)
        self.type_prefixes = [_checked_prefix(p) for p in type_prefixes]
        self.lease_duration = durations.to_seconds(lease_duration, what="lease_duration")
        if self.lease_duration < 1:
            raise errors.InvalidArgument("lease_duration must be at least one second")
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise errors.InvalidArgument("concurrency must be a positive integer")
        self.concurrency = concurrency
        self.poll_interval = durations.to_seconds(poll_interval, what="poll_interval")
        self.watch_interval = durations.to_seconds(watch_interval, what="watch_interval")
        self.shutdown_grace = durations.to_seconds(shutdown_grace, what="shutdown_grace")
        self.heartbeat_events = heartbeat_events
        self._backend = backend or open_backend(
            database_url or self.app.database_url, schema=schema or self.app.schema
        )
        self._active: dict[str, _Active] = {}
        self._steps: StepJournal | None = None
        self._types: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._signal: asyncio.Event | None = None
        self._stopping = False
        self._woken = True
        self._timer: asyncio.TimerHandle | None = None
        self._due: list[float] = []  # loop times at which runs we heard of become due
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._outcomes = OutcomeLog(_log)

    def workflow(self, type: str, **options: Any) -> Callable[[Any], Any]:
        """Register a handler on this poller's app; see :meth:`App.workflow`."""
        return self.app.workflow(type, **options)

    @property
    def types(self) -> list[str]:
        """The types this worker claims: registered handlers selected by its prefixes."""
        return self.app.types_matching(self.type_prefixes)

    # -- running ---------------------------------------------------------------------

    def run(self) -> None:
        """Work until SIGTERM or SIGINT, then shut down gracefully; a second signal exits now."""
        asyncio.run(self._run_with_signals())
        if self._executor is not None and any(
            thread.is_alive() for thread in getattr(self._executor, "_threads", ())
        ):
            # A sync handler ignored the stop request; its lease is already released.
            _log.warning("exiting with sync handlers still running; their runs were released")
            logging.shutdown()
            os._exit(0)

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        await self.run_async()

    def _on_signal(self, signum: int) -> None:
        if self._stopping:
            _log.warning("second %s: exiting at once", signal.Signals(signum).name)
            logging.shutdown()
            os._exit(1)
        _log.info(
            "%s: finishing running handlers, then stopping (a second Ctrl-C or SIGTERM exits "
            "at once)",
            signal.Signals(signum).name,
        )
        self._request_stop()

    def stop(self) -> None:
        """Ask the worker to stop gracefully; safe from any thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._request_stop)

    def _request_stop(self) -> None:
        self._stopping = True
        if self._signal is not None:
            self._signal.set()

    async def run_async(self) -> None:
        """Work until :meth:`stop` is called (or the task is cancelled)."""
        self._types = self.types
        if not self._types:
            raise errors.ConfigurationError(
                f"no registered handler matches the prefixes {self.type_prefixes}; "
                f"registered types: {sorted(self.app.definitions) or 'none'}"
            )
        self._loop = asyncio.get_running_loop()
        self._signal = asyncio.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.concurrency, thread_name_prefix="simpleworkflow-handler"
        )
        backend = self._backend
        await self._prepare_schema()
        await backend.execute_async(backend.register_types(self._types, RUNTIME))
        outbox = Outbox(backend, self.worker_id)
        self._steps = StepJournal(backend)
        helpers = [
            asyncio.create_task(outbox.run(), name="outbox"),
            asyncio.create_task(self._steps.run(), name="journal"),
            asyncio.create_task(self._heartbeats(), name="heartbeats"),
            asyncio.create_task(self._reaper(), name="reaper"),
            asyncio.create_task(backend.listen(self._on_message), name="listen"),
            asyncio.create_task(self._report_unknown_versions(), name="versions"),
        ]
        if not backend.has_notifications:
            helpers.append(asyncio.create_task(self._watch_leases(), name="lease-watch"))
            if self.watch_interval > 0:
                watch = backend.watch_changes(self._on_change, self.watch_interval)
                helpers.append(asyncio.create_task(watch, name="change-watch"))
        _log.info(
            "worker %s claiming %s on %s (concurrency %d)",
            self.worker_id,
            ", ".join(self._types),
            backend.location,
            self.concurrency,
        )
        try:
            await self._claim_loop(outbox)
        finally:
            await self._drain(outbox)
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            self._executor.shutdown(wait=False, cancel_futures=True)
            await backend.aclose()
            self._outcomes.flush()
            _log.info("worker %s stopped", self.worker_id)

    async def _prepare_schema(self) -> None:
        backend = self._backend
        version = await backend.execute_async(backend.schema_version(), readonly=True)
        if needs_migration(backend, version, auto_migrate=auto_migrates(backend, None)):
            await asyncio.to_thread(backend.migrate)
            if version is None:
                # A worker started in the wrong directory makes a new file and idles.
                _log.warning(
                    "created a new, empty database at %s: no runs wait in it. If your runs "
                    "are in another database, stop this worker and point it there (-d, "
                    "$SIMPLEWORKFLOW_DATABASE_URL, or the directory it runs in)",
                    backend.location,
                )

    # -- claiming --------------------------------------------------------------------

    async def _claim_loop(self, outbox: Outbox) -> None:
        assert self._signal is not None
        claim_more = True  # the last claim filled every free slot: there may be more
        pause = 0.2
        while not self._stopping:
            free = self._free_slots()
            if free > 0 and (claim_more or self._woken):
                self._woken = False
                try:
                    leases = await self._claim(free)
                except errors.StoreUnavailable as exc:
                    _log.warning("claim failed (%s); retrying in %.1fs", exc, pause)
                    await asyncio.sleep(pause)
                    pause, self._woken = min(pause * 2, 10.0), True
                    continue
                pause = 0.2
                for lease in leases:
                    self._start(lease, outbox)
                claim_more = len(leases) == free
                continue
            self._signal.clear()
            try:
                await asyncio.wait_for(self._signal.wait(), self.poll_interval)
            except TimeoutError:
                self._woken = True

    def _free_slots(self) -> int:
        """Slots for new runs. A run whose handler has returned no longer holds one while
        its outcome is written, so the next claim overlaps that write instead of waiting
        for it; at most ``concurrency`` such writes are waited for at a time."""
        running = sum(1 for active in self._active.values() if not active.finishing)
        return min(self.concurrency - running, 2 * self.concurrency - len(self._active))

    def _claim_request(self, limit: int) -> Claim:
        definitions = [self.app.definitions[t] for t in self._types]
        return Claim(
            worker_id=self.worker_id,
            types=tuple(self._types),
            limit=limit,
            lease_seconds=self.lease_duration,
            runtime=RUNTIME,
            versions={d.type: d.version for d in definitions},
            known=tuple(f"{d.type}@{v}" for d in definitions for v in d.known_versions),
        )

    async def _claim(self, limit: int) -> list[Lease]:
        op = self._backend.claim(self._claim_request(limit))
        return await self._backend.execute_async(op)

    async def _report_unknown_versions(self, interval: float = 300.0) -> None:
        """Say which due runs this worker leaves alone because it lacks their code version."""
        while True:
            op = self._backend.unknown_versions(self._claim_request(0))
            try:
                rows = await self._backend.execute_async(op, readonly=True)
            except errors.StoreUnavailable:
                rows = []
            for type_name, version, count in rows:
                _log.warning(
                    "%s of %s started on code version %r, which this worker does "
                    "not have (it knows %s); deploy a worker that knows it, or cancel them",
                    plural(count, "due run"),
                    type_name,
                    version,
                    ", ".join(self.app.definitions[type_name].known_versions),
                )
            await asyncio.sleep(interval)

    def _start(self, lease: Lease, outbox: Outbox) -> None:
        definition = self.app.definitions[lease.run.type]
        ctx = Context(
            lease.run,
            self.worker_id,
            lease=lease,
            backend=self._backend,
            async_body=definition.is_async,
            steps=self._steps,
        )
        task = asyncio.create_task(self._execute(lease, ctx, outbox), name=f"run-{lease.run.id}")
        self._active[lease.run.id] = _Active(lease, ctx, task)

    async def _execute(self, lease: Lease, ctx: Context, outbox: Outbox) -> None:
        definition: Definition = self.app.definitions[lease.run.type]
        assert self._executor is not None
        try:
            outcome = await execution.attempt(definition, lease, ctx, self._executor)
            own = self._own(lease)
            if own is not None:
                own.finishing = True
                if self._signal is not None:  # a slot is free for the next claim
                    self._signal.set()
            # Stopped from outside (cancelled, lease lost, shutdown): nothing to record.
            # A timeout stops the handler too, but its failure is the outcome.
            stopped = ctx.stop_reason not in (None, execution.TIMED_OUT)
            recorded = outcome is None or stopped or await outbox.deliver(outcome)
            if recorded and not stopped:
                self._outcomes.record(lease, outcome)
                self._wake_in(_due_in(outcome))
            if not recorded:
                _log.warning(
                    "run %s: lease lost before its outcome was recorded; discarded", lease.run.id
                )
        except Exception:
            _log.exception("run %s: worker error while running it", lease.run.id)
        finally:
            if self._own(lease) is not None:
                del self._active[lease.run.id]
            if self._signal is not None:
                self._signal.set()

    def _own(self, lease: Lease) -> _Active | None:
        """This attempt's entry. Once a suspension is recorded the run may be due at once
        (a signal came) and claimed again by this worker before the attempt has cleaned
        up: the entry under its id is then the next attempt's, which it must leave alone."""
        active = self._active.get(lease.run.id)
        return active if active is not None and active.lease is lease else None

    # -- leases ----------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        """Extend every held lease about three times per lease duration."""
        while True:
            await asyncio.sleep(self.lease_duration / 3)
            leases = self._held()
            if not leases:
                continue
            op = self._backend.heartbeat(
                self.worker_id, leases, self.lease_duration, self.heartbeat_events
            )
            try:
                states = await self._backend.execute_async(op)
            except errors.StoreUnavailable as exc:
                _log.warning("heartbeat failed (%s); retrying", exc)
                continue
            self._apply(states)

    async def _watch_leases(self, interval: float = 0.5) -> None:
        """For stores without notifications: notice cancellations within ``interval``."""
        while True:
            await asyncio.sleep(interval)
            leases = self._held()
            if not leases:
                continue
            try:
                states = await self._backend.execute_async(
                    self._backend.lease_states(leases), readonly=True
                )
            except errors.StoreUnavailable:
                continue
            self._apply(states)

    def _held(self) -> list[tuple[str, str]]:
        return [
            (run_id, active.lease.token)
            for run_id, active in self._active.items()
            if not (active.ctx.is_cancelled() or active.finishing)
        ]

    def _apply(self, states: Mapping[str, str]) -> None:
        for run_id, state in states.items():
            active = self._active.get(run_id)
            if active is None or active.finishing or state == HELD:
                continue
            if state == CANCELLED:
                _log.info("run %s was cancelled; stopping its handler", run_id)
                active.ctx._request_stop("cancelled")
            elif state == LOST:
                _log.warning("run %s: lease lost to another worker; abandoning it", run_id)
                active.ctx._request_stop("lease lost")

    def _on_message(self, kind: str, value: str) -> None:
        """A notification: ``cancel <run id>``, or ``wake [<type> [<due epoch>]]``."""
        if kind == "cancel":
            self._apply({value: CANCELLED} if value in self._active else {})
            return
        type_name, _, due = value.partition(" ")
        if kind != "wake" or (type_name and type_name not in self._types):
            return
        try:
            delay = float(due) - time.time() if due else 0.0
        except ValueError:
            delay = 0.0
        self._wake_in(delay)

    def _on_change(self) -> None:
        """Another connection wrote to the store (SQLite): there may be new work."""
        self._wake_in(0.0)

    def _wake_in(self, delay: float) -> None:
        """Claim now, or when a run becomes due (a retry, a sleep, a delayed start)
        rather than at the next poll."""
        if delay <= 0:
            self._woken = True
            if self._signal is not None:
                self._signal.set()
            return
        if self._loop is None or delay == float("inf"):
            return
        heapq.heappush(self._due, self._loop.time() + delay)
        if len(self._due) > 4096:  # a flood of far-off times: keep the nearest
            self._due = heapq.nsmallest(1024, self._due)
        self._arm()

    def _arm(self) -> None:
        """Keep one timer, set for the earliest due time."""
        if not self._due or self._loop is None:
            return
        first = self._due[0]
        if self._timer is not None:
            if self._timer.when() <= first:
                return
            self._timer.cancel()
        self._timer = self._loop.call_at(first, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        now = self._loop.time() if self._loop is not None else 0.0
        while self._due and self._due[0] <= now + 0.001:
            heapq.heappop(self._due)
        self._wake_in(0.0)
        self._arm()

    async def _reaper(self) -> None:
        """Turn leases that expired (their worker died or stalled) into failed attempts."""
        interval = max(1.0, min(self.lease_duration / 2, 30.0))
        while True:
            try:
                op = self._backend.reap_expired(self._types, 100, self._expired, RUNTIME)
                reaped = await self._backend.execute_async(op)
            except errors.StoreUnavailable as exc:
                _log.warning("reaping expired leases failed (%s)", exc)
                reaped = 0
            if reaped:
                _log.info("recovered %s whose lease expired", plural(reaped, "run"))
                self._on_message("wake", "")
                continue
            await asyncio.sleep(interval * (0.8 + 0.4 * random.random()))

    def _expired(self, row: Mapping[str, Any]) -> Failure:
        definition = self.app.definitions[row["type"]]
        failures = row["attempt"] + 1
        final = failures >= row["max_attempts"]
        message = (
            f"lease expired: worker {row['leased_by']} stopped renewing it "
            "(it crashed, was killed, or stalled)"
        )
        token = row["lease_token"]
        return Failure(
            run_id=str(row["id"]),
            token=None if token is None else str(token),
            final=final,
            delay=0.0 if final else definition.retry.delay(failures),
            error=message,
            data={
                "reason": "lease_expired",
                "worker_id": row["leased_by"],
                "error": {"type": "LeaseExpired", "message": message},
            },
        )

    # -- shutdown --------------------------------------------------------------------

    async def _drain(self, outbox: Outbox) -> None:
        """Let running handlers finish within the grace period, then give the rest back."""
        tasks = [active.task for active in self._active.values()]
        if tasks:
            _log.info(
                "waiting up to %gs for %s", self.shutdown_grace, plural(len(tasks), "handler")
            )
            await asyncio.wait(tasks, timeout=self.shutdown_grace)
        leftovers = list(self._active.values())
        for active in leftovers:
            active.ctx._request_stop("shutdown")
        if leftovers:
            # Handlers that honour the request get a moment to stop before their runs are
            # given back; once ``run`` returns, the process exits under whatever still runs.
            await asyncio.wait([a.task for a in leftovers], timeout=STOP_WAIT)
        releases = [outbox.record(Release(a.lease.run.id, a.lease.token)) for a in leftovers]
        if releases:
            released = await asyncio.gather(*releases, return_exceptions=True)
            count = sum(r is True for r in released)
            _log.info("released %s", plural(count, "unfinished run"))
        await outbox.drained()


def _due_in(outcome: object) -> float:
    """Seconds until a run this worker just gave back is due again (inf: not at all)."""
    if isinstance(outcome, Failure) and not outcome.final:
        return max(outcome.delay, 0.001)
    if isinstance(outcome, Suspension):
        if outcome.run_at is not None:
            return max((outcome.run_at - datetime.now(UTC)).total_seconds(), 0.001)
        return max(outcome.delay, 0.001)
    return float("inf")


def _checked_prefix(prefix: str) -> str:
    names.prefix_stem(prefix)
    return prefix
