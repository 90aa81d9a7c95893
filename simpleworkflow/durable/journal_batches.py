"""The journal's group commit on a worker: the entries of every run's steps written a
batch at a time. Every attempt's :class:`~simpleworkflow.durable.journal.Durable` queues
into it, and its lease checks into the :class:`~simpleworkflow.durable.holding.LeaseCheck`
it carries (``checks``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from simpleworkflow import outage
from simpleworkflow.backends.records import StepRecord
from simpleworkflow.durable.groupcommit import GroupCommit
from simpleworkflow.durable.holding import LeaseCheck

if TYPE_CHECKING:
    from simpleworkflow.backends import Backend


class StepJournal(GroupCommit[StepRecord]):
    """Journal entries of the steps of every run on a worker, group-committed: under load
    the steps of many runs share a statement and a commit. On a store without
    notifications it also batches the status checks made before steps (``checks``, whose
    ``run`` the worker supervises as a service of its own)."""

    what = "the journal entry"

    def __init__(self, backend: Backend, unavailable: outage.Outage | None = None) -> None:
        super().__init__(unavailable)
        self._backend = backend
        self.checks = LeaseCheck(backend, unavailable)
        self.unavailable = unavailable  # for the attempts' direct writes (see Durable)

    def key(self, item: StepRecord) -> Hashable:
        return (item.run_id, item.name)

    async def write(self, items: list[StepRecord]) -> set[Hashable]:
        return set(await self._backend.execute_async(self._backend.record_steps(items)))
