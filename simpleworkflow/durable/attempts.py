"""One attempt a worker is running, and the threads that run its code.

Python cannot interrupt a thread. When an attempt is asked to stop, its task may end (an
async body is cancelled at its ``await``) while a thread still runs its code: a sync
handler that ignores the request, or a plain ``def`` step of an async body, whose
``await`` was cancelled but whose thread goes on. Giving the run back then would let
another worker run the same code at the same time, so a worker must know which attempts
still have a thread running.

Threads are charged to an attempt through a context variable: the attempt's task sets
it, every task it creates inherits it, and a :class:`TrackedExecutor` reads it when work
is submitted. A call counts from its submission (it may wait in the pool's queue, and
start later) until it returns or is cancelled before it started.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from simpleworkflow.backends.base import Lease
from simpleworkflow.durable.attempt import AttemptState

P = ParamSpec("P")
T = TypeVar("T")


class Threads:
    """Calls of one attempt submitted to a :class:`TrackedExecutor` and not yet ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    @property
    def running(self) -> bool:
        return self._count > 0

    def track(self, future: concurrent.futures.Future[Any]) -> None:
        self.enter()
        future.add_done_callback(self._ended)  # called at once if it already ended

    def enter(self) -> None:
        """A call of this attempt was submitted; :meth:`leave` once it ended."""
        with self._lock:
            self._count += 1

    def leave(self) -> None:
        with self._lock:
            self._count -= 1

    def _ended(self, _: concurrent.futures.Future[Any]) -> None:
        self.leave()


_current: contextvars.ContextVar[Threads | None] = contextvars.ContextVar(
    "simpleworkflow_attempt_threads", default=None
)


def charged() -> Threads | None:
    """The attempt the calling task's threads are charged to, if any."""
    return _current.get()


def charge_to(threads: Threads) -> None:
    """Charge threads submitted from the calling task (and the tasks it creates) to
    ``threads``; call it first thing in the attempt's task."""
    _current.set(threads)


class TrackedExecutor(concurrent.futures.ThreadPoolExecutor):
    """A thread pool whose calls count as the submitting attempt's until they end.

    ``join=False`` makes :meth:`shutdown` never wait for running calls: for the default
    executor of a worker process's event loop, whose teardown would otherwise wait for
    a thread that ignores every request to stop.
    """

    def __init__(self, max_workers: int | None = None, *, name: str, join: bool = True) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=name)
        self._join = join

    def submit(
        self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[T]:
        future = super().submit(fn, *args, **kwargs)
        threads = _current.get()
        if threads is not None:
            threads.track(future)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=wait and self._join, cancel_futures=cancel_futures)


@dataclass
class Attempt:
    """A run this worker holds: its lease, its state, the task running it, its threads."""

    lease: Lease
    state: AttemptState
    task: asyncio.Task[None]
    threads: Threads = field(default_factory=Threads)
    # Its handler has been called: until then it waits in the worker for a free slot
    # (claimed ahead, see ``worker.running``), and at shutdown is given back at once.
    started: bool = False
    # The handler returned and its outcome is being written: a lease check that reads
    # the run after that write commits finds the lease gone, which is not a lost lease.
    finishing: bool = False

    @property
    def stopped(self) -> bool:
        """No code of this attempt runs any more: its handler returned or was stopped,
        and no thread of it is left."""
        return (self.finishing or self.task.done()) and not self.threads.running
