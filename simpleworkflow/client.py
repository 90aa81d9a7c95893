"""Producers: start runs, look them up, list, cancel, wait for and soft-delete them.

``Client`` and ``AsyncClient`` are two faces of one implementation: the arguments are
checked and turned into a backend op by :class:`_Requests`, and each face only decides
how that op is executed (blocking, or awaited).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import functools
import itertools
import json
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from simpleworkflow import durations, errors, names, payloads
from simpleworkflow.backends import Backend, open_backend
from simpleworkflow.backends.base import JournalEntry, NewRun, Op, RunQuery, SignalSent
from simpleworkflow.models import WAITING_STATES, Event, Run, RunPage, RunStatus, Signal

if TYPE_CHECKING:
    from simpleworkflow.admin import Admin, AsyncAdmin

T = TypeVar("T")
#: What ``start_many`` takes for each run: ``(type, payload)`` or a dict of start() arguments.
StartRequest = tuple[str, Any] | Mapping[str, Any]

_INT4 = 2**31 - 1
MAX_KEY_LENGTH = 512
MAX_PAGE = 1000
#: How a client's Postgres connections appear in ``pg_stat_activity`` (``application_name``).
CLIENT_NAME = "simpleworkflow client"
# Far enough for any schedule, near enough that now + delay stays a valid timestamp in
# every store (SQLite's date functions stop at year 9999).
MAX_DELAY_SECONDS = 100 * 366 * 86400


class _Requests:
    """What both clients share: configuration, argument checks, and the ops they run."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        schema: str | None = None,
        max_payload_bytes: int = payloads.DEFAULT_MAX_BYTES,
        auto_migrate: bool | None = None,
        backend: Backend | None = None,
        application_name: str = CLIENT_NAME,
    ) -> None:
        self.backend = backend or open_backend(
            database_url, schema=schema, application_name=application_name
        )
        self.max_payload_bytes = max_payload_bytes
        self._auto_migrate = auto_migrates(self.backend, auto_migrate)
        self._schema_ok = False

    def _schema_verdict(self, version: int | None) -> bool:
        """True when the schema must be migrated first; raise when it may not be."""
        needed = needs_migration(self.backend, version, auto_migrate=self._auto_migrate)
        self._schema_ok = not needed
        return needed

    def _new_run(
        self,
        type: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        priority: int = 100,
        run_at: datetime | None = None,
        delay: durations.Duration | None = None,
        max_attempts: int | None = None,
        deadline: datetime | durations.Duration | None = None,
        parent_id: str | None = None,
    ) -> NewRun:
        """Check a start request and turn it into what the store writes."""
        if run_at is not None and delay is not None:
            raise errors.InvalidArgument("give either run_at or delay, not both")
        if run_at is not None and (not isinstance(run_at, datetime) or run_at.tzinfo is None):
            raise errors.InvalidArgument(
                "run_at must be a timezone-aware datetime, e.g. datetime.now(timezone.utc)"
            )
        new = NewRun(
            type=names.validate_type(type),
            payload=payloads.encode(payload, max_bytes=self.max_payload_bytes),
            idempotency_key=_check_key(idempotency_key),
            priority=_check_int("priority", priority, -_INT4, _INT4),
            run_at=run_at,
            delay_seconds=_check_delay(delay),
            max_attempts=(
                None
                if max_attempts is None
                else _check_int("max_attempts", max_attempts, 1, 10_000)
            ),
            parent_id=parent_id,
            deadline=_check_time("deadline", deadline) if isinstance(deadline, datetime) else None,
            deadline_seconds=(
                None
                if deadline is None or isinstance(deadline, datetime)
                else durations.to_seconds(deadline, what="deadline")
            ),
        )
        return new

    def _many_op(self, requests: Iterable[StartRequest]) -> Op[builtins.list[Run]]:
        news = self._checked(requests)
        first = next(news, None)
        if first is None:
            raise errors.InvalidArgument("start_many needs at least one run to start")
        # The rest are checked as the store takes them: a bad one rolls back the batch.
        return self.backend.create_runs(itertools.chain([first], news))

    def _checked(self, requests: Iterable[StartRequest]) -> Iterator[tuple[str, NewRun]]:
        """``(new run id, checked request)`` for each of ``start_many``'s requests."""
        for request in requests:
            if isinstance(request, tuple):
                type_name, payload = request
                new = self._new_run(type_name, {} if payload is None else payload)
            elif isinstance(request, Mapping):
                options = dict(request)
                options.setdefault("payload", {})
                new = self._new_run(**options)
            else:
                raise errors.InvalidArgument(
                    "start_many takes (type, payload) pairs or dicts of start() arguments, "
                    f"not {type(request).__name__}"
                )
            yield names.new_run_id(), new

    def _started(self, run: Run) -> Run:
        if run.created:
            self.backend.notify_local("wake", _due(run))
        return run

    def _started_many(self, runs: builtins.list[Run]) -> builtins.list[Run]:
        # Runs of one batch mostly share their type and due time: one wake-up for each.
        for wake in {(run.type, run.run_at, run.created_at) for run in runs if run.created}:
            self.backend.notify_local("wake", _wake(*wake))
        return runs

    def _list_query(
        self,
        type_prefix: str | None,
        status: str | Iterable[str] | None,
        created_after: datetime | None,
        created_before: datetime | None,
        include_deleted: bool,
        limit: int,
        cursor: str | None,
    ) -> RunQuery:
        raw = [] if status is None else [status] if isinstance(status, str) else [*status]
        states = [_check_status(s) for s in raw]
        waits = tuple(WAITING_STATES[s] for s in states if s in WAITING_STATES)
        after_created_at, after_id = _decode_cursor(cursor) if cursor else (None, None)
        return RunQuery(
            type_like=None if type_prefix is None else names.like_pattern(type_prefix),
            statuses=tuple(s for s in states if s not in WAITING_STATES),
            waits=waits,
            retrying="retry" in waits,
            created_after=_check_time("created_after", created_after),
            created_before=_check_time("created_before", created_before),
            include_deleted=bool(include_deleted),
            limit=_check_int("limit", limit, 1, MAX_PAGE) + 1,  # one extra tells if more exist
            after_created_at=after_created_at,
            after_id=after_id,
        )

    @staticmethod
    def _page(runs: builtins.list[Run], query: RunQuery) -> RunPage:
        if len(runs) < query.limit:
            return RunPage(runs=runs, next_cursor=None)
        runs = runs[: query.limit - 1]
        return RunPage(runs=runs, next_cursor=_encode_cursor(runs[-1]))

    def _cancel_op(self, run_id: str, reason: str | None) -> Op[builtins.list[str] | None]:
        if reason is not None and (not isinstance(reason, str) or names.unstorable(reason)):
            raise errors.InvalidArgument(
                "a cancel's reason must be text without NUL characters or lone surrogates, "
                f"not {reason!r:.80}"
            )
        return self.backend.cancel_run(names.normalize_run_id(run_id), reason)

    def _cancelled(self, run_id: str, cancelled: builtins.list[str] | None) -> bool:
        for cancelled_id in self._found(run_id, cancelled):
            self.backend.notify_local("cancel", cancelled_id)
        return run_id in cancelled  # type: ignore[operator]

    def _signal_op(self, run_id: str, event: str, payload: Any) -> Op[SignalSent | str | None]:
        run_id = names.normalize_run_id(run_id)
        text = payloads.encode({} if payload is None else payload, max_bytes=self.max_payload_bytes)
        return self.backend.send_signal(run_id, names.validate_event(event), text)

    def _signalled(self, run_id: str, event: str, outcome: SignalSent | str | None) -> SignalSent:
        if outcome is None:
            raise errors.RunNotFound(run_id)
        if isinstance(outcome, str):
            raise errors.RunFinished(
                f"run {run_id} has already finished ({outcome}); signal {event!r} was not "
                "stored (signals are for runs that are pending or running)"
            )
        if outcome.woke:
            self.backend.notify_local("wake", "")
        return outcome

    @staticmethod
    def _found(run_id: str, value: T | None) -> T:
        if value is None:
            raise errors.RunNotFound(run_id)
        return value


class Client(_Requests):
    """A blocking producer client. Thread-safe; close it (or use ``with``) when done."""

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

    def start(
        self,
        type: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        priority: int = 100,
        run_at: datetime | None = None,
        delay: durations.Duration | None = None,
        max_attempts: int | None = None,
        deadline: datetime | durations.Duration | None = None,
    ) -> Run:
        """Record the intent to run ``type`` with ``payload``; return the stored run.

        The run's ``created`` is True. A repeated ``idempotency_key`` returns the run that
        already holds it and writes nothing (``created`` is then False); held by a run of
        another type, it raises :class:`~simpleworkflow.errors.IdempotencyConflict`.
        """
        new = self._new_run(
            type,
            {} if payload is None else payload,
            idempotency_key=idempotency_key,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            deadline=deadline,
        )
        return self._started(self._run(self.backend.create_run(new)))

    def start_many(self, requests: Iterable[StartRequest]) -> builtins.list[Run]:
        """Start many runs in one statement: ``(type, payload)`` pairs, or dicts of
        :meth:`start` arguments. Returns the runs in order; a known idempotency key gives
        the run that holds it, as with :meth:`start`."""
        return self._started_many(self._run(self._many_op(requests)))

    def get(self, run_id: str) -> Run:
        """The run with this id; :class:`RunNotFound` if there is none."""
        run_id = names.normalize_run_id(run_id)
        return self._found(run_id, self._run(self.backend.get_run(run_id), readonly=True))

    def list(
        self,
        *,
        type_prefix: str | None = None,
        status: str | Iterable[str] | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        include_deleted: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> RunPage:
        """One page of runs, newest first; pass ``page.next_cursor`` for the next one.

        ``status`` takes stored statuses and the states of pending runs that wait
        (``sleeping``, ``waiting-signal``, ``waiting-child``, ``retrying``); a run in any
        of those given is listed."""
        query = self._list_query(
            type_prefix, status, created_after, created_before, include_deleted, limit, cursor
        )
        return self._page(self._run(self.backend.list_runs(query), readonly=True), query)

    def cancel(self, run_id: str, *, reason: str | None = None) -> bool:
        """Cancel a pending or leased run; ``False`` if it had already finished."""
        run_id = names.normalize_run_id(run_id)
        return self._cancelled(run_id, self._run(self._cancel_op(run_id, reason)))

    def signal(self, run_id: str, event: str, payload: Any = None) -> SignalSent:
        """Store signal ``event`` for a run; a ``wait_for_event`` in it consumes it, whether
        the wait began before or after. :class:`RunFinished` if the run is over."""
        sent = self._run(self._signal_op(run_id, event, payload))
        return self._signalled(run_id, event, sent)

    def delete(self, run_id: str) -> bool:
        """Soft-delete a run: hidden from claims and listings; ``False`` if already deleted."""
        run_id = names.normalize_run_id(run_id)
        return self._found(run_id, self._run(self.backend.delete_run(run_id)))

    def events(self, run_id: str) -> builtins.list[Event]:
        """The audit trail of a run, oldest first."""
        run = self.get(run_id)
        return self._run(self.backend.list_events(run.id), readonly=True)

    def steps(self, run_id: str) -> builtins.list[JournalEntry]:
        """The run's journal: its durable calls in the order they first ran."""
        run = self.get(run_id)
        return self._run(self.backend.load_journal(run.id), readonly=True)

    def signals(self, run_id: str) -> builtins.list[Signal]:
        """The signals sent to the run, oldest first, consumed or still waiting for a wait."""
        run = self.get(run_id)
        return self._run(self.backend.list_signals(run.id), readonly=True)

    def wait(self, run_id: str, timeout: durations.Duration | None = None) -> Run:
        """Block until the run is succeeded, failed or cancelled, and return it."""
        deadline = _deadline(timeout)
        for pause in _pauses(deadline):
            run = self.get(run_id)
            if run.is_terminal:
                return run
            if pause is None:
                break
            time.sleep(pause)
        raise _timed_out(run_id, timeout)

    @functools.cached_property
    def admin(self) -> Admin:
        """Operator actions (registry, counts, retry, purge ...) on this client's
        connections; see :mod:`simpleworkflow.admin`."""
        from simpleworkflow.admin import Admin  # built on this module: imported late

        return Admin(backend=self.backend, auto_migrate=self._auto_migrate)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Requests):
    """The asyncio producer client. Use one per event loop; ``aclose`` it when done."""

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

    async def start(
        self,
        type: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        priority: int = 100,
        run_at: datetime | None = None,
        delay: durations.Duration | None = None,
        max_attempts: int | None = None,
        deadline: datetime | durations.Duration | None = None,
    ) -> Run:
        """Record the intent to run ``type`` with ``payload``; see :meth:`Client.start`."""
        new = self._new_run(
            type,
            {} if payload is None else payload,
            idempotency_key=idempotency_key,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            deadline=deadline,
        )
        return self._started(await self._run(self.backend.create_run(new)))

    async def start_many(self, requests: Iterable[StartRequest]) -> builtins.list[Run]:
        """Start many runs in one statement; see :meth:`Client.start_many`."""
        return self._started_many(await self._run(self._many_op(requests)))

    async def get(self, run_id: str) -> Run:
        """The run with this id; :class:`RunNotFound` if there is none."""
        run_id = names.normalize_run_id(run_id)
        return self._found(run_id, await self._run(self.backend.get_run(run_id), readonly=True))

    async def list(
        self,
        *,
        type_prefix: str | None = None,
        status: str | Iterable[str] | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        include_deleted: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> RunPage:
        """One page of runs, newest first; see :meth:`Client.list`."""
        query = self._list_query(
            type_prefix, status, created_after, created_before, include_deleted, limit, cursor
        )
        return self._page(await self._run(self.backend.list_runs(query), readonly=True), query)

    async def cancel(self, run_id: str, *, reason: str | None = None) -> bool:
        """Cancel a pending or leased run; ``False`` if it had already finished."""
        run_id = names.normalize_run_id(run_id)
        return self._cancelled(run_id, await self._run(self._cancel_op(run_id, reason)))

    async def signal(self, run_id: str, event: str, payload: Any = None) -> SignalSent:
        """Store signal ``event`` for a run; see :meth:`Client.signal`."""
        sent = await self._run(self._signal_op(run_id, event, payload))
        return self._signalled(run_id, event, sent)

    async def delete(self, run_id: str) -> bool:
        """Soft-delete a run; ``False`` if it was already deleted."""
        run_id = names.normalize_run_id(run_id)
        return self._found(run_id, await self._run(self.backend.delete_run(run_id)))

    async def events(self, run_id: str) -> builtins.list[Event]:
        """The audit trail of a run, oldest first."""
        run = await self.get(run_id)
        return await self._run(self.backend.list_events(run.id), readonly=True)

    async def steps(self, run_id: str) -> builtins.list[JournalEntry]:
        """The run's journal: its durable calls in the order they first ran."""
        run = await self.get(run_id)
        return await self._run(self.backend.load_journal(run.id), readonly=True)

    async def signals(self, run_id: str) -> builtins.list[Signal]:
        """The signals sent to the run; see :meth:`Client.signals`."""
        run = await self.get(run_id)
        return await self._run(self.backend.list_signals(run.id), readonly=True)

    async def wait(self, run_id: str, timeout: durations.Duration | None = None) -> Run:
        """Wait until the run is succeeded, failed or cancelled, and return it."""
        deadline = _deadline(timeout)
        for pause in _pauses(deadline):
            run = await self.get(run_id)
            if run.is_terminal:
                return run
            if pause is None:
                break
            await asyncio.sleep(pause)
        raise _timed_out(run_id, timeout)

    @functools.cached_property
    def admin(self) -> AsyncAdmin:
        """Operator actions, awaited, on this client's connections; see
        :mod:`simpleworkflow.admin`."""
        from simpleworkflow.admin import AsyncAdmin  # built on this module: imported late

        return AsyncAdmin(backend=self.backend, auto_migrate=self._auto_migrate)

    async def aclose(self) -> None:
        await self.backend.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# -- pure helpers ---------------------------------------------------------------------


def auto_migrates(backend: Backend, auto_migrate: bool | None) -> bool:
    """The embedded store creates its schema on first use; Postgres schemas are managed
    on purpose, with ``simpleworkflow migrate``."""
    return backend.name == "sqlite" if auto_migrate is None else auto_migrate


def needs_migration(backend: Backend, version: int | None, *, auto_migrate: bool) -> bool:
    """True when the schema must be migrated before use; raise when that is not allowed."""
    latest = backend.latest_version
    if version is not None and version >= latest:
        return False
    if auto_migrate:
        return True
    if version is None:
        raise errors.SchemaError(
            f"the {backend.name} database has no simpleworkflow schema yet; "
            "create it with `simpleworkflow migrate` (or `simpleworkflow migrate --sql` "
            "to see the SQL)"
        )
    raise errors.SchemaError(
        f"the {backend.name} database schema is at version {version}, older than "
        f"version {latest} which this simpleworkflow needs; upgrade it with "
        "`simpleworkflow migrate`"
    )


def _due(run: Run) -> str:
    """A wake-up message for in-process workers: the run's type and when it is due."""
    return _wake(run.type, run.run_at, run.created_at)


def _wake(type_name: str, run_at: datetime, created_at: datetime) -> str:
    """``<type>`` for a run due at once, ``<type> <due epoch>`` for one due later: a due
    time is on the database's clock, which the worker's need not match."""
    return f"{type_name} {run_at.timestamp()}" if run_at > created_at else type_name


def _check_int(what: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise errors.InvalidArgument(
            f"{what} must be an integer from {low} to {high}, not {value!r}"
        )
    return value


def _check_delay(delay: durations.Duration | None) -> float:
    seconds = 0.0 if delay is None else durations.to_seconds(delay, what="delay")
    if seconds > MAX_DELAY_SECONDS:
        raise errors.InvalidArgument(
            f"delay must be at most 100 years ({MAX_DELAY_SECONDS} seconds), not {seconds}"
        )
    return seconds


def _check_key(key: object) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH or names.unstorable(key):
        raise errors.InvalidArgument(
            f"idempotency_key must be a non-empty string of at most {MAX_KEY_LENGTH} "
            f"characters without NUL characters or lone surrogates, not {key!r:.80}"
        )
    return key


def _check_status(status: object) -> str:
    """A stored status, or one of the states of a waiting run (``sleeping`` ...)."""
    if status in WAITING_STATES:
        return str(status)
    try:
        return RunStatus(str(status)).value
    except ValueError:
        known = ", ".join([*(s.value for s in RunStatus), *WAITING_STATES])
        raise errors.InvalidArgument(f"unknown status {status!r}; use one of {known}") from None


def _check_time(what: str, value: datetime | None) -> datetime | None:
    if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
        raise errors.InvalidArgument(f"{what} must be a timezone-aware datetime")
    return value


def _encode_cursor(run: Run) -> str:
    raw = json.dumps([run.created_at.isoformat(), run.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, run_id = json.loads(raw)
        return datetime.fromisoformat(created_at), names.normalize_run_id(run_id)
    except (ValueError, TypeError, binascii.Error, errors.RunNotFound):
        raise errors.InvalidArgument(
            f"invalid cursor {cursor!r:.60}: pass the next_cursor of a previous page unchanged"
        ) from None


def _deadline(timeout: durations.Duration | None) -> float | None:
    if timeout is None:
        return None
    return time.monotonic() + durations.to_seconds(timeout, what="timeout")


def _pauses(deadline: float | None) -> Iterator[float | None]:
    """Pauses between polls: quick at first, then at most a second; ``None`` at the deadline."""
    pause = 0.01
    while True:
        if deadline is None:
            yield pause
        else:
            left = deadline - time.monotonic()
            yield None if left <= 0 else min(pause, left)
        pause = min(pause * 1.5, 1.0)


def _timed_out(run_id: str, timeout: durations.Duration | None) -> errors.WaitTimeout:
    return errors.WaitTimeout(
        f"run {run_id} did not finish within {timeout}; it goes on, and wait() can be called again"
    )
