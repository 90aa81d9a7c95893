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

A call may also be *parked* (:meth:`HandlerThreads.park`): prepared while its run waits
for a slot. A thread whose call returned, and whose call held a slot (a :class:`Holder`),
takes the oldest parked call at once and runs it in that slot, with no wake-up of
another thread and no turn of the loop; the loop learns of the hand-over when it
settles the returned call (``Holder.passed_to``). A slot the loop frees first queues a
parked call as usual (:meth:`HandlerThreads.unpark`). See docs/performance.md, plain def
handlers, sixth pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from simpleworkflow.durable.attempt import Threads, charged

_QUEUED, _RUNNING, _CANCELLED, _PARKED = 0, 1, 2, 3


class Holder(Protocol):
    """The slot of the run a call belongs to, as the worker keeps it (``worker.slots``)."""

    def taken(self) -> None:
        """In a handler thread, under the pool's lock: the run's handler starts now."""

    def passed_to(self, other: Any) -> None:
        """On the loop: this run's slot went to ``other``'s (its thread took that call)."""


class _Call:
    __slots__ = ("fn", "future", "holder", "passed", "state", "threads")

    def __init__(
        self,
        fn: Callable[[], Any],
        future: _Pending,
        threads: Threads | None,
        holder: Holder | None = None,
    ) -> None:
        self.fn = fn
        self.holder = holder  # None: the call holds no slot to pass on
        self.passed: _Call | None = None  # the parked call its thread took next
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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._parked: deque[_Call] = deque()
        self._parking = True  # False once shutting down: no parked call starts any more

    def run(self, fn: Callable[[], Any], holder: Holder | None = None) -> asyncio.Future[Any]:
        """Call ``fn()`` in a thread; its result (or exception) settles the future.
        ``holder``: the slot the call holds, which its thread may pass on."""
        call = self._call(fn, holder)
        assert call.future is not None
        if call.threads is not None:
            call.threads.enter()
        self._queue(call)
        return call.future

    def park(self, fn: Callable[[], Any], holder: Holder) -> asyncio.Future[Any]:
        """Keep the call of a run waiting for a slot: a thread whose call returns takes
        it (:meth:`Holder.passed_to`), or :meth:`unpark` queues it."""
        call = self._call(fn, holder)
        assert call.future is not None
        call.state = _PARKED
        with self._lock:
            self._parked.append(call)
        return call.future

    def unpark(self, future: asyncio.Future[Any]) -> bool:
        """On the loop: the parked call of ``future`` has a slot; queue it. False if a
        thread took it first (it runs already)."""
        call = _pending(future).call
        with self._lock:
            if call.state != _PARKED:
                return False
            self._parked.remove(call)
            call.state = _QUEUED
        if call.threads is not None:
            call.threads.enter()
        self._queue(call)
        return True

    def withdraw(self, future: asyncio.Future[Any]) -> bool:
        """On the loop: drop the parked call of ``future`` unless a thread took it; True
        if it never ran and never will (its future is then cancelled)."""
        call = _pending(future).call
        with self._lock:
            if call.state == _PARKED:
                self._parked.remove(call)
                call.state = _CANCELLED
            elif call.state != _CANCELLED:
                return False
        future.cancel()
        return True

    def stop_parking(self) -> None:
        """At shutdown, on the loop: no parked call starts from now on (see
        :meth:`withdraw`); once this returns, every call that started has said so
        (``Holder.taken``)."""
        with self._lock:
            self._parking = False

    def _call(self, fn: Callable[[], Any], holder: Holder | None) -> _Call:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future = _Pending(loop=loop)
        call = _Call(fn, future, charged(), holder)
        future.call, future.pool = call, self
        return call

    def _queue(self, call: _Call) -> None:
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

    def close(self) -> None:
        """Drop the calls no thread took, and let every thread end once its call returns."""
        with self._lock:
            self._parking = False
            parked, self._parked = list(self._parked), deque()
            for dropped in parked:
                dropped.state = _CANCELLED
        for dropped in parked:
            if dropped.future is not None:
                dropped.future.cancel()
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
            if call.state == _PARKED:  # never charged
                self._parked.remove(call)
                call.state = _CANCELLED
                return
            if call.state != _QUEUED:
                return
            call.state = _CANCELLED
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
        """Run ``call`` unless it was cancelled first; hand its result to the loop. Then
        run the oldest parked call in its slot, if it held one, and so on."""
        with self._lock:
            taken = call.state == _QUEUED
            call.state = _RUNNING
            if taken and call.holder is not None:
                call.holder.taken()
        if not taken:
            with self._lock:
                self._idle += 1
                call.future = None
            return
        following: _Call | None = call
        passes = 0
        while following is not None:
            call = following
            try:
                result: tuple[_Call, bool, Any] = (call, True, call.fn())
            except BaseException as exc:  # the handler's, handed back as it raised it
                result = (call, False, exc)
            if call.threads is not None:
                call.threads.leave()
            with self._lock:
                following = None
                if call.holder is not None and self._parked and self._parking and passes < 1:
                    passes += 1
                    following = call.passed = self._parked.popleft()
                    following.state = _RUNNING
                    if following.threads is not None:
                        following.threads.enter()
                    assert following.holder is not None
                    following.holder.taken()
                else:
                    self._idle += 1
                self._results.append(result)
                wake = len(self._results) == 1
            del call, result
            if wake and self._loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop has closed
                    self._loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:
        """On the loop: settle every result handed back so far."""
        with self._lock:
            results, self._results = self._results, []
        for call, ok, value in results:
            future, call.future = call.future, None
            passed, call.passed = call.passed, None
            if passed is not None:
                assert call.holder is not None
                call.holder.passed_to(passed.holder)
            if future is None or future.done():  # cancelled while its thread ran
                continue
            if ok:
                future.set_result(value)
            elif isinstance(value, StopIteration):  # a future refuses it
                future.set_exception(RuntimeError(f"handler raised {value!r}"))
            else:
                future.set_exception(value)


def _pending(future: asyncio.Future[Any]) -> _Pending:
    assert isinstance(future, _Pending)
    return future
