"""Worker presence: each worker process keeps one row in ``workflow_worker``, upserted
once per heartbeat interval, so that a worker holding no lease is seen too (the leases
show only the busy ones)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from simpleworkflow.backends.core import StoreCore
from simpleworkflow.backends.ops import Op

#: How long the rows of gone workers are kept: the retention sweep deletes older ones.
FORGET_AFTER = 86400.0


@dataclass(frozen=True, slots=True)
class Presence:
    """Who a worker process is, as it records itself."""

    worker_id: str
    host: str
    pid: int
    runtime: str
    type_prefixes: tuple[str, ...]
    concurrency: int | None
    version: str | None


@dataclass(frozen=True, slots=True)
class PresenceRow:
    """A worker's row as read back, with whether it is live by the database's clock."""

    presence: Presence
    started_at: datetime
    last_seen_at: datetime
    #: Live until then: its last write plus a lease's length.
    seen_until: datetime
    stopped_at: datetime | None
    live: bool
    #: The database's clock when read.
    now: datetime


class PresenceOps(StoreCore):
    def worker_seen(self, presence: Presence, seconds: float, *, starting: bool) -> Op[None]:
        """Record ``presence`` as live for ``seconds`` from now; ``starting`` restarts its
        row (a new ``started_at``, no ``stopped_at``)."""
        yield self.stmt(
            "worker_seen",
            worker_id=presence.worker_id,
            host=presence.host,
            pid=presence.pid,
            runtime=presence.runtime,
            type_prefixes=json.dumps(list(presence.type_prefixes)),
            concurrency=presence.concurrency,
            version=presence.version,
            seconds=round(float(seconds), 3),
            starting=starting,
        )

    def worker_stopped(self, worker_id: str, pid: int) -> Op[None]:
        """Mark the worker stopped (a graceful stop), unless another process took its id."""
        yield self.stmt("worker_stopped", worker_id=worker_id, pid=pid)

    def list_workers(self, window: float) -> Op[list[PresenceRow]]:
        """Workers live now or gone within ``window`` seconds, by id."""
        rows = yield self.stmt("list_workers", window=round(float(window), 3))
        return [found for row in rows if (found := self._presence_row(row)) is not None]

    def forget_workers(self, older_than: float) -> Op[None]:
        """Delete the rows of workers gone longer than ``older_than`` seconds."""
        yield self.stmt("forget_workers", older_than=round(float(older_than), 3))

    def _presence_row(self, row: Mapping[str, Any]) -> PresenceRow | None:
        """The row's worker; ``None`` for a row another runtime wrote whose times or
        prefixes cannot be read: its liveness cannot be judged, so it is left out."""
        try:
            return self._read_presence(row)
        except (ValueError, TypeError, OverflowError):
            return None

    def _read_presence(self, row: Mapping[str, Any]) -> PresenceRow:
        prefixes: Sequence[str] = self.decode_json(row["type_prefixes"]) or []
        concurrency = row["concurrency"]
        return PresenceRow(
            presence=Presence(
                worker_id=str(row["worker_id"]),
                host=str(row["host"]),
                pid=int(row["pid"]),
                runtime=str(row["runtime"]),
                type_prefixes=tuple(prefixes),
                concurrency=None if concurrency is None else int(concurrency),
                version=None if row["version"] is None else str(row["version"]),
            ),
            started_at=self.decode_time(row["started_at"]),
            last_seen_at=self.decode_time(row["last_seen_at"]),
            seen_until=self.decode_time(row["seen_until"]),
            stopped_at=self.opt_time(row["stopped_at"]),
            live=bool(row["live"]),
            now=self.decode_time(row["now"]),
        )
