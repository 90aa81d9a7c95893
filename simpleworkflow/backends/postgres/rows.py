"""A run's row as psycopg hands it over, read without the generic checks.

psycopg has already typed every column: ``jsonb`` parsed, integers as ``int``, times as
``datetime`` or, out of Python's range, an :class:`~simpleworkflow.models.Unreadable`
from ``loading``. What ``StoreCore.run_from_row`` checks for a store that hands over
text (SQLite) is then a no-op here, and a claim reads a hundred rows at a time: this
reads them as they are, the same :class:`~simpleworkflow.models.Run` for less.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simpleworkflow.backends.core import read_status
from simpleworkflow.models import Run, RunStatus

_STATUSES = {status.value: status for status in RunStatus}


def run_from_row(row: Mapping[str, Any]) -> Run:
    """The run of a row of ``workflow_run`` (``returning *`` or ``select *``)."""
    status = _STATUSES.get(row["status"])
    # a listing may select fewer columns: those the generic reading takes as optional
    parent_id, continued_as = row.get("parent_id"), row.get("continued_as")
    continued_from, forked_from = row.get("continued_from"), row.get("forked_from")
    return Run(
        id=str(row["id"]),
        type=row["type"],
        payload=row["payload"],
        status=read_status(row["status"]) if status is None else status,
        priority=row["priority"],
        run_at=row["run_at"],
        idempotency_key=row["idempotency_key"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        leased_by=row["leased_by"],
        lease_until=row["lease_until"],
        last_error=row["last_error"],
        result=row["result"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        deleted_at=row["deleted_at"],
        waiting_for=row.get("waiting_for"),
        parent_id=None if parent_id is None else str(parent_id),
        deadline=row.get("deadline"),
        code_version=row.get("code_version"),
        trace_context=row.get("trace_context"),
        retention=row.get("retention"),
        concurrency_key=row.get("concurrency_key"),
        continued_as=None if continued_as is None else str(continued_as),
        continued_from=None if continued_from is None else str(continued_from),
        forked_from=None if forked_from is None else str(forked_from),
        forked_at_step=row.get("forked_at_step"),
    )
