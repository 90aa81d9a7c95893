"""The worker's outbox: outcomes of many runs group-committed, a batch per transaction."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from dataclasses import dataclass

from simpleworkflow import errors
from simpleworkflow.backends.base import Backend, Failure, Outcomes, Success, Suspension
from simpleworkflow.groupcommit import GroupCommit
from simpleworkflow.wording import plural

_log = logging.getLogger("simpleworkflow.worker")


@dataclass(frozen=True, slots=True)
class Release:
    """Give a leased run back untouched (no attempt counted), e.g. at shutdown."""

    run_id: str
    token: str


Item = Success | Failure | Release | Suspension


class Outbox(GroupCommit[Item]):
    """Outcomes are never given up on: a lost connection is retried until it passes."""

    what = "the outcome"

    def __init__(self, backend: Backend, worker_id: str) -> None:
        super().__init__()
        self._backend = backend
        self._worker_id = worker_id

    def key(self, item: Item) -> Hashable:
        return item.run_id

    async def write(self, items: list[Item]) -> set[Hashable]:
        outcomes = Outcomes(
            succeeded=[i for i in items if isinstance(i, Success)],
            failed=[i for i in items if isinstance(i, Failure)],
            released=[(i.run_id, i.token) for i in items if isinstance(i, Release)],
            suspended=[i for i in items if isinstance(i, Suspension)],
        )
        pause = 0.2
        while True:
            try:
                op = self._backend.finish(outcomes, self._worker_id)
                return set(await self._backend.execute_async(op))
            except errors.StoreUnavailable as exc:
                # Outcomes are fenced by lease token, so writing them late is safe: a
                # lease lost meanwhile just makes the write a no-op.
                _log.warning(
                    "cannot record %s yet (%s); retrying", plural(len(items), "outcome"), exc
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
