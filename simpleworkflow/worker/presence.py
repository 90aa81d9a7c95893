"""Worker presence as a worker service: the worker records itself in ``workflow_worker``
(who, where, what it claims, since when) and renews that row once per heartbeat interval,
so that operators see idle workers too, not only those holding leases.

One upsert per interval (a third of the lease, as the heartbeats): the row says the
worker is live until a lease's length past its last write, so a worker that died or lost
the store reads as gone when its leases would have run out too. A graceful stop marks
the row stopped. Rows gone for :data:`FORGET_AFTER` are deleted by the retention sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterable

from simpleworkflow import errors, outage
from simpleworkflow.backends import Backend
from simpleworkflow.backends.presence_ops import FORGET_AFTER, Presence
from simpleworkflow.version import __version__

#: Seconds a stopping worker spends marking itself stopped, at most.
STOP_TIMEOUT = 2.0
#: The pause after the store could not be reached, at most.
RETRY_PAUSE = 1.0


__all__ = ["FORGET_AFTER", "PresenceService", "this_process"]


def this_process(
    worker_id: str, runtime: str, type_prefixes: Iterable[str], concurrency: int
) -> Presence:
    """The presence of a worker running in this process."""
    return Presence(
        worker_id=worker_id,
        host=socket.gethostname(),
        pid=os.getpid(),
        runtime=runtime,
        type_prefixes=tuple(type_prefixes),
        concurrency=concurrency,
        version=__version__,
    )


class PresenceService:
    """Renews the worker's row every ``lease / 3`` seconds; marks it stopped when cancelled."""

    name = "presence"

    def __init__(
        self,
        backend: Backend,
        presence: Presence,
        lease_seconds: float,
        unavailable: outage.Outage | None = None,
    ) -> None:
        self.backend = backend
        self.presence = presence
        self.lease_seconds = lease_seconds
        self._outage = unavailable
        self._started = False

    @property
    def interval(self) -> float:
        return self.lease_seconds / 3

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(await self.beat())
        except asyncio.CancelledError:
            await self._stopped()
            raise

    async def beat(self) -> float:
        """Write the row once; return the pause before the next write."""
        op = self.backend.worker_seen(self.presence, self.lease_seconds, starting=not self._started)
        try:
            await self.backend.execute_async(op)
        except errors.StoreUnavailable as exc:
            if self._outage is not None:
                self._outage.failed(exc)
            return min(RETRY_PAUSE, self.interval)
        if self._outage is not None:
            self._outage.ended()
        self._started = True
        return self.interval

    async def _stopped(self) -> None:
        """Say the worker stopped, rather than leave it to read as gone a lease later."""
        if not self._started:
            return
        op = self.backend.worker_stopped(self.presence.worker_id, self.presence.pid)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.backend.execute_async(op), STOP_TIMEOUT)
