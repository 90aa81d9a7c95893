"""IntentPoller: claims due runs by type prefix, runs their handlers, records outcomes.

One event loop does all the bookkeeping: the claim loop (``claiming``) leases as many runs
as there are free slots (and, while handlers are quick, some more: ``slots``) in one
statement and starts an attempt for each (``running``);
beside it, supervised services (``supervisor``) extend every held lease in one statement
and fence the worker when they cannot (``leases``), recover expired leases of crashed
workers (``recovery``), listen for wake-ups and cancellations (``timer``), and
group-commit outcomes and journal entries. Sync handlers run in a thread pool, async ones
on the loop; ``shutdown`` stops them. This module ties the parts together.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Unpack

from simpleworkflow import errors, observe, outage
from simpleworkflow.backends import Backend, open_backend
from simpleworkflow.backends.base import CANCELLED, Failure
from simpleworkflow.backends.schema_verdict import ensure_async
from simpleworkflow.durable.attempt import Attempt, TrackedExecutor
from simpleworkflow.durable.journal_batches import StepJournal
from simpleworkflow.errors import plural
from simpleworkflow.handlers import Handlers
from simpleworkflow.worker import hooks, leases, limits, presence, recovery, scheduler, shutdown
from simpleworkflow.worker.claiming import ClaimLoop
from simpleworkflow.worker.log_observer import OutcomeLog
from simpleworkflow.worker.options import RUNTIME, WorkerOptions, WorkerSettings
from simpleworkflow.worker.outbox import Outbox
from simpleworkflow.worker.running import Runner
from simpleworkflow.worker.supervisor import Loop, Service, Supervisor
from simpleworkflow.worker.sweeper import Sweeper
from simpleworkflow.worker.timer import Bell, due_in

_log = logging.getLogger("simpleworkflow.worker")


class IntentPoller:
    """A worker for the handlers of ``app`` whose types match ``type_prefixes``.

    ``IntentPoller(type_prefixes=["billing.%"], lease_duration=30, worker_id="w1")``
    works as it stands; register handlers on ``poller.app`` (or pass ``app=``), then
    call :meth:`run` (blocking, handles SIGTERM/SIGINT) or await :meth:`run_async`.
    The keyword arguments are the fields of :class:`WorkerOptions`; ``options=`` gives
    them all at once (keywords given too replace its fields).
    """

    def __init__(
        self,
        app: Handlers | None = None,
        *,
        options: WorkerOptions | None = None,
        backend: Backend | None = None,
        **settings: Unpack[WorkerSettings],
    ) -> None:
        given: dict[str, Any] = dict(settings)
        self.options = replace(options, **given) if options else WorkerOptions(**given)
        self.app = app or Handlers(self.options.database_url, schema=self.options.schema)
        self._backend = backend or open_backend(
            self.options.database_url or self.app.database_url,
            schema=self.options.schema or self.app.schema,
            application_name=self.worker_id,
        )
        self._bell = Bell()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exiting = False  # run() ends the process: what still runs stops with it
        self._failure: errors.WorkerFailed | None = None
        self._types: list[str] = []
        self._outcomes = OutcomeLog(_log)
        self._renewals = leases.Renewals(self.options.lease_duration)
        self._outage = outage.Outage(_log, self._backend.location)
        self._reports: set[asyncio.Task[None]] = set()  # see recovery.report_unreadable

    @property
    def worker_id(self) -> str:
        return self.options.worker_id

    @property
    def type_prefixes(self) -> list[str]:
        return list(self.options.type_prefixes)

    @property
    def lease_duration(self) -> float:
        return self.options.lease_duration

    @property
    def concurrency(self) -> int:
        return self.options.concurrency

    @property
    def poll_interval(self) -> float:
        return self.options.poll_interval

    @property
    def watch_interval(self) -> float:
        return self.options.watch_interval

    @property
    def shutdown_grace(self) -> float:
        return self.options.shutdown_grace

    @property
    def heartbeat_events(self) -> bool:
        return self.options.heartbeat_events

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
        handlers' threads do: see ``shutdown``. Raises :class:`~simpleworkflow.errors.
        WorkerFailed` (or exits with status 1) when a service of the worker kept dying."""
        self._exiting = True
        try:
            asyncio.run(self._run_with_signals())
        except errors.WorkerFailed:
            self._exit_if_threads_outlive(1)
            raise
        self._exit_if_threads_outlive(0)

    def _exit_if_threads_outlive(self, status: int) -> None:
        if shutdown.threads_outlive(shutdown.STOP_WAIT):
            # Threads no attempt owned (a handler's own): the interpreter's exit would wait
            # for them, maybe forever.
            _log.warning("exiting with threads of handlers still running")
            shutdown.exit_now(status)

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        # The loop is ours: threads a handler starts with asyncio.to_thread count as its
        # attempt's, and the loop's teardown waits for none of them.
        loop.set_default_executor(TrackedExecutor(name="simpleworkflow-default", join=False))
        await self.run_async()

    def _on_signal(self, signum: int) -> None:
        if self._bell.stopping:
            _log.warning("second %s: exiting at once", signal.Signals(signum).name)
            shutdown.exit_now(1)
        _log.info(
            "%s: finishing running handlers, then stopping (a second Ctrl-C or SIGTERM exits "
            "at once)",
            signal.Signals(signum).name,
        )
        self._bell.stop()

    def stop(self) -> None:
        """Ask the worker to stop gracefully; safe from any thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._bell.stop)

    def _failed(self, failure: errors.WorkerFailed) -> None:
        """The supervisor gave up on a service: stop claiming, then stop the handlers."""
        self._failure = failure
        self._bell.stop()

    async def run_async(self) -> None:
        """Work until :meth:`stop` is called (or the task is cancelled).

        Raises :class:`~simpleworkflow.errors.WorkerFailed` after stopping its handlers
        and giving their runs back, when a service of the worker kept dying."""
        types = self._types = self.types
        if not types:
            raise errors.ConfigurationError(
                f"no registered handler matches the prefixes {self.type_prefixes}; "
                f"registered types: {sorted(self.app.definitions) or 'none'}"
            )
        self._loop = asyncio.get_running_loop()
        self._bell.start()
        self._failure = None
        backend = self._backend
        await self._prepare_schema()
        await backend.execute_async(backend.register_types(types, RUNTIME))
        await scheduler.declare(backend, self.app.schedules, types)
        declared = {t: self.app.definitions[t].limits for t in types}
        await limits.declare(backend, self.app.rate_limits, declared)
        runner, claims, outbox, supervisor = self._assemble(types)
        supervisor.start()
        _log.info(
            "worker %s claiming %s on %s (concurrency %d)",
            self.worker_id,
            ", ".join(types),
            backend.location,
            self.concurrency,
        )
        try:
            await claims.run()
        finally:
            await self._wind_down(runner, outbox, supervisor)
        if self._failure is not None:
            raise self._failure

    def _assemble(self, types: list[str]) -> tuple[Runner, ClaimLoop, Outbox, Supervisor]:
        """The parts of one ``run_async``: they live as long as it does."""
        backend = self._backend
        # Today's outcome lines come first, then whatever the app registered.
        observers = observe.Observers([self._outcomes, self.app.observers])
        outbox = Outbox(backend, self.worker_id, self._outage)
        steps = StepJournal(backend, self._outage)
        runner = Runner(
            self.app,
            self.worker_id,
            self.concurrency,
            backend,
            claim_batch=self.options.claim_batch,
            outbox=outbox,
            steps=steps,
            renewals=self._renewals,
            bell=self._bell,
            observers=observers,
            step_log=self._outcomes,
        )
        outbox.running = runner.handlers_running
        outbox.in_threads = runner.handlers_in_threads
        claims = ClaimLoop(
            backend,
            self.options,
            self.app.definitions,
            types,
            runner=runner,
            bell=self._bell,
            renewals=self._renewals,
            unavailable=self._outage,
        )
        outbox.claim_sending = claims.sending
        supervisor = Supervisor(self._failed)
        for service, critical in self._services(runner, claims, outbox, steps, observers):
            supervisor.add(service, critical=critical)
        return runner, claims, outbox, supervisor

    async def _wind_down(self, runner: Runner, outbox: Outbox, supervisor: Supervisor) -> None:
        running = await self._stop_attempts(runner, outbox)
        await supervisor.stop()
        runner.close()
        await self._backend.aclose()
        self._outcomes.flush()
        if running:
            shutdown.Lingering(
                self._backend, self.worker_id, self.lease_duration, running, self.heartbeat_events
            ).start()
        _log.info("worker %s stopped", self.worker_id)

    def _services(
        self,
        runner: Runner,
        claims: ClaimLoop,
        outbox: Outbox,
        steps: StepJournal,
        observers: observe.Observer,
    ) -> Iterator[tuple[Service, bool]]:
        """The worker's side loops, and whether each is critical (see ``supervisor``):
        heartbeats may die and come back, since the watch on lease ends stops handlers
        whose leases were not renewed in time; the watch itself may not."""
        backend = self._backend
        holdings = leases.Holdings(runner, self._renewals, observers, self.worker_id)
        keeper = leases.Keeper(
            backend,
            self.worker_id,
            self._renewals,
            held=holdings.held,
            apply=holdings.apply,
            give_up=holdings.give_up,
            events=self.heartbeat_events,
            outage=self._outage,
            synchronous=bool(self.options.synchronous_claims),
        )
        recovered = functools.partial(self._on_recovered, observers)
        reap = functools.partial(
            recovery.reap, backend, self._types, RUNTIME, recovered, self.worker_id
        )
        on_message = functools.partial(self._on_message, holdings)
        listen = functools.partial(backend.listen, on_message, claims.claim_after_wake)
        yield Loop("outbox", outbox.run), False
        yield Loop("journal", steps.run), False
        yield Loop("lease-checks", steps.checks.run), False
        yield Loop("heartbeats", keeper.beat), False
        yield Loop("lease-ends", keeper.watch), True
        yield Loop("reaper", reap), False
        yield Loop("listen", listen), False
        yield Loop("versions", claims.report_unknown_versions), False
        me = presence.this_process(self.worker_id, RUNTIME, self.type_prefixes, self.concurrency)
        yield presence.PresenceService(backend, me, self.lease_duration, self._outage), False
        if not backend.has_notifications:
            yield Loop("lease-watch", keeper.look), False
            if self.watch_interval > 0:
                changes = backend.watch_changes
                watch = functools.partial(changes, self._on_change, self.watch_interval)
                yield Loop("change-watch", watch), False
        if self.options.sweep_every is not None:
            policy = self.options.policy()
            every = self.options.sweep_every
            sweeper = Sweeper(backend, self.worker_id, every, policy, observers, self._outage)
            yield sweeper, False
        if self.options.scheduler:
            yield scheduler.Scheduler(backend, self._outage, observers=observers), False
        for service in self.options.services:
            yield service, False

    async def _stop_attempts(self, runner: Runner, outbox: Outbox) -> list[Attempt]:
        """Shut down gracefully (see ``shutdown``); return the attempts still running.
        A worker process exits here under them; embedded, they keep their runs leased
        until their code returns. A failed worker gives its handlers no grace."""
        unstarted = runner.stop_waiting()
        attempts = runner.draining = [a for a in runner.active.values() if a.started]
        grace = 0.0 if self._failure is not None else self.shutdown_grace
        running = await shutdown.drain(
            attempts, outbox, grace, exiting=self._exiting, unstarted=unstarted
        )
        if running and self._exiting:
            self._outcomes.flush()
            _log.warning(
                "exiting with %s still running; their runs are due again in %gs",
                plural(len(running), "handler"),
                shutdown.EXIT_DELAY,
            )
            shutdown.exit_now(1 if self._failure is not None else 0)
        if running:
            _log.warning(
                "%s still running after the worker stopped; their runs stay leased until "
                "they return",
                plural(len(running), "handler"),
            )
        return running

    async def _prepare_schema(self) -> None:
        backend = self._backend
        if await ensure_async(backend) is None:
            # A worker started in the wrong directory makes a new file and idles.
            _log.warning(
                "created a new, empty database at %s: no runs wait in it. If your runs "
                "are in another database, stop this worker and point it there (-d, "
                "$SIMPLEWORKFLOW_DATABASE_URL, or the directory it runs in)",
                backend.location,
            )

    # -- what the store says -----------------------------------------------------------

    def _on_message(self, holdings: leases.Holdings, kind: str, value: str) -> None:
        """A notification: ``cancel <run id>``, or ``wake [<type> [<due epoch>]]``."""
        if kind == "cancel":
            holdings.apply({value: CANCELLED})
            return
        type_name, _, due = value.partition(" ")
        if kind != "wake" or (type_name and type_name not in self._types):
            return
        try:
            delay = float(due) - self._backend.now().timestamp() if due else 0.0
        except ValueError:
            delay = 0.0
        self._bell.wake_in(delay)

    def _on_change(self) -> None:
        """Another connection wrote to the store (SQLite): there may be new work."""
        self._bell.wake_in(0.0)

    def _on_recovered(self, observers: observe.Observer, failures: list[Failure]) -> None:
        """The reaper gave runs back: claim them when due (on SQLite no notification says
        so; other processes see the file change)."""
        hooks.reaped(observers, [failure.run_id for failure in failures])
        unreadable = [failure for failure in failures if "unreadable" in failure.data]
        if unreadable:
            report = recovery.report_unreadable(
                self._backend, observers, self.worker_id, unreadable
            )
            task = asyncio.create_task(report)
            self._reports.add(task)
            task.add_done_callback(self._reports.discard)
        for failure in failures:
            self._bell.wake_in(due_in(failure, self._backend.now))
