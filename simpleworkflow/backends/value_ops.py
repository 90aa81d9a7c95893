"""Values a run publishes (``ctx.set_value``): the fenced set, journaled with its value in
one transaction, and the readers' look-ups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simpleworkflow.backends.core import read_int
from simpleworkflow.backends.journal_ops import JournalOps
from simpleworkflow.backends.ops import ATOMIC, Op
from simpleworkflow.backends.records import StepRecord
from simpleworkflow.models import TERMINAL_STATUSES, RunValue

_ENDED = frozenset(str(status) for status in TERMINAL_STATUSES)


class ValueOps(JournalOps):
    def set_value(self, step: StepRecord, key: str, value: str) -> Op[bool]:
        """Journal ``step`` (its events log the set) and store ``value`` (JSON text) as the
        run's ``key``, in one transaction fenced by the lease; ``False``, writing
        nothing, when the lease was lost."""
        yield ATOMIC  # the value is stored only together with its journal entry
        if not (yield from self._record(step)):
            return False
        yield self.stmt("set_value", run_id=step.run_id, key=key, value=value, name=step.name)
        return True

    def list_values(self, run_id: str) -> Op[list[RunValue]]:
        """The run's values, by key."""
        rows = yield self.stmt("list_values", id=run_id)
        return [self._value_from_row(row) for row in rows]

    def get_value(self, run_id: str, key: str) -> Op[RunValue | None]:
        """The run's value ``key``, or ``None`` when it has set none."""
        rows = yield self.stmt("get_value", id=run_id, key=key)
        return self._value_from_row(rows[0]) if rows else None

    def await_value(self, run_id: str, key: str) -> Op[tuple[RunValue | None, str | None] | None]:
        """The run's value ``key`` (``None`` when unset) and, once the run has ended, its
        status, read in one statement; ``None`` when the run does not exist."""
        rows = yield self.stmt("await_value", id=run_id, key=key)
        if not rows:
            return None
        row = rows[0]
        value = None if row["key"] is None else self._value_from_row(row)
        status = str(row["run_status"])
        return value, status if status in _ENDED else None

    def _value_from_row(self, row: Mapping[str, Any]) -> RunValue:
        return RunValue(
            run_id=str(row["run_id"]),
            key=row["key"],
            value=self.read_json(row["value"]),
            version=read_int(row["version"]),
            step_name=row["step_name"],
            updated_at=self.read_time(row["updated_at"]),
        )
