"""The threads that run plain ``def`` handlers: long-lived, handing results back in batches.

``loop.run_in_executor`` made a ``def`` handler cost about twice what an ``async def`` one
costs: a concurrent future chained to an asyncio future, callbacks on both, and one
wake-up of the event loop per call. Here a call is one queued item; the thread that ran it
appends its result to a list, and only the result that finds the list empty wakes the
loop, which settles every result listed by then in one turn. Under load, many handlers'
results cost one wake-up.

Each call is charged to the submitting attempt's :class:`~simpleworkflow.durable.attempt.Threads`
from its submission until it returns, or is cancelled before a thread took it: the worker
must know which attempts still run code (see ``attempt``).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

from simpleworkflow.durable.attempt import Threads, charged

_QUEUED, _RUNNING, _CANCELLED = 0, 1, 2


class _Call:
    __slots__ = ("fn", "future", "state", "threads")

    def __init__(self, fn: Callable[[], Any], future: _Pending, threads: Threads | None) -> None:
        self.fn = fn
        # Cleared once the call has ended: a call and its future refer to each other, and
        # that cycle would keep the attempt's whole state (the handler's arguments) alive
        # until the cyclic garbage collector came by, for every run.
        self.future: _Pending | None = future
        self.threads = threads
        self.state = _QUEUED


class _Pending(asyncio.Future[Any]):
    """A call's result on the loop; cancelling it before a thread took the call drops it."""

    call: _Call
    pool: HandlerThreads

    def cancel(self, msg: Any = None) -> bool:
        if not super().cancel(msg):
            return False
        self.pool._dropped(self.call)
        return True


class HandlerThreads:
    """At most ``size`` threads, started as calls need them and kept until :meth:`close`.

    :meth:`run` is called on the event loop; the threads are not daemons, so that a
    process's exit can tell (see ``worker.shutdown``) whether handler code still runs.
    """

    def __init__(self, size: int, *, name: str) -> None:
        self._size = size
        self._name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._results: list[tuple[_Call, bool, Any]] = []
        self._threads = 0
        self._idle = 0  # threads waiting for a call, less the calls promised to them
        self._unsettled = 0  # calls whose result the loop has not settled (nor dropped)
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Call ``fn()`` in a thread; its result (or exception) settles the future."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future = _Pending(loop=loop)
        call = _Call(fn, future, charged())
        future.call, future.pool = call, self
        self._unsettled += 1
        if call.threads is not None:
            call.threads.enter()
        with self._lock:
            start = self._idle == 0 and self._threads < self._size
            if start:
                self._threads += 1
            elif self._idle > 0:
                self._idle -= 1
        self._calls.put(call)
        if start:
            name = f"{self._name}_{self._threads - 1}"
            threading.Thread(target=self._work, name=name, daemon=False).start()
        return future

    def busy(self) -> bool:
        """On the loop: whether calls are queued or running whose results are to come."""
        return self._unsettled > 0

    def close(self) -> None:
        """Drop the calls no thread took, and let every thread end once its call returns."""
        with contextlib.suppress(queue.Empty):
            while True:
                call = self._calls.get_nowait()
                if call is not None and call.future is not None:
                    call.future.cancel()
        with self._lock:
            threads = self._threads
        for _ in range(threads):
            self._calls.put(None)

    def _dropped(self, call: _Call) -> None:
        """On the loop: ``call``'s future was cancelled. Not taken yet: it never runs."""
        with self._lock:
            if call.state != _QUEUED:
                return
            call.state = _CANCELLED
        self._unsettled -= 1
        if call.threads is not None:
            call.threads.leave()

    def _work(self) -> None:
        calls = self._calls
        while True:
            call = calls.get()
            if call is None:
                return
            self._take(call)
            del call  # else it, and what it holds, would live while this thread waits

    def _take(self, call: _Call) -> None:
        """Run ``call`` unless it was cancelled first; hand its result to the loop."""
        with self._lock:
            taken = call.state == _QUEUED
            call.state = _RUNNING
        if taken:
            try:
                result: tuple[_Call, bool, Any] = (call, True, call.fn())
            except BaseException as exc:  # the handler's, handed back as it raised it
                result = (call, False, exc)
            if call.threads is not None:
                call.threads.leave()
        with self._lock:
            self._idle += 1
            if not taken:
                call.future = None
                return
            self._results.append(result)
            wake = len(self._results) == 1
        if wake and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:
        """On the loop: settle every result handed back so far."""
        with self._lock:
            results, self._results = self._results, []
        self._unsettled -= len(results)
        for call, ok, value in results:
            future, call.future = call.future, None
            if future is None or future.done():  # cancelled while its thread ran
                continue
            if ok:
                future.set_result(value)
            elif isinstance(value, StopIteration):  # a future refuses it
                future.set_exception(RuntimeError(f"handler raised {value!r}"))
            else:
                future.set_exception(value)
