"""A recorded run's history, replayed against the current code as a test.

``record_history`` writes what a run's next attempt would replay (its type, payload, code
version and journal) to a JSON file; ``assert_replays`` runs the workflow's body against
that journal as ``replay-check`` does (``admin/replaycheck.py``: durable calls answered
from the journal only, no step's code called, nothing written) and fails the test when
the code no longer takes the recorded path. Keep such files beside the tests: a change
to a workflow that would strand its runs in flight then fails before it is deployed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from simpleworkflow import errors
from simpleworkflow.admin import replaycheck
from simpleworkflow.backends.ops import ATOMIC, Op
from simpleworkflow.backends.sqlite import SQLiteBackend
from simpleworkflow.client import Client
from simpleworkflow.handlers import Handlers
from simpleworkflow.models import JournalEntry, Run, RunStatus

#: The version of the file's layout.
FORMAT = 1
_ENTRY_KEYS = ("step_name", "kind", "position", "status", "output", "attempts")


@dataclass(frozen=True, slots=True)
class History:
    """What a replay needs of a run."""

    run_id: str
    type: str
    payload: Any
    code_version: str | None
    journal: tuple[JournalEntry, ...]
    #: The store's time when it was recorded: a replay's "now" (a sleep that had ended
    #: then has ended in the replay, whatever the clock says at replay).
    recorded_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "run": {
                "id": self.run_id,
                "type": self.type,
                "payload": self.payload,
                "code_version": self.code_version,
            },
            "recorded_at": self.recorded_at.isoformat(),
            "journal": [{key: getattr(e, key) for key in _ENTRY_KEYS} for e in self.journal],
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "history") -> History:
        """Read a history back; :class:`InvalidArgument` naming what is wrong."""
        try:
            if data["format"] != FORMAT:
                raise errors.InvalidArgument(
                    f"{where}: format {data['format']!r} is not {FORMAT}, the one this "
                    "version reads"
                )
            run = data["run"]
            journal = tuple(
                JournalEntry(**{key: entry[key] for key in _ENTRY_KEYS})
                for entry in data["journal"]
            )
            recorded_at = datetime.fromisoformat(data["recorded_at"])
            return cls(
                run["id"], run["type"], run["payload"], run["code_version"], journal, recorded_at
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.InvalidArgument(
                f"{where}: not a recorded history (missing or wrong {exc}); write one with "
                "simpleworkflow.testing.record_history"
            ) from exc

    def run(self) -> Run:
        """The run as a worker would claim it for its next attempt."""
        now = self.recorded_at
        return Run(
            id=self.run_id,
            type=self.type,
            payload=self.payload,
            status=RunStatus.LEASED,
            priority=100,
            run_at=now,
            idempotency_key=None,
            attempt=0,
            max_attempts=3,
            leased_by="replay",
            lease_until=None,
            last_error=None,
            result=None,
            created_at=now,
            updated_at=now,
            deleted_at=None,
            code_version=self.code_version,
        )


def record_history(client: Client, run_id: str, path: str | os.PathLike[str]) -> History:
    """Write run ``run_id``'s history to ``path`` (JSON); return it."""
    run = client.get(run_id)
    journal = tuple(client.steps(run_id))
    history = History(
        run.id, run.type, run.payload, run.code_version, journal, client.backend.now()
    )
    with open(path, "w", encoding="utf-8") as out:
        json.dump(history.to_dict(), out, indent=2, sort_keys=True)
        out.write("\n")
    return history


def load_history(path: str | os.PathLike[str]) -> History:
    with open(path, encoding="utf-8") as source:
        return History.from_dict(json.load(source), where=str(path))


def replay(app: Handlers, history: History) -> replaycheck.ReplayReport:
    """Replay ``history`` against ``app``'s code; the report ``replay-check`` gives."""
    backend = _Recorded(history)
    try:
        return asyncio.run(_replay(app, backend, history))
    finally:
        backend.close()


def assert_replays(
    app: Handlers, path: str | os.PathLike[str] | History
) -> replaycheck.ReplayReport:
    """Fail (``AssertionError``, with the reason) unless the recorded history at ``path``
    replays on ``app``'s code; return the report (its patches' sides, for instance)."""
    history = path if isinstance(path, History) else load_history(path)
    report = replay(app, history)
    if report.verdict != replaycheck.OK:
        raise AssertionError(
            f"run {history.run_id} ({history.type}) does not replay: {report.verdict}"
            + (f": {report.detail}" if report.detail else "")
        )
    return report


async def _replay(app: Handlers, backend: _Recorded, history: History) -> replaycheck.ReplayReport:
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
        report = await replaycheck.check_run(app, backend, history.run(), executor)
    if report is None:  # no journal: nothing recorded can diverge
        return replaycheck.ReplayReport(history.run_id, history.type, replaycheck.OK)
    return report


class _Recorded(SQLiteBackend):
    """A store that holds nothing but the recorded journal (an in-memory file, unused)."""

    def __init__(self, history: History) -> None:
        super().__init__(":memory:")
        self._journal = list(history.journal)
        self._recorded_at = history.recorded_at

    def now(self) -> datetime:
        return self._recorded_at

    def load_journal(self, run_id: str) -> Op[list[JournalEntry]]:
        yield ATOMIC
        return list(self._journal)
