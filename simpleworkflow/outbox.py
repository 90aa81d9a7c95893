"""Group commit: outcomes of many runs written in one transaction.

Handlers that finish while a write is in flight queue up; the next write takes them all.
Each caller learns whether its outcome counted (its lease was still held).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from simpleworkflow import errors
from simpleworkflow.backends.base import Backend, Failure, Outcomes, Success, Suspension

_log = logging.getLogger("simpleworkflow.worker")


@dataclass(frozen=True, slots=True)
class Release:
    """Give a leased run back untouched (no attempt counted), e.g. at shutdown."""

    run_id: str
    token: str


Item = Success | Failure | Release | Suspension


class Outbox:
    def __init__(self, backend: Backend, worker_id: str) -> None:
        self._backend = backend
        self._worker_id = worker_id
        self._queue: list[tuple[Item, asyncio.Future[bool]]] = []
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    async def record(self, item: Item) -> bool:
        """Queue ``item`` and wait until it is committed; False if the lease was lost.

        Raises what the store raised if it refused this outcome (not a lost connection:
        those are retried until they pass).
        """
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        self._idle.clear()
        self._ready.set()
        return await future

    async def drained(self) -> None:
        """Return once everything queued so far has been written."""
        await self._idle.wait()

    async def run(self) -> None:
        """The writer task: flush whatever is queued, one transaction per batch."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._queue = self._queue, []
            if batch:
                await self._flush(batch)
            if not self._queue:
                self._idle.set()

    async def _flush(self, batch: list[tuple[Item, asyncio.Future[bool]]]) -> None:
        try:
            accepted = await self._write([item for item, _ in batch])
        except Exception as exc:
            # The store refused the batch for a reason retrying cannot cure. Write the
            # outcomes one by one, so that one bad outcome fails alone; its caller gets the
            # error, and its run, no longer heartbeated, is retried once its lease expires.
            # Letting the error end this task would leave every later caller waiting.
            if len(batch) > 1:
                for entry in batch:
                    await self._flush([entry])
                return
            _log.error("cannot record the outcome of run %s: %r", batch[0][0].run_id, exc)
            if not batch[0][1].done():
                batch[0][1].set_exception(exc)
            return
        for item, future in batch:
            if not future.done():
                future.set_result(item.run_id in accepted)

    async def _write(self, items: list[Item]) -> set[str]:
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
                return await self._backend.execute_async(op)
            except errors.StoreUnavailable as exc:
                # Outcomes are fenced by lease token, so writing them late is safe: a
                # lease lost meanwhile just makes the write a no-op.
                _log.warning("cannot record %d outcomes yet (%s); retrying", len(items), exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
