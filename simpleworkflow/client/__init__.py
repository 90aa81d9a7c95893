"""Producers: start runs, publish events, look runs up, list, cancel, wait for and
soft-delete them.

``Client`` and ``AsyncClient`` are two faces of one implementation: the arguments are
checked and turned into a backend op by :class:`~simpleworkflow.client._requests.Requests`
(start options by :mod:`~simpleworkflow.client._options`, listings by ``_listing``), and
each face only decides how that op is executed (blocking, or awaited).
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeVar, Unpack

from simpleworkflow import durations, names
from simpleworkflow.admin import Admin, AsyncAdmin, AsyncSchedules, Schedules
from simpleworkflow.backends.ops import Op
from simpleworkflow.backends.schema_verdict import auto_migrates, needs_migration
from simpleworkflow.client import _connections, _listing, _waiting
from simpleworkflow.client._debounce import Debounce
from simpleworkflow.client._listing import MAX_PAGE
from simpleworkflow.client._live import AsyncLiveReads, LiveReads
from simpleworkflow.client._options import (
    MAX_DELAY_SECONDS,
    MAX_KEY_LENGTH,
    OPTIONS,
    StartOptions,
    StartRequest,
)
from simpleworkflow.client._requests import CLIENT_NAME
from simpleworkflow.models import (
    Event,
    JournalEntry,
    Published,
    Run,
    RunPage,
    Signal,
    SignalSent,
)

T = TypeVar("T")

__all__ = [
    "CLIENT_NAME",
    "MAX_DELAY_SECONDS",
    "MAX_KEY_LENGTH",
    "MAX_PAGE",
    "OPTIONS",
    "AsyncClient",
    "Client",
    "Debounce",
    "StartOptions",
    "StartRequest",
    "auto_migrates",
    "needs_migration",
]


class Client(LiveReads):
    """A blocking producer client. Thread-safe; close it (or use ``with``) when done."""

    def start(
        self,
        type: str,
        payload: Any = None,
        *,
        connection: Any = None,
        **options: Unpack[StartOptions],
    ) -> Run:
        """Record the intent to run ``type`` with ``payload``; return the stored run.

        ``options`` are those of :class:`StartOptions`. The run's ``created`` is True. A
        repeated ``idempotency_key`` returns the run that already holds it and writes
        nothing (``created`` is then False); held by a run of another type, it raises
        :class:`~simpleworkflow.errors.IdempotencyConflict`.

        With ``connection`` (a psycopg ``Connection``, a ``sqlite3.Connection`` to the
        client's file, or a SQLAlchemy ``Connection`` or ``Session``) the run is written
        inside the caller's transaction on it, and exists exactly when that transaction
        commits: see docs/transactions.md. ``start_many``, ``publish``, ``signal`` and
        ``cancel`` take it too.
        """
        with self._starting(type) as trace:
            op = self._start_op(type, payload, options, trace)
            return self._started(self._call(op, connection), connection is None)

    def start_many(
        self, requests: Iterable[StartRequest], *, connection: Any = None
    ) -> builtins.list[Run]:
        """Start many runs in one statement: ``(type, payload)`` pairs, or dicts of
        :meth:`start` arguments. Returns the runs in order; a known idempotency key gives
        the run that holds it, as with :meth:`start`."""
        with self._starting(None) as trace:
            op = self._many_op(requests, trace)
            return self._started_many(self._call(op, connection), connection is None)

    def publish(
        self,
        topic: str,
        payload: Any = None,
        *,
        event_id: str | None = None,
        connection: Any = None,
    ) -> Published:
        """Publish an event: start, in one transaction, a run of ``payload`` for each
        workflow type subscribed to a pattern that matches ``topic`` (see docs/topics.md).

        Publishing the same ``event_id`` on the same topic again starts nothing and returns
        the runs the first publish started (``created`` False); without an ``event_id``
        each call is a new event (its id, a UUID, is in the result). No subscription: no
        runs, and nothing written.
        """
        op = self._publish_op(topic, payload, event_id)
        return self._published(self._call(op, connection), connection is None)

    def get(self, run_id: str, *, type: Any = None) -> Run:
        """The run with this id; :class:`RunNotFound` if there is none. With ``type`` (a
        type hint) a succeeded run's result is read as that type (docs/payloads.md)."""
        run_id = names.normalize_run_id(run_id)
        run = self._found(run_id, self._run(self.backend.get_run(run_id), readonly=True))
        return run if type is None else self._result_as(run, type)

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
        payload_contains: Any = None,
    ) -> RunPage:
        """One page of runs, newest first; pass ``page.next_cursor`` for the next one.

        ``status`` takes stored statuses and the states of pending runs that wait
        (``sleeping``, ``waiting-signal``, ``waiting-child``, ``retrying``, ``throttled``);
        a run in any of those given is listed. ``payload_contains`` (JSON: a dict, a list, a value)
        lists only runs whose payload contains it, as Postgres ``jsonb @>`` decides:
        ``{"customer": "c_1"}`` matches every payload with that key and value."""
        query = _listing.list_query(
            type_prefix,
            status,
            created_after,
            created_before,
            include_deleted,
            limit,
            cursor,
            payload_contains,
            self.codec,
        )
        return _listing.page(self._run(self.backend.list_runs(query), readonly=True), query)

    def cancel(self, run_id: str, *, reason: str | None = None, connection: Any = None) -> bool:
        """Cancel a pending or leased run; ``False`` if it had already finished.

        No step of the run begins once this has returned: a leased run's cancel returns
        0.2 s after its commit (see docs/durable.md#cancellation)."""
        return self.cancel_and_get(run_id, reason=reason, connection=connection)[0]

    def cancel_and_get(
        self, run_id: str, *, reason: str | None = None, connection: Any = None
    ) -> tuple[bool, Run]:
        """:meth:`cancel`, and the run: as the cancel left it (read in its transaction),
        or as it stands if it had already finished."""
        run_id = names.normalize_run_id(run_id)
        committed = connection is None
        op = self._cancel_op(run_id, reason)
        cancelled, run = self._cancelled(run_id, self._call(op, connection), committed)
        time.sleep(self._settle_for(cancelled, committed))
        return run_id in cancelled.ids, run

    def signal(
        self, run_id: str, event: str, payload: Any = None, *, connection: Any = None
    ) -> SignalSent:
        """Store signal ``event`` for a run; a ``wait_for_event`` in it consumes it, whether
        the wait began before or after. :class:`RunFinished` if the run is over."""
        with self.observers.around_signal(run_id, event):
            sent = self._call(self._signal_op(run_id, event, payload), connection)
            return self._signalled(run_id, event, sent, connection is None)

    def delete(self, run_id: str) -> bool:
        """Soft-delete a run: hidden from claims and listings; ``False`` if already deleted."""
        run_id = names.normalize_run_id(run_id)
        return self._found(run_id, self._run(self.backend.delete_run(run_id)))

    def events(self, run_id: str) -> builtins.list[Event]:
        """The audit trail of a run, oldest first."""
        run_id = names.normalize_run_id(run_id)
        return self._run(self.backend.of_run(run_id, self.backend.list_events), readonly=True)

    def steps(self, run_id: str) -> builtins.list[JournalEntry]:
        """The run's journal: its durable calls in the order they first ran."""
        run_id = names.normalize_run_id(run_id)
        return self._run(self.backend.of_run(run_id, self.backend.load_journal), readonly=True)

    def signals(self, run_id: str) -> builtins.list[Signal]:
        """The signals sent to the run, oldest first, consumed or still waiting for a wait."""
        run_id = names.normalize_run_id(run_id)
        return self._run(self.backend.of_run(run_id, self.backend.list_signals), readonly=True)

    def wait(
        self,
        run_id: str,
        timeout: durations.Duration | None = None,
        *,
        follow: bool = True,
        type: Any = None,
    ) -> Run:
        """Block until the run is succeeded, failed or cancelled, and return it. A run
        that continued as new is followed along its chain to the last run, which is
        returned (``follow=False``: the run ``run_id`` itself, once it has ended).
        ``type``: its result read as that type, as :meth:`get` does."""
        deadline = _waiting.deadline(timeout)
        current = run_id
        for pause in _waiting.pauses(deadline):
            run = self.get(current)
            while follow and run.continued_as is not None:
                run = self.get(run.continued_as)
            current = run.id  # the next look starts where the chain stands
            if run.is_terminal:
                return run if type is None else self._result_as(run, type)
            if pause is None:
                break
            time.sleep(pause)
        raise _waiting.timed_out(run_id, timeout)

    @functools.cached_property
    def admin(self) -> Admin:
        """Operator actions (registry, counts, retry, purge ...) on this client's
        connections; see :mod:`simpleworkflow.admin`."""
        return Admin(
            backend=self.backend,
            auto_migrate=self._auto_migrate,
            observers=self.observers,
            codec=self.codec,
        )

    def _call(self, op: Op[T], connection: Any) -> T:
        """``op`` on the client's own connections, or in the caller's transaction."""
        if connection is None:
            return self._run(op)
        conn = _connections.driver_connection(connection)
        return self._run_on(self.backend.joinable(conn, asynchronous=False), op)

    @property
    def schedules(self) -> Schedules:
        """Cron schedules (create, list, pause, resume, delete), on this client's
        connections; the same object as ``admin.schedules``. See docs/schedules.md."""
        return self.admin.schedules

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(AsyncLiveReads):
    """The asyncio producer client. Use one per event loop; ``aclose`` it when done."""

    async def start(
        self,
        type: str,
        payload: Any = None,
        *,
        connection: Any = None,
        **options: Unpack[StartOptions],
    ) -> Run:
        """Record the intent to run ``type`` with ``payload``; see :meth:`Client.start`.
        ``connection`` is a psycopg ``AsyncConnection``, a ``sqlite3.Connection`` or a
        SQLAlchemy ``AsyncConnection`` or ``AsyncSession``."""
        with self._starting(type) as trace:
            op = self._start_op(type, payload, options, trace)
            return self._started(await self._call(op, connection), connection is None)

    async def start_many(
        self, requests: Iterable[StartRequest], *, connection: Any = None
    ) -> builtins.list[Run]:
        """Start many runs in one statement; see :meth:`Client.start_many`."""
        with self._starting(None) as trace:
            op = self._many_op(requests, trace)
            return self._started_many(await self._call(op, connection), connection is None)

    async def publish(
        self,
        topic: str,
        payload: Any = None,
        *,
        event_id: str | None = None,
        connection: Any = None,
    ) -> Published:
        """Publish an event to the workflow types subscribed to ``topic``; see
        :meth:`Client.publish`."""
        op = self._publish_op(topic, payload, event_id)
        return self._published(await self._call(op, connection), connection is None)

    async def get(self, run_id: str, *, type: Any = None) -> Run:
        """The run with this id; :class:`RunNotFound` if there is none. ``type``: see
        :meth:`Client.get`."""
        run_id = names.normalize_run_id(run_id)
        run = self._found(run_id, await self._run(self.backend.get_run(run_id), readonly=True))
        return run if type is None else self._result_as(run, type)

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
        payload_contains: Any = None,
    ) -> RunPage:
        """One page of runs, newest first; see :meth:`Client.list`."""
        query = _listing.list_query(
            type_prefix,
            status,
            created_after,
            created_before,
            include_deleted,
            limit,
            cursor,
            payload_contains,
            self.codec,
        )
        return _listing.page(await self._run(self.backend.list_runs(query), readonly=True), query)

    async def cancel(
        self, run_id: str, *, reason: str | None = None, connection: Any = None
    ) -> bool:
        """Cancel a pending or leased run; ``False`` if it had already finished.

        No step of the run begins once this has returned: a leased run's cancel returns
        0.2 s after its commit (see docs/durable.md#cancellation)."""
        return (await self.cancel_and_get(run_id, reason=reason, connection=connection))[0]

    async def cancel_and_get(
        self, run_id: str, *, reason: str | None = None, connection: Any = None
    ) -> tuple[bool, Run]:
        """:meth:`cancel`, and the run: as the cancel left it (read in its transaction),
        or as it stands if it had already finished."""
        run_id = names.normalize_run_id(run_id)
        committed = connection is None
        op = self._cancel_op(run_id, reason)
        cancelled, run = self._cancelled(run_id, await self._call(op, connection), committed)
        await asyncio.sleep(self._settle_for(cancelled, committed))
        return run_id in cancelled.ids, run

    async def signal(
        self, run_id: str, event: str, payload: Any = None, *, connection: Any = None
    ) -> SignalSent:
        """Store signal ``event`` for a run; see :meth:`Client.signal`."""
        with self.observers.around_signal(run_id, event):
            sent = await self._call(self._signal_op(run_id, event, payload), connection)
            return self._signalled(run_id, event, sent, connection is None)

    async def delete(self, run_id: str) -> bool:
        """Soft-delete a run; ``False`` if it was already deleted."""
        run_id = names.normalize_run_id(run_id)
        return self._found(run_id, await self._run(self.backend.delete_run(run_id)))

    async def events(self, run_id: str) -> builtins.list[Event]:
        """The audit trail of a run, oldest first."""
        run_id = names.normalize_run_id(run_id)
        op = self.backend.of_run(run_id, self.backend.list_events)
        return await self._run(op, readonly=True)

    async def steps(self, run_id: str) -> builtins.list[JournalEntry]:
        """The run's journal: its durable calls in the order they first ran."""
        run_id = names.normalize_run_id(run_id)
        return await self._run(
            self.backend.of_run(run_id, self.backend.load_journal), readonly=True
        )

    async def signals(self, run_id: str) -> builtins.list[Signal]:
        """The signals sent to the run; see :meth:`Client.signals`."""
        run_id = names.normalize_run_id(run_id)
        return await self._run(
            self.backend.of_run(run_id, self.backend.list_signals), readonly=True
        )

    async def wait(
        self,
        run_id: str,
        timeout: durations.Duration | None = None,
        *,
        follow: bool = True,
        type: Any = None,
    ) -> Run:
        """Wait until the run is succeeded, failed or cancelled, and return it; see
        :meth:`Client.wait` for ``follow`` and ``type``."""
        deadline = _waiting.deadline(timeout)
        current = run_id
        for pause in _waiting.pauses(deadline):
            run = await self.get(current)
            while follow and run.continued_as is not None:
                run = await self.get(run.continued_as)
            current = run.id  # the next look starts where the chain stands
            if run.is_terminal:
                return run if type is None else self._result_as(run, type)
            if pause is None:
                break
            await asyncio.sleep(pause)
        raise _waiting.timed_out(run_id, timeout)

    @functools.cached_property
    def admin(self) -> AsyncAdmin:
        """Operator actions, awaited, on this client's connections; see
        :mod:`simpleworkflow.admin`."""
        return AsyncAdmin(
            backend=self.backend,
            auto_migrate=self._auto_migrate,
            observers=self.observers,
            codec=self.codec,
        )

    async def _call(self, op: Op[T], connection: Any) -> T:
        """``op`` on the client's own connections, or in the caller's transaction."""
        if connection is None:
            return await self._run(op)
        conn = await _connections.driver_connection_async(connection)
        return await self._run_on(self.backend.joinable(conn, asynchronous=True), op)

    @property
    def schedules(self) -> AsyncSchedules:
        """Cron schedules, awaited; see :attr:`Client.schedules`."""
        return self.admin.schedules

    async def aclose(self) -> None:
        await self.backend.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
