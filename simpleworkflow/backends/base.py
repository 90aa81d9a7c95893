"""The small interface every store implements, and the plumbing shared by all of them.

A backend verb (``create_run``, ``claim``, ``record_step`` ...) returns an *op*: a
generator that yields the SQL statements it needs and receives each one's rows. The same
op is driven by a synchronous connection (:meth:`Backend.execute`) or an asynchronous one
(:meth:`Backend.execute_async`), always inside one transaction, so the sync ``Client``
and the ``AsyncClient`` share one implementation of every operation. The verbs live by
concept in ``run_ops``, ``worker_ops``, ``journal_ops``, ``admin_ops``, ``registry_ops``,
``topic_ops``, ``schedule_ops``, ``insight_ops``, ``presence_ops`` and ``session_ops``;
the op protocol in ``ops``, the stores' own records in ``records`` and the public ones in
:mod:`simpleworkflow.models`.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from simpleworkflow import clockwork
from simpleworkflow.backends.admin_ops import AdminOps
from simpleworkflow.backends.insight_ops import InsightOps
from simpleworkflow.backends.journal_ops import JournalOps
from simpleworkflow.backends.ops import ATOMIC, Op, Rows, Statement, Stream, drive
from simpleworkflow.backends.payload_index import Action, unsupported
from simpleworkflow.backends.presence_ops import PresenceOps
from simpleworkflow.backends.records import (
    CANCELLED,
    HELD,
    LOST,
    Claim,
    Claimed,
    Continuation,
    Failure,
    Lease,
    NewRun,
    Outcomes,
    Release,
    RunQuery,
    ServiceLease,
    StepRecord,
    Success,
    Suspension,
)
from simpleworkflow.backends.registry_ops import RegistryOps
from simpleworkflow.backends.run_ops import RunOps
from simpleworkflow.backends.schedule_ops import ScheduleOps
from simpleworkflow.backends.session_ops import SessionOps
from simpleworkflow.backends.stream_ops import StreamOps
from simpleworkflow.backends.topic_ops import TopicOps
from simpleworkflow.backends.value_ops import ValueOps
from simpleworkflow.backends.worker_ops import WorkerOps
from simpleworkflow.models import (
    JournalEntry,
    PayloadIndex,
    RegistryEntry,
    Schedule,
    SignalSent,
    Subscription,
)

T = TypeVar("T")


class OpRunner(Protocol):
    """Runs an op where its giver chose (see :meth:`Backend.listen`)."""

    def __call__(self, op: Op[T], /) -> Awaitable[T]: ...


#: What :meth:`Backend.listen` awaits after the notifications it delivered.
AfterWake = Callable[[OpRunner], Awaitable[None]]

__all__ = [
    "ATOMIC",
    "CANCELLED",
    "HELD",
    "LOST",
    "Backend",
    "Claim",
    "Claimed",
    "Continuation",
    "Failure",
    "JournalEntry",
    "Lease",
    "NewRun",
    "Op",
    "OpRunner",
    "Outcomes",
    "RegistryEntry",
    "Release",
    "Rows",
    "RunQuery",
    "Schedule",
    "ServiceLease",
    "SignalSent",
    "Statement",
    "StepRecord",
    "Stream",
    "Subscription",
    "Success",
    "Suspension",
    "drive",
]


class Backend(
    RunOps,
    WorkerOps,
    ValueOps,
    JournalOps,
    StreamOps,
    AdminOps,
    RegistryOps,
    TopicOps,
    ScheduleOps,
    InsightOps,
    PresenceOps,
    SessionOps,
):
    """A store of runs. Subclasses provide SQL, row decoding and the two drivers."""

    #: The newest migration this code knows.
    latest_version: int
    #: Which database this is, for people: a file's absolute path, or a masked URL.
    location: str
    #: A test's clock and step doubles (``clockwork``), found when the backend is made;
    #: ``None`` outside ``simpleworkflow.testing``.
    rig: clockwork.Rig | None = None

    def now(self) -> datetime:
        """The store's time as Python code of the worker reads it: the wall clock, or
        a test's clock."""
        rig = self.rig
        if rig is not None and rig.clock is not None:
            return rig.clock.now()
        return datetime.now(UTC)

    @property
    def has_notifications(self) -> bool:
        """Whether :meth:`listen` hears about every write in every process."""
        return self.dialect.has_notifications

    def stream_waker(self, run_id: str) -> Any:
        """Something whose ``wait(seconds)`` returns early once the run's streams are
        written, and ``close()``; ``None`` where the store has no notifications (readers
        poll). See ``postgres.run_wakeups``."""
        return None

    async def stream_waker_async(self, run_id: str) -> Any:
        """:meth:`stream_waker` with awaited ``wait`` and ``close``."""
        return None

    # -- execution -------------------------------------------------------------------

    @abc.abstractmethod
    def execute(self, op: Op[T], *, readonly: bool = False, wait_for_disk: bool = True) -> T:
        """Run ``op`` to completion in one transaction, synchronously.

        ``wait_for_disk=False`` lets a store return before the commit is on disk
        (Postgres: ``synchronous_commit = off`` for the op's transaction alone), for
        writes that a database crash may lose: the worker's claims and heartbeats (see
        docs/performance.md). A store that cannot (SQLite) waits as usual."""

    @abc.abstractmethod
    async def execute_async(
        self, op: Op[T], *, readonly: bool = False, wait_for_disk: bool = True
    ) -> T:
        """Run ``op`` to completion in one transaction, without blocking the event loop;
        ``wait_for_disk`` as in :meth:`execute`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections held for synchronous use."""

    async def aclose(self) -> None:
        """Release connections held for asynchronous use."""
        self.close()

    # -- transactions ----------------------------------------------------------------

    @abc.abstractmethod
    def joinable(self, connection: object, *, asynchronous: bool) -> Any:
        """``connection`` if :meth:`execute_on` can join its transaction; else
        :class:`~simpleworkflow.errors.InvalidArgument`, saying why (another driver, or
        its other face; closed; a failed transaction; another SQLite file)."""

    @abc.abstractmethod
    def execute_on(self, connection: Any, op: Op[T]) -> T:
        """Run ``op`` on the caller's ``connection`` (checked by :meth:`joinable`), inside
        the caller's transaction: nothing is committed here, and a failure undoes only
        what ``op`` wrote (a savepoint). A connection in autocommit mode outside any
        transaction gets a transaction of the op's own."""

    @abc.abstractmethod
    async def execute_on_async(self, connection: Any, op: Op[T]) -> T:
        """:meth:`execute_on` for an asynchronous driver connection."""

    @abc.abstractmethod
    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        """A driver connection of the store's own inside a transaction that commits when
        the block ends and rolls back when it raises: a transactional step's writes and
        its journal entry (written with :meth:`execute_on`) commit together."""

    @abc.abstractmethod
    def transaction_async(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """:meth:`transaction` with an asynchronous driver connection."""

    # -- wake-ups --------------------------------------------------------------------

    async def listen(
        self, on_message: Callable[[str, str], None], after: AfterWake | None = None
    ) -> None:
        """Call ``on_message(kind, value)`` for wake-ups until cancelled.

        ``kind`` is ``"wake"`` (value: a type with a newly due run) or ``"cancel"``
        (value: a cancelled run id). Stores without notifications never call it.
        ``after``, if given, is awaited after each batch of notifications with a runner
        of ops on the connection that received them, where a store listens on one: its
        server process has just woken to deliver them, so a claim sent there starts
        sooner than on a pooled connection idle since the last run (see ``listening``).
        """
        await asyncio.Event().wait()

    async def watch_changes(self, on_change: Callable[[], None], interval: float) -> None:
        """Call ``on_change()`` soon after another connection commits, checking every
        ``interval`` seconds, until cancelled.

        For stores whose :meth:`listen` does not hear other processes' writes (SQLite):
        a cheap check, so that an idle worker need not wait for its next poll. Stores with
        notifications never call it.
        """
        await asyncio.Event().wait()

    def notify_local(self, kind: str, value: str) -> None:
        """Wake this process's listeners after a commit (for stores without triggers)."""

    def value_notices(self, run_id: str) -> contextlib.AbstractContextManager[Any]:
        """A way to hear of sets of ``run_id``'s values while the block runs:
        ``notices(seconds) -> bool`` (see ``postgres.run_wakeups``), or ``None`` for a
        store without notifications, whose readers poll."""
        return contextlib.nullcontext(None)

    def value_notices_async(self, run_id: str) -> contextlib.AbstractAsyncContextManager[Any]:
        """:meth:`value_notices`, awaited."""
        return contextlib.nullcontext(None)

    # -- schema ----------------------------------------------------------------------

    @abc.abstractmethod
    def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied. Safe to run concurrently."""

    @abc.abstractmethod
    def migration_sql(self) -> str:
        """Every migration as one script, for teams that apply schemas with their own tools."""

    @abc.abstractmethod
    def reference_schema_sql(self) -> str:
        """The schema as it stands after every migration, written out in one file."""

    def payload_index(self, action: Action) -> PayloadIndex:
        """Create, drop or describe the optional payload index (Postgres only: a store
        without one raises :class:`~simpleworkflow.errors.ConfigurationError`). Runs on a
        connection of its own, outside any transaction: the index is built concurrently."""
        raise unsupported(self.name)

    @abc.abstractmethod
    def schema_version(self) -> Op[int | None]:
        """The applied schema version, or ``None`` when the schema does not exist."""
