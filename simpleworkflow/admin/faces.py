"""The two faces of the admin: :class:`Admin` blocks, :class:`AsyncAdmin` is awaited.

Each method runs the op :class:`~simpleworkflow.admin.verbs.Verbs` built for it, and
does what must follow the commit; nothing else.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import time
from datetime import datetime
from typing import Any

from simpleworkflow import durations, rates
from simpleworkflow.admin.records import Minute, Queues, SweepReport, TypeStats, Worker
from simpleworkflow.admin.replaycheck import ReplayReport
from simpleworkflow.admin.schedules import AsyncSchedules, Schedules
from simpleworkflow.admin.verbs import DEFAULT_PURGE_BATCH, DEFAULT_SWEEP_BATCH, Verbs
from simpleworkflow.backends import op_runner, schema_verdict
from simpleworkflow.backends.payload_index import Action
from simpleworkflow.handlers import Handlers
from simpleworkflow.models import (
    Event,
    JournalEntry,
    PayloadIndex,
    RateLimit,
    RegistryEntry,
    Run,
    Subscription,
)


class Admin(op_runner.Checked, Verbs):
    """Operator actions, blocking. ``close`` it when done (a no-op for ``client.admin``,
    whose connections are the client's)."""

    def schema_version(self) -> int:
        """The version the database's schema is at, asked of the database on each call (a
        readiness probe): migrated first where this admin may (an embedded SQLite file),
        else :class:`~simpleworkflow.errors.SchemaError` when it is missing or older than
        this code; :class:`~simpleworkflow.errors.StoreUnavailable` when unreachable."""
        found = schema_verdict.ensure(self.backend, auto_migrate=self._auto_migrate)
        self._schema_ok = True
        return _version_now(self.backend.latest_version, found)

    def registry(self) -> builtins.list[RegistryEntry]:
        """Every registered type: the runtime that runs it, and whether it is paused."""
        return self._run(self.backend.list_registry(), readonly=True)

    def set_runtime(
        self, type: str, runtime: str, *, description: str | None = None
    ) -> RegistryEntry:
        """Have only workers of ``runtime`` claim ``type`` (creating its entry if needed);
        runs already leased finish where they are. ``description`` is kept if ``None``."""
        return self._run(self._set_op(type, runtime, description))

    def pause(self, type: str) -> RegistryEntry:
        """Stop every worker from claiming ``type``; its runs wait as pending.
        :class:`~simpleworkflow.errors.TypeNotRegistered` if it is not in the registry."""
        return self._run(self._switch_op(type, False))

    def resume(self, type: str) -> RegistryEntry:
        """Let the workers of its runtime claim ``type`` again."""
        return self._run(self._switch_op(type, True))

    def set_retention(self, type: str, retention: durations.Duration | None) -> RegistryEntry:
        """Keep the runs of ``type`` started from now on without a retention of their own
        this long after they finish (``"90d"``); ``None`` gives them the sweeper's default
        again. Runs started before keep the retention they started with. At most the ceiling
        (``$SIMPLEWORKFLOW_MAX_RETENTION_DAYS``); :class:`~simpleworkflow.errors.
        TypeNotRegistered` if the registry does not hold ``type``."""
        return self._run(self._set_retention_op(type, retention))

    def set_concurrency(
        self, type: str, limit: int | None, *, per_key: int | None = None
    ) -> RegistryEntry:
        """Let at most ``limit`` runs of ``type`` be leased at once across the fleet, and at
        most ``per_key`` of those started with one ``concurrency_key`` (``None``: no such
        limit); both are set together. Runs over a limit wait as pending; runs already
        leased finish. Claims pause while the leases are counted afresh (see
        docs/flow-control.md). :class:`~simpleworkflow.errors.TypeNotRegistered` if the
        registry does not hold ``type``."""
        return self._run(self._set_concurrency_op(type, limit, per_key))

    def set_rate_limit(
        self, name: str, rate: str | tuple[int, durations.Duration], *, per_key: bool = False
    ) -> RateLimit:
        """Create or change the rate limit ``name``: at most ``rate`` claims (``"10/s"``,
        ``"600/m"``, ``"5/10s"``, or ``(runs, period)``) of the types that obey it, in
        windows of the period; counted apart for each ``concurrency_key`` if ``per_key``.
        Runs over it stay pending, due when the next window opens (docs/flow-control.md)."""
        return self._run(self._set_rate_limit_op(name, rate, per_key))

    def rate_limits(self) -> builtins.list[RateLimit]:
        """Every rate limit, by name."""
        return self._run(self.backend.list_rate_limits(), readonly=True)

    def delete_rate_limit(self, name: str) -> bool:
        """Delete a rate limit; the types that obeyed it run unthrottled until a limit of
        that name is set again. ``False`` if there was none."""
        return self._run(self.backend.delete_rate_limit(rates.check_name(name)))

    def limit_rate(self, type: str, rate_limit: str | None) -> RegistryEntry:
        """Have every claim of ``type`` take a token of the rate limit named
        ``rate_limit`` (``None``: none). :class:`~simpleworkflow.errors.TypeNotRegistered`
        for a type the registry does not hold, ``InvalidArgument`` for a limit that
        does not exist."""
        return self._run(self._limit_rate_op(type, rate_limit))

    def subscribe(
        self, pattern: str, type: str, *, priority: int = 100, max_attempts: int | None = None
    ) -> Subscription:
        """Have ``type`` run once for every event published on a topic ``pattern``
        matches (``orders.created``, ``orders.*``, ``orders.#``; see docs/topics.md), with
        these start options (``max_attempts`` ``None``: the default, 3). Subscribing
        again changes the options; events published before are not delivered."""
        return self._run(self._subscribe_op(pattern, type, priority, max_attempts))

    def unsubscribe(self, pattern: str, type: str) -> bool:
        """Stop delivering ``pattern``'s events to ``type``; runs already started go on.
        ``False`` if there was no such subscription."""
        return self._run(self._unsubscribe_op(pattern, type))

    def subscriptions(
        self, *, topic: str | None = None, type: str | None = None
    ) -> builtins.list[Subscription]:
        """The subscriptions, by pattern then type: every one, those of ``type``, or those
        an event published on ``topic`` would start a run for."""
        return self._run(self._subscriptions_op(topic, type), readonly=True)

    @functools.cached_property
    def schedules(self) -> Schedules:
        """Cron schedules: create, list, get, pause, resume, trigger, delete
        (docs/schedules.md)."""
        return Schedules(self, self.observers, self.codec)

    def stats(self) -> builtins.list[TypeStats]:
        """Every type with runs or a registry entry, by name: its runs by state, how late
        its queue is, and its registry entry."""
        return self._run(self._stats_op(), readonly=True)

    def counts(self) -> dict[str, dict[str, int]]:
        """``{type: {state: runs}}`` for every name in :data:`STATES`, soft-deleted runs
        left out; one grouped query."""
        return self._run(self._counts_op(), readonly=True)

    def oldest_due(self) -> dict[str, float]:
        """``{type: seconds}`` since each type's oldest due pending run became due, by the
        database's clock; types with nothing due are left out."""
        return self._run(self.backend.oldest_due(), readonly=True)

    def queues(self) -> Queues:
        """What is under way: each type's pending, due and leased runs, how late its
        queue is, and the workers holding leases. One statement that reads no finished
        run, cheap enough for every metrics scrape."""
        return self._run(self._queues_op(), readonly=True)

    def throughput(self, minutes: int = 60) -> builtins.list[Minute]:
        """Runs that succeeded or failed, and attempts that failed and will be retried,
        minute by minute over the last ``minutes`` (at most a day), oldest first, the
        current minute last; minutes by the database's clock, zeros included. Read from
        the audit events through an index of those alone."""
        return self._run(self._throughput_op(minutes), readonly=True)

    def workers(self, *, gone_within: durations.Duration = "1h") -> builtins.list[Worker]:
        """The workers live now, idle ones included, and those stopped or gone within
        ``gone_within``, by id: who and where each is (its presence row, renewed every
        heartbeat interval), its state, and the runs it holds by type with when its
        soonest lease runs out. Workers that record no presence (another runtime) are
        seen through their leases."""
        return self._run(self._workers_op(gone_within), readonly=True)

    def children(self, run_id: str, *, limit: int = 100) -> builtins.list[Run]:
        """Up to ``limit`` runs started by ``run_id`` (its children), oldest first;
        :class:`~simpleworkflow.errors.RunNotFound` if there is no such run."""
        return self._run(self._children_op(run_id, limit), readonly=True)

    def retry(self, run_id: str) -> Run:
        """Give a failed or cancelled run a new attempt, on the same id: pending and due
        now, with at least one attempt left; its journal replays, except steps that used
        up their attempts, which run again. Audited as ``retried_by_operator`` (with the
        error). :class:`~simpleworkflow.errors.RunNotRetryable` for any other run."""
        return self._retried(self._run(self._retry_op(run_id)))

    def events(self, run_id: str) -> builtins.list[Event]:
        """The audit trail of a run, oldest first."""
        return self._run(self._of_run(run_id, self.backend.list_events), readonly=True)

    def steps(self, run_id: str) -> builtins.list[JournalEntry]:
        """The run's journal, in the order its calls first ran, each with when it started
        and completed and how many attempts it took."""
        return self._run(self._of_run(run_id, self.backend.load_journal), readonly=True)

    def purge(
        self,
        older_than: durations.Duration,
        *,
        type: str | None = None,
        batch_size: int = DEFAULT_PURGE_BATCH,
    ) -> int:
        """Delete finished runs (and soft-deleted ones no worker holds) unchanged for
        ``older_than``, optionally of one ``type``, with their events, journal and
        signals; ``batch_size`` runs per transaction. Returns how many were deleted."""
        purge = self._purge(older_than, type, batch_size)
        while not purge.done:
            purge.took(self._run(purge.batch()))
            time.sleep(purge.rest)
        return purge.total

    def sweep(
        self,
        *,
        default_retention: durations.Duration | None = None,
        batch_size: int = DEFAULT_SWEEP_BATCH,
        dry_run: bool = False,
    ) -> SweepReport:
        """Delete the runs past their retention (see docs/retention.md), with their
        events, journal and signals, ``batch_size`` (at most 1,000) per transaction;
        ``dry_run`` counts them instead and deletes nothing. ``default_retention`` is for
        runs whose start and type chose none (else ``$SIMPLEWORKFLOW_RETENTION_DAYS``,
        else 30 days). Never a pending or leased run, however old."""
        policy, sweep = self._sweep(default_retention, batch_size)
        if dry_run:
            expired = self._run(self._expired_op(policy), readonly=True)
            return self._report(policy, expired, dry_run=True)
        while not sweep.done:
            sweep.took(self._run(sweep.batch()))
            time.sleep(sweep.rest)
        return self._report(policy, sweep.deleted, dry_run=False)

    def end_dashboard_session(self, nonce: str, expires_at: datetime) -> None:
        """Record that the dashboard session ``nonce`` was logged out, so that every
        process sharing this store refuses it until ``expires_at`` (when it would have
        expired anyway); records of sessions expired since are deleted. The dashboard
        calls it at logout (docs/dashboard.md)."""
        self._run(self._end_session_op(nonce, expires_at))

    def dashboard_session_ended(self, nonce: str) -> bool:
        """Whether the dashboard session ``nonce`` was logged out: one read by key."""
        return self._run(self._session_ended_op(nonce), readonly=True)

    def payload_index(self) -> PayloadIndex:
        """Whether the optional payload index exists on Postgres, serves queries, and
        its size (docs/admin.md#the-payload-index); ``ConfigurationError`` on SQLite."""
        return self._payload_index("status")

    def create_payload_index(self) -> PayloadIndex:
        """Build the index that serves ``payload_contains`` listings on Postgres,
        concurrently (writes go on meanwhile); every run's writes pay for it from then on.
        Idempotent; an invalid index left by an interrupted build is rebuilt."""
        return self._payload_index("create")

    def drop_payload_index(self) -> PayloadIndex:
        """Drop the payload index, concurrently; payload filters read runs in the
        listing's order again. Idempotent."""
        return self._payload_index("drop")

    def _payload_index(self, action: Action) -> PayloadIndex:
        self.schema_version()  # a missing or old schema says so, before any index
        return self.backend.payload_index(action)

    def replay_check(self, app: Handlers) -> builtins.list[ReplayReport]:
        """Replay the journal of every unfinished run of ``app``'s types against its code,
        calling no step and writing nothing; see :mod:`simpleworkflow.admin.replaycheck`."""
        return asyncio.run(self._replays(app, close=True))

    def fork(self, run_id: str, from_step: str | int, payload: Any = None) -> Run:
        """A new run of the type of finished run ``run_id``, whose journal holds the
        original's entries before ``from_step`` (a step's name or journal position), with
        ``payload`` or the original's; the original is unchanged (docs/admin.md)."""
        return self._forked(self._run(self._fork_op(run_id, from_step, payload)))

    def forks(self, run_id: str, *, limit: int = 100) -> builtins.list[Run]:
        """The runs forked from ``run_id``, oldest first."""
        return self._run(self._forks_op(run_id, limit), readonly=True)

    def close(self) -> None:
        if self._owns_backend:
            self.backend.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncAdmin(op_runner.AsyncChecked, Verbs):
    """Operator actions, awaited; see :class:`Admin` for what each verb does."""

    async def schema_version(self) -> int:
        """The schema's version, asked of the database; see :meth:`Admin.schema_version`."""
        found = await schema_verdict.ensure_async(self.backend, auto_migrate=self._auto_migrate)
        self._schema_ok = True
        return _version_now(self.backend.latest_version, found)

    async def registry(self) -> builtins.list[RegistryEntry]:
        """Every registered type; see :meth:`Admin.registry`."""
        return await self._run(self.backend.list_registry(), readonly=True)

    async def set_runtime(
        self, type: str, runtime: str, *, description: str | None = None
    ) -> RegistryEntry:
        """Choose the runtime that runs ``type``; see :meth:`Admin.set_runtime`."""
        return await self._run(self._set_op(type, runtime, description))

    async def pause(self, type: str) -> RegistryEntry:
        """Stop every worker from claiming ``type``; see :meth:`Admin.pause`."""
        return await self._run(self._switch_op(type, False))

    async def resume(self, type: str) -> RegistryEntry:
        """Let workers claim ``type`` again."""
        return await self._run(self._switch_op(type, True))

    async def set_retention(self, type: str, retention: durations.Duration | None) -> RegistryEntry:
        """Choose how long ``type``'s runs are kept; see :meth:`Admin.set_retention`."""
        return await self._run(self._set_retention_op(type, retention))

    async def set_concurrency(
        self, type: str, limit: int | None, *, per_key: int | None = None
    ) -> RegistryEntry:
        """Limit how many runs of ``type`` are leased at once; see
        :meth:`Admin.set_concurrency`."""
        return await self._run(self._set_concurrency_op(type, limit, per_key))

    async def set_rate_limit(
        self, name: str, rate: str | tuple[int, durations.Duration], *, per_key: bool = False
    ) -> RateLimit:
        """Create or change a rate limit; see :meth:`Admin.set_rate_limit`."""
        return await self._run(self._set_rate_limit_op(name, rate, per_key))

    async def rate_limits(self) -> builtins.list[RateLimit]:
        """Every rate limit, by name."""
        return await self._run(self.backend.list_rate_limits(), readonly=True)

    async def delete_rate_limit(self, name: str) -> bool:
        """Delete a rate limit; see :meth:`Admin.delete_rate_limit`."""
        return await self._run(self.backend.delete_rate_limit(rates.check_name(name)))

    async def limit_rate(self, type: str, rate_limit: str | None) -> RegistryEntry:
        """Have ``type``'s claims obey a rate limit; see :meth:`Admin.limit_rate`."""
        return await self._run(self._limit_rate_op(type, rate_limit))

    async def subscribe(
        self, pattern: str, type: str, *, priority: int = 100, max_attempts: int | None = None
    ) -> Subscription:
        """Subscribe ``type`` to a topic pattern; see :meth:`Admin.subscribe`."""
        return await self._run(self._subscribe_op(pattern, type, priority, max_attempts))

    async def unsubscribe(self, pattern: str, type: str) -> bool:
        """Remove a subscription; see :meth:`Admin.unsubscribe`."""
        return await self._run(self._unsubscribe_op(pattern, type))

    async def subscriptions(
        self, *, topic: str | None = None, type: str | None = None
    ) -> builtins.list[Subscription]:
        """The subscriptions; see :meth:`Admin.subscriptions`."""
        return await self._run(self._subscriptions_op(topic, type), readonly=True)

    @functools.cached_property
    def schedules(self) -> AsyncSchedules:
        """Cron schedules, awaited; see :attr:`Admin.schedules`."""
        return AsyncSchedules(self, self.observers, self.codec)

    async def stats(self) -> builtins.list[TypeStats]:
        """Every type at a glance; see :meth:`Admin.stats`."""
        return await self._run(self._stats_op(), readonly=True)

    async def counts(self) -> dict[str, dict[str, int]]:
        """Runs by type and state; see :meth:`Admin.counts`."""
        return await self._run(self._counts_op(), readonly=True)

    async def oldest_due(self) -> dict[str, float]:
        """How late each type's queue is; see :meth:`Admin.oldest_due`."""
        return await self._run(self.backend.oldest_due(), readonly=True)

    async def queues(self) -> Queues:
        """What is under way; see :meth:`Admin.queues`."""
        return await self._run(self._queues_op(), readonly=True)

    async def throughput(self, minutes: int = 60) -> builtins.list[Minute]:
        """Outcomes minute by minute; see :meth:`Admin.throughput`."""
        return await self._run(self._throughput_op(minutes), readonly=True)

    async def workers(self, *, gone_within: durations.Duration = "1h") -> builtins.list[Worker]:
        """The workers live and recently gone; see :meth:`Admin.workers`."""
        return await self._run(self._workers_op(gone_within), readonly=True)

    async def children(self, run_id: str, *, limit: int = 100) -> builtins.list[Run]:
        """The runs ``run_id`` started; see :meth:`Admin.children`."""
        return await self._run(self._children_op(run_id, limit), readonly=True)

    async def retry(self, run_id: str) -> Run:
        """A new attempt for a failed or cancelled run; see :meth:`Admin.retry`."""
        return self._retried(await self._run(self._retry_op(run_id)))

    async def events(self, run_id: str) -> builtins.list[Event]:
        """The audit trail of a run, oldest first."""
        return await self._run(self._of_run(run_id, self.backend.list_events), readonly=True)

    async def steps(self, run_id: str) -> builtins.list[JournalEntry]:
        """The run's journal with timings; see :meth:`Admin.steps`."""
        return await self._run(self._of_run(run_id, self.backend.load_journal), readonly=True)

    async def purge(
        self,
        older_than: durations.Duration,
        *,
        type: str | None = None,
        batch_size: int = DEFAULT_PURGE_BATCH,
    ) -> int:
        """Delete finished runs older than ``older_than``; see :meth:`Admin.purge`."""
        purge = self._purge(older_than, type, batch_size)
        while not purge.done:
            purge.took(await self._run(purge.batch()))
            await asyncio.sleep(purge.rest)
        return purge.total

    async def sweep(
        self,
        *,
        default_retention: durations.Duration | None = None,
        batch_size: int = DEFAULT_SWEEP_BATCH,
        dry_run: bool = False,
    ) -> SweepReport:
        """Delete the runs past their retention; see :meth:`Admin.sweep`."""
        policy, sweep = self._sweep(default_retention, batch_size)
        if dry_run:
            expired = await self._run(self._expired_op(policy), readonly=True)
            return self._report(policy, expired, dry_run=True)
        while not sweep.done:
            sweep.took(await self._run(sweep.batch()))
            await asyncio.sleep(sweep.rest)
        return self._report(policy, sweep.deleted, dry_run=False)

    async def end_dashboard_session(self, nonce: str, expires_at: datetime) -> None:
        """Log a dashboard session out for every process; see
        :meth:`Admin.end_dashboard_session`."""
        await self._run(self._end_session_op(nonce, expires_at))

    async def dashboard_session_ended(self, nonce: str) -> bool:
        """Whether a dashboard session was logged out; see
        :meth:`Admin.dashboard_session_ended`."""
        return await self._run(self._session_ended_op(nonce), readonly=True)

    async def payload_index(self) -> PayloadIndex:
        """:meth:`Admin.payload_index`, awaited."""
        return await self._payload_index("status")

    async def create_payload_index(self) -> PayloadIndex:
        """:meth:`Admin.create_payload_index`, awaited (in a thread: it may take minutes)."""
        return await self._payload_index("create")

    async def drop_payload_index(self) -> PayloadIndex:
        """:meth:`Admin.drop_payload_index`, awaited."""
        return await self._payload_index("drop")

    async def _payload_index(self, action: Action) -> PayloadIndex:
        await self.schema_version()
        return await asyncio.to_thread(self.backend.payload_index, action)

    async def replay_check(self, app: Handlers) -> builtins.list[ReplayReport]:
        """Replay unfinished runs against ``app``'s code; see :meth:`Admin.replay_check`."""
        return await self._replays(app, close=False)

    async def fork(self, run_id: str, from_step: str | int, payload: Any = None) -> Run:
        """A run forked from ``run_id`` at ``from_step``; see :meth:`Admin.fork`."""
        return self._forked(await self._run(self._fork_op(run_id, from_step, payload)))

    async def forks(self, run_id: str, *, limit: int = 100) -> builtins.list[Run]:
        """The runs forked from ``run_id``, oldest first."""
        return await self._run(self._forks_op(run_id, limit), readonly=True)

    async def aclose(self) -> None:
        if self._owns_backend:
            await self.backend.aclose()

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _version_now(latest: int, found: int | None) -> int:
    """The version after :func:`schema_verdict.ensure` found ``found``: an older or missing
    schema was migrated to ``latest`` (or it raised)."""
    return latest if found is None else max(found, latest)
