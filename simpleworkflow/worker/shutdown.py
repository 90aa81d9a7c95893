"""Graceful shutdown: finish what can finish, give back what stopped, and never give back
a run whose code still runs.

A run given back is claimable by every other worker at once. If a thread of this process
were still running its code (Python cannot interrupt a thread), the same code would run
twice at the same time. So only runs whose attempt has really stopped are released. For
the others there are two ways out, depending on who owns the process:

- a worker process (:meth:`IntentPoller.run`) exits, which stops them; their runs are
  released just before, due again :data:`EXIT_DELAY` seconds later, long after the exit;
- an embedded worker (:meth:`IntentPoller.run_async`) cannot end the process, so a thread
  of its own (:class:`Lingering`) keeps their leases alive until their code returns, and
  then releases them.

Either way no attempt is charged for a shutdown, and the process does not wait for code
that ignores the request to stop: ``run`` exits within the grace period plus a few
seconds, whatever its threads do.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Iterable

from simpleworkflow import errors
from simpleworkflow.backends import Backend
from simpleworkflow.backends.base import HELD, Outcomes, Release
from simpleworkflow.durable.attempt import Attempt
from simpleworkflow.errors import plural
from simpleworkflow.outage import Outage
from simpleworkflow.worker.outbox import Outbox

_log = logging.getLogger("simpleworkflow.worker")

STOP_WAIT = 1.0  # seconds attempts told to stop at the end of the grace period have to do so
WRITE_WAIT = 5.0  # seconds the last outcomes and releases may take to be written
EXIT_DELAY = 5.0  # a run still running when its process exits is due again this much later
LINGER_POLL = 0.1  # how often a lingering run's threads are checked


async def drain(
    attempts: list[Attempt],
    outbox: Outbox,
    grace: float,
    *,
    exiting: bool,
    unstarted: list[Attempt] | None = None,
) -> list[Attempt]:
    """Let ``attempts`` finish within ``grace`` seconds, ask the rest to stop, and give back
    the runs of those that did. Return the attempts whose code still runs.

    ``exiting``: the process exits next, which stops them; their runs are given back too,
    due again :data:`EXIT_DELAY` seconds from now. ``unstarted``: attempts claimed ahead
    whose handler never ran (and never will): their runs are given back first, at once,
    for other workers to take while these finish.
    """
    if unstarted:
        await _write(outbox, [_release(a) for a in unstarted])
    if attempts and grace > 0:
        _log.info("waiting up to %gs for %s", grace, plural(len(attempts), "handler"))
        await until_stopped(attempts, grace)
    leftovers = [a for a in attempts if not a.stopped]
    for attempt in leftovers:
        attempt.state.request_stop("shutdown")
    if leftovers:
        await until_stopped(leftovers, STOP_WAIT)
    running = [a for a in leftovers if not a.stopped]
    releases = [_release(a) for a in leftovers if a.stopped]
    if exiting:
        releases += [_release(a, EXIT_DELAY) for a in running]
    await _write(outbox, releases)
    return running


async def until_stopped(attempts: Iterable[Attempt], timeout: float) -> None:
    """Wait until every attempt has stopped (its task done, its threads ended), or
    ``timeout`` seconds have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    waiting = list(attempts)
    tasks = [a.task for a in waiting if not a.task.done()]
    if tasks:
        await asyncio.wait(tasks, timeout=timeout)
    while any(not a.stopped for a in waiting) and loop.time() < deadline:
        await asyncio.sleep(0.02)  # threads say nothing when they end: look again soon


def _release(attempt: Attempt, delay: float = 0.0) -> Release:
    trace = attempt.state.trace_context  # for the next attempt to link to
    lease = attempt.lease
    return Release(lease.run.id, lease.token, delay, trace=trace, counted=lease.counted)


async def _write(outbox: Outbox, releases: list[Release]) -> None:
    """Record ``releases`` and whatever else is queued, for at most :data:`WRITE_WAIT`."""

    async def write() -> list[bool | BaseException]:
        done = await asyncio.gather(*map(outbox.record, releases), return_exceptions=True)
        await outbox.drained()
        return done

    try:
        done = await asyncio.wait_for(write(), WRITE_WAIT)
    except TimeoutError:
        _log.warning(
            "the store did not take the last outcomes within %gs; runs not recorded are "
            "recovered when their leases expire",
            WRITE_WAIT,
        )
        return
    if releases:
        _log.info("released %s", plural(sum(r is True for r in done), "unfinished run"))


class Lingering(threading.Thread):
    """Holds the runs of attempts whose threads outlived an embedded worker's shutdown:
    extends their leases while those threads run, releases each run once they end."""

    def __init__(
        self,
        backend: Backend,
        worker_id: str,
        lease_seconds: float,
        attempts: list[Attempt],
        heartbeat_events: bool = True,
    ) -> None:
        super().__init__(name=f"simpleworkflow-lingering-{worker_id}", daemon=True)
        self._backend = backend
        self._worker_id = worker_id
        self._lease_seconds = lease_seconds
        self._held = {a.lease.run.id: a for a in attempts}
        self._events = heartbeat_events
        self._outage = Outage(_log, backend.location)  # logged once, not every poll

    def run(self) -> None:
        beat = 0.0  # when the leases are next extended (monotonic)
        while self._held:
            try:
                self._release_ended()
                if self._held and time.monotonic() >= beat:
                    self._extend()
                    beat = time.monotonic() + self._lease_seconds / 3
            except errors.StoreUnavailable as exc:
                self._outage.failed(exc)
            else:
                self._outage.ended()
            time.sleep(LINGER_POLL)
        self._backend.close()

    def _release_ended(self) -> None:
        ended = [a for a in self._held.values() if not a.threads.running]
        if not ended:
            return
        outcomes = Outcomes(released=[_release(a) for a in ended])
        released = self._backend.execute(self._backend.finish(outcomes, self._worker_id))
        _log.info(
            "released %s whose handlers ended after the worker stopped",
            plural(len(released), "run"),
        )
        for attempt in ended:
            del self._held[attempt.lease.run.id]

    def _extend(self) -> None:
        leases = [(run_id, a.lease.token) for run_id, a in self._held.items()]
        op = self._backend.heartbeat(self._worker_id, leases, self._lease_seconds, self._events)
        for run_id, state in self._backend.execute(op).items():
            if state != HELD:  # cancelled, or taken over: nothing left to hold
                self._held.pop(run_id, None)


def threads_outlive(timeout: float) -> bool:
    """Whether threads the interpreter would wait for at exit are still running after
    ``timeout`` seconds (idle threads of the pools end at once)."""
    deadline = time.monotonic() + timeout
    current = threading.current_thread()
    others = [t for t in threading.enumerate() if t is not current and not t.daemon]
    for thread in others:
        thread.join(max(deadline - time.monotonic(), 0.0))
    return any(thread.is_alive() for thread in others)


def exit_now(status: int = 0) -> None:
    """End the process without waiting for threads that may never return."""
    logging.shutdown()
    os._exit(status)
