"""What every backend verb builds on: named statements and decoding of rows."""

from __future__ import annotations

import abc
import functools
import json
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from simpleworkflow.backends.dialect import Dialect, followups
from simpleworkflow.backends.ops import Op, Statement
from simpleworkflow.backends.records import NewRun
from simpleworkflow.models import (
    DEFAULT_MAX_ATTEMPTS,
    Event,
    RateLimit,
    RegistryEntry,
    Run,
    RunStatus,
    Unreadable,
    runs,
)

#: ``created_run``'s default: parse the request's payload text.
_PARSE: Any = object()


class StoreCore(abc.ABC):
    """Statements by name, and rows turned into typed records."""

    #: Human name of the store, for messages ("postgres", "sqlite").
    name: str
    #: Named SQL statements, with the schema already filled in.
    q: dict[str, str]
    #: What the store's SQL can do.
    dialect: Dialect

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

    def then(self, query: str, /, **params: Any) -> Op[None]:
        """Run the follow-ups of ``query`` (``<query>_then_...``), for stores that cannot
        chain writes inside one statement (see :class:`~.dialect.Dialect`)."""
        if self.dialect.chained_writes:
            return
        for name in self._followups.get(query, ()):
            yield self.stmt(name, **params)

    @functools.cached_property
    def _followups(self) -> dict[str, list[str]]:
        """Worked out once rather than per call."""
        return followups(list(self.q))

    def read_time(self, value: Any) -> Any:
        """A stored time, or ``None``; an :class:`Unreadable` where it cannot be read
        (see :func:`unreadable`)."""
        if value is None:
            return None
        try:
            return self.decode_time(value)
        except (ValueError, TypeError, OverflowError) as exc:
            return unreadable(value, exc)

    def read_json(self, value: Any) -> Any:
        """Stored JSON, parsed; an :class:`Unreadable` where it does not parse."""
        try:
            return self.decode_json(value)
        except (ValueError, TypeError, RecursionError) as exc:
            return unreadable(value, exc)

    def run_from_row(self, row: Mapping[str, Any]) -> Run:
        """The run of a row, whatever it holds: a column that cannot be read is an
        :class:`Unreadable` in it (``run.unreadable`` lists them), never an error, so
        that one row written by hand fails neither a listing nor a claim of many."""
        time, json_ = self.read_time, self.read_json
        return Run(
            id=str(row["id"]),
            type=row["type"],
            payload=json_(row["payload"]),
            status=read_status(row["status"]),
            priority=read_int(row["priority"]),
            run_at=time(row["run_at"]),
            idempotency_key=row["idempotency_key"],
            attempt=read_int(row["attempt"]),
            max_attempts=read_int(row["max_attempts"]),
            leased_by=row["leased_by"],
            lease_until=time(row["lease_until"]),
            last_error=row["last_error"],
            result=json_(row["result"]),
            created_at=time(row["created_at"]),
            updated_at=time(row["updated_at"]),
            deleted_at=time(row["deleted_at"]),
            waiting_for=json_(row.get("waiting_for")),
            parent_id=None if row.get("parent_id") is None else str(row["parent_id"]),
            deadline=time(row.get("deadline")),
            code_version=row.get("code_version"),
            trace_context=json_(row.get("trace_context")),
            retention=read_duration(row.get("retention")),
            concurrency_key=row.get("concurrency_key"),
            continued_as=_id_or_none(row.get("continued_as")),
            continued_from=_id_or_none(row.get("continued_from")),
            forked_from=_id_or_none(row.get("forked_from")),
            forked_at_step=row.get("forked_at_step"),
        )

    def created_run(
        self, run_id: str, new: NewRun, row: Mapping[str, Any], payload: Any = _PARSE
    ) -> Run:
        """The run ``run_id`` just inserted for ``new``: the store sends back only the
        times it decided (``updated_at`` only when it differs from ``created_at``,
        ``run_at`` null when it is ``created_at``); the rest is what the client asked for
        and the defaults. ``payload`` is ``new.payload`` parsed, when the caller has it."""
        if payload is _PARSE:
            payload = json.loads(new.payload)
        return next(self.created_runs([run_id], [new], row, [payload]))

    def created_runs(
        self, ids: list[str], news: list[NewRun], row: Mapping[str, Any], payloads: list[Any]
    ) -> Iterator[Run]:
        """:meth:`created_run` for runs that share ``row``'s values (a group of
        ``create_runs``'s rows), each with its request and its parsed payload: the
        values are read once for them all."""
        created_at = self.decode_time(row["created_at"])
        updated_at = row.get("updated_at")
        updated_at = created_at if updated_at is None else self.decode_time(updated_at)
        run_at = row["run_at"]
        run_at = created_at if run_at is None else self.decode_time(run_at)
        deadline = self.opt_time(row["deadline"])
        # the store fixes it: the one asked for, else the type's of now (0022)
        retention = read_duration(row.get("retention"))
        for run_id, new, payload in zip(ids, news, payloads, strict=True):
            yield runs.created_run(
                id=run_id,
                type=new.type,
                payload=payload,
                priority=new.priority,
                run_at=run_at,
                idempotency_key=new.idempotency_key,
                max_attempts=(
                    DEFAULT_MAX_ATTEMPTS if new.max_attempts is None else new.max_attempts
                ),
                created_at=created_at,
                updated_at=updated_at,
                parent_id=new.parent_id,
                deadline=deadline,
                trace_context=(
                    None if new.trace_context is None else json.loads(new.trace_context)
                ),
                retention=retention,
                concurrency_key=new.concurrency_key,
            )

    def event_from_row(self, row: Mapping[str, Any]) -> Event:
        return Event(
            id=row["id"],
            workflow_id=str(row["workflow_id"]),
            event_type=row["event_type"],
            data=self.read_json(row["data"]),
            created_at=self.read_time(row["created_at"]),
        )

    def registry_from_row(self, row: Mapping[str, Any]) -> RegistryEntry:
        """A registry row; what cannot be read (written by hand) is an
        :class:`Unreadable`, shown as such, as in a run."""
        return RegistryEntry(
            workflow_name=row["workflow_name"],
            intent_type=row["intent_type"],
            runtime=row["runtime"],
            is_enabled=bool(row["is_enabled"]),
            description=row["description"],
            created_at=self.read_time(row["created_at"]),
            updated_at=self.read_time(row["updated_at"]),
            retention=read_duration(row.get("retention")),
            concurrency=read_int(row.get("concurrency")),
            key_concurrency=read_int(row.get("key_concurrency")),
            rate_limit=row.get("rate_limit"),
        )

    def rate_limit_from_row(self, row: Mapping[str, Any]) -> RateLimit:
        """A rate limit's row; as :meth:`registry_from_row`, what cannot be read is an
        :class:`Unreadable`."""
        return RateLimit(
            name=row["name"],
            max_runs=read_int(row["max_runs"]),
            period=read_number(row["period"]),
            per_key=bool(row["per_key"]),
            created_at=self.read_time(row["created_at"]),
            updated_at=self.read_time(row["updated_at"]),
        )

    def opt_time(self, value: Any) -> datetime | None:
        return None if value is None else self.decode_time(value)


def unreadable(value: Any, exc: BaseException) -> Unreadable:
    """The marker of a stored value that cannot be read, with its raw text and why."""
    if isinstance(value, Unreadable):
        return value
    raw = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return Unreadable(raw[:200], str(exc)[:200] or type(exc).__name__)


def read_int(value: Any) -> Any:
    """A stored integer, or ``None``; an :class:`Unreadable` for anything else (SQLite
    keeps text or a fraction in an integer column written by hand). Healthy values pay
    one type check."""
    if type(value) is int or value is None:
        return value
    return unreadable(value, ValueError("not an integer"))


def read_flag(value: Any) -> Any:
    """A stored boolean (``boolean`` on Postgres, 0 or 1 on SQLite); an
    :class:`Unreadable` for anything else."""
    if type(value) is bool or value in (0, 1):
        return value
    return unreadable(value, ValueError("not a boolean"))


def read_number(value: Any) -> Any:
    """A stored number (a ``real`` column), or ``None``; an :class:`Unreadable` for
    anything else."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    return unreadable(value, ValueError("not a number"))


def read_status(value: Any) -> Any:
    """A run's status, or an :class:`Unreadable` for one this version does not know
    (written with SQLite's checks off, or by a newer runtime)."""
    try:
        return RunStatus(value)
    except ValueError:
        return unreadable(value, ValueError("unknown status"))


def read_duration(value: Any) -> Any:
    """A stored retention (see :func:`duration`), or an :class:`Unreadable`."""
    try:
        return duration(value)
    except (ValueError, TypeError, OverflowError) as exc:
        return unreadable(value, exc)


def duration(value: Any) -> timedelta | None:
    """A stored retention: an ``interval`` (Postgres) or seconds (SQLite), or null."""
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=float(value))


def _id_or_none(value: Any) -> str | None:
    """A run id column as text (Postgres gives a ``UUID``), or ``None``."""
    return None if value is None else str(value)
