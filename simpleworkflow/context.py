"""What a handler sees of its run: ids, attempt number, and the request to stop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from simpleworkflow import errors
from simpleworkflow.models import Run


class Context:
    """Passed to a handler as its second argument (when it takes one).

    ``is_cancelled()`` turns true when this attempt should stop: the run was cancelled,
    the worker lost its lease, the handler ran past its timeout, or the worker is shutting
    down past its grace period.
    Sync handlers check it (or call ``raise_if_cancelled()``) between units of work; an
    async handler is also interrupted with ``asyncio.CancelledError``.
    """

    def __init__(self, run: Run, worker_id: str) -> None:
        self.run = run
        self.worker_id = worker_id
        self._stop = threading.Event()  # read from handler threads
        self._async_stop = asyncio.Event()  # awaited on the worker's loop
        self._stop_reason: str | None = None
        self._on_stop: list[Callable[[], Any]] = []

    @property
    def run_id(self) -> str:
        return self.run.id

    @property
    def type(self) -> str:
        return self.run.type

    @property
    def attempt(self) -> int:
        """This attempt's number, 1 for the first."""
        return self.run.attempt + 1

    @property
    def max_attempts(self) -> int:
        return self.run.max_attempts

    @property
    def stop_reason(self) -> str | None:
        """``"cancelled"``, ``"lease lost"``, ``"timeout"`` or ``"shutdown"`` once asked to stop."""
        return self._stop_reason

    def is_cancelled(self) -> bool:
        return self._stop.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~simpleworkflow.errors.Cancelled` if this attempt should stop."""
        if self._stop.is_set():
            raise errors.Cancelled(self._stop_reason)

    async def wait_cancelled(self) -> None:
        """Return once this attempt is asked to stop."""
        await self._async_stop.wait()

    def _request_stop(self, reason: str) -> None:
        """Called by the worker, on its event loop."""
        if self._stop.is_set():
            return
        self._stop_reason = reason
        self._stop.set()
        self._async_stop.set()
        for callback in self._on_stop:
            callback()
