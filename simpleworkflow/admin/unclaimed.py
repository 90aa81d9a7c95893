"""Why a run just started may wait for ever: its type has no registry row (no worker or
runtime has announced it, often a typo in the type) or its type is paused.

A start is never refused for this, since producers may start runs before any worker of
their type has been deployed. The command line and the HTTP API say it instead, on stderr
and in the start's ``warnings``; the Python client does not (docs/client.md says why).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from simpleworkflow.admin.faces import AsyncAdmin
from simpleworkflow.models import RegistryEntry


def start_warnings(type: str, registry: Iterable[RegistryEntry]) -> list[str]:
    """What a person starting a run of ``type`` should know, given the registry's rows."""
    entry = next((row for row in registry if row.workflow_name == type), None)
    if entry is None:
        return [
            f"no worker or runtime has registered {type} (it has no row in "
            "workflow_registry): the run waits as pending until one does; check the "
            "type's spelling against `simpleworkflow registry list`"
        ]
    if not entry.is_enabled:
        return [
            f"{type} is paused: the run waits as pending until "
            f"`simpleworkflow registry resume {type}`"
        ]
    return []


class RegistryView:
    """The registry as last read, for a server that starts many runs: read again when it
    is older than ``max_age`` seconds (so a pause shows within that) or when a type is
    missing from it, at most once per ``recheck`` seconds (a worker that has just
    registered its types silences the warning at once, and a stream of starts of an
    unregistered type costs one read per ``recheck``, not one per start)."""

    def __init__(
        self,
        *,
        max_age: float = 30.0,
        recheck: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_age = max_age
        self._recheck = recheck
        self._clock = clock
        self._entries: list[RegistryEntry] = []
        self._read_at: float | None = None

    async def start_warnings(self, admin: AsyncAdmin, type: str) -> list[str]:
        """:func:`start_warnings` for ``type``, reading the registry only when due."""
        if self._due(type):
            self._entries = await admin.registry()
            self._read_at = self._clock()
        return start_warnings(type, self._entries)

    def _due(self, type: str) -> bool:
        if self._read_at is None:
            return True
        age = self._clock() - self._read_at
        if age >= self._max_age:
            return True
        known = any(entry.workflow_name == type for entry in self._entries)
        return not known and age >= self._recheck
