"""The journal of one attempt: its look-ups, its writes, and the attempt's bookkeeping.

Each durable call first asks the replay state whether its step is journaled
(:meth:`Durable.begin`); a journaled step returns its recorded output at once. Otherwise
the call does its work and its output is written to the journal in one fenced
transaction (:meth:`Durable.journal`) before the body continues. A call that must wait
notes its wait in :attr:`Durable.waits` (see ``suspension``) and raises it.

Every write an attempt makes goes through :class:`Durable` (journal entries here; the
signal a wait takes, a rate limit's token and a child run through :meth:`Durable.once`
and :meth:`Durable.until_available`, from ``signals``, ``throttle`` and ``children``; a
transactional step's entry as an op run on the step's own transaction,
:meth:`Durable.journal_op`), so that the lease checks live in one place;
:class:`~simpleworkflow.durable.context.Context` and the modules of each durable call
decide what to ask for.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from simpleworkflow import errors, names, outage, payloads
from simpleworkflow.backends.ops import Op
from simpleworkflow.backends.records import Lease, StepRecord
from simpleworkflow.codec import Codec, reading
from simpleworkflow.durable import races, scopes
from simpleworkflow.durable.holding import Holding
from simpleworkflow.durable.journal_batches import StepJournal
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.durable.replay import Replay, answered, check_readable, compensation
from simpleworkflow.durable.suspension import Waits
from simpleworkflow.models import JournalEntry

if TYPE_CHECKING:
    from simpleworkflow.backends import Backend

T = TypeVar("T")


def database_time(lease: Lease, started: float) -> datetime:
    """The database's time: its clock at ``lease``'s claim plus the time elapsed since
    ``started`` (``time.monotonic()`` then)."""
    claimed = lease.claimed_at or datetime.now(UTC)
    return claimed + timedelta(seconds=time.monotonic() - started)


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
        # Made only when :meth:`settle` must wait: nearly every attempt ends with none
        # of its durable calls under way, and an Event made and set costs each run.
        self._settled: asyncio.Event | None = None
        self._uses: dict[str, int] = {}
        self._order: dict[str, int] = {}  # the order in which the code called each name
        #: The waits the body met, and the suspension they make.
        # The clock is not the bound ``self.db_now``: a cycle would leave every attempt's
        # journal to the cyclic collector instead of freeing it when the run ends.
        clock = functools.partial(database_time, lease, self._started)
        self.waits = Waits(lease, self._order, clock)
        self._recordings: list[set[str]] = []
        # The lease was lost, or given up before it could end unrenewed: another worker
        # may hold the run, so this attempt writes nothing more, not even a fenced write.
        self._fenced = False
        self._lease_ended = lease_ended
        self._outage = steps.unavailable if steps is not None else None
        self.holding = Holding(lease, backend, None if steps is None else steps.checks, stop)
        self._refused: list[errors.InvalidInput] = []
        #: The compensations registered (``ctx.on_rollback``), by journal name: made at
        #: the first, so that a run that registers none pays nothing.
        self.rollbacks: dict[str, Any] | None = None
        #: The app's codec (``App(codec=...)``), which writes every value the body hands
        #: over; ``None``: strict JSON.
        self.codec: Codec | None = None

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
        name = scopes.path(names.validate_step_name(name))
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
        return database_time(self.lease, self._started)

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

    async def begin(self, name: str, kind: JournalKind, stopped: bool) -> JournalEntry | None:
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
        if replay.rolling_back:
            if not compensation(name):
                raise errors.RollingBack(name)  # the body has registered its compensations
            await self.holding.confirm()
            return entry  # a compensation runs, even past the run's deadline
        # A race (a loop, a join) is judged by its branches: when one of them suspended,
        # their steps are journaled but the race is not, and they are met only as the
        # branches run again.
        if kind not in scopes.CONTAINERS:
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

    def _exit(self) -> None:
        self._inflight -= 1
        settled = self._settled
        if self._inflight == 0 and settled is not None:
            self._settled = None  # the next wait, if any, makes its own
            settled.set()

    async def settle(self) -> None:
        """Wait until no durable call of this attempt is under way (parallel branches):
        a branch still reading the store may yet suspend, and its wait must be recorded."""
        while self._inflight:
            if self._settled is None:
                self._settled = asyncio.Event()
            await self._settled.wait()

    async def journal(
        self,
        name: str,
        kind: JournalKind,
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
        kind: JournalKind,
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

    async def trim(self, names: list[str]) -> None:
        """Delete these entries from the journal (a loop's old iterations), fenced by the
        lease; abandon the attempt if it is lost."""
        if self.fenced:
            raise errors.LeaseLost(names[0])
        run_id, token = self.lease.run.id, self.lease.token
        held = await self.until_available(
            names[0],
            lambda: self.backend.execute_async(self.backend.trim_journal(run_id, token, names)),
        )
        if not held:
            raise errors.LeaseLost(names[0])
        assert self.replay is not None
        self.replay.forget(names)

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

    def encode(self, name: str, output: Any) -> str:
        """A step's output as JSON, or :class:`~simpleworkflow.errors.InvalidPayload`."""
        return payloads.encode(output, what=f"output of step {name!r}", codec=self.codec)

    def typed(self, data: Any, hint: Any, what: str) -> Any:
        """``data`` read from the journal (a signal, a child's result) as the ``type=`` of
        its durable call types it, through the app's codec or a default one; data that
        does not fit fails the run (every replay would read the same JSON)."""
        try:
            return reading(self.codec).decode(data, hint, what=what)
        except errors.InvalidPayload as exc:
            raise self.refuse(exc) from None

    def payload(self, value: Any, what: str = "payload", **options: Any) -> str:
        """A payload, value or stream item the body hands over, as JSON (the codec's)."""
        return payloads.encode(value, what=what, codec=self.codec, **options)

    async def _journaled(self, name: str) -> JournalEntry | None:
        """Step ``name``'s completed journal entry as the store has it, if it has one."""
        run_id = self.lease.run.id
        entries = await self.backend.execute_async(self.backend.load_journal(run_id), readonly=True)
        return next((e for e in entries if e.step_name == name and e.status == "completed"), None)

    async def once(self, name: str, call: Callable[[], Awaitable[T]]) -> T | JournalEntry:
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

        return await self.until_available(name, take)

    async def until_available(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` (idempotent) again while the store cannot be reached: an outage is
        not the handler's failure, and must not cost an attempt. Gives up with
        ``LeaseLost`` once the worker has given the lease up meanwhile."""

        async def attempt() -> T:
            if self.fenced:
                raise errors.LeaseLost(name)
            return await call()

        return await outage.until_available(attempt, self._outage)


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


def _default_events(
    name: str, kind: JournalKind, started_at: datetime | None
) -> list[dict[str, Any]]:
    if kind != JournalKind.STEP:
        return []
    started = {"type": "step_started", "data": {"step": name}}
    if started_at is not None:
        started["at"] = started_at.isoformat()
    return [started, {"type": "step_completed", "data": {"step": name}}]
