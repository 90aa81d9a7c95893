"""What the admin facade returns besides the engine's records: a type at a glance."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from simpleworkflow.backends.records import RegistryEntry
from simpleworkflow.models import WAITING_STATES, RunStatus

#: The states counted for every type, in this order: the statuses, then the waiting
#: states of pending runs (a refinement of ``pending``; a run may be in several).
STATES = (*(status.value for status in RunStatus), *WAITING_STATES)


@dataclass(frozen=True, slots=True)
class TypeStats:
    """One workflow type at a glance, as an operator's overview shows it."""

    type: str
    #: Runs not deleted, for every name in :data:`STATES` (zeros included).
    counts: Mapping[str, int]
    #: Seconds since its oldest due pending run became due (how late its queue is);
    #: ``None`` when no run is due. A run sleeping until tomorrow is not late.
    oldest_due: float | None
    #: Its registry entry, ``None`` when no worker or operator has registered it.
    registry: RegistryEntry | None

    @property
    def total(self) -> int:
        """Runs of the type that are not deleted, in any status."""
        return sum(self.counts[status.value] for status in RunStatus)

    @property
    def paused(self) -> bool:
        return self.registry is not None and not self.registry.is_enabled

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, as the CLI and API print it."""
        return {
            "type": self.type,
            "counts": dict(self.counts),
            "total": self.total,
            "oldest_due_seconds": self.oldest_due,
            "registry": None if self.registry is None else registry_dict(self.registry),
        }


def registry_dict(entry: RegistryEntry) -> dict[str, Any]:
    """A JSON-ready registry entry, times as ISO 8601 like every other JSON output."""
    return {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in (
            ("workflow_name", entry.workflow_name),
            ("intent_type", entry.intent_type),
            ("runtime", entry.runtime),
            ("is_enabled", entry.is_enabled),
            ("description", entry.description),
            ("created_at", entry.created_at),
            ("updated_at", entry.updated_at),
        )
    }
