"""Keeping leases, and giving them up in time when they cannot be kept.

A lease is only as good as its last confirmed renewal. A worker cut off from the store
(connections terminated, a silent network, a locked SQLite file) cannot renew its
leases, and once they expire another worker claims the runs and runs the same steps. So
a worker fences itself: it knows, for each lease, until when its last confirmed renewal
holds it at the least, and when that moment comes within :func:`margin` seconds without
a new confirmation, it treats the lease as lost: the handler is asked to stop (reason
``"lease lost"``) and the attempt writes nothing more.

"At the least" means measured on the worker's own monotonic clock from the moment the
claim or the heartbeat was *sent*: the store set ``lease_until`` from its own clock when
the statement ran, later than that, so the worker's deadline never falls after the
store's, whatever the two clocks say. (A database crash may take a claim or heartbeat of
its last moment, which do not wait for the disk: the store's lease then ends earlier, or
the run is pending again, and the worker learns it from its next heartbeat or fenced
write; see docs/performance.md.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from simpleworkflow import errors, observe
from simpleworkflow.backends import Backend
from simpleworkflow.backends.base import CANCELLED, HELD, LOST
from simpleworkflow.durable.attempt import Attempt
from simpleworkflow.errors import plural
from simpleworkflow.outage import Outage
from simpleworkflow.worker import hooks

_log = logging.getLogger("simpleworkflow.worker")

RETRY_PAUSE = 0.5  # seconds between heartbeats while they fail, at most
WATCH_PAUSE = 0.25  # seconds between looks for leases about to end, at most


def margin(lease_seconds: float) -> float:
    """How long before its end a lease not renewed since is given up: a fifth of the
    lease, at least a second, but never more than a quarter of it: a short lease would
    otherwise be given up whenever one heartbeat (every third of the lease) is late."""
    return min(max(lease_seconds / 5, 1.0), lease_seconds / 4)


class Renewals:
    """Until when each held lease surely holds: by lease token, a monotonic time."""

    def __init__(self, lease_seconds: float) -> None:
        self.lease_seconds = lease_seconds
        self.margin = margin(lease_seconds)
        self._until: dict[str, float] = {}
        self._claims: dict[str, float] = {}  # when the claim of each lease was sent

    def granted(self, tokens: Iterable[str], sent_at: float) -> None:
        """The store granted these leases by a claim sent at ``sent_at``."""
        until = sent_at + self.lease_seconds
        for token in tokens:
            self._until[token] = until
            self._claims[token] = sent_at

    def claimed(self, token: str) -> float | None:
        """When the claim that granted the lease was sent: it found the run held then, as
        a read of it would have (see ``durable.holding``)."""
        return self._claims.get(token)

    def renewed(self, tokens: Iterable[str], sent_at: float) -> None:
        """The store extended these leases by a heartbeat sent at ``sent_at``. A lease
        given up meanwhile stays given up: its handler was already asked to stop."""
        until = sent_at + self.lease_seconds
        for token in tokens:
            if token in self._until:
                self._until[token] = max(self._until[token], until)

    def forget(self, token: str) -> None:
        self._until.pop(token, None)
        self._claims.pop(token, None)

    def until(self, token: str) -> float | None:
        return self._until.get(token)

    def ended(self, token: str) -> bool:
        """Whether the lease is given up, or due to be: safe to call from any thread."""
        until = self._until.get(token)
        return until is None or time.monotonic() >= until - self.margin

    def ending(self, now: float) -> list[str]:
        """Leases within the margin of their end (or past it): to be given up now."""
        return [token for token, until in self._until.items() if until - self.margin <= now]

    def next_end(self) -> float | None:
        """When the next lease must be given up, if none is renewed before."""
        if not self._until:
            return None
        return min(self._until.values()) - self.margin


class Keeper:
    """Renews the leases a worker holds, and fences it when renewals stop coming.

    ``held`` lists the ``(run id, token)`` leases to renew; ``apply`` hears what the store
    said of each (held, cancelled, lost); ``give_up`` is told the tokens of leases about
    to end unrenewed, and asks their handlers to stop. Heartbeats wait for the disk only
    if ``synchronous``: one lost in a database crash only ends its leases earlier, at the
    end the last durable renewal gave them.
    """

    def __init__(
        self,
        backend: Backend,
        worker_id: str,
        renewals: Renewals,
        *,
        held: Callable[[], list[tuple[str, str]]],
        apply: Callable[[Mapping[str, str]], None],
        give_up: Callable[[list[str]], None],
        events: bool = True,
        outage: Outage | None = None,
        synchronous: bool = True,
    ) -> None:
        self._backend = backend
        self._worker_id = worker_id
        self._renewals = renewals
        self._held = held
        self._apply = apply
        self._give_up = give_up
        self._events = events
        self._synchronous = synchronous
        # The worker's one account of the store's outages (logged once, and its end once).
        self._outage = outage or Outage(_log, backend.location)

    @property
    def interval(self) -> float:
        """Three heartbeats per lease while they succeed."""
        return self._renewals.lease_seconds / 3

    async def beat(self) -> None:
        """Extend every held lease about three times per lease duration; after a failure,
        try again within :data:`RETRY_PAUSE` seconds until the store answers."""
        pause = self.interval
        while True:
            await asyncio.sleep(pause)
            sent_at = time.monotonic()
            ok = await self._extend()
            spent = time.monotonic() - sent_at
            pause = max(self.interval - spent, 0.0) if ok else min(RETRY_PAUSE, self.interval)

    async def _extend(self) -> bool:
        leases = self._held()
        if not leases:
            return True
        sent_at = time.monotonic()
        renewals = self._renewals
        op = self._backend.heartbeat(
            self._worker_id, leases, renewals.lease_seconds, self._events, renewals.margin
        )
        try:
            states = await self._backend.execute_async(op, wait_for_disk=self._synchronous)
        except errors.StoreUnavailable as exc:
            self._outage.failed(exc)
            return False
        self._outage.ended()
        tokens = dict(leases)
        self._renewals.renewed(
            (tokens[run_id] for run_id, state in states.items() if state == HELD), sent_at
        )
        self._apply(states)
        return True

    async def look(self, interval: float = 0.5) -> None:
        """For stores without notifications: notice cancellations within ``interval``."""
        while True:
            await asyncio.sleep(interval)
            leases = self._held()
            if not leases:
                continue
            op = self._backend.lease_states(leases)
            try:
                states = await self._backend.execute_async(op, readonly=True)
            except errors.StoreUnavailable:
                continue
            self._apply(states)

    async def watch(self) -> None:
        """Give up each lease when its end comes within the margin unrenewed. Runs beside
        :meth:`beat`, whose statement may hang as long as the network is silent."""
        while True:
            now = time.monotonic()
            ending = self._renewals.ending(now)
            if ending:
                for token in ending:
                    self._renewals.forget(token)
                self._give_up(ending)
            next_end = self._renewals.next_end()
            pause = WATCH_PAUSE if next_end is None else min(next_end - now, WATCH_PAUSE)
            await asyncio.sleep(max(pause, 0.01))


class Attempts(Protocol):
    """What :class:`Holdings` reads of the worker's runner (``running.Runner``)."""

    active: dict[str, Attempt]  # by run id
    draining: list[Attempt]  # at shutdown: attempts that may still run


class Holdings:
    """The leases of a worker's attempts, as its :class:`Keeper` sees them: which to
    renew, what to do with what the store said of each, and which to give up."""

    def __init__(
        self, runner: Attempts, renewals: Renewals, observers: observe.Observer, worker_id: str
    ) -> None:
        self._runner = runner
        self._renewals = renewals
        self._observers = observers
        self._worker_id = worker_id

    def held(self) -> list[tuple[str, str]]:
        """Leases to keep: those of attempts whose code runs, also when asked to stop at
        shutdown (until it has stopped, the run must not expire into other hands)."""
        runner = self._runner
        attempts = [*(a for a in runner.draining if not a.stopped), *runner.active.values()]
        held = {
            a.lease.run.id: a.lease.token
            for a in attempts
            if not (a.finishing or a.state.stop_reason in ("cancelled", "lease lost"))
        }
        return list(held.items())

    def apply(self, states: Mapping[str, str]) -> None:
        for run_id, state in states.items():
            active = self._runner.active.get(run_id)
            if active is None or active.finishing or state == HELD:
                continue
            if state == CANCELLED:
                _log.info("run %s was cancelled; stopping its handler", run_id)
                active.state.request_stop("cancelled")
            elif state == LOST:
                self._lost(run_id, active)
            self._renewals.forget(active.lease.token)  # nothing left to give up

    def _lost(self, run_id: str, active: Attempt) -> None:
        """The store refused to renew a lease this worker still counted on. Either it ran
        out first (a late heartbeat: refused within the give-up margin or after the end,
        whether or not another worker took the run since), or, while it still held here,
        the run was taken from it (another worker, an operator)."""
        token = active.lease.token
        ran_out = self._renewals.ended(token)
        if ran_out:
            _log.warning(
                "run %s: its lease ran out before it could be renewed (a heartbeat came "
                "too late); abandoning it",
                run_id,
            )
        else:
            _log.warning("run %s: lease lost to another worker; abandoning it", run_id)
        active.state.request_stop("lease lost")
        if self._renewals.until(token) is not None:  # said once
            why = hooks.NOT_RENEWED if ran_out else hooks.TAKEN
            hooks.lease_lost(self._observers, active.state, self._worker_id, why)

    def give_up(self, tokens: list[str]) -> None:
        """Leases about to end unrenewed (see above): stop their handlers, which then
        write nothing more; another worker may take the runs once the leases end."""
        ending = set(tokens)
        attempts = [
            a
            for a in self._runner.active.values()
            if a.lease.token in ending and not (a.finishing or a.state.stop_reason == "cancelled")
        ]
        for attempt in attempts:
            attempt.state.request_stop("lease lost")
        if attempts:
            warn_not_renewed([a.lease.run.id for a in attempts])
        for attempt in attempts:
            hooks.lease_lost(self._observers, attempt.state, self._worker_id, hooks.NOT_RENEWED)


def warn_not_renewed(run_ids: list[str]) -> None:
    """The operator's one line for leases given up unrenewed, whoever saw it first: the
    watch above, or a handler asking ``ctx.is_cancelled()`` just before it (the runner
    then says it, see ``running``)."""
    _log.warning(
        "lease lost: could not renew the lease of %s (%s) in time; stopping %s, "
        "writing nothing more for %s",
        plural(len(run_ids), "run"),
        ", ".join(run_ids),
        "its handler" if len(run_ids) == 1 else "their handlers",
        "it" if len(run_ids) == 1 else "them",
    )
