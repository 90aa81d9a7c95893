"""Worker services, and the supervisor that keeps them running.

Beside its claim loop a worker runs side loops: heartbeats, the watch on lease ends, the
outbox, the journal, the reaper, the listener. Each is a *service*: an object with a
``name`` and an ``async run()`` that works until it is cancelled. A service that raises
an unexpected exception, or returns, is logged (with its traceback) and started again
after a pause that doubles from :data:`FIRST_BACKOFF` to :data:`MAX_BACKOFF`. One that
dies more than :data:`MAX_DEATHS` times within :data:`WINDOW` seconds is broken, not
unlucky: the worker then fails. So does the death of a *critical* service, one the worker
cannot run handlers without even for a moment (the watch that fences leases). A failed
worker stops claiming, stops its handlers, gives their runs back and raises
:class:`~simpleworkflow.errors.WorkerFailed` (a worker process exits non-zero).

A store outage is not a death: services catch ``StoreUnavailable`` and retry themselves,
logging the outage once (see ``outage``).

A new service is one class, registered the way the worker registers its own; a cron
scheduler looks like this (``start_due`` stands for what it calls)::

    class Scheduler:
        name = "scheduler"

        def __init__(self, client: AsyncClient, every: float = 60.0) -> None:
            self.client, self.every = client, every

        async def run(self) -> None:
            while True:
                await start_due(self.client)
                await asyncio.sleep(self.every)

    IntentPoller(app, services=[Scheduler(app.async_client())])

and inside the worker, ``supervisor.add(Scheduler(...))`` beside
``supervisor.add(Loop("heartbeats", keeper.beat), ...)``. The retention sweeper
(``sweeper``) is one, added when ``WorkerOptions.sweep_every`` is set.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from simpleworkflow import errors

_log = logging.getLogger("simpleworkflow.worker")

FIRST_BACKOFF = 0.1  # seconds before the first restart of a service that died
MAX_BACKOFF = 10.0  # the pause doubles up to this
MAX_DEATHS = 5  # a service that dies more often than this ...
WINDOW = 60.0  # ... within this many seconds fails the worker


class Service(Protocol):
    """Something a worker runs beside its claim loop, until the worker stops."""

    @property
    def name(self) -> str: ...

    async def run(self) -> None: ...


@dataclass(frozen=True)
class Loop:
    """A service made of a coroutine function, for the worker's own loops."""

    name: str
    body: Callable[[], Awaitable[None]]

    async def run(self) -> None:
        await self.body()


@dataclass(frozen=True)
class Limits:
    """When a service is restarted, and when its deaths fail the worker."""

    first_backoff: float = FIRST_BACKOFF
    max_backoff: float = MAX_BACKOFF
    max_deaths: int = MAX_DEATHS
    window: float = WINDOW


class Supervisor:
    """Runs services, restarts those that die, and reports the worker failed (once, to
    ``on_failure``) when one keeps dying or a critical one dies."""

    def __init__(
        self,
        on_failure: Callable[[errors.WorkerFailed], None],
        limits: Limits = Limits(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_failure = on_failure
        self._limits = limits
        self._clock = clock
        self._services: list[tuple[Service, bool]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.failure: errors.WorkerFailed | None = None

    def add(self, service: Service, *, critical: bool = False) -> None:
        """Run ``service`` from :meth:`start` on. ``critical``: its death fails the worker
        at once, without a restart."""
        self._services.append((service, critical))

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._supervise(service, critical), name=service.name)
            for service, critical in self._services
        ]

    async def stop(self) -> None:
        """Cancel every service and wait until each has ended."""
        await cancel_all(self._tasks)
        self._tasks = []

    async def _supervise(self, service: Service, critical: bool) -> None:
        deaths: deque[float] = deque()
        pause = self._limits.first_backoff
        while True:
            error = await _run_once(service)
            now = self._clock()
            while deaths and now - deaths[0] > self._limits.window:
                deaths.popleft()
            if not deaths:  # the last death is long past: start the backoff over
                pause = self._limits.first_backoff
            deaths.append(now)
            if critical or len(deaths) > self._limits.max_deaths:
                self._fail(service, error, critical, len(deaths))
                return
            what = "failed" if error is not None else "returned while the worker runs"
            _log.error(
                "worker service %r %s; restarting it in %.1fs",
                service.name,
                what,
                pause,
                exc_info=error,
            )
            await asyncio.sleep(pause)
            pause = min(pause * 2, self._limits.max_backoff)

    def _fail(self, service: Service, error: Exception | None, critical: bool, deaths: int) -> None:
        if critical:
            why = f"its service {service.name!r}, which it cannot run handlers without, died"
        else:
            why = (
                f"its service {service.name!r} died {deaths} times within {self._limits.window:g}s"
            )
        last = f"{type(error).__name__}: {error}" if error is not None else "it returned"
        failure = errors.WorkerFailed(
            f"the worker stops: {why} (last: {last}); its handlers are stopped and their "
            "runs given back"
        )
        failure.__cause__ = error
        _log.error("%s", failure, exc_info=error)
        if self.failure is None:
            self.failure = failure
            self._on_failure(failure)


async def _run_once(service: Service) -> Exception | None:
    """Run ``service`` until it ends: the exception it raised, or None if it returned."""
    try:
        await service.run()
    except Exception as exc:
        return exc
    return None


async def cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait for them to end, cancelling again any that go on.

    A task can swallow a cancellation (Python 3.11's ``asyncio.wait_for`` does when the
    awaited call completes at the same moment, as a pool's connection request may), and
    one that lives on would keep the worker from ever exiting."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=1.0)
