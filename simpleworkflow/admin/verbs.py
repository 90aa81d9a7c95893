"""What both faces of the admin share: the store, its schema check, argument checks and
the op of each verb, built once."""

from __future__ import annotations

import builtins
import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from simpleworkflow import durations, errors, limits, names, observe, payloads, rates, retention
from simpleworkflow.admin import forks, replaycheck
from simpleworkflow.admin.records import (
    STATES,
    Minute,
    Queues,
    QueueStats,
    SweepReport,
    TypeStats,
    Worker,
)
from simpleworkflow.admin.replaycheck import ReplayReport
from simpleworkflow.backends import Backend, open_backend, schema_verdict
from simpleworkflow.backends.insight_ops import HolderRow
from simpleworkflow.backends.ops import Op
from simpleworkflow.backends.presence_ops import PresenceRow
from simpleworkflow.codec import Codec
from simpleworkflow.handlers import Handlers
from simpleworkflow.models import RateLimit, RegistryEntry, Run, Subscription

T = TypeVar("T")

#: How an admin's own Postgres connections appear in ``pg_stat_activity``.
ADMIN_NAME = "simpleworkflow admin"
DEFAULT_PURGE_BATCH = 1000
DEFAULT_SWEEP_BATCH = retention.DEFAULT_BATCH
MAX_PURGE_BATCH = 10_000
#: How far back :meth:`throughput` looks at most (a day, by the minute).
MAX_THROUGHPUT_MINUTES = 24 * 60
MAX_CHILDREN = 1000
_RUNTIME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_NONCE = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: How far the clocks of processes serving one dashboard may disagree, seconds: a logout
#: is kept this long past the moment its session expires.
SESSION_CLOCK_SKEW = 300.0
MAX_CONCURRENCY = limits.MAX_CONCURRENCY
check_concurrency = limits.check_concurrency
# The bounds of start()'s priority and max_attempts: a subscription's runs take them.


class Verbs:
    """What both faces share: the store, its schema check, argument checks and the ops."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        schema: str | None = None,
        auto_migrate: bool | None = None,
        backend: Backend | None = None,
        observers: Iterable[observe.Observer] = (),
        application_name: str = ADMIN_NAME,
        codec: Codec | None = None,
    ) -> None:
        self._owns_backend = backend is None
        #: Writes the payloads of forks and schedules (a client's admin: the client's).
        self.codec = codec
        self.backend = backend or open_backend(
            database_url, schema=schema, application_name=application_name
        )
        self._auto_migrate = schema_verdict.auto_migrates(self.backend, auto_migrate)
        self._schema_ok = False
        #: Told of the runs a purge deletes (``runs_deleted``, once per type and batch);
        #: an ``Observers`` given (an app's, say) is shared, not copied.
        self.observers = (
            observers if isinstance(observers, observe.Observers) else observe.Observers(observers)
        )

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

    def _queues_op(self) -> Op[Queues]:
        live = yield from self.backend.live_runs()
        every = sorted({*live.pending, *live.leased, *live.registered})
        return Queues(
            types=tuple(
                QueueStats(
                    type=name,
                    pending=live.pending.get(name, 0),
                    due=live.due.get(name, 0),
                    oldest_due=live.oldest_due.get(name),
                    leased=live.leased[name],
                    expired_leases=live.expired[name],
                    registered=name in live.registered,
                    paused=live.registered.get(name) is False,
                )
                for name in every
            ),
            holders=dict(sorted(live.holders.items())),
        )

    def _throughput_op(self, minutes: int) -> Op[builtins.list[Minute]]:
        window = names.check_int("minutes", minutes, 1, MAX_THROUGHPUT_MINUTES)
        found = yield from self.backend.outcomes_per_minute(window)
        starts = [found.now - timedelta(minutes=back) for back in range(window - 1, -1, -1)]
        return [
            Minute(
                start=start,
                succeeded=found.counts[start, "succeeded"],
                failed=found.counts[start, "failed"],
                retried=found.counts[start, "retried"],
            )
            for start in starts
        ]

    def _workers_op(self, gone_within: durations.Duration) -> Op[builtins.list[Worker]]:
        # at most durations.MAX_SECONDS: every store can subtract it from now
        window = durations.to_seconds(gone_within, what="gone_within")
        seen = yield from self.backend.list_workers(window)
        rows = yield from self.backend.lease_holders()
        holders: dict[str, builtins.list[HolderRow]] = {}
        for row in rows:
            holders.setdefault(row.worker_id, []).append(row)
        found = {row.presence.worker_id: row for row in seen}
        return [
            _worker(worker_id, found.get(worker_id), holders.get(worker_id, []))
            for worker_id in sorted({*found, *holders})
        ]

    def _children_op(self, run_id: str, limit: int) -> Op[builtins.list[Run]]:
        size = names.check_int("limit", limit, 1, MAX_CHILDREN)
        return self._of_run(run_id, lambda found: self.backend.list_children(found, size))

    def _of_run(self, run_id: str, read: Callable[[str], Op[T]]) -> Op[T]:
        """``read(run_id)``, or :class:`RunNotFound` when there is no such run."""
        return self.backend.of_run(names.normalize_run_id(run_id), read)

    def _retry_op(self, run_id: str) -> Op[Run]:
        return self._retrying(names.normalize_run_id(run_id))

    def _retrying(self, run_id: str) -> Op[Run]:
        outcome = yield from self.backend.retry_run(run_id)
        if outcome is None:
            raise errors.RunNotFound(run_id)
        run, retried = outcome
        if not retried:
            raise errors.RunNotRetryable(
                run.id, run.status_text, deleted=run.deleted_at is not None
            )
        return run

    def _fork_op(self, run_id: str, from_step: str | int, payload: Any) -> Op[Run]:
        original = names.normalize_run_id(run_id)
        point = forks.check_from_step(from_step)
        text = None if payload is None else payloads.encode(payload, codec=self.codec)
        return self._forking(original, point, text)

    def _forking(self, run_id: str, from_step: str | int, payload: str | None) -> Op[Run]:
        run = yield from self.backend.lock_run(run_id)
        if run is None:
            raise errors.RunNotFound(run_id)
        journal = yield from self.backend.load_journal(run_id)
        point = forks.fork_point(run, journal, from_step)
        return (
            yield from self.backend.fork_run(
                run_id, names.new_run_id(), payload, point.step, point.position
            )
        )

    def _forked(self, run: Run) -> Run:
        """After the commit: wake this process's idle workers (stores without triggers),
        and tell the observers of the new run, as a start does, and that it is a fork."""
        self.backend.notify_local("wake", run.type)
        if self.observers:
            self.observers.run_created(observe.RunCreated(run))
            if run.forked_from is not None and run.forked_at_step is not None:
                forked = observe.RunForked(run, run.forked_from, run.forked_at_step)
                self.observers.run_forked(forked)
        return run

    def _forks_op(self, run_id: str, limit: int) -> Op[builtins.list[Run]]:
        size = names.check_int("limit", limit, 1, MAX_CHILDREN)
        return self._of_run(run_id, lambda found: self.backend.list_forks(found, size))

    def _retried(self, run: Run) -> Run:
        """After the commit: wake this process's idle workers (stores without triggers)."""
        self.backend.notify_local("wake", run.type)
        return run

    def _purge(
        self, older_than: durations.Duration, type: str | None, batch_size: int
    ) -> retention.Batches:
        seconds = durations.to_seconds(older_than, what="older_than")  # as gone_within
        size = retention.check_batch(batch_size, MAX_PURGE_BATCH)
        one_type = None if type is None else names.validate_type(type)
        return retention.Batches(
            functools.partial(self.backend.purge_runs, seconds, one_type, size),
            size,
            self.observers,
            one_writer=not self.backend.dialect.skip_locked,
        )

    def _set_retention_op(self, type: str, keep: durations.Duration | None) -> Op[RegistryEntry]:
        return self._retained(names.validate_type(type), retention.check(keep))

    def _retained(self, name: str, seconds: float | None) -> Op[RegistryEntry]:
        entry = yield from self.backend.set_registry_retention(name, seconds)
        if entry is None:
            raise errors.TypeNotRegistered(name)
        return entry

    def _set_concurrency_op(
        self, type: str, limit: int | None, per_key: int | None
    ) -> Op[RegistryEntry]:
        name = names.validate_type(type)
        total, each = check_concurrency("limit", limit), check_concurrency("per_key", per_key)
        entry = yield from self.backend.set_registry_concurrency(name, total, each)
        if entry is None:
            raise errors.TypeNotRegistered(name)
        return entry

    def _set_rate_limit_op(
        self, name: str, rate: str | tuple[int, durations.Duration], per_key: bool
    ) -> Op[RateLimit]:
        runs, period = rates.parse(rate)
        if not isinstance(per_key, bool):
            raise errors.InvalidArgument(f"per_key must be True or False, not {per_key!r:.40}")
        return self.backend.set_rate_limit(rates.check_name(name), runs, period, per_key)

    def _limit_rate_op(self, type: str, name: str | None) -> Op[RegistryEntry]:
        type_name = names.validate_type(type)
        limit = None if name is None else rates.check_name(name)
        entry = yield from self.backend.set_registry_rate_limit(type_name, limit)
        if entry is None:
            raise errors.TypeNotRegistered(type_name)
        return entry

    def _sweep(
        self, default_retention: durations.Duration | None, batch_size: int
    ) -> tuple[retention.Policy, retention.Batches]:
        size = retention.check_batch(batch_size, retention.MAX_BATCH)
        policy = retention.Policy.from_env(default_retention)
        sweep = functools.partial(self.backend.sweep_runs, policy.default, policy.ceiling, size)
        one_writer = not self.backend.dialect.skip_locked
        batches = retention.Batches(
            sweep, size, self.observers, until_empty=True, one_writer=one_writer
        )
        return policy, batches

    def _expired_op(self, policy: retention.Policy) -> Op[Counter[str]]:
        return self.backend.count_expired(policy.default, policy.ceiling)

    @staticmethod
    def _report(policy: retention.Policy, runs: Mapping[str, int], *, dry_run: bool) -> SweepReport:
        return SweepReport(
            runs=dict(runs),
            dry_run=dry_run,
            default_retention=policy.default,
            max_retention=policy.ceiling,
        )

    def _subscribe_op(
        self, pattern: str, type: str, priority: int, max_attempts: int | None
    ) -> Op[Subscription]:
        return self.backend.subscribe(
            names.validate_topic_pattern(pattern),
            names.validate_type(type),
            names.check_priority(priority),
            names.check_max_attempts(max_attempts),
        )

    def _unsubscribe_op(self, pattern: str, type: str) -> Op[bool]:
        return self.backend.unsubscribe(
            names.validate_topic_pattern(pattern), names.validate_type(type)
        )

    def _subscriptions_op(
        self, topic: str | None, type: str | None
    ) -> Op[builtins.list[Subscription]]:
        return self.backend.list_subscriptions(
            topic=None if topic is None else names.validate_topic(topic),
            type=None if type is None else names.validate_type(type),
        )

    def _end_session_op(self, nonce: str, expires_at: datetime) -> Op[None]:
        return self.backend.end_session(
            _check_nonce(nonce),
            durations.check_time(expires_at, what="expires_at"),
            SESSION_CLOCK_SKEW,
        )

    def _session_ended_op(self, nonce: str) -> Op[bool]:
        return self.backend.session_ended(_check_nonce(nonce))

    async def _replays(self, app: Handlers, *, close: bool) -> builtins.list[ReplayReport]:
        # A missing or old schema is an error, never "nothing to check": a deploy pipeline
        # pointed at the wrong database must not pass.
        try:
            version = await self.backend.execute_async(self.backend.schema_version(), readonly=True)
            schema_verdict.needs_migration(self.backend, version, auto_migrate=False)
            return await replaycheck.check_runs(app, self.backend)
        finally:
            if close:  # the event loop ends with this call: its connections go with it
                await self.backend.aclose()


def check_runtime(runtime: object) -> str:
    """A runtime's name: a lowercase word such as ``python`` or ``go``."""
    if not isinstance(runtime, str) or not _RUNTIME.fullmatch(runtime):
        raise errors.InvalidArgument(
            f"invalid runtime {runtime!r}: use a lowercase word such as python or go "
            "(letters, digits and '_', at most 32 characters)"
        )
    return runtime


def _check_nonce(nonce: object) -> str:
    """A dashboard session's nonce: 1 to 64 URL-safe characters (letters, digits, - _)."""
    if not isinstance(nonce, str) or not _NONCE.fullmatch(nonce):
        raise errors.InvalidArgument(
            f"invalid session nonce {nonce!r:.80}: use 1 to 64 letters, digits, '-' or '_'"
        )
    return nonce


def _check_text(what: str, text: str | None) -> str | None:
    if text is not None and (not isinstance(text, str) or names.unstorable(text)):
        raise errors.InvalidArgument(
            f"{what} must be text without NUL characters or lone surrogates, not {text!r:.80}"
        )
    return text


def _worker(worker_id: str, seen: PresenceRow | None, held: builtins.list[HolderRow]) -> Worker:
    """One worker from its presence row (if it writes one) and its leases (if any)."""
    leases: dict[str, Any] = {}
    if held:
        leases = {
            "runs": {row.type: row.runs for row in held},
            "next_expiry": min(row.next_expiry for row in held),
            "last_renewed": max(row.last_renewed for row in held),
            "expired": sum(row.expired for row in held),
        }
    if seen is None:  # another runtime, or an older version: its leases say it all
        live = sum(row.runs for row in held) > sum(row.expired for row in held)
        return Worker(worker_id=worker_id, state="live" if live else "gone", **leases)
    me = seen.presence
    state = "live" if seen.live else "stopped" if seen.stopped_at is not None else "gone"
    return Worker(
        worker_id=worker_id,
        state=state,
        host=me.host,
        pid=me.pid,
        runtime=me.runtime,
        type_prefixes=me.type_prefixes,
        concurrency=me.concurrency,
        version=me.version,
        started_at=seen.started_at,
        last_seen=seen.last_seen_at,
        stopped_at=seen.stopped_at,
        **leases,
    )


def _all_states(tally: Mapping[str, int]) -> dict[str, int]:
    return {state: tally.get(state, 0) for state in STATES}
