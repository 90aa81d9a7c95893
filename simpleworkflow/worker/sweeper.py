"""The retention sweeper as a worker service: one worker of a fleet deletes the runs past
their retention, in bounded batches, every ``sweep_every``.

Every worker runs one unless told not to (``WorkerOptions(sweep=False)``, ``simpleworkflow
worker --no-sweep``), every 5 minutes unless ``sweep_every`` or
``$SIMPLEWORKFLOW_SWEEP_EVERY`` says, so that finished runs do not pile up forever by
default. The workers take turns through a lease row (``workflow_service_lease``, named
``sweeper``): each batch takes or renews the lease in its own transaction, so only the
holder deletes, and a holder that stalled past its lease stops at its next batch. The
lease lasts :data:`LEASE_ROUNDS` rounds (at least :data:`MIN_LEASE` seconds): a holder
that dies hands the sweep on within that, and one that stops gives the lease back at once
(the others have nothing to give back, and stop without a statement).

What a round deletes and why (retention per run, per type, default, ceiling) is the
admin's ``sweep``; see :mod:`simpleworkflow.retention` and docs/retention.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging

from simpleworkflow import errors, observe, outage, retention
from simpleworkflow.backends import Backend
from simpleworkflow.backends.records import ServiceLease

_log = logging.getLogger("simpleworkflow.worker")

#: The lease outlasts this many rounds: the holder renews it every round, and if it dies
#: another worker takes over at most this many rounds later.
LEASE_ROUNDS = 2
MIN_LEASE = 60.0
#: Seconds a stopping sweeper spends giving its lease back, at most.
RELEASE_TIMEOUT = 2.0


class Sweeper:
    """Sweeps every ``every`` seconds while it holds the fleet's sweeper lease."""

    name = "sweeper"

    def __init__(
        self,
        backend: Backend,
        holder: str,
        every: float,
        policy: retention.Policy,
        observers: observe.Observer,
        unavailable: outage.Outage | None = None,
    ) -> None:
        self.backend = backend
        self.every = every
        self.policy = policy
        self.observers = observers
        self.lease = ServiceLease(
            name=retention.SWEEPER, holder=holder, seconds=max(LEASE_ROUNDS * every, MIN_LEASE)
        )
        self._outage = unavailable
        # whether the last batch held the lease: only a holder has one to give back
        self._holding = False

    async def run(self) -> None:
        try:
            while True:
                await self.sweep_once()
                await asyncio.sleep(self.every)
        finally:
            await self._release()

    async def sweep_once(self) -> retention.Batches:
        """One round: batches until one finds nothing, the lease is another's, or the
        store cannot be reached (the next round tries again)."""
        sweep = functools.partial(
            self.backend.sweep_runs,
            self.policy.default,
            self.policy.ceiling,
            retention.MAX_BATCH,
            self.lease,
        )
        one_writer = not self.backend.dialect.skip_locked
        batches = retention.Batches(
            sweep, retention.MAX_BATCH, self.observers, until_empty=True, one_writer=one_writer
        )
        try:
            while not batches.done:
                try:
                    gone = await self.backend.execute_async(batches.batch())
                except errors.StoreUnavailable as exc:
                    if self._outage is not None:
                        self._outage.failed(exc)
                    break
                if self._outage is not None:
                    self._outage.ended()
                self._holding = gone is not None
                batches.took(gone)
                await asyncio.sleep(batches.rest)
        finally:  # what went is told even when the worker stops mid-round
            if batches.total:
                _log.info(
                    "sweeper deleted %d run(s) past their retention: %s",
                    batches.total,
                    ", ".join(f"{name} {n}" for name, n in sorted(batches.deleted.items())),
                )
        return batches

    async def _release(self) -> None:
        """Give the lease back, so that another worker sweeps without waiting for it."""
        if not self._holding:
            return
        op = self.backend.release_service_lease(self.lease)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.backend.execute_async(op), RELEASE_TIMEOUT)
