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
from simpleworkflow.models.runs import run_draft, sealed_run

_STATUSES = {status.value: status for status in RunStatus}


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
