"""The small interface every store implements, and the plumbing shared by all of them.

A backend verb (``create_run``, ``get_run`` ...) returns an *op*: a generator that yields
the SQL statements it needs and receives each one's rows. The same op is driven by a
synchronous connection (:meth:`Backend.execute`) or an asynchronous one
(:meth:`Backend.execute_async`), always inside one transaction, so the sync ``Client``
and the ``AsyncClient`` share one implementation of every operation.
"""

from __future__ import annotations

import abc
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


class Backend(abc.ABC):
    """A store of runs. Subclasses provide SQL, row decoding and the two drivers."""

    #: Human name of the store, for messages ("postgres", "sqlite").
    name: str
    #: The newest migration this code knows.
    latest_version: int
    #: Named SQL statements, with the schema already filled in.
    q: dict[str, str]

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

    def stmt(self, name: str, **params: Any) -> Statement:
        return Statement(self.q[name], self.encode_params(params))

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


def drive(op: Op[T], run: Callable[[Statement], Rows]) -> T:
    """Feed each statement an op yields to ``run`` until the op returns."""
    try:
        statement = next(op)
        while True:
            statement = op.send(run(statement))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
