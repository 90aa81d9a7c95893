"""The durable calls of one attempt: journal look-ups and writes, and suspensions.

Each call first asks the replay state whether its step is journaled; a journaled step
returns its recorded output at once. Otherwise the step runs and its output is written
to the journal in one fenced transaction before the body continues. A call that must
wait (a sleep, a signal, a child, a step's backoff) raises ``Suspend``; the worker then
gives the run back with ``run_at`` at the earliest wake-up time and ``waiting_for``
holding every wait the body is suspended in (parallel branches may wait for several
things at once), so that whichever comes first wakes it.

Every write an attempt makes goes through :class:`Durable` (journal entries, the signal
a wait takes, the child run a workflow starts; a transactional step's entry as an op run
on the step's own transaction, :meth:`Durable.journal_op`), so that the lease checks live
in one place; :class:`~simpleworkflow.context.Context` decides what to ask for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from simpleworkflow import errors, names, outage, payloads, races
from simpleworkflow.backends.ops import Op
from simpleworkflow.backends.records import Lease, NewRun, RateToken, StepRecord, Suspension
from simpleworkflow.holding import Holding
from simpleworkflow.journal_writes import StepJournal
from simpleworkflow.models import JournalEntry
from simpleworkflow.replay import Replay, answered, check_readable

if TYPE_CHECKING:
    from simpleworkflow.backends import Backend
    from simpleworkflow.models import Run

T = TypeVar("T")
#: Far enough to mean "no timeout", and storable in every backend.
FOREVER = datetime(9999, 1, 1, tzinfo=UTC)


class Durable:
    """Replay state and journal writes of one attempt of one run."""

    def __init__(
        self,
        lease: Lease,
        backend: Backend,
        steps: StepJournal | None = None,
        stop: Callable[[str], None] | None = None,
        lease_ended: Callable[[], bool] | None = None,
    ) -> None:
        self.lease = lease
        self.backend = backend
        self._steps = steps  # the worker's group commit of journal entries, if any
        self.replay: Replay | None = None
        #: The journal could not be read (see ``replay.check_readable``): the run fails.
        self.unreadable: errors.UnreadableRow | None = None
        self._loading: asyncio.Future[Replay] | None = None
        self._started = time.monotonic()
        self._inflight = 0
        self._settled = asyncio.Event()
        self._settled.set()
        # Each wait with the race branch it was met in: a lost branch's waits are over.
        self._waits: list[tuple[errors.Suspend, races.Clock | None]] = []
        self._uses: dict[str, int] = {}
        self._order: dict[str, int] = {}  # the order in which the code called each name
        self._recordings: list[set[str]] = []
        # The lease was lost, or given up before it could end unrenewed: another worker
        # may hold the run, so this attempt writes nothing more, not even a fenced write.
        self._fenced = False
        self._lease_ended = lease_ended
        self._outage = steps.unavailable if steps is not None else None
        self.holding = Holding(lease, backend, steps, stop)
        self._refused: list[errors.InvalidInput] = []

    @property
    def fenced(self) -> bool:
        """Whether the worker gave the lease up (or must now): write nothing more."""
        return self._fenced or (self._lease_ended is not None and self._lease_ended())

    def fence(self) -> None:
        self._fenced = True

    def name(self, name: str) -> str:
        """``name`` the first time, then ``name#2``, ``name#3`` ... so loops need no suffix.

        Called when the durable call is made, not when it is awaited, so numbering follows
        the order of the calls in the code, also for parallel steps.
        """
        names.validate_step_name(name)
        count = self._uses.get(name, 0) + 1
        self._uses[name] = count
        unique = name if count == 1 else f"{name}#{count}"
        self._order[unique] = len(self._order)
        return unique

    def refuse(self, exc: errors.InvalidInput) -> errors.InvalidInput:
        """Note ``exc`` as a durable call's refusal of its arguments: the same code would
        make the same call on every retry, so, uncaught, it fails the run at once."""
        self._refused.append(exc)
        return exc

    def refused(self, exc: BaseException) -> bool:
        """Whether ``exc`` (raised out of the body) is a refusal noted by :meth:`refuse`."""
        return any(exc is refusal for refusal in self._refused)

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
            run_id = self.lease.run.id
            entries = await outage.until_available(
                lambda: self.backend.execute_async(self.backend.load_journal(run_id), readonly=True)
            )
        except BaseException:
            self._loading = None  # the next call tries again
            raise
        try:
            check_readable(run_id, entries)
        except errors.UnreadableRow as exc:
            self.unreadable = exc  # the run fails with it, whatever the body does
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
            races.note(entry.completed_at)
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
        # A cancel committed since the worker last learned it holds the run stops the
        # call here (see ``holding``).
        await self.holding.confirm()
        return entry

    def calling(self) -> contextlib.AbstractContextManager[None]:
        """Around every durable call of an async body: the attempt settles only once none
        is under way, and a race waits for a branch while it reads the store."""
        return _Call(self, races.reading())

    def _enter(self) -> None:
        self._inflight += 1
        self._settled.clear()

    def _exit(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._settled.set()

    async def settle(self) -> None:
        """Wait until no durable call of this attempt is under way (parallel branches):
        a branch still reading the store may yet suspend, and its wait must be recorded."""
        while self._inflight:
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
        if self.fenced:
            raise errors.LeaseLost(name)
        await self.load()
        if text is None:
            text = self.encode(name, output)
        record = self.entry(name, kind, text, attempts, started_at, status, events)
        began = time.monotonic()  # a fenced write that counts finds the lease held
        if self._steps is not None:
            recorded = await self._steps.record(record)
        else:
            recorded = await outage.until_available(
                lambda: self.backend.execute_async(self.backend.record_step(record))
            )
        if not recorded:
            raise errors.LeaseLost(name)
        self.holding.held_since(began)
        self.remember(record)

    def entry(
        self,
        name: str,
        kind: str,
        text: str | None,
        attempts: int = 1,
        started_at: datetime | None = None,
        status: str = "completed",
        events: list[dict[str, Any]] | None = None,
    ) -> StepRecord:
        """The journal entry of ``name`` to write, fenced by this attempt's lease (the
        journal is loaded: :meth:`begin` came first)."""
        assert self.replay is not None
        return StepRecord(
            run_id=self.lease.run.id,
            token=self.lease.token,
            name=name,
            kind=kind,
            position=self.replay.position(name),
            output=text,
            attempts=attempts,
            status=status,
            started_at=started_at,
            events=_default_events(name, kind, started_at) if events is None else events,
        )

    def journal_op(self, record: StepRecord) -> Op[bool]:
        """Journal ``record`` on a transaction of the caller's (a transactional step's),
        fenced by the lease; ``False``, writing nothing, when it is lost or given up."""
        if self.fenced:
            return False
        return (yield from self.backend.record_step(record))

    def remember(self, record: StepRecord) -> None:
        """Note an entry this attempt has written (committed): a later lookup finds it."""
        assert self.replay is not None and record.output is not None
        self.replay.remember(
            JournalEntry(
                record.name,
                record.kind,
                record.position,
                record.status,
                json.loads(record.output),
                record.attempts,
            )
        )
        for journaled in self._recordings:
            journaled.add(record.name)

    @staticmethod
    def encode(name: str, output: Any) -> str:
        """A step's output as JSON, or :class:`~simpleworkflow.errors.InvalidPayload`."""
        return payloads.encode(output, what=f"output of step {name!r}")

    async def consume_signal(
        self, name: str, event: str, match: str | None
    ) -> dict[str, Any] | None:
        """Take the oldest stored signal ``event`` whose payload contains ``match`` (JSON
        text) and journal it as wait ``name``'s output, in one fenced transaction.
        Returns that output, or ``None`` when no such signal is stored."""
        replay = await self.load()
        record = self.entry(name, "wait", None, events=[])
        began = time.monotonic()
        got = await self._once(
            name,
            lambda: self.backend.execute_async(self.backend.consume_signal(record, event, match)),
        )
        if isinstance(got, JournalEntry):
            return dict(got.output)
        if got is None:
            return None
        held, payload, sent_at = got
        if not held:
            raise errors.LeaseLost(name)
        self.holding.held_since(began)
        races.note(sent_at)  # a race is won by the signal sent first, not read first
        output = {"signal": payload}
        replay.remember(_entry(name, "wait", record.position, output))
        return output

    async def take_token(self, name: str, limit: str, key: str | None) -> RateToken:
        """Take a token of rate limit ``limit`` (per ``key``) and journal it as step
        ``name`` in one fenced transaction; or learn when the next window opens."""
        text = self.encode(name, {"rate_limit": limit, "key": key})
        record = self.entry(name, "rate_limit", text, events=[])
        began = time.monotonic()
        got = await self._once(
            name,
            lambda: self.backend.execute_async(self.backend.take_rate_token(record, limit, key)),
        )
        if isinstance(got, JournalEntry):
            return RateToken(True)
        if not got.held:
            raise errors.LeaseLost(name)
        self.holding.held_since(began)
        if got.granted:
            self.remember(record)
        return got

    async def create_child(
        self,
        name: str,
        type: str,
        payload: str,
        priority: int,
        max_attempts: int | None,
        trace_context: dict[str, str] | None = None,
    ) -> Run:
        """Create the child run that step ``name`` starts, and wake this process's workers.

        Keyed by the parent and the step: a replay that finds no journal entry (the
        attempt ended between this write and its journal's) gets the same child back,
        with ``created`` False, instead of a second one."""
        new = NewRun(
            type=type,
            payload=payload,
            idempotency_key=f"child:{self.lease.run.id}:{name}",
            priority=priority,
            max_attempts=max_attempts,
            parent_id=self.lease.run.id,
            trace_context=None if trace_context is None else json.dumps(trace_context),
        )
        # The key makes a second try after a broken connection find the child the first
        # created, if it did.
        child = await self._until_available(
            name, lambda: self.backend.execute_async(self.backend.create_run(new))
        )
        self.backend.notify_local("wake", type)
        return child

    async def read_run(self, name: str, run_id: str) -> Run | None:
        """A run as it stands now (a child waited for), or ``None`` if there is none."""
        return await self._until_available(
            name, lambda: self.backend.execute_async(self.backend.get_run(run_id), readonly=True)
        )

    async def _journaled(self, name: str) -> JournalEntry | None:
        """Step ``name``'s completed journal entry as the store has it, if it has one."""
        run_id = self.lease.run.id
        entries = await self.backend.execute_async(self.backend.load_journal(run_id), readonly=True)
        return next((e for e in entries if e.step_name == name and e.status == "completed"), None)

    async def _once(self, name: str, call: Callable[[], Awaitable[T]]) -> T | JournalEntry:
        """``call()``, which takes something (a signal, a token) and journals it as step
        ``name``, again while the store is unreachable; but the step's entry once the store
        did commit it before the connection broke: taking again would take a second one."""
        tried = False

        async def take() -> T | JournalEntry:
            nonlocal tried
            if tried and (entry := await self._journaled(name)) is not None:
                races.note(entry.completed_at)  # as a replay would
                assert self.replay is not None
                self.replay.remember(entry)
                return entry
            tried = True
            return await call()

        return await self._until_available(name, take)

    async def _until_available(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` (idempotent) again while the store cannot be reached: an outage is
        not the handler's failure, and must not cost an attempt. Gives up with
        ``LeaseLost`` once the worker has given the lease up meanwhile."""

        async def attempt() -> T:
            if self.fenced:
                raise errors.LeaseLost(name)
            return await call()

        return await outage.until_available(attempt, self._outage)

    # -- suspension ------------------------------------------------------------------

    def suspend(self, exc: errors.Suspend) -> errors.Suspend:
        self._waits.append((exc, races.current()))
        return exc

    def withdraw(self, suspensions: list[errors.Suspend]) -> None:
        """Forget these waits: the branches of a race that lost. (Those met on a losing
        branch's clock are forgotten anyway; this also covers tasks the branch did not
        start itself, such as those of an ``asyncio.gather(...)`` passed as a branch.)"""
        self._waits = [(exc, clock) for exc, clock in self._waits if exc not in suspensions]

    @property
    def suspended(self) -> bool:
        """True when the body waits for something (in a branch that has not lost a race)."""
        return bool(self._live_waits())

    def _live_waits(self) -> list[errors.Suspend]:
        live = [exc for exc, clock in self._waits if clock is None or not clock.given_up()]
        return sorted(live, key=lambda exc: self._order.get(exc.step, len(self._order)))

    def suspension(self) -> Suspension:
        """The suspension to record: every wait of this attempt, due at the earliest."""
        waits = self._live_waits() or [exc for exc, _ in self._waits]
        times = [self._wake_time(exc) for exc in waits]
        first = waits[times.index(min(times))]
        waiting_for = first.waiting_for
        if len(waits) > 1:
            waiting_for = {"kind": "any", "waits": [exc.waiting_for for exc in waits]}
            if min(times) < FOREVER:
                waiting_for["until"] = min(times).isoformat()
        return Suspension(
            run_id=self.lease.run.id,
            token=self.lease.token,
            events=[{"type": exc.event, "data": {"step": exc.step, **exc.data}} for exc in waits],
            run_at=first.run_at,
            delay=first.delay,
            waiting_for=waiting_for,
        )

    def _wake_time(self, exc: errors.Suspend) -> datetime:
        if exc.run_at is not None:
            return exc.run_at
        # Delays are bounded where they are given (durations.MAX_SECONDS); past FOREVER
        # one would overflow the datetime, so clamp all the same.
        now = self.db_now()
        return now + timedelta(seconds=min(exc.delay, (FOREVER - now).total_seconds()))


class _Call:
    """One durable call under way (see :meth:`Durable.calling`); a class, not a generator,
    since every step of every run enters one."""

    def __init__(self, durable: Durable, reads: contextlib.AbstractContextManager[None]) -> None:
        self._durable = durable
        self._reads = reads

    def __enter__(self) -> None:
        self._durable._enter()
        self._reads.__enter__()

    def __exit__(self, *exc: object) -> None:
        try:
            self._reads.__exit__(None, None, None)
        finally:
            self._durable._exit()


def _entry(name: str, kind: str, position: int, output: Any) -> JournalEntry:
    return JournalEntry(name, kind, position, "completed", json.loads(json.dumps(output)), 1)


def _default_events(name: str, kind: str, started_at: datetime | None) -> list[dict[str, Any]]:
    if kind != "step":
        return []
    started = {"type": "step_started", "data": {"step": name}}
    if started_at is not None:
        started["at"] = started_at.isoformat()
    return [started, {"type": "step_completed", "data": {"step": name}}]
