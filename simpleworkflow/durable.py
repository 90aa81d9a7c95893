"""The durable calls of one attempt: journal look-ups and writes, and suspensions.

Each call first asks the replay state whether its step is journaled; a journaled step
returns its recorded output at once. Otherwise the step runs and its output is written
to the journal in one fenced transaction before the body continues. A call that must
wait (a sleep, a signal, a child, a step's backoff) raises ``Suspend``; the worker then
gives the run back with ``run_at`` at the wake-up time.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from collections.abc import Callable, Hashable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from simpleworkflow import durations, errors, names, payloads
from simpleworkflow.backends.records import (
    CANCELLED,
    HELD,
    JournalEntry,
    Lease,
    StepRecord,
    Suspension,
)
from simpleworkflow.groupcommit import GroupCommit
from simpleworkflow.replay import Replay, answered
from simpleworkflow.retry import DEFAULT_STEP_POLICY, RetryPolicy

if TYPE_CHECKING:
    from simpleworkflow.backends import Backend

#: Far enough to mean "no timeout", and storable in every backend.
FOREVER = datetime(9999, 1, 1, tzinfo=UTC)


class StepJournal(GroupCommit[StepRecord]):
    """Journal entries of the steps of every run on a worker, group-committed: under load
    the steps of many runs share a statement and a commit. On a store without
    notifications it also batches the status checks made before steps (``checks``)."""

    what = "the journal entry"

    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self._backend = backend
        self.checks = LeaseCheck(backend)

    def key(self, item: StepRecord) -> Hashable:
        return (item.run_id, item.name)

    async def write(self, items: list[StepRecord]) -> set[Hashable]:
        return set(await self._backend.execute_async(self._backend.record_steps(items)))

    async def run(self) -> None:
        await asyncio.gather(super().run(), self.checks.run())


class LeaseCheck(GroupCommit[tuple[str, str]]):
    """Whether runs are still leased, ``(run id, token)`` each, read a batch at a time: the
    checks of many runs' next steps share one read (and one hop to the store's thread)."""

    what = "the lease check"

    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self._backend = backend

    def key(self, item: tuple[str, str]) -> Hashable:
        return item[0]

    async def write(self, items: list[tuple[str, str]]) -> set[Hashable]:
        op = self._backend.lease_states(items)
        states = await self._backend.execute_async(op, readonly=True)
        return {run_id for run_id, state in states.items() if state == HELD}


class Durable:
    """Replay state and journal writes of one attempt of one run."""

    def __init__(
        self,
        lease: Lease,
        backend: Backend,
        steps: StepJournal | None = None,
        stop: Callable[[str], None] | None = None,
    ) -> None:
        self.lease = lease
        self.backend = backend
        self._steps = steps  # the worker's group commit of journal entries, if any
        self._stop = stop  # asks the attempt to stop, with a reason (Context._request_stop)
        self.replay: Replay | None = None
        self._loading: asyncio.Future[Replay] | None = None
        self._started = time.monotonic()
        self._inflight = 0
        self._settled = asyncio.Event()
        self._settled.set()
        self.suspensions: list[errors.Suspend] = []
        self._uses: dict[str, int] = {}
        self._recordings: list[set[str]] = []

    def name(self, name: str) -> str:
        """``name`` the first time, then ``name#2``, ``name#3`` ... so loops need no suffix.

        Called when the durable call is made, not when it is awaited, so numbering follows
        the order of the calls in the code, also for parallel steps.
        """
        names.validate_step_name(name)
        count = self._uses.get(name, 0) + 1
        self._uses[name] = count
        return name if count == 1 else f"{name}#{count}"

    def record_names(self) -> set[str]:
        """Start collecting the names journaled from now on (for a race)."""
        recorded: set[str] = set()
        self._recordings.append(recorded)
        return recorded

    def stop_recording(self, recorded: set[str]) -> None:
        self._recordings.remove(recorded)

    def db_now(self) -> datetime:
        """The database's time: its clock at the claim plus the time elapsed since."""
        claimed = self.lease.claimed_at or datetime.now(UTC)
        return claimed + timedelta(seconds=time.monotonic() - self._started)

    async def load(self) -> Replay:
        """Read the journal once, at the first durable call of the attempt.

        Parallel first calls (``gather`` at the top of a body) share that one read: had
        each its own, they would meet their journaled steps at different times, and a
        branch would be judged against the journal before its siblings met theirs.
        """
        if self.replay is not None:
            return self.replay
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._read_journal())
        return await asyncio.shield(self._loading)

    async def _read_journal(self) -> Replay:
        try:
            op = self.backend.load_journal(self.lease.run.id)
            entries = await self.backend.execute_async(op, readonly=True)
        except BaseException:
            self._loading = None  # the next call tries again
            raise
        self.replay = Replay(entries)
        return self.replay

    # -- step boundaries -------------------------------------------------------------

    async def begin(self, name: str, kind: str, stopped: bool) -> JournalEntry | None:
        """The journal entry that answers this call, or ``None``/a retrying entry when
        the call must do its work now. Raises when the attempt must not go on."""
        if stopped:
            raise errors.Cancelled("stop requested")
        replay = await self.load()
        entry = replay.lookup(name, kind)
        for recorded in self._recordings:
            recorded.add(name)  # a race notes what its branches met, not only what they wrote
        if entry is not None and answered(entry):
            return entry
        # A race is judged by its branches: when one of them suspended, their steps are
        # journaled but the race is not, and they are met only as the branches run again.
        if kind != "race":
            # Parallel branches started in the same tick meet their journaled steps
            # first, before this new step is judged against the journal.
            for _ in range(3):
                await asyncio.sleep(0)
            replay.check_new(name)
        deadline = self.lease.run.deadline
        if deadline is not None and self.db_now() >= deadline:
            raise errors.DeadlineExceeded(
                f"the run's deadline ({deadline.isoformat()}) passed before step {name!r}"
            )
        if not self.backend.has_notifications:
            await self._check_held()
        return entry

    async def _check_held(self) -> None:
        """Stop here if the run was cancelled (or its lease lost) while the worker had not
        heard of it yet.

        Without notifications between processes (SQLite) a worker learns of a cancel from
        another process only at its next look at its leases; reading the run's status
        before each new step (a local read) means no step begins once ``cancel()`` has
        returned. Postgres workers hear of a cancel by notification instead.
        """
        run_id = self.lease.run.id
        lease = (run_id, self.lease.token)
        if self._steps is not None and await self._steps.checks.record(lease):
            return
        op = self.backend.lease_states([lease])  # alone, or to learn why it is not held
        state = (await self.backend.execute_async(op, readonly=True)).get(run_id)
        if state == HELD:
            return
        reason = "cancelled" if state == CANCELLED else "lease lost"
        if self._stop is not None:
            self._stop(reason)  # as the worker would at its next look
        raise errors.Cancelled(reason)

    def started(self) -> None:
        self._inflight += 1
        self._settled.clear()

    def ended(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._settled.set()

    async def settle(self) -> None:
        """Wait until no step of this attempt is still running (parallel branches)."""
        await self._settled.wait()

    async def journal(
        self,
        name: str,
        kind: str,
        output: Any,
        *,
        attempts: int = 1,
        started_at: datetime | None = None,
        status: str = "completed",
        events: list[dict[str, Any]] | None = None,
        text: str | None = None,
    ) -> None:
        """Write a step's entry, fenced by the lease; abandon the attempt if it is lost.

        ``text`` is ``output`` already encoded (see :meth:`encode`)."""
        replay = await self.load()
        if text is None:
            text = self.encode(name, output)
        record = StepRecord(
            run_id=self.lease.run.id,
            token=self.lease.token,
            name=name,
            kind=kind,
            position=replay.position(name),
            output=text,
            attempts=attempts,
            status=status,
            started_at=started_at,
            events=_default_events(name, kind, started_at) if events is None else events,
        )
        if self._steps is not None:
            recorded = await self._steps.record(record)
        else:
            recorded = await self.backend.execute_async(self.backend.record_step(record))
        if not recorded:
            raise errors.LeaseLost(name)
        replay.remember(
            JournalEntry(name, kind, record.position, status, json.loads(text), attempts)
        )
        for journaled in self._recordings:
            journaled.add(name)

    @staticmethod
    def encode(name: str, output: Any) -> str:
        """A step's output as JSON, or :class:`~simpleworkflow.errors.InvalidPayload`."""
        return payloads.encode(output, what=f"output of step {name!r}")

    async def failed(
        self,
        name: str,
        entry: JournalEntry | None,
        policy: RetryPolicy | None,
        exc: Exception,
    ) -> BaseException:
        """Record a failed step attempt. Returns what to raise: a suspension until the
        retry, or :class:`~simpleworkflow.errors.StepFailed` when no attempt is left."""
        policy = policy or DEFAULT_STEP_POLICY
        done = entry.attempts if entry is not None else 0
        # Made storable as a run's errors are: a message the journal or the suspension
        # could not hold would fail this write, and the step would run again as a retry
        # of the whole run.
        error = {
            "type": payloads.storable(type(exc).__name__),
            "message": payloads.storable(str(exc))[:2000],
        }
        if isinstance(exc, errors.RetryAfter):
            delay = durations.to_seconds(exc.delay, what="retry delay")  # type: ignore[arg-type]
            return await self._retry_later(name, done, "step_deferred", delay, {"error": error})
        attempt = done + 1
        limit = policy.max_attempts or DEFAULT_STEP_POLICY.max_attempts or 1
        # An output no store can hold would be the same on every attempt.
        retryable = policy.retries(exc) and not isinstance(exc, errors.InvalidPayload)
        if retryable and attempt < limit:
            data = {"error": error, "attempt": attempt}
            return await self._retry_later(
                name, attempt, "step_failed", policy.delay(attempt), data
            )
        message = payloads.storable(f"{type(exc).__name__}: {exc}")[:2000]
        error["traceback"] = payloads.storable("".join(traceback.format_exception(exc)))[-8000:]
        data = {"step": name, "attempt": attempt, "final": True, "error": error}
        # Journaled as given up, so that every later replay (after a compensation's
        # sleep or retry, say) raises the same StepFailed instead of running it again.
        await self.journal(
            name,
            "step",
            {"gave_up": message},
            attempts=attempt,
            status="retrying",
            events=[{"type": "step_failed", "data": data}],
        )
        failure = errors.StepFailed(name, attempt, message)
        failure.__cause__ = exc
        return failure

    async def _retry_later(
        self, name: str, attempts: int, event: str, delay: float, data: dict[str, Any]
    ) -> errors.Suspend:
        await self.journal(name, "step", None, attempts=attempts, status="retrying", events=[])
        return self.suspend(
            errors.Suspend(
                name, event, data=data, waiting_for={"kind": "retry", "step": name}, delay=delay
            )
        )

    # -- suspension ------------------------------------------------------------------

    def suspend(self, exc: errors.Suspend) -> errors.Suspend:
        self.suspensions.append(exc)
        return exc

    def withdraw(self, suspensions: list[errors.Suspend]) -> None:
        """Forget suspensions that no longer hold (the branches of a race that lost)."""
        self.suspensions = [s for s in self.suspensions if s not in suspensions]

    def suspension(self) -> Suspension:
        """The suspension to record: the earliest wake-up among those of this attempt."""
        chosen = min(self.suspensions, key=self._wake_time)
        return Suspension(
            run_id=self.lease.run.id,
            token=self.lease.token,
            event=chosen.event,
            data={"step": chosen.step, **chosen.data},
            run_at=chosen.run_at,
            delay=chosen.delay,
            waiting_for=chosen.waiting_for,
        )

    def _wake_time(self, exc: errors.Suspend) -> datetime:
        if exc.run_at is not None:
            return exc.run_at
        now = self.db_now()  # a delay past FOREVER (RetryAfter(1e300)) must not overflow
        return now + timedelta(seconds=min(exc.delay, (FOREVER - now).total_seconds()))


def _default_events(name: str, kind: str, started_at: datetime | None) -> list[dict[str, Any]]:
    if kind != "step":
        return []
    started = {"type": "step_started", "data": {"step": name}}
    if started_at is not None:
        started["at"] = started_at.isoformat()
    return [started, {"type": "step_completed", "data": {"step": name}}]
