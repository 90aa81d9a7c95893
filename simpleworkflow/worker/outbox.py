"""The worker's outbox: outcomes of many runs group-committed, a batch per transaction."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Hashable

from simpleworkflow import errors, outage, payloads
from simpleworkflow.backends.base import (
    Backend,
    Continuation,
    Failure,
    Outcomes,
    Release,
    Success,
    Suspension,
)
from simpleworkflow.durable.groupcommit import GroupCommit

_log = logging.getLogger("simpleworkflow.worker")

Item = Success | Failure | Release | Suspension | Continuation


class Outbox(GroupCommit[Item]):
    """Outcomes are never given up on: a lost connection is retried until it passes."""

    what = "the outcome"

    def __init__(
        self, backend: Backend, worker_id: str, unavailable: outage.Outage | None = None
    ) -> None:
        super().__init__(unavailable)
        self._backend = backend
        self._worker_id = worker_id

    #: Whether handlers are running whose outcomes come next (set by the worker's runner).
    running: Callable[[], bool] = staticmethod(lambda: False)
    #: Whether the claim loop's next claim is about to be sent (``ClaimLoop.sending``):
    #: the write waits the turn or two it takes, so that the claim goes first.
    claim_sending: Callable[[], bool] = staticmethod(lambda: False)
    #: Whether plain ``def`` handlers run in the handler threads (``HandlerThreads.busy``).
    in_threads: Callable[[], bool] = staticmethod(lambda: False)

    def more_coming(self) -> bool:
        return self.running() or self.claim_sending()

    def trickling(self) -> bool:
        return self.in_threads()

    def key(self, item: Item) -> Hashable:
        return item.run_id

    async def deliver(self, item: Item) -> bool:
        """Record ``item`` as :meth:`record` does, but never leave its run to the lease
        because the store refused it: record it again with its text made storable, and
        failing that, fail the run with :class:`~simpleworkflow.errors.OutcomeRefused`.

        Only an unreachable store is not handled here (the write is retried until it
        passes); whatever else the store refuses, retrying the same write cannot cure.
        """
        outcome = await self._tried(item)
        if isinstance(outcome, Exception):
            cleaned = _scrubbed(item)
            if cleaned != item:
                outcome = await self._tried(cleaned)
        if not isinstance(outcome, Exception):
            return outcome
        if isinstance(item, Release):
            raise outcome
        _log.error("run %s: the store refused its outcome (%s); failing it", item.run_id, outcome)
        return await self.record(_refused(item, outcome, self._worker_id))

    async def _tried(self, item: Item) -> bool | Exception:
        """Whether ``item`` counted (its lease was held), or what the store refused it with."""
        try:
            return await self.record(item)
        except errors.StoreUnavailable:
            raise
        except Exception as exc:
            return exc

    async def write(self, items: list[Item]) -> set[Hashable]:
        outcomes = Outcomes(
            succeeded=[i for i in items if isinstance(i, Success)],
            failed=[i for i in items if isinstance(i, Failure)],
            released=[i for i in items if isinstance(i, Release)],
            suspended=[i for i in items if isinstance(i, Suspension)],
            continued=[i for i in items if isinstance(i, Continuation)],
        )
        # Outcomes are fenced by lease token, so writing them late is safe: a lease lost
        # meanwhile just makes the write a no-op (GroupCommit retries it while the store
        # cannot be reached).
        op = self._backend.finish(outcomes, self._worker_id)
        accepted: set[Hashable] = set(await self._backend.execute_async(op))
        for started in {c.type for c in outcomes.continued if c.run_id in accepted}:
            self._backend.notify_local("wake", started)  # the successors, due now
        return accepted


def _scrubbed(item: Item) -> Item:
    """``item`` with its text made storable (see :func:`payloads.scrub`)."""
    if isinstance(item, Success):
        return dataclasses.replace(item, result=_scrubbed_json(item.result))
    if isinstance(item, Failure):
        return dataclasses.replace(
            item, error=payloads.storable(item.error), data=payloads.scrub(item.data)
        )
    if isinstance(item, Continuation):
        return dataclasses.replace(item, payload=_scrubbed_json(item.payload))
    if isinstance(item, Suspension):
        return dataclasses.replace(
            item,
            events=payloads.scrub(item.events),
            waiting_for=payloads.scrub(item.waiting_for),
        )
    return item


def _scrubbed_json(text: str) -> str:
    return json.dumps(payloads.scrub(json.loads(text)), separators=(",", ":"))


def _refused(
    item: Success | Failure | Suspension | Continuation, refusal: Exception, worker_id: str
) -> Failure:
    """The run's end when the store will not take what its attempt produced."""
    what = {
        Success: "result",
        Failure: "failure",
        Suspension: "suspension",
        Continuation: "continuation",
    }[type(item)]
    exc = errors.OutcomeRefused(
        payloads.storable(
            f"the store refused to record this attempt's {what}, even with its text made "
            f"storable: {type(refusal).__name__}: {refusal}"
        )[:2000]
    )
    name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    return Failure(
        run_id=item.run_id,
        token=item.token,
        final=True,
        delay=0.0,
        error=f"{name}: {exc}",
        data={
            "worker_id": worker_id,
            "error": {"type": name, "message": str(exc)},
            "retryable": False,
        },
    )
