"""The journal's group commits on a worker: the steps of every run written a batch at a
time, and (on a store without notifications) the lease checks before steps read a batch
at a time. Every attempt's :class:`~simpleworkflow.durable.Durable` queues into them.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from simpleworkflow import outage
from simpleworkflow.backends.records import HELD, StepRecord
from simpleworkflow.durable.groupcommit import GroupCommit

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


class LeaseCheck(GroupCommit[tuple[str, str]]):
    """Whether runs are still leased, ``(run id, token)`` each, read a batch at a time: the
    checks of many runs' next steps share one read (and one hop to the store's thread)."""

    what = "the lease check"

    def __init__(self, backend: Backend, unavailable: outage.Outage | None = None) -> None:
        super().__init__(unavailable)
        self._backend = backend

    def key(self, item: tuple[str, str]) -> Hashable:
        return item[0]

    async def write(self, items: list[tuple[str, str]]) -> set[Hashable]:
        op = self._backend.lease_states(items)
        states = await self._backend.execute_async(op, readonly=True)
        return {run_id for run_id, state in states.items() if state == HELD}
