"""Operator actions in one place: what the CLI, the HTTP API and the dashboard share.

``Admin`` and ``AsyncAdmin`` are two faces of one implementation, as the clients are: a
verb's arguments are checked and its backend op built once, by :class:`_Verbs`, and a face
only runs the op (blocking, or awaited) and does what must follow the commit. Reach one
through a client (``client.admin``, on the client's connections) or open one on a
database URL (``Admin("postgresql://...")``), then:

- the registry: :meth:`~Admin.registry`, :meth:`~Admin.set_runtime`, :meth:`~Admin.pause`,
  :meth:`~Admin.resume`;
- the types at a glance: :meth:`~Admin.stats` (runs by state, the oldest due run's age,
  the registry entry), or its parts :meth:`~Admin.counts` and :meth:`~Admin.oldest_due`;
- one run: :meth:`~Admin.retry`, :meth:`~Admin.events`, :meth:`~Admin.steps` (timed);
- housekeeping: :meth:`~Admin.purge`, :meth:`~Admin.migrate`, :meth:`~Admin.migration_sql`,
  :meth:`~Admin.replay_check`.
"""

from __future__ import annotations

import asyncio
import builtins
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from simpleworkflow import durations, errors, names, observe, replaycheck
from simpleworkflow.backends import Backend, open_backend
from simpleworkflow.backends.records import JournalEntry, Op, RegistryEntry
from simpleworkflow.client import auto_migrates, needs_migration
from simpleworkflow.handlers import Handlers
from simpleworkflow.models import WAITING_STATES, Event, Run, RunStatus
from simpleworkflow.replaycheck import ReplayReport

T = TypeVar("T")

#: How an admin's own Postgres connections appear in ``pg_stat_activity``.
ADMIN_NAME = "simpleworkflow admin"
#: The states :meth:`Admin.counts` reports for every type, in this order: the statuses,
#: then the waiting states of pending runs (a refinement of ``pending``, overlapping).
STATES = (*(status.value for status in RunStatus), *WAITING_STATES)
DEFAULT_PURGE_BATCH = 1000
MAX_PURGE_BATCH = 10_000
# As far back as a delay may reach forward (client.MAX_DELAY_SECONDS): every store can
# subtract it from now.
MAX_AGE_SECONDS = 100 * 366 * 86400
_RUNTIME = re.compile(r"[a-z][a-z0-9_]{0,31}")


@dataclass(frozen=True, slots=True)
class TypeStats:
    """One workflow type at a glance, as an operator's overview shows it."""

    type: str
    #: Runs not deleted, for every name in :data:`STATES` (zeros included).
    counts: Mapping[str, int]
    #: Seconds since its oldest due pending run became due (how late its queue is);
    #: ``None`` when no run is due. A run sleeping until tomorrow is not late.
    oldest_due: float | None
    #: Its registry entry, ``None`` when no worker or operator has registered it.
    registry: RegistryEntry | None

    @property
    def total(self) -> int:
        """Runs of the type that are not deleted, in any status."""
        return sum(self.counts[status.value] for status in RunStatus)

    @property
    def paused(self) -> bool:
        return self.registry is not None and not self.registry.is_enabled

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, as the CLI and API print it."""
        return {
            "type": self.type,
            "counts": dict(self.counts),
            "total": self.total,
            "oldest_due_seconds": self.oldest_due,
            "registry": None if self.registry is None else registry_dict(self.registry),
        }


def registry_dict(entry: RegistryEntry) -> dict[str, Any]:
    """A JSON-ready registry entry, times as ISO 8601 like every other JSON output."""
    return {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in (
            ("workflow_name", entry.workflow_name),
            ("intent_type", entry.intent_type),
            ("runtime", entry.runtime),
            ("is_enabled", entry.is_enabled),
            ("description", entry.description),
            ("created_at", entry.created_at),
            ("updated_at", entry.updated_at),
        )
    }


@dataclass
class _Purge:
    """A purge in progress: one transaction per batch, until a batch comes back short."""

    backend: Backend
    observers: observe.Observers
    older_than: float
    type: str | None
    batch_size: int
    deleted: int = 0
    done: bool = False

    def batch(self) -> Op[Counter[str]]:
        return self.backend.purge_runs(self.older_than, self.type, self.batch_size)

    def took(self, gone: Counter[str]) -> None:
        """Count a committed batch, and tell the observers what went."""
        count = sum(gone.values())
        self.deleted += count
        self.done = count < self.batch_size
        for type_name, runs in sorted(gone.items()):
            self.observers.runs_deleted(observe.RunsDeleted(type=type_name, count=runs))


class _Verbs:
    """What both faces share: the store, its schema check, argument checks and the ops."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        schema: str | None = None,
        auto_migrate: bool | None = None,
        backend: Backend | None = None,
        observers: observe.Observers | None = None,
    ) -> None:
        self._owns_backend = backend is None
        self.backend = backend or open_backend(
            database_url, schema=schema, application_name=ADMIN_NAME
        )
        self._auto_migrate = auto_migrates(self.backend, auto_migrate)
        self._schema_ok = False
        #: Told of the runs a purge deletes (``runs_deleted``, once per type and batch).
        self.observers = observers if observers is not None else observe.Observers()

    def _schema_verdict(self, version: int | None) -> bool:
        """True when the schema must be migrated first; raise when it may not be."""
        needed = needs_migration(self.backend, version, auto_migrate=self._auto_migrate)
        self._schema_ok = not needed
        return needed

    @property
    def latest_version(self) -> int:
        """The schema version this code needs (the newest migration it knows)."""
        return self.backend.latest_version

    def migration_sql(self) -> str:
        """Every migration as one script, for teams that apply schemas with their own
        tools; the database is not touched."""
        return self.backend.migration_sql()

    # -- the ops, built once for both faces ------------------------------------------

    def _set_op(self, type: str, runtime: str, description: str | None) -> Op[RegistryEntry]:
        return self.backend.set_registry(
            names.validate_type(type),
            check_runtime(runtime),
            _check_text("a description", description),
        )

    def _switch_op(self, type: str, enabled: bool) -> Op[RegistryEntry]:
        return self._switched(names.validate_type(type), enabled)

    def _switched(self, name: str, enabled: bool) -> Op[RegistryEntry]:
        entry = yield from self.backend.enable_registry(name, enabled)
        if entry is None:
            raise errors.TypeNotRegistered(name)
        return entry

    def _stats_op(self) -> Op[builtins.list[TypeStats]]:
        counts = yield from self.backend.count_runs()
        late = yield from self.backend.oldest_due()
        entries = yield from self.backend.list_registry()
        registry = {entry.workflow_name: entry for entry in entries}
        return [
            TypeStats(
                type=name,
                counts=_all_states(counts.get(name, Counter())),
                oldest_due=late.get(name),
                registry=registry.get(name),
            )
            for name in sorted({*counts, *late, *registry})
        ]

    def _counts_op(self) -> Op[dict[str, dict[str, int]]]:
        counts = yield from self.backend.count_runs()
        return {name: _all_states(counts[name]) for name in sorted(counts)}

    def _of_run(self, run_id: str, read: Callable[[str], Op[T]]) -> Op[T]:
        """``read(run_id)``, or :class:`RunNotFound` when there is no such run."""
        return self._reading(names.normalize_run_id(run_id), read)

    def _reading(self, run_id: str, read: Callable[[str], Op[T]]) -> Op[T]:
        if (yield from self.backend.get_run(run_id)) is None:
            raise errors.RunNotFound(run_id)
        return (yield from read(run_id))

    def _retry_op(self, run_id: str) -> Op[Run]:
        return self._retrying(names.normalize_run_id(run_id))

    def _retrying(self, run_id: str) -> Op[Run]:
        outcome = yield from self.backend.retry_run(run_id)
        if outcome is None:
            raise errors.RunNotFound(run_id)
        run, retried = outcome
        if not retried:
            raise errors.RunNotRetryable(
                run.id, run.status.value, deleted=run.deleted_at is not None
            )
        return run

    def _retried(self, run: Run) -> Run:
        """After the commit: wake this process's idle workers (stores without triggers)."""
        self.backend.notify_local("wake", run.type)
        return run

    def _purge(self, older_than: durations.Duration, type: str | None, batch_size: int) -> _Purge:
        seconds = durations.to_seconds(older_than, what="older_than")
        if seconds > MAX_AGE_SECONDS:
            raise errors.InvalidArgument(
                f"older_than must be at most 100 years ({MAX_AGE_SECONDS} seconds), not {seconds}"
            )
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int)
            or not (1 <= batch_size <= MAX_PURGE_BATCH)
        ):
            raise errors.InvalidArgument(
                f"batch_size must be an integer from 1 to {MAX_PURGE_BATCH}, not {batch_size!r}"
            )
        return _Purge(
            backend=self.backend,
            observers=self.observers,
            older_than=seconds,
            type=None if type is None else names.validate_type(type),
            batch_size=batch_size,
        )

    async def _replays(self, app: Handlers, *, close: bool) -> builtins.list[ReplayReport]:
        # A missing or old schema is an error, never "nothing to check": a deploy pipeline
        # pointed at the wrong database must not pass.
        try:
            version = await self.backend.execute_async(self.backend.schema_version(), readonly=True)
            needs_migration(self.backend, version, auto_migrate=False)
            return await replaycheck.check_runs(app, self.backend)
        finally:
            if close:  # the event loop ends with this call: its connections go with it
                await self.backend.aclose()


class Admin(_Verbs):
    """Operator actions, blocking. ``close`` it when done (a no-op for ``client.admin``,
    whose connections are the client's)."""

    def _run(self, op: Op[T], *, readonly: bool = False) -> T:
        if not self._schema_ok and self._schema_verdict(
            self.backend.execute(self.backend.schema_version(), readonly=True)
        ):
            self.migrate()
        return self.backend.execute(op, readonly=readonly)

    def migrate(self) -> builtins.list[int]:
        """Create or upgrade the schema; return the migration versions applied now."""
        applied = self.backend.migrate()
        self._schema_ok = True
        return applied

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
        return purge.deleted

    def replay_check(self, app: Handlers) -> builtins.list[ReplayReport]:
        """Replay the journal of every unfinished run of ``app``'s types against its code,
        calling no step and writing nothing; see :mod:`simpleworkflow.replaycheck`."""
        return asyncio.run(self._replays(app, close=True))

    def close(self) -> None:
        if self._owns_backend:
            self.backend.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncAdmin(_Verbs):
    """Operator actions, awaited; see :class:`Admin` for what each verb does."""

    async def _run(self, op: Op[T], *, readonly: bool = False) -> T:
        if not self._schema_ok and self._schema_verdict(
            await self.backend.execute_async(self.backend.schema_version(), readonly=True)
        ):
            await self.migrate()
        return await self.backend.execute_async(op, readonly=readonly)

    async def migrate(self) -> builtins.list[int]:
        """Create or upgrade the schema; return the migration versions applied now."""
        applied = await asyncio.to_thread(self.backend.migrate)
        self._schema_ok = True
        return applied

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

    async def stats(self) -> builtins.list[TypeStats]:
        """Every type at a glance; see :meth:`Admin.stats`."""
        return await self._run(self._stats_op(), readonly=True)

    async def counts(self) -> dict[str, dict[str, int]]:
        """Runs by type and state; see :meth:`Admin.counts`."""
        return await self._run(self._counts_op(), readonly=True)

    async def oldest_due(self) -> dict[str, float]:
        """How late each type's queue is; see :meth:`Admin.oldest_due`."""
        return await self._run(self.backend.oldest_due(), readonly=True)

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
        return purge.deleted

    async def replay_check(self, app: Handlers) -> builtins.list[ReplayReport]:
        """Replay unfinished runs against ``app``'s code; see :meth:`Admin.replay_check`."""
        return await self._replays(app, close=False)

    async def aclose(self) -> None:
        if self._owns_backend:
            await self.backend.aclose()

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def check_runtime(runtime: object) -> str:
    """A runtime's name: a lowercase word such as ``python`` or ``go``."""
    if not isinstance(runtime, str) or not _RUNTIME.fullmatch(runtime):
        raise errors.InvalidArgument(
            f"invalid runtime {runtime!r}: use a lowercase word such as python or go "
            "(letters, digits and '_', at most 32 characters)"
        )
    return runtime


def _check_text(what: str, text: str | None) -> str | None:
    if text is not None and (not isinstance(text, str) or names.unstorable(text)):
        raise errors.InvalidArgument(
            f"{what} must be text without NUL characters or lone surrogates, not {text!r:.80}"
        )
    return text


def _all_states(tally: Mapping[str, int]) -> dict[str, int]:
    return {state: tally.get(state, 0) for state in STATES}
