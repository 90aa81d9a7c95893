"""Plain, typed data: runs, events and pages of runs, as read back from a store."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any


class RunStatus(enum.StrEnum):
    """The five statuses of a run; the values are the strings stored in the database."""

    PENDING = "pending"
    LEASED = "leased"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})


@dataclass(frozen=True, slots=True)
class Run:
    """One row of ``workflow_run``."""

    id: str
    type: str
    payload: Any
    status: RunStatus
    priority: int
    run_at: datetime
    idempotency_key: str | None
    attempt: int
    max_attempts: int
    leased_by: str | None
    lease_until: datetime | None
    last_error: str | None
    result: Any
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None
    #: What a suspended run waits for: a signal, a child run, or the time in ``run_at``.
    waiting_for: Any = None
    parent_id: str | None = None
    deadline: datetime | None = None
    #: The code version of the handler the run started on (set at its first claim).
    code_version: str | None = None
    #: Set only on what ``start`` and ``start_many`` return: True when the call created
    #: the run, False when its idempotency key was held already and the run that holds it
    #: came back. ``None`` on runs read back. Not part of the run's equality.
    created: bool | None = dataclasses.field(default=None, compare=False)

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (times as ISO 8601 strings), as the CLI and API print it."""
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            out[name] = value.isoformat() if isinstance(value, datetime) else value
        if self.created is None:
            del out["created"]  # a run read back, not one a start returned
        out["status"] = self.status.value
        return out


@dataclass(frozen=True, slots=True)
class Event:
    """One row of the audit trail, ``workflow_event``."""

    id: int
    workflow_id: str
    event_type: str
    data: Any
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "workflow_id": self.workflow_id,
            "event_type": self.event_type,
            "data": self.data,
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of a listing; pass ``next_cursor`` back to get the next page."""

    runs: list[Run]
    next_cursor: str | None
