"""Running the attempts a worker claimed: one task each, its outcome handed to the outbox.

A slot counts as busy while a handler runs. Once it returns, its outcome is still being
written, but the next claim need not wait for that: see :meth:`Runner.free_slots`. A run
claimed ahead of the free slots waits in its task for one (see ``slots``: in the
common case the slot is handed over before its task first runs, and it waits on nothing).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from simpleworkflow import logs, observe
from simpleworkflow.backends import Backend
from simpleworkflow.backends.base import Failure, Lease
from simpleworkflow.durable import execution
from simpleworkflow.durable.attempt import (
    Attempt,
    AttemptState,
    Threads,
    TrackedExecutor,
    charge_to,
)
from simpleworkflow.durable.handler_threads import HandlerThreads
from simpleworkflow.durable.journal_batches import StepJournal
from simpleworkflow.handlers import Definition, Handlers
from simpleworkflow.worker import hooks
from simpleworkflow.worker.leases import Renewals, warn_not_renewed
from simpleworkflow.worker.outbox import Outbox
from simpleworkflow.worker.slots import Pace, Slots
from simpleworkflow.worker.timer import Bell, due_in

_log = logging.getLogger("simpleworkflow.worker")


class Runner:
    """The attempts one ``run_async`` of a worker holds, and the task of each."""

    def __init__(
        self,
        app: Handlers,
        worker_id: str,
        concurrency: int,
        backend: Backend,
        *,
        claim_batch: int = 0,
        outbox: Outbox,
        steps: StepJournal,
        renewals: Renewals,
        bell: Bell,
        observers: observe.Observer,
        step_log: observe.Observer | None = None,
    ) -> None:
        self.app = app
        self.worker_id = worker_id
        self.concurrency = concurrency
        self._backend = backend
        self._outbox = outbox
        self._steps = steps
        self._renewals = renewals
        self._bell = bell
        self._observers = observers
        self._step_log = step_log
        self.active: dict[str, Attempt] = {}
        self.draining: list[Attempt] = []  # at shutdown: attempts that may still run
        self._refusals: set[asyncio.Task[None]] = set()  # runs failed as unreadable
        self._slots = Slots(concurrency)
        self._pace = Pace(concurrency, claim_batch)
        self._threads = HandlerThreads(concurrency, name="simpleworkflow-handler")
        self._step_executor = TrackedExecutor(name="simpleworkflow-step")  # sync steps

    def free_slots(self) -> int:
        """Runs the next claim may take: the free slots, and as many more as may wait for
        one (see ``slots``); none while runs wait for a slot (they feed the slots that free
        up meanwhile), so that claims stay large. A run whose handler has returned no
        longer holds a slot while its outcome is written, so the next claim overlaps that
        write instead of waiting for it; at most about as many such writes as runs held
        are waited for at a time. A suspect (see ``recovery``) runs alone: while it runs
        there are none."""
        if any(active.lease.isolated for active in self.active.values()):
            return 0
        slots = self._slots
        ahead = self._pace.ahead()
        if slots.waiting:
            return 0
        limit = self.concurrency + ahead
        return min(limit - slots.busy - slots.waiting, 2 * limit + ahead - len(self.active))

    def handlers_running(self) -> bool:
        """Whether quick handlers run now: their outcomes may join those about to be
        written (see ``groupcommit``)."""
        return self._slots.busy > 0 and self._pace.quick()

    def handlers_in_threads(self) -> bool:
        """Whether plain ``def`` handlers run (or are about to) in the handler threads:
        their outcomes reach the loop a few at a time (see ``groupcommit``)."""
        return self._threads.busy()

    def start(self, lease: Lease) -> None:
        """Run ``lease``'s handler once a slot is free (at once, unless it was claimed
        ahead)."""
        if lease.run.unreadable:
            self._refuse(lease)
            return
        definition = self.app.definitions[lease.run.type]
        state = AttemptState(
            lease,
            self.worker_id,
            self._backend,
            async_body=definition.is_async,
            steps=self._steps,
            executor=self._step_executor,
            lease_ended=functools.partial(self._renewals.ended, lease.token),
            observers=self.app.observers,  # the step hooks: the outcome log needs none
            step_log=self._step_log,  # but for the steps that fail
        )
        claimed = self._renewals.claimed(lease.token)
        if claimed is not None:  # the claim found the run held: its first step need not read
            state.durable.holding.held_since(claimed)
        threads = Threads()
        # Counted at once: the claim loop may ask for free slots before the task runs.
        queued = not self._slots.take_now()
        work = self._execute(lease, definition, state, threads, queued)
        task = asyncio.create_task(work, name=f"run-{lease.run.id}")
        self.active[lease.run.id] = Attempt(lease, state, task, threads)

    def stop_waiting(self) -> list[Attempt]:
        """At shutdown: start no more handlers; return the attempts whose handler never
        started (claimed ahead), whose runs are to be given back at once."""
        self._slots.close()
        return [attempt for attempt in self.active.values() if not attempt.started]

    async def _slot(self, state: AttemptState, queued: bool) -> bool:
        """Whether the attempt holds a slot: the one it took when it was started, or the
        one it was queued for (``queued``); False if it was stopped (cancelled, its lease
        lost) or the worker began to shut down first."""
        slots = self._slots
        if queued:
            if slots.closed:
                slots.leave()
                return False
            waiter = slots.ask()  # None: it holds a slot, and is checked below
            if waiter is not None:  # no slot yet: wait for one, unless stopped first
                if state.stop_reason is not None:
                    slots.stop(waiter)
                    return False
                state.on_stop(functools.partial(slots.stop, waiter))
                try:
                    if not await waiter:
                        return False
                except asyncio.CancelledError:
                    slots.abandon(waiter)
                    raise
        if slots.closed or state.stop_reason is not None:
            slots.give_back()  # stopped before its handler was called
            return False
        return True

    async def _execute(
        self,
        lease: Lease,
        definition: Definition,
        state: AttemptState,
        threads: Threads,
        queued: bool,
    ) -> None:
        try:
            if await self._slot(state, queued):
                await self._attempt(lease, definition, state, threads)
        finally:
            self._renewals.forget(lease.token)
            if self.own(lease) is not None:
                del self.active[lease.run.id]
                # Empty now: the moment to take a suspect, if one waits (see recovery).
                self._bell.woken = self._bell.woken or not self.active
            if not self._slots.waiting:  # else the claim loop has nothing to do yet
                self._bell.ring()

    async def _attempt(
        self, lease: Lease, definition: Definition, state: AttemptState, threads: Threads
    ) -> None:
        """Run the handler in the slot it holds, give the slot back, record the outcome."""
        own = self.own(lease)
        if own is not None:
            own.started = True
        charge_to(threads)
        hooks.claimed(self._observers, lease, self.worker_id)
        logs.enter_attempt(lease.run.id, lease.run.type, lease.run.attempt + 1)
        started = time.monotonic()
        holding = True
        try:
            hooks.started(self._observers, lease, self.worker_id)
            outcome = await execution.attempt(definition, state, self._threads)
            duration = time.monotonic() - started
            self._pace.handled(duration)
            holding = False
            self._slots.give_back()  # to a run waiting for one, or for the next claim
            own = self.own(lease)
            if own is not None:
                own.finishing = True
            if not self._slots.waiting:  # a slot is free for the next claim
                self._bell.ring()
            # Stopped from outside (cancelled, lease lost, shutdown): nothing to record.
            # A timeout stops the handler too, but its failure is the outcome. (The stop
            # reason is read once before the write and once after: each read looks at
            # the lease's end, and the lease may end while the outcome is written.)
            reason = state.stop_reason
            stopped = reason not in (None, execution.TIMED_OUT)
            recorded = True
            if outcome is not None and not stopped:
                recorded = await self._outbox.deliver(outcome)
                reason = state.stop_reason
            if recorded and not stopped:
                self._bell.wake_in(due_in(outcome, self._backend.now))
            if not recorded:
                _log.warning(
                    "run %s: lease lost before its outcome was recorded; discarded", lease.run.id
                )
            if reason == "lease lost":  # it may have seen the end before the watch
                self._lease_lost(lease, state)
            end = hooks.Ending(outcome, reason, recorded, duration)
            hooks.finished(self._observers, lease, self.worker_id, end)
        except Exception as exc:
            _log.exception("run %s: worker error while running it", lease.run.id)
            spent = time.monotonic() - started
            self._observers.attempt_finished(hooks.worker_error(lease, self.worker_id, exc, spent))
        finally:
            if holding:
                self._slots.give_back()

    def _lease_lost(self, lease: Lease, state: AttemptState) -> None:
        """Say once that the attempt stopped for its lease, if nobody has yet: the handler
        (``ctx.is_cancelled()``) or a step's lease check may see it before the watch."""
        if state.lease_loss_reported:
            return  # the watch or a heartbeat's answer said it
        if self._renewals.ended(lease.token):
            warn_not_renewed([lease.run.id])
        else:  # a step's check of the lease found it gone
            _log.warning(
                "run %s: its lease was found lost (taken by another worker, or ended in "
                "the store); its handler stopped, nothing more written",
                lease.run.id,
            )
        hooks.lease_lost(self._observers, state, self.worker_id, hooks.NOT_RENEWED)

    def _refuse(self, lease: Lease) -> None:
        """Fail a run claimed with columns this worker cannot read, calling no handler:
        the row cannot change by being retried, and the other runs go on."""
        failure = execution.unreadable_run(lease, self.worker_id)
        _log.error("%s", failure.data["error"]["message"])
        task = asyncio.create_task(self._record_refusal(lease, failure))
        self._refusals.add(task)
        task.add_done_callback(self._refusals.discard)

    async def _record_refusal(self, lease: Lease, failure: Failure) -> None:
        """Record the failure, and tell the observers as of any attempt that failed for
        good (metrics count it), though no handler ran."""
        try:
            recorded = await self._outbox.deliver(failure)
        except Exception:  # its lease expires, and the next claim tries again
            _log.exception("run %s: could not record that it cannot be read", lease.run.id)
            return
        finally:
            self._renewals.forget(lease.token)
        end = hooks.Ending(failure, None, recorded, 0.0)
        hooks.finished(self._observers, lease, self.worker_id, end)

    def own(self, lease: Lease) -> Attempt | None:
        """This attempt's entry. Once a suspension is recorded the run may be due at once
        (a signal came) and claimed again by this worker before the attempt has cleaned
        up: the entry under its id is then the next attempt's, which it must leave alone."""
        active = self.active.get(lease.run.id)
        return active if active is not None and active.lease is lease else None

    def close(self) -> None:
        """Let the pools' idle threads go; threads still running are left to end."""
        self._threads.close()
        self._step_executor.shutdown(wait=False, cancel_futures=True)
