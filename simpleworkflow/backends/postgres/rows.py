"""A run's row as psycopg hands it over, read without the generic checks.

psycopg has already typed every column: ``jsonb`` parsed, integers as ``int``, times as
``datetime`` or, out of Python's range, an :class:`~simpleworkflow.models.Unreadable`
from ``loading``. What ``StoreCore.run_from_row`` checks for a store that hands over
text (SQLite) is then a no-op here, and a claim reads a hundred rows at a time: this
reads them as they are, the same :class:`~simpleworkflow.models.Run` for less.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.adapt import Loader, Transformer
from psycopg.pq import ExecStatus, Format
from psycopg.rows import dict_row
from psycopg.types.string import TextLoader

from simpleworkflow.backends.core import read_status
from simpleworkflow.backends.ops import Op, Statement
from simpleworkflow.backends.postgres import loading
from simpleworkflow.backends.records import Claim, Claimed, Lease
from simpleworkflow.backends.worker_ops import WorkerOps, resumes
from simpleworkflow.models import Run, RunStatus
from simpleworkflow.models.runs import run_draft, sealed_run

_STATUSES = {status.value: status for status in RunStatus}
TUPLES_OK = ExecStatus.TUPLES_OK


def run_from_row(row: Mapping[str, Any]) -> Run:
    """The run of a row of ``workflow_run`` (``returning *`` or ``select *``), written
    field by field (see ``models.runs.run_draft``): every field of ``Run`` is set here."""
    status = _STATUSES.get(row["status"])
    # a listing may select fewer columns: those the generic reading takes as optional
    parent_id, continued_as = row.get("parent_id"), row.get("continued_as")
    continued_from, forked_from = row.get("continued_from"), row.get("forked_from")
    run = run_draft()
    run.id = str(row["id"])
    run.type = row["type"]
    run.payload = row["payload"]
    run.status = read_status(row["status"]) if status is None else status
    run.priority = row["priority"]
    run.run_at = row["run_at"]
    run.idempotency_key = row["idempotency_key"]
    run.attempt = row["attempt"]
    run.max_attempts = row["max_attempts"]
    run.leased_by = row["leased_by"]
    run.lease_until = row["lease_until"]
    run.last_error = row["last_error"]
    run.result = row["result"]
    run.created_at = row["created_at"]
    run.updated_at = row["updated_at"]
    run.deleted_at = row["deleted_at"]
    run.waiting_for = row.get("waiting_for")
    run.parent_id = None if parent_id is None else str(parent_id)
    run.deadline = row.get("deadline")
    run.code_version = row.get("code_version")
    run.trace_context = row.get("trace_context")
    run.retention = row.get("retention")
    run.concurrency_key = row.get("concurrency_key")
    run.continued_as = None if continued_as is None else str(continued_as)
    run.continued_from = None if continued_from is None else str(continued_from)
    run.forked_from = None if forked_from is None else str(forked_from)
    run.forked_at_step = row.get("forked_at_step")
    run.created = None
    return sealed_run(run)


@dataclass(frozen=True, slots=True)
class Read(Statement):
    """A statement whose rows a psycopg row factory of its own makes, not dicts; the
    driver reads it on :meth:`cursor`.

    Its times load through psycopg's own loaders, not ``loading``'s guarded ones (a
    Python call a value): only a result holding a time Python cannot hold is loaded
    again, guarded, so such a value still becomes an ``Unreadable``."""

    row_factory: Any = field(kw_only=True)

    def cursor(self, conn: Any) -> Any:
        kind = _AsyncCursor if isinstance(conn, psycopg.AsyncConnection) else _Cursor
        cursor = kind(conn, row_factory=self.row_factory)
        for name, loader in _PLAIN:
            cursor.adapters.register_loader(name, loader)
        return cursor


class _JsonbText(Loader):
    """``jsonb`` in the text format, parsed as text: ``json.loads`` of bytes first looks
    for their encoding (Python code), where Postgres sends UTF-8."""

    def load(self, data: Any) -> Any:
        return _decode(str(data, "utf-8"))


_decode = json.JSONDecoder().decode  # what json.loads(text) calls

#: Loaders of a :class:`Read`: ids as the text Postgres writes them, which is
#: ``str(UUID)`` (what a Run holds), ``jsonb`` parsed from text, and the times
#: unguarded (C where installed).
_AS_TEXT: list[tuple[str, Any]] = [("uuid", TextLoader), ("jsonb", _JsonbText)]
_PLAIN = _AS_TEXT + [
    (name, psycopg.adapters.get_loader(psycopg.adapters.types[name].oid, Format.TEXT))
    for name in loading.TYPES
]

#: What psycopg's time loaders raise for a value out of Python's range.
_OUT_OF_RANGE = (psycopg.DataError, ValueError, OverflowError)


class _Cursor(psycopg.Cursor[Any]):
    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except _OUT_OF_RANGE:
            if self.pgresult is None or self.pgresult.status != TUPLES_OK:
                raise  # the server's own error: no rows to load again
            return _guarded_rows(self)


class _AsyncCursor(psycopg.AsyncCursor[Any]):
    async def fetchall(self) -> list[Any]:
        try:
            return await super().fetchall()
        except _OUT_OF_RANGE:
            if self.pgresult is None or self.pgresult.status != TUPLES_OK:
                raise  # the server's own error: no rows to load again
            return _guarded_rows(self)


def _guarded_rows(cursor: Any) -> list[Any]:
    """The rows of ``cursor``'s result loaded again, through ``loading``'s guarded
    loaders."""
    result = cursor.pgresult
    guarded = cursor.connection.cursor()  # for its adapters and timezone: nothing is sent
    for name, loader in _AS_TEXT:  # as the first reading: ids as text, jsonb parsed
        guarded.adapters.register_loader(name, loader)
    loading.guard(guarded)
    transformer = Transformer(guarded)
    transformer.set_pgresult(result)
    return transformer.load_rows(0, result.ntuples, cursor.row_factory(cursor))


#: What the claim's row factory makes of a row: its lease (``None`` on the row of nulls
#: a claim that leased nothing returns), ``throttled_for`` and ``limited``.
ClaimedRow = tuple[Lease | None, Any, Any]


class _UnsealedLease:
    """:class:`Lease`'s slots without its frozen guard (see ``models.runs.run_draft``)."""

    __slots__ = Lease.__slots__


def claimed_row(cursor: Any) -> Callable[[Sequence[Any]], ClaimedRow]:
    """The claim's row factory: each row straight to its :class:`Lease` and the run in it,
    by position, with no dict between (the columns are those of ``returning r.*`` and
    the claim's own; ``run_from_row`` says what each field holds)."""
    at = {column.name: i for i, column in enumerate(cursor.description or ())}
    (id_, type_, payload, status_, priority, run_at, idempotency_key, attempt) = (
        at[name]
        for name in (
            "id", "type", "payload", "status", "priority", "run_at", "idempotency_key",
            "attempt",
        )
    )  # fmt: skip
    (max_attempts, leased_by, lease_until, last_error, result, created_at, updated_at) = (
        at[name]
        for name in (
            "max_attempts", "leased_by", "lease_until", "last_error", "result", "created_at",
            "updated_at",
        )
    )  # fmt: skip
    (deleted_at, waiting_for, parent_id, deadline, code_version, trace_context) = (
        at[name]
        for name in (
            "deleted_at", "waiting_for", "parent_id", "deadline", "code_version",
            "trace_context",
        )
    )  # fmt: skip
    (retention, concurrency_key, continued_as, continued_from, forked_from) = (
        at[name]
        for name in (
            "retention", "concurrency_key", "continued_as", "continued_from", "forked_from",
        )
    )  # fmt: skip
    forked_at_step, token, db_now, isolate = (
        at[name] for name in ("forked_at_step", "lease_token", "db_now", "isolate")
    )
    was_waiting_for = at.get("was_waiting_for", waiting_for)
    counted, throttled_for, limited = (at.get(n) for n in ("counted", "throttled_for", "limited"))
    statuses = _STATUSES

    def claimed(row: Sequence[Any]) -> ClaimedRow:
        throttled = None if throttled_for is None else row[throttled_for]
        limits = None if limited is None else row[limited]
        if row[id_] is None:
            return None, throttled, limits
        status = statuses.get(row[status_])
        run = run_draft()
        run.id = row[id_]
        run.type = row[type_]
        run.payload = row[payload]
        run.status = read_status(row[status_]) if status is None else status
        run.priority = row[priority]
        run.run_at = row[run_at]
        run.idempotency_key = row[idempotency_key]
        run.attempt = row[attempt]
        run.max_attempts = row[max_attempts]
        run.leased_by = row[leased_by]
        run.lease_until = row[lease_until]
        run.last_error = row[last_error]
        run.result = row[result]
        run.created_at = row[created_at]
        run.updated_at = row[updated_at]
        run.deleted_at = row[deleted_at]
        run.waiting_for = row[waiting_for]
        run.parent_id = row[parent_id]
        run.deadline = row[deadline]
        run.code_version = row[code_version]
        run.trace_context = row[trace_context]
        run.retention = row[retention]
        run.concurrency_key = row[concurrency_key]
        run.continued_as = row[continued_as]
        run.continued_from = row[continued_from]
        run.forked_from = row[forked_from]
        run.forked_at_step = row[forked_at_step]
        run.created = None
        lease: Any = _UnsealedLease()
        lease.run = sealed_run(run)
        lease.token = row[token]
        lease.claimed_at = _time(row[db_now])
        waited = row[was_waiting_for]
        lease.was_waiting_for = None if waited is None else resumes(waited)
        lease.isolated = bool(row[isolate])
        lease.counted = counted is None or row[counted] is not False
        lease.__class__ = Lease
        return lease, throttled, limits  # a Lease now

    return claimed


def _time(value: Any) -> datetime:
    if not isinstance(value, datetime):  # an Unreadable, from loading
        raise ValueError(f"not a time Python can hold: {value}")
    return value


class ClaimReading(WorkerOps):
    """The claim read with :func:`claimed_row`: a hundred leases for about half of what
    dicts and then ``run_from_row`` cost (docs/performance.md); the outcomes' run ids
    read as text."""

    def ids_stmt(self, query: str, /, **params: Any) -> Statement:
        # an outcome's run ids as text: no UUID made a run to be turned back into text
        return Read(self.q[query], params, row_factory=dict_row)

    def claim_runs(self, claim: Claim) -> Op[Claimed]:
        name, params = self.claim_call(claim)
        read = Read(self.q[name], params, row_factory=claimed_row)
        got = yield from self._claim_rows(read, claim.wait_for_disk)
        rows: list[ClaimedRow] = got  # type: ignore[assignment]  # made by claimed_row
        # leased runs only (a throttled run stays pending, unreturned): throttled_for
        # when the claim throttled runs, limited on every row
        waits = [float(throttled) for _, throttled, _ in rows if throttled is not None]
        limited = next((limits for _, _, limits in rows if limits is not None), True)
        leases = [lease for lease, _, _ in rows if lease is not None]
        return Claimed(leases, min(waits) if waits else None, limited=bool(limited))
