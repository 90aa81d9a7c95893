"""The small interface every store implements, and the plumbing shared by all of them.

A backend verb (``create_run``, ``get_run`` ...) returns an *op*: a generator that yields
the SQL statements it needs and receives each one's rows. The same op is driven by a
synchronous connection (:meth:`Backend.execute`) or an asynchronous one
(:meth:`Backend.execute_async`), always inside one transaction, so the sync ``Client``
and the ``AsyncClient`` share one implementation of every operation.
"""

from __future__ import annotations

import abc
import asyncio
import json
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from simpleworkflow import errors
from simpleworkflow.models import Event, Run, RunStatus

T = TypeVar("T")
Rows = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Statement:
    """One SQL statement with its named parameters."""

    sql: str
    params: Mapping[str, Any] = field(default_factory=dict)


Op = Generator[Statement, Rows, T]


@dataclass(frozen=True, slots=True)
class NewRun:
    """A validated request to start a run; ``payload`` is already JSON text."""

    type: str
    payload: str
    idempotency_key: str | None = None
    priority: int = 100
    run_at: datetime | None = None
    delay_seconds: float = 0.0
    max_attempts: int | None = None


@dataclass(frozen=True, slots=True)
class RunQuery:
    """Filters and paging for a listing; ``None`` means "any"."""

    type_like: str | None = None
    statuses: tuple[str, ...] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    include_deleted: bool = False
    limit: int = 50
    after_created_at: datetime | None = None
    after_id: str | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """A run a worker claimed, with the token that fences every write it makes for it."""

    run: Run
    token: str


@dataclass(frozen=True, slots=True)
class Claim:
    """What a worker asks for: up to ``limit`` due runs of ``types`` it may run."""

    worker_id: str
    types: tuple[str, ...]
    limit: int
    lease_seconds: float
    runtime: str = "python"


@dataclass(frozen=True, slots=True)
class Success:
    run_id: str
    token: str
    result: str  # JSON text


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed attempt: retried after ``delay`` seconds, or the end of the run if ``final``."""

    run_id: str
    token: str | None
    final: bool
    delay: float
    error: str  # stored in last_error
    data: dict[str, Any]  # event data


@dataclass(frozen=True, slots=True)
class Outcomes:
    """Everything a worker has to record, written together in one transaction."""

    succeeded: list[Success] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    released: list[tuple[str, str]] = field(default_factory=list)  # (run id, token)

    def __bool__(self) -> bool:
        return bool(self.succeeded or self.failed or self.released)


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """One row of ``workflow_registry``: which runtime may run a type, and whether it may."""

    workflow_name: str
    intent_type: str
    runtime: str
    is_enabled: bool
    description: str | None
    created_at: datetime
    updated_at: datetime


#: What a worker learns about a lease it holds.
HELD, CANCELLED, LOST = "held", "cancelled", "lost"


class Backend(abc.ABC):
    """A store of runs. Subclasses provide SQL, row decoding and the two drivers."""

    #: Human name of the store, for messages ("postgres", "sqlite").
    name: str
    #: The newest migration this code knows.
    latest_version: int
    #: Named SQL statements, with the schema already filled in.
    q: dict[str, str]
    #: Whether :meth:`listen` hears about every write in every process.
    has_notifications: bool = False

    # -- execution -------------------------------------------------------------------

    @abc.abstractmethod
    def execute(self, op: Op[T], *, readonly: bool = False) -> T:
        """Run ``op`` to completion in one transaction, synchronously."""

    @abc.abstractmethod
    async def execute_async(self, op: Op[T], *, readonly: bool = False) -> T:
        """Run ``op`` to completion in one transaction, without blocking the event loop."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections held for synchronous use."""

    async def aclose(self) -> None:
        """Release connections held for asynchronous use."""
        self.close()

    # -- wake-ups --------------------------------------------------------------------

    async def listen(self, on_message: Callable[[str, str], None]) -> None:
        """Call ``on_message(kind, value)`` for wake-ups until cancelled.

        ``kind`` is ``"wake"`` (value: a type with a newly due run) or ``"cancel"``
        (value: a cancelled run id). Stores without notifications never call it.
        """
        await asyncio.Event().wait()

    def notify_local(self, kind: str, value: str) -> None:  # noqa: B027 - optional hook
        """Wake this process's listeners after a commit (for stores without triggers)."""

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

    @abc.abstractmethod
    def schema_version(self) -> Op[int | None]:
        """The applied schema version, or ``None`` when the schema does not exist."""

    # -- conversions -----------------------------------------------------------------

    @abc.abstractmethod
    def decode_time(self, value: Any) -> datetime: ...

    @abc.abstractmethod
    def decode_json(self, value: Any) -> Any: ...

    def encode_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Adapt Python values to what the driver expects (identity by default)."""
        return params

    def stmt(self, query: str, /, **params: Any) -> Statement:
        """The named query with its parameters adapted for the driver."""
        return Statement(self.q[query], self.encode_params(params))

    def run_from_row(self, row: Mapping[str, Any]) -> Run:
        opt_time = self._opt_time
        return Run(
            id=str(row["id"]),
            type=row["type"],
            payload=self.decode_json(row["payload"]),
            status=RunStatus(row["status"]),
            priority=row["priority"],
            run_at=self.decode_time(row["run_at"]),
            idempotency_key=row["idempotency_key"],
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            leased_by=row["leased_by"],
            lease_until=opt_time(row["lease_until"]),
            last_error=row["last_error"],
            result=self.decode_json(row["result"]),
            created_at=self.decode_time(row["created_at"]),
            updated_at=self.decode_time(row["updated_at"]),
            deleted_at=opt_time(row["deleted_at"]),
        )

    def event_from_row(self, row: Mapping[str, Any]) -> Event:
        return Event(
            id=row["id"],
            workflow_id=str(row["workflow_id"]),
            event_type=row["event_type"],
            data=self.decode_json(row["data"]),
            created_at=self.decode_time(row["created_at"]),
        )

    def _opt_time(self, value: Any) -> datetime | None:
        return None if value is None else self.decode_time(value)

    # -- domain verbs ----------------------------------------------------------------

    def create_run(self, new: NewRun) -> Op[tuple[Run, bool]]:
        """Insert a run and its ``created`` event; on a known key return the existing run."""
        rows = yield self.stmt(
            "create_run",
            type=new.type,
            payload=new.payload,
            idempotency_key=new.idempotency_key,
            priority=new.priority,
            run_at=new.run_at,
            delay=new.delay_seconds,
            max_attempts=new.max_attempts,
        )
        if rows:
            run = self.run_from_row(rows[0])
            if "created_event" in self.q:  # stores whose insert cannot also write the event
                yield self.stmt(
                    "created_event",
                    id=run.id,
                    type=run.type,
                    priority=run.priority,
                    run_at=rows[0]["run_at"],
                )
            return run, True
        return (yield from self._existing_by_key(new)), False

    def _existing_by_key(self, new: NewRun) -> Op[Run]:
        rows = yield self.stmt("get_run_by_key", idempotency_key=new.idempotency_key)
        if not rows:  # the conflicting row was deleted by retention between two statements
            raise errors.StoreUnavailable(
                f"a run with idempotency key {new.idempotency_key!r} vanished while being "
                "read; retry the call"
            )
        return self.run_from_row(rows[0])

    def get_run(self, run_id: str) -> Op[Run | None]:
        rows = yield self.stmt("get_run", id=run_id)
        return self.run_from_row(rows[0]) if rows else None

    def list_runs(self, query: RunQuery) -> Op[list[Run]]:
        rows = yield self.stmt(
            "list_runs",
            type_like=query.type_like,
            statuses=list(query.statuses) if query.statuses else None,
            created_after=query.created_after,
            created_before=query.created_before,
            include_deleted=query.include_deleted,
            after_created_at=query.after_created_at,
            after_id=query.after_id,
            limit=query.limit,
        )
        return [self.run_from_row(row) for row in rows]

    def cancel_run(self, run_id: str, reason: str | None) -> Op[bool | None]:
        """Cancel a pending or leased run. ``None``: no such run; ``False``: already over."""
        data = json.dumps({"reason": reason} if reason else {})
        rows = yield self.stmt("cancel_run", id=run_id, data=data)
        if not rows:
            return (yield from self._exists(run_id))
        if "cancelled_event" in self.q:
            yield self.stmt("cancelled_event", id=run_id, data=data)
        return True

    def delete_run(self, run_id: str) -> Op[bool | None]:
        """Soft-delete a run. ``None``: no such run; ``False``: already deleted."""
        rows = yield self.stmt("delete_run", id=run_id)
        if not rows:
            return (yield from self._exists(run_id))
        return True

    def _exists(self, run_id: str) -> Op[bool | None]:
        rows = yield self.stmt("get_run", id=run_id)
        return False if rows else None

    def list_events(self, run_id: str) -> Op[list[Event]]:
        rows = yield self.stmt("list_events", id=run_id)
        return [self.event_from_row(row) for row in rows]

    # -- registry --------------------------------------------------------------------

    def registry_from_row(self, row: Mapping[str, Any]) -> RegistryEntry:
        return RegistryEntry(
            workflow_name=row["workflow_name"],
            intent_type=row["intent_type"],
            runtime=row["runtime"],
            is_enabled=bool(row["is_enabled"]),
            description=row["description"],
            created_at=self.decode_time(row["created_at"]),
            updated_at=self.decode_time(row["updated_at"]),
        )

    def register_types(self, types: list[str], runtime: str) -> Op[None]:
        """Record ``runtime`` for each type that has no registry entry yet."""
        yield self.stmt("register_types", types=types, runtime=runtime)

    def list_registry(self) -> Op[list[RegistryEntry]]:
        rows = yield self.stmt("list_registry")
        return [self.registry_from_row(row) for row in rows]

    def set_registry(self, name: str, runtime: str, description: str | None) -> Op[RegistryEntry]:
        rows = yield self.stmt("set_registry", name=name, runtime=runtime, description=description)
        return self.registry_from_row(rows[0])

    def enable_registry(self, name: str, enabled: bool) -> Op[RegistryEntry | None]:
        rows = yield self.stmt("enable_registry", name=name, enabled=enabled)
        return self.registry_from_row(rows[0]) if rows else None

    # -- worker ----------------------------------------------------------------------

    def claim(self, claim: Claim) -> Op[list[Lease]]:
        """Lease up to ``claim.limit`` due runs, highest priority and longest due first."""
        rows = yield self.stmt(
            "claim",
            worker_id=claim.worker_id,
            types=list(claim.types),
            runtime=claim.runtime,
            limit=claim.limit,
            lease=float(claim.lease_seconds),
        )
        if rows and "claim_events" in self.q:
            yield self.stmt("claim_events", ids=[str(row["id"]) for row in rows])
        return [Lease(self.run_from_row(row), str(row["lease_token"])) for row in rows]

    def heartbeat(
        self, worker_id: str, leases: list[tuple[str, str]], lease_seconds: float, events: bool
    ) -> Op[dict[str, str]]:
        """Extend held leases; map each run id to HELD, CANCELLED or LOST."""
        rows = yield self.stmt(
            "heartbeat",
            items=_lease_items(leases),
            lease=float(lease_seconds),
            worker_id=worker_id,
            with_events=events,
        )
        extended = [str(row["id"]) for row in rows]
        if extended and events and "heartbeat_events" in self.q:
            yield self.stmt(
                "heartbeat_events", ids=extended, lease=float(lease_seconds), worker_id=worker_id
            )
        states = dict.fromkeys(extended, HELD)
        others = [lease for lease in leases if lease[0] not in states]
        if others:
            states.update((yield from self.lease_states(others)))
        return states

    def lease_states(self, leases: list[tuple[str, str]]) -> Op[dict[str, str]]:
        """Whether each lease is still held, or was cancelled or lost, without changing it."""
        rows = yield self.stmt("lease_states", items=_lease_items(leases))
        states = {}
        for row in rows:
            if row["status"] == "cancelled":
                state = CANCELLED
            elif row["status"] == "leased" and row["held"]:
                state = HELD
            else:
                state = LOST
            states[str(row["id"])] = state
        return states

    def finish(self, outcomes: Outcomes, worker_id: str, reason: str = "shutdown") -> Op[set[str]]:
        """Record outcomes of leased runs; return the ids whose lease was still held."""
        accepted: set[str] = set()
        if outcomes.succeeded:
            items: list[dict[str, Any]] = [
                {"id": s.run_id, "token": s.token, "result": s.result} for s in outcomes.succeeded
            ]
            accepted |= yield from self._fenced_update("succeed_runs", "succeed_events", items)
        if outcomes.failed:
            failed: list[dict[str, Any]] = [
                {
                    "id": f.run_id,
                    "token": f.token,
                    "final": f.final,
                    "delay": round(f.delay, 3),
                    "error": f.error,
                    "data": f.data,
                }
                for f in outcomes.failed
            ]
            accepted |= yield from self._fenced_update("fail_runs", "fail_events", failed)
        if outcomes.released:
            released = [{"id": run_id, "token": token} for run_id, token in outcomes.released]
            accepted |= yield from self._fenced_update(
                "release_runs", "release_events", released, worker_id=worker_id, reason=reason
            )
        return accepted

    def _fenced_update(
        self, name: str, events: str, items: list[dict[str, Any]], **extra: Any
    ) -> Op[set[str]]:
        rows = yield self.stmt(name, items=json.dumps(items), **extra)
        done = [str(row["id"]) for row in rows]
        if done and events in self.q:
            yield self.stmt(events, ids=done, items=json.dumps(items), **extra)
        return set(done)

    def reap_expired(
        self, types: list[str], limit: int, decide: Callable[[Mapping[str, Any]], Failure]
    ) -> Op[int]:
        """Turn expired leases of ``types`` into failed attempts, as ``decide`` says."""
        rows = yield self.stmt("expired_leases", types=types, limit=limit)
        if not rows:
            return 0
        failures = [decide(row) for row in rows]
        accepted = yield from self.finish(Outcomes(failed=failures), worker_id="")
        return len(accepted)


def _lease_items(leases: list[tuple[str, str]]) -> str:
    return json.dumps([{"id": run_id, "token": token} for run_id, token in leases])


def drive(op: Op[T], run: Callable[[Statement], Rows]) -> T:
    """Feed each statement an op yields to ``run`` until the op returns."""
    try:
        statement = next(op)
        while True:
            statement = op.send(run(statement))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
