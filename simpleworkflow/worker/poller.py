"""IntentPoller: claims due runs by type prefix, runs their handlers, records outcomes.

One event loop does all the bookkeeping: a claim loop that leases as many runs as there
are free slots in one statement, a heartbeat task that extends every held lease in one
statement, a reaper that recovers expired leases (crashed workers, see ``recovery``),
a listener for wake-ups and cancellations, and the outbox that group-commits outcomes.
Sync handlers run in a thread pool, async ones on the loop; ``shutdown`` stops them.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from simpleworkflow import durations, errors, execution, names, outage
from simpleworkflow.worker import leases, recovery, shutdown
from simpleworkflow.attempts import Attempt, Threads, TrackedExecutor, charge_to
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
from simpleworkflow.handlers import Definition, Handlers
from simpleworkflow.outbox import Outbox
from simpleworkflow.outcome_log import OutcomeLog
from simpleworkflow.wording import plural

_log = logging.getLogger("simpleworkflow.worker")
RUNTIME = "python"
# How often a worker on a store without cross-process notifications (SQLite) checks
# whether another process wrote to it: a shared-memory read, so cheap to do this often.
WATCH_INTERVAL = 0.005


class IntentPoller:
    """A worker for the handlers of ``app`` whose types match ``type_prefixes``.

    ``IntentPoller(type_prefixes=["billing.%"], lease_duration=30, worker_id="w1")``
    works as it stands; register handlers on ``poller.app`` (or pass ``app=``), then
    call :meth:`run` (blocking, handles SIGTERM/SIGINT) or await :meth:`run_async`.
    """

    def __init__(
        self,
        app: Handlers | None = None,
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
        self.app = app or Handlers(database_url, schema=schema)
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
            database_url or self.app.database_url,
            schema=schema or self.app.schema,
            application_name=self.worker_id,
        )
        self._active: dict[str, Attempt] = {}
        self._steps: StepJournal | None = None
        self._types: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._signal: asyncio.Event | None = None
        self._stopping = False
        self._woken = True
        self._timer: asyncio.TimerHandle | None = None
        self._due: list[float] = []  # loop times at which runs we heard of become due
        self._executor: TrackedExecutor | None = None  # sync handlers
        self._step_executor: TrackedExecutor | None = None  # sync steps of async bodies
        self._exiting = False  # run() ends the process: what still runs stops with it
        self._draining: list[Attempt] = []  # at shutdown: attempts that may still run
        self._outcomes = OutcomeLog(_log)
        self._renewals = leases.Renewals(self.lease_duration)
        self._outage = outage.Outage(_log, self._backend.location)

    def workflow(self, type: str, **options: Any) -> Callable[[Any], Any]:
        """Register a handler on this poller's app; see :meth:`App.workflow`."""
        return self.app.workflow(type, **options)

    @property
    def types(self) -> list[str]:
        """The types this worker claims: registered handlers selected by its prefixes."""
        return self.app.types_matching(self.type_prefixes)

    # -- running ---------------------------------------------------------------------

    def run(self) -> None:
        """Work until SIGTERM or SIGINT, then shut down gracefully; a second signal exits now.

        Returns (or exits) within ``shutdown_grace`` plus a few seconds, whatever the
        handlers' threads do: see ``shutdown``."""
        self._exiting = True
        asyncio.run(self._run_with_signals())
        if _threads_outlive(shutdown.STOP_WAIT):
            # Threads no attempt owned (a handler's own): the interpreter's exit would wait
            # for them, maybe forever.
            _log.warning("exiting with threads of handlers still running")
            _exit_now()

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        # The loop is ours: threads a handler starts with asyncio.to_thread count as its
        # attempt's, and the loop's teardown waits for none of them.
        loop.set_default_executor(TrackedExecutor(name="simpleworkflow-default", join=False))
        await self.run_async()

    def _on_signal(self, signum: int) -> None:
        if self._stopping:
            _log.warning("second %s: exiting at once", signal.Signals(signum).name)
            _exit_now(1)
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
        self._draining = []
        self._executor = TrackedExecutor(self.concurrency, name="simpleworkflow-handler")
        self._step_executor = TrackedExecutor(name="simpleworkflow-step")
        backend = self._backend
        await self._prepare_schema()
        await backend.execute_async(backend.register_types(self._types, RUNTIME))
        outbox = Outbox(backend, self.worker_id)
        self._steps = StepJournal(backend)
        keeper = leases.Keeper(
            backend,
            self.worker_id,
            self._renewals,
            held=self._held,
            apply=self._apply,
            give_up=self._give_up,
            events=self.heartbeat_events,
            outage=self._outage,
        )
        outbox = Outbox(backend, self.worker_id, self._outage)
        self._steps = StepJournal(backend, self._outage)
        helpers = [
            asyncio.create_task(outbox.run(), name="outbox"),
            asyncio.create_task(self._steps.run(), name="journal"),
            asyncio.create_task(keeper.beat(), name="heartbeats"),
            asyncio.create_task(keeper.watch(), name="lease-ends"),
            asyncio.create_task(
                recovery.reap(backend, self._types, RUNTIME, self._on_recovered), name="reaper"
            ),
            asyncio.create_task(backend.listen(self._on_message), name="listen"),
            asyncio.create_task(self._report_unknown_versions(), name="versions"),
        ]
        if not backend.has_notifications:
            helpers.append(asyncio.create_task(keeper.look(), name="lease-watch"))
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
            running = await self._stop_attempts(outbox)
            await _cancel_all(helpers)
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._step_executor.shutdown(wait=False, cancel_futures=True)
            await backend.aclose()
            self._outcomes.flush()
            if running:
                shutdown.Lingering(
                    backend, self.worker_id, self.lease_duration, running, self.heartbeat_events
                ).start()
            _log.info("worker %s stopped", self.worker_id)

    async def _stop_attempts(self, outbox: Outbox) -> list[Attempt]:
        """Shut down gracefully (see ``shutdown``); return the attempts still running.
        A worker process exits here under them; embedded, they keep their runs leased
        until their code returns."""
        attempts = self._draining = list(self._active.values())
        running = await shutdown.drain(attempts, outbox, self.shutdown_grace, exiting=self._exiting)
        if running and self._exiting:
            self._outcomes.flush()
            _log.warning(
                "exiting with %s still running; their runs are due again in %gs",
                plural(len(running), "handler"),
                shutdown.EXIT_DELAY,
            )
            _exit_now()
        if running:
            _log.warning(
                "%s still running after the worker stopped; their runs stay leased until "
                "they return",
                plural(len(running), "handler"),
            )
        return running

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
        pause = 0.0
        while not self._stopping:
            free = self._free_slots()
            if free > 0 and (claim_more or self._woken):
                self._woken = False
                try:
                    leases = await self._claim_unless_stopping(free)
                except errors.StoreUnavailable as exc:
                    self._outage.failed(exc)
                    pause, self._woken = outage.next_pause(pause), True
                    await self._rest(pause)
                    continue
                self._outage.ended()
                pause = 0.0
                for lease in leases:
                    self._start(lease, outbox)
                claim_more = len(leases) == free
                continue
            if await self._rest(self.poll_interval):
                self._woken = True

    async def _rest(self, seconds: float) -> bool:
        """Wait ``seconds`` (then return True), or less if a wake-up or a request to stop
        comes first: after an outage the listener's reconnection is such a wake-up, so the
        next claim follows the server's return at once rather than the end of a pause."""
        assert self._signal is not None
        self._signal.clear()
        try:
            await asyncio.wait_for(self._signal.wait(), seconds)
        except TimeoutError:
            return True
        return False

    async def _claim_unless_stopping(self, limit: int) -> list[Lease]:
        """Claim, but give up when asked to stop: on a network gone silent a claim may
        wait for its connection's timeouts, and shutdown must not wait for them. Runs a
        claim given up on may have leased stay so until their leases expire."""
        assert self._signal is not None
        claim = asyncio.ensure_future(self._claim(limit))
        while not claim.done() and not self._stopping:
            self._signal.clear()
            stop = asyncio.ensure_future(self._signal.wait())
            await asyncio.wait({claim, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
        if not claim.done():
            claim.cancel()
            return []
        return claim.result()

    def _free_slots(self) -> int:
        """Slots for new runs. A run whose handler has returned no longer holds one while
        its outcome is written, so the next claim overlaps that write instead of waiting
        for it; at most ``concurrency`` such writes are waited for at a time. A suspect
        (see ``recovery``) runs alone: while it runs there are none."""
        if any(active.lease.isolated for active in self._active.values()):
            return 0
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
            alone=not self._active,
        )

    async def _claim(self, limit: int) -> list[Lease]:
        op = self._backend.claim(self._claim_request(limit))
        sent_at = time.monotonic()
        claimed = await self._backend.execute_async(op)
        self._renewals.granted((lease.token for lease in claimed), sent_at)
        return claimed

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
            executor=self._step_executor,
            lease_ended=functools.partial(self._renewals.ended, lease.token),
        )
        threads = Threads()
        task = asyncio.create_task(
            self._execute(lease, ctx, outbox, threads), name=f"run-{lease.run.id}"
        )
        self._active[lease.run.id] = Attempt(lease, ctx, task, threads)

    async def _execute(self, lease: Lease, ctx: Context, outbox: Outbox, threads: Threads) -> None:
        charge_to(threads)
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
            self._renewals.forget(lease.token)
            if self._own(lease) is not None:
                del self._active[lease.run.id]
                # Empty now: the moment to take a suspect, if one waits (see recovery).
                self._woken = self._woken or not self._active
            if self._signal is not None:
                self._signal.set()

    def _own(self, lease: Lease) -> Attempt | None:
        """This attempt's entry. Once a suspension is recorded the run may be due at once
        (a signal came) and claimed again by this worker before the attempt has cleaned
        up: the entry under its id is then the next attempt's, which it must leave alone."""
        active = self._active.get(lease.run.id)
        return active if active is not None and active.lease is lease else None

    # -- leases ----------------------------------------------------------------------

    def _held(self) -> list[tuple[str, str]]:
        """Leases to keep: those of attempts whose code runs, also when asked to stop at
        shutdown (until it has stopped, the run must not expire into other hands)."""
        attempts = [*(a for a in self._draining if not a.stopped), *self._active.values()]
        held = {
            a.lease.run.id: a.lease.token
            for a in attempts
            if not (a.finishing or a.ctx.stop_reason in ("cancelled", "lease lost"))
        }
        return list(held.items())

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
            self._renewals.forget(active.lease.token)  # nothing left to give up

    def _give_up(self, tokens: list[str]) -> None:
        """Leases about to end unrenewed (see ``leases``): stop their handlers, which
        then write nothing more; another worker may take the runs once the leases end."""
        ending = set(tokens)
        attempts = [
            a
            for a in self._active.values()
            if a.lease.token in ending and not (a.finishing or a.ctx.stop_reason == "cancelled")
        ]
        for attempt in attempts:
            attempt.ctx._request_stop("lease lost")
        if attempts:
            _log.warning(
                "lease lost: could not renew the lease of %s (%s) in time; stopping %s, "
                "writing nothing more for %s",
                plural(len(attempts), "run"),
                ", ".join(a.lease.run.id for a in attempts),
                "its handler" if len(attempts) == 1 else "their handlers",
                "it" if len(attempts) == 1 else "them",
            )

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

    def _on_recovered(self, failures: list[Failure]) -> None:
        """The reaper gave runs back: claim them when due (on SQLite no notification says
        so; other processes see the file change)."""
        for failure in failures:
            self._wake_in(_due_in(failure))


async def _cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait for them to end, cancelling again any that go on.

    A task can swallow a cancellation (Python 3.11's ``asyncio.wait_for`` does when the
    awaited call completes at the same moment, as a pool's connection request may), and
    one that lives on would keep the worker from ever exiting."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=1.0)


def _due_in(outcome: object) -> float:
    """Seconds until a run this worker just gave back is due again (inf: not at all)."""
    if isinstance(outcome, Failure) and not outcome.final:
        return max(outcome.delay, 0.001)
    if isinstance(outcome, Suspension):
        if outcome.run_at is not None:
            return max((outcome.run_at - datetime.now(UTC)).total_seconds(), 0.001)
        return max(outcome.delay, 0.001)
    return float("inf")


def _threads_outlive(timeout: float) -> bool:
    """Whether threads the interpreter would wait for at exit are still running after
    ``timeout`` seconds (idle threads of the pools end at once)."""
    deadline = time.monotonic() + timeout
    current = threading.current_thread()
    others = [t for t in threading.enumerate() if t is not current and not t.daemon]
    for thread in others:
        thread.join(max(deadline - time.monotonic(), 0.0))
    return any(thread.is_alive() for thread in others)


def _exit_now(status: int = 0) -> None:
    """End the process without waiting for threads that may never return."""
    logging.shutdown()
    os._exit(status)


def _checked_prefix(prefix: str) -> str:
    names.prefix_stem(prefix)
    return prefix
