"""One attempt of one run as the worker runs it: why it must stop, its journal, its threads.

The worker owns :class:`AttemptState`. It asks it to stop (the run was cancelled, the
lease lost, the handler timed out, the worker is shutting down) and reads why it
stopped; the handler sees it only through :class:`~simpleworkflow.durable.context.Context`,
its read-only face with the durable calls. Keeping the control state here, rather than
in the object the user's code holds, means neither the worker nor the user reaches into
the other's.

Python cannot interrupt a thread. When an attempt is asked to stop, its task may end (an
async body is cancelled at its ``await``) while a thread still runs its code: a sync
handler that ignores the request, or a plain ``def`` step of an async body, whose
``await`` was cancelled but whose thread goes on. Giving the run back then would let
another worker run the same code at the same time, so a worker must know which attempts
still have a thread running (:class:`Attempt`).

Threads are charged to an attempt through a context variable: the attempt's task sets
it, every task it creates inherits it, and a :class:`TrackedExecutor` reads it when work
is submitted. A call counts from its submission (it may wait in the pool's queue, and
start later) until it returns or is cancelled before it started.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from simpleworkflow import observe
from simpleworkflow.backends.base import Lease
from simpleworkflow.durable import unawaited
from simpleworkflow.durable.journal import Durable
from simpleworkflow.durable.journal_batches import StepJournal

if TYPE_CHECKING:
    from simpleworkflow.backends import Backend
    from simpleworkflow.models import Run

P = ParamSpec("P")
T = TypeVar("T")


class AttemptState:
    """The lease, the request to stop, the journal and the observers of one attempt.

    Made on the worker's event loop; the stop request is readable from any thread (a
    ``def`` handler polls it), and awaitable on the loop.
    """

    def __init__(
        self,
        lease: Lease,
        worker_id: str,
        backend: Backend,
        *,
        async_body: bool = True,
        steps: StepJournal | None = None,
        executor: concurrent.futures.Executor | None = None,
        lease_ended: Callable[[], bool] | None = None,
        observers: observe.Observers | None = None,
        step_log: observe.Observer | None = None,
        durable_class: type[Durable] = Durable,
    ) -> None:
        self.lease = lease
        self.worker_id = worker_id
        self.async_body = async_body
        self.executor = executor  # for plain def steps of an async body (None: the loop's)
        self.observers = observe.Observers() if observers is None else observers
        #: Told of each failed step try besides ``observers`` (the worker's outcome log):
        #: only failures, so a step that succeeds makes no event for it.
        self.step_log = step_log
        #: The durable calls an async body made, checked when it returns.
        self.calls = unawaited.Calls()
        #: What the observers inject inside ``around_attempt`` (see ``execution.call``).
        self.trace_context: dict[str, str] | None = None
        self.loop = asyncio.get_running_loop()
        # Whether the lease is past the point where the worker gives it up (see
        # ``leases``): checked on each call, so that code that runs on after the process
        # was paused past its lease stops before the worker's own timer has fired.
        self._lease_ended = lease_ended
        # Set once, on the loop; read from handler threads (a plain attribute read is
        # atomic, and an Event per attempt would cost every run two locks).
        self._stopping = False
        self._async_stop: asyncio.Event | None = None  # made when first awaited
        self._stop_reason: str | None = None
        self._on_stop: list[Callable[[], Any]] = []
        #: Whether observers were told of the lease's loss (see ``worker.hooks.lease_lost``).
        self.lease_loss_reported = False
        #: The attempt's stream writer (``streams.Writer``), made at its first append.
        self.streams: object | None = None
        # The journal asks the attempt to stop through a weak reference: a bound method
        # would make the two a cycle, which only the cyclic collector frees, and every run
        # would leave its attempt (with its lease, task and context) to it.
        stop = functools.partial(_request_stop, weakref.ref(self))
        self.durable = durable_class(lease, backend, steps, stop=stop, lease_ended=lease_ended)

    @property
    def run(self) -> Run:
        return self.lease.run

    # -- stopping --------------------------------------------------------------------

    @property
    def stop_reason(self) -> str | None:
        """``"cancelled"``, ``"lease lost"``, ``"timeout"`` or ``"shutdown"`` once asked to stop."""
        if self._stop_reason is None and self._lease_ended is not None and self._lease_ended():
            return "lease lost"  # the worker's request to stop is on its way
        return self._stop_reason

    def is_cancelled(self) -> bool:
        """Whether this attempt should stop; safe from any thread."""
        if not self._stopping and self._lease_ended is not None and self._lease_ended():
            with contextlib.suppress(RuntimeError):  # the worker's loop has closed
                self.loop.call_soon_threadsafe(self.request_stop, "lease lost")
            return True
        return self._stopping

    async def stopped(self) -> None:
        """Return once this attempt is asked to stop."""
        if self._stopping:
            return
        if self._async_stop is None:
            self._async_stop = asyncio.Event()
        await self._async_stop.wait()

    def request_stop(self, reason: str) -> None:
        """Ask the attempt to stop (the first reason given sticks); on the worker's loop.

        A lost lease also fences the journal at once: another worker may hold the run."""
        if reason == "lease lost":
            self.durable.fence()
        if self._stopping:
            return
        self._stop_reason = reason
        self._stopping = True
        if self._async_stop is not None:
            self._async_stop.set()
        for callback in self._on_stop:
            callback()

    def on_stop(self, callback: Callable[[], Any]) -> None:
        """Call ``callback`` (on the worker's loop) when the attempt is asked to stop."""
        self._on_stop.append(callback)

    # -- where the code runs ---------------------------------------------------------

    def in_thread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """Call plain ``fn`` in the worker's step pool (outside a worker, the loop's own),
        in a copy of the calling task's context, as ``asyncio.to_thread`` would."""
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return self.loop.run_in_executor(self.executor, call)

    def bridge(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the worker's loop from a handler's thread, and wait for it.

        The task runs in a copy of the calling thread's context, as the durable call would
        in an async body: a tracer's span and the run's log context stay current in it."""
        context = contextvars.copy_context()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def settle(task: asyncio.Task[T]) -> None:
            if task.cancelled():
                done.cancel()
            elif (exc := task.exception()) is not None:
                done.set_exception(exc)
            else:
                done.set_result(task.result())

        def start() -> None:
            self.loop.create_task(coro, context=context).add_done_callback(settle)

        self.loop.call_soon_threadsafe(start)
        return done.result()


def _request_stop(state: weakref.ref[AttemptState], reason: str) -> None:
    """Ask the attempt to stop, if it is still there (see ``AttemptState.__init__``)."""
    attempt = state()
    if attempt is not None:
        attempt.request_stop(reason)


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
