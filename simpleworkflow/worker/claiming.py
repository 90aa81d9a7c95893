"""The claim loop: lease as many due runs as there are free slots, in one statement.

It claims again at once while claims fill every free slot (there may be more), and
otherwise rests until its :class:`~simpleworkflow.worker.timer.Bell` rings or the poll
interval passes. While the store is down it retries within a second (see ``outage``).

A notification that wakes an idle worker is followed by a claim from the listener's own
task, on the connection that received it (:meth:`ClaimLoop.claim_after_wake`, see
``Backend.listen``); one claim at a time either way, and if that one fails the loop
claims again through the pool.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from simpleworkflow import errors, outage
from simpleworkflow.backends import Backend
from simpleworkflow.backends.base import Claim, Lease, OpRunner
from simpleworkflow.errors import plural
from simpleworkflow.handlers import Definition
from simpleworkflow.worker.leases import Renewals
from simpleworkflow.worker.options import RUNTIME, WorkerOptions
from simpleworkflow.worker.running import Runner
from simpleworkflow.worker.timer import Bell

_log = logging.getLogger("simpleworkflow.worker")

VERSIONS_INTERVAL = 300.0  # seconds between warnings about runs of unknown code versions
#: After a rate limit's next window opens, by the database's clock, the claim waits this
#: much more: a claim a moment early would find the throttled runs not yet due.
WINDOW_MARGIN = 0.005
#: Seconds the loop's end waits for a claim in flight on the listening connection, so
#: that the runs it leased are started (and then stopped gracefully) rather than left
#: leased until their leases expire.
LAST_CLAIM_WAIT = 1.0


class ClaimLoop:
    """Claims runs of ``types`` for ``runner`` until the bell says stop."""

    def __init__(
        self,
        backend: Backend,
        options: WorkerOptions,
        definitions: Mapping[str, Definition],
        types: list[str],
        *,
        runner: Runner,
        bell: Bell,
        renewals: Renewals,
        unavailable: outage.Outage,
    ) -> None:
        self._backend = backend
        self._options = options
        self._definitions = definitions
        self._types = types
        self._runner = runner
        self._bell = bell
        self._renewals = renewals
        self._outage = unavailable
        #: Whether the last claim found a limit on any of ``types``: until one says not,
        #: each claim heeds limits (see ``Claim.limited``).
        self._limited = True
        self._claiming = False  # a claim is in flight (the loop's or the listener's)
        #: The loop has decided to claim and its claim is not sent yet (see ``sending``).
        self._about_to_send = False
        self._after_wake: asyncio.Future[None] | None = None  # the listener's, in flight

    async def run(self) -> None:
        bell = self._bell
        claim_more = True  # the last claim filled every free slot: there may be more
        pause = 0.0
        while not bell.stopping:
            free = self._runner.free_slots()
            if free > 0 and (claim_more or bell.woken) and not self._claiming:
                bell.woken = False
                self._claiming = self._about_to_send = True
                try:
                    leases = await self._claim_unless_stopping(free)
                except errors.StoreUnavailable as exc:
                    self._outage.failed(exc)
                    pause, bell.woken = outage.next_pause(pause), True
                    await bell.rest(pause)
                    continue
                except Exception:
                    # The store refused the claim itself (a row that breaks the schema's
                    # own checks, written with them off): the worker stays up, fails
                    # such runs where it can, and tries again, less and less often.
                    _log.exception("claiming runs failed; trying again")
                    pause, bell.woken = outage.next_pause(pause), True
                    if not await self._fail_unparsable():
                        await bell.rest(max(pause, self._options.poll_interval))
                    continue
                finally:
                    self._claiming = self._about_to_send = False
                self._outage.ended()
                pause = 0.0
                for lease in leases:
                    self._runner.start(lease)
                claim_more = len(leases) == free
                continue
            if await bell.rest(self._options.poll_interval):
                bell.woken = True
        if self._after_wake is not None:
            await asyncio.wait({self._after_wake}, timeout=LAST_CLAIM_WAIT)
            self._after_wake = None  # one still in flight leaves its runs to expire

    def sending(self) -> bool:
        """Whether the loop's claim is about to be sent (a turn or two of the event loop
        from now): the outbox lets it go first, since its rows start the next handlers and
        the outcomes' commit starts nothing."""
        return self._about_to_send

    async def claim_after_wake(self, execute: OpRunner) -> None:
        """Right after a notification woke the worker: claim with ``execute`` (on the
        connection that received it), unless the loop claims already or nothing woke
        it. A failure leaves the claim to the loop, through the pool."""
        bell = self._bell
        free = self._runner.free_slots()
        if self._claiming or bell.stopping or not bell.woken or free <= 0:
            return
        bell.woken, self._claiming = False, True
        done = self._after_wake = asyncio.get_running_loop().create_future()
        try:
            leases = await self._claim(free, execute)
        except Exception as exc:
            _log.debug("claiming on the listening connection failed (%s); claiming again", exc)
            leases, bell.woken = [], True
        finally:
            self._claiming = False
            done.set_result(None)
        if self._after_wake is done:  # else the loop has ended without them
            self._after_wake = None
            for lease in leases:
                self._runner.start(lease)
            bell.woken = bell.woken or len(leases) == free  # there may be more
        bell.ring()
        await asyncio.sleep(0)  # the handlers begin before the listener listens again

    async def _claim_unless_stopping(self, limit: int) -> list[Lease]:
        """Claim, but give up when asked to stop: on a network gone silent a claim may
        wait for its connection's timeouts, and shutdown must not wait for them. Runs a
        claim given up on may have leased stay so until their leases expire."""
        claim = asyncio.ensure_future(self._claim(limit))
        while not claim.done() and not self._bell.stopping:
            stop = self._bell.next_ring()
            either: set[asyncio.Future[Any]] = {claim, stop}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
        if not claim.done():
            claim.cancel()
            return []
        return claim.result()

    async def _fail_unparsable(self) -> bool:
        """After a failed claim: fail the runs no claim can lease (see
        ``Backend.fail_unparsable``); True if there were any."""
        op = self._backend.fail_unparsable(self._types, self._options.worker_id)
        try:
            failed = await self._backend.execute_async(op)
        except Exception:
            _log.exception("failing the runs that break the schema's checks failed")
            return False
        for run_id in failed:
            _log.error(
                "run %s cannot be read: its JSON breaks the schema's checks (written "
                "with them off); failed, each such text kept as a JSON string",
                run_id,
            )
        return bool(failed)

    def request(self, limit: int) -> Claim:
        definitions = [self._definitions[t] for t in self._types]
        return Claim(
            worker_id=self._options.worker_id,
            types=tuple(self._types),
            limit=limit,
            lease_seconds=self._options.lease_duration,
            runtime=RUNTIME,
            versions={d.type: d.version for d in definitions},
            known=tuple(f"{d.type}@{v}" for d in definitions for v in d.known_versions),
            alone=not self._runner.active,
            limited=self._limited,
            wait_for_disk=bool(self._options.synchronous_claims),
        )

    async def _claim(self, limit: int, execute: OpRunner | None = None) -> list[Lease]:
        request = self.request(limit)
        op = self._backend.claim_runs(request)
        sent_at = time.monotonic()
        self._about_to_send = False  # sent in this turn, before the outbox's next write
        # Unless told otherwise, the claim does not wait for the disk (request's
        # wait_for_disk): lost in a database crash, its runs are due again
        # (docs/performance.md).
        claimed = await (execute or self._backend.execute_async)(op)
        self._limited = claimed.limited
        if claimed.limited and not request.limited:
            self._bell.woken = True  # a type limited since: its runs wait for a full claim
        self._renewals.granted((lease.token for lease in claimed.leases), sent_at)
        if claimed.throttled_for is not None:  # claim again when the next window opens
            self._bell.wake_in(max(claimed.throttled_for, 0.0) + WINDOW_MARGIN)
        return claimed.leases

    async def report_unknown_versions(self) -> None:
        """Say which due runs this worker leaves alone because it lacks their code version."""
        while True:
            op = self._backend.unknown_versions(self.request(0))
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
                    ", ".join(self._definitions[type_name].known_versions),
                )
            await asyncio.sleep(VERSIONS_INTERVAL)
