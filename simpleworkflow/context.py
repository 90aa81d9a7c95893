"""What a handler sees of its run: identity, the request to stop, and durable calls.

In an ``async def`` body every durable call is awaited (``await ctx.step(...)``); in a
``def`` body, which runs in a worker thread, the same calls return their value directly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import random as _random
import threading
import uuid as _uuid
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from simpleworkflow import durations, errors, names, payloads, races
from simpleworkflow.backends.records import JournalEntry
from simpleworkflow.durable import FOREVER, Durable, StepJournal
from simpleworkflow.models import Run
from simpleworkflow.replay import answered, gave_up
from simpleworkflow.retry import RetryPolicy

if TYPE_CHECKING:
    from simpleworkflow.backends import Backend
    from simpleworkflow.backends.records import Lease

T = TypeVar("T")


class Context:
    """Passed to a handler as its second argument (when it takes one).

    ``is_cancelled()`` turns true when this attempt should stop: the run was cancelled,
    the worker lost its lease, the handler ran past its timeout, or the worker is shutting
    down past its grace period.
    Sync handlers check it (or call ``raise_if_cancelled()``) between units of work; an
    async handler is also interrupted with ``asyncio.CancelledError``. Durable calls
    (``step``, ``sleep``, ``wait_for_event`` ...) check it at every step boundary.
    """

    def __init__(
        self,
        run: Run,
        worker_id: str,
        *,
        lease: Lease | None = None,
        backend: Backend | None = None,
        async_body: bool = True,
        steps: StepJournal | None = None,
        executor: concurrent.futures.Executor | None = None,
        lease_ended: Callable[[], bool] | None = None,
    ) -> None:
        self.run = run
        self.worker_id = worker_id
        # Whether the lease is past the point where the worker gives it up (see
        # ``leases``): checked on each call, so that code that runs on after the process
        # was paused past its lease stops before the worker's own timer has fired.
        self._lease_ended = lease_ended
        self._stop = threading.Event()  # read from handler threads
        self._async_stop = asyncio.Event()  # awaited on the worker's loop
        self._stop_reason: str | None = None
        self._on_stop: list[Callable[[], Any]] = []
        self._async_body = async_body
        self._executor = executor  # for plain def steps of an async body (None: the loop's)
        self._loop = asyncio.get_running_loop()
        self._backend = backend
        self._durable = (
            Durable(lease, backend, steps, stop=self._request_stop, lease_ended=lease_ended)
            if lease is not None and backend
            else None
        )

    # -- identity --------------------------------------------------------------------

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
    def code_version(self) -> str | None:
        """The code version the run started on: branch on it to keep old runs replayable."""
        return self.run.code_version

    # -- stopping --------------------------------------------------------------------

    @property
    def stop_reason(self) -> str | None:
        """``"cancelled"``, ``"lease lost"``, ``"timeout"`` or ``"shutdown"`` once asked to stop."""
        if self._stop_reason is None and self._lease_ended is not None and self._lease_ended():
            return "lease lost"  # the worker's request to stop is on its way
        return self._stop_reason

    def is_cancelled(self) -> bool:
        if not self._stop.is_set() and self._lease_ended is not None and self._lease_ended():
            with contextlib.suppress(RuntimeError):  # the worker's loop has closed
                self._loop.call_soon_threadsafe(self._request_stop, "lease lost")
            return True
        return self._stop.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~simpleworkflow.errors.Cancelled` if this attempt should stop."""
        if self.is_cancelled():
            raise errors.Cancelled(self.stop_reason)

    async def wait_cancelled(self) -> None:
        """Return once this attempt is asked to stop."""
        await self._async_stop.wait()

    def _request_stop(self, reason: str) -> None:
        """Called by the worker, on its event loop."""
        if reason == "lease lost" and self._durable is not None:
            self._durable.fence()
        if self._stop.is_set():
            return
        self._stop_reason = reason
        self._stop.set()
        self._async_stop.set()
        for callback in self._on_stop:
            callback()

    # -- durable calls ---------------------------------------------------------------

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once for this run: its JSON result is journaled and
        returned again on every replay. A repeated name is numbered (``name#2`` ...).

        On an exception the step is retried as ``retry`` says (default: 3 attempts,
        exponential backoff from 1 s to 60 s, 20 % jitter), with the run suspended in
        between; after the last attempt :class:`~simpleworkflow.errors.StepFailed` is
        raised in the body, and fails the run unless the body handles it.
        """
        durable = self._need_durable()
        unique = durable.name(name)
        if self._async_body:
            return self._step_async(durable, unique, fn, args, kwargs, retry)
        return self._step_sync(durable, unique, fn, args, kwargs, retry)

    async def _step_async(
        self,
        durable: Durable,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: RetryPolicy | None,
    ) -> Any:
        with durable.calling():
            entry = await durable.begin(name, "step", self.is_cancelled())
            if entry is not None and answered(entry):
                return _journaled_step(entry)
            started_at = durable.db_now()
            try:
                with races.not_reading():  # the step's code: what it does happens now
                    if inspect.iscoroutinefunction(fn):
                        value = await fn(*args, **kwargs)
                    else:
                        value = await self._in_thread(fn, *args, **kwargs)
                races.note_now(durable.db_now)
                text = durable.encode(name, value)
            except Exception as exc:
                races.note_now(durable.db_now)
                raise await durable.failed(name, entry, retry, exc) from None
            attempts = (entry.attempts if entry is not None else 0) + 1
            await durable.journal(
                name, "step", value, attempts=attempts, started_at=started_at, text=text
            )
            return value

    def _step_sync(
        self,
        durable: Durable,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: RetryPolicy | None,
    ) -> Any:
        entry = self._bridge(durable.begin(name, "step", self.is_cancelled()))
        if entry is not None and answered(entry):
            return _journaled_step(entry)
        started_at = durable.db_now()
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = self._bridge(_awaited(value))
            text = durable.encode(name, value)
        except Exception as exc:
            raise self._bridge(durable.failed(name, entry, retry, exc)) from None
        attempts = (entry.attempts if entry is not None else 0) + 1
        self._bridge(
            durable.journal(
                name, "step", value, attempts=attempts, started_at=started_at, text=text
            )
        )
        return value

    def sleep(self, name: str, duration: durations.Duration) -> Any:
        """Sleep durably: the run gives its slot back and resumes on any worker afterwards.

        The wake-up time is journaled, so a replay waits for the same moment."""
        names.validate_step_name(name)
        seconds = durations.to_seconds(duration, what="sleep duration")
        return self._durable_call(self._sleep(name, None, seconds))

    def sleep_until(self, name: str, when: datetime) -> Any:
        """Sleep durably until ``when`` (a timezone-aware datetime)."""
        names.validate_step_name(name)
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise errors.InvalidArgument("sleep_until needs a timezone-aware datetime")
        return self._durable_call(self._sleep(name, when, 0.0))

    async def _sleep(self, name: str, when: datetime | None, seconds: float) -> None:
        durable = self._need_durable()
        unique = durable.name(name)
        entry = await durable.begin(unique, "sleep", self.is_cancelled())
        if entry is None:
            until = _whole_ms(when or durable.db_now() + _seconds(seconds))
            await durable.journal(unique, "sleep", {"until": until.isoformat()}, events=[])
        else:
            until = datetime.fromisoformat(entry.output["until"])
        if durable.db_now() >= until:
            races.note(until)  # it ended then, however late this replay comes
            return
        raise durable.suspend(
            errors.Suspend(
                unique,
                "sleeping",
                data={"until": until.isoformat()},
                waiting_for={"kind": "sleep", "step": unique, "until": until.isoformat()},
                run_at=until,
            )
        )

    def wait_for_event(
        self,
        name: str,
        *,
        event: str,
        match: Any = None,
        timeout: durations.Duration | None = None,
    ) -> Any:
        """Wait durably for signal ``event`` whose payload contains ``match`` (JSON
        containment, like ``jsonb @>``); return its payload, or ``None`` on timeout.

        Signals are stored, so one sent before the wait began is consumed too (the
        oldest matching one first)."""
        names.validate_step_name(name)
        names.validate_event(event)
        match_text = None if match is None else payloads.encode(match, what="match")
        seconds = None if timeout is None else durations.to_seconds(timeout, what="timeout")
        return self._durable_call(self._wait(name, event, match, match_text, seconds))

    async def _wait(
        self, name: str, event: str, match: Any, match_text: str | None, timeout: float | None
    ) -> Any:
        durable = self._need_durable()
        unique = durable.name(name)
        entry = await durable.begin(unique, "wait", self.is_cancelled())
        if entry is not None and entry.status == "completed":
            return entry.output.get("signal")
        if entry is None:
            until = FOREVER if timeout is None else _whole_ms(durable.db_now() + _seconds(timeout))
            started = {"until": until.isoformat(), "event": event}
            await durable.journal(unique, "wait", started, status="retrying", events=[])
        else:
            until = datetime.fromisoformat(entry.output["until"])
        got = await durable.consume_signal(unique, event, match_text)
        if got is not None:
            return got["signal"]
        if durable.db_now() >= until:
            await durable.journal(unique, "wait", {"timeout": True}, events=[])
            races.note(until)  # the timeout happened then
            return None
        waiting: dict[str, Any] = {"kind": "signal", "step": unique, "event": event}
        if match is not None:
            waiting["match"] = match
        if timeout is not None:
            waiting["until"] = until.isoformat()
        raise durable.suspend(
            errors.Suspend(
                unique, "waiting", data={"event": event}, waiting_for=waiting, run_at=until
            )
        )

    def start_child(
        self,
        type: str,
        payload: Any = None,
        *,
        name: str | None = None,
        priority: int = 100,
        max_attempts: int | None = None,
    ) -> Any:
        """Start a child run once (journaled), and return its id."""
        names.validate_type(type)
        step = names.validate_step_name(name or f"child:{type}")
        text = payloads.encode({} if payload is None else payload)
        return self._durable_call(self._start_child(step, type, text, priority, max_attempts))

    async def _start_child(
        self, name: str, type: str, payload: str, priority: int, max_attempts: int | None
    ) -> str:
        durable = self._need_durable()
        unique = durable.name(name)
        entry = await durable.begin(unique, "child", self.is_cancelled())
        if entry is not None:
            return str(entry.output["child_id"])
        child = await durable.create_child(unique, type, payload, priority, max_attempts)
        data = {"step": unique, "child_id": child.id, "type": type}
        await durable.journal(
            unique,
            "child",
            {"child_id": child.id, "type": type},
            events=[{"type": "child_started", "data": data}],
        )
        return child.id

    def wait_child(self, child_id: str, *, name: str | None = None) -> Any:
        """Wait durably for a child run; return its result, or raise
        :class:`~simpleworkflow.errors.ChildFailed` if it failed or was cancelled."""
        child_id = names.normalize_run_id(child_id)
        step = names.validate_step_name(name or f"child-result:{child_id}")
        return self._durable_call(self._wait_child(step, child_id))

    async def _wait_child(self, name: str, child_id: str) -> Any:
        durable = self._need_durable()
        unique = durable.name(name)
        entry = await durable.begin(unique, "child_result", self.is_cancelled())
        if entry is None or entry.status != "completed":
            child = await durable.read_run(child_id)
            if child is None:
                raise errors.RunNotFound(child_id)
            if child.parent_id != self.run.id:
                # Only a run's own children wake it when they finish: waiting for any
                # other run would never end.
                raise errors.InvalidArgument(
                    f"run {child_id} is not a child of this run; wait_child waits only for "
                    "runs started with ctx.start_child in this workflow"
                )
            if not child.is_terminal:
                raise durable.suspend(
                    errors.Suspend(
                        unique,
                        "waiting",
                        data={"child_id": child_id},
                        waiting_for={"kind": "child", "step": unique, "child_id": child_id},
                        run_at=FOREVER,
                    )
                )
            races.note(child.updated_at)  # when it finished
            outcome = {
                "status": child.status.value,
                "result": child.result,
                "error": child.last_error,
            }
            await durable.journal(unique, "child_result", outcome, events=[])
        else:
            outcome = entry.output
        if outcome["status"] != "succeeded":
            raise errors.ChildFailed(child_id, outcome["status"], outcome.get("error"))
        return outcome["result"]

    def now(self, name: str = "@now") -> Any:
        """The database's current time, recorded on first execution and replayed after."""
        names.validate_step_name(name)
        return self._durable_call(
            self._recorded(name, "now", lambda d: d.db_now().isoformat()),
            convert=datetime.fromisoformat,
        )

    def uuid(self, name: str = "@uuid") -> Any:
        """A random UUID (string), recorded on first execution and replayed after."""
        names.validate_step_name(name)
        return self._durable_call(self._recorded(name, "uuid", lambda d: str(_uuid.uuid4())))

    def random(self, name: str = "@random") -> Any:
        """A random float in [0, 1), recorded on first execution and replayed after."""
        names.validate_step_name(name)
        return self._durable_call(self._recorded(name, "random", lambda d: _random.random()))

    async def _recorded(self, name: str, kind: str, make: Callable[[Durable], Any]) -> Any:
        durable = self._need_durable()
        unique = durable.name(name)
        entry = await durable.begin(unique, kind, self.is_cancelled())
        if entry is not None:
            return entry.output
        value = make(durable)
        await durable.journal(unique, kind, value, events=[])
        return value

    async def race(self, name: str, *branches: Awaitable[Any]) -> tuple[int, Any]:
        """Run ``branches`` concurrently; return ``(index, value)`` of the one whose
        outcome happened first, and cancel the others.

        A branch that must wait (a sleep, a signal, a child) does not finish the race;
        when all of them wait, the run is suspended in all their waits and wakes when any
        of them can go on. Several branches may then finish in the same replay (a signal
        came, and a timer ran out since): the winner is the one whose signal, timer, child
        or step came first by the database's clock. The winner is journaled, so a replay
        returns it again without running any branch. Async bodies only."""
        if not branches:
            raise errors.InvalidArgument("race needs at least one branch")
        durable = self._need_durable()
        unique = durable.name(name)
        with durable.calling():
            entry = await durable.begin(unique, "race", self.is_cancelled())
            if entry is not None:
                for branch in branches:
                    _discard(branch)
                (await durable.load()).meet(entry.output["steps"])
                return int(entry.output["winner"]), entry.output["value"]
            recorded = durable.record_names()
            race = races.Race(branches, durable.db_now)
            index = None
            try:
                with races.not_reading():  # the branches read for themselves
                    index = await race.winner()
            finally:
                await race.close(index)
                durable.stop_recording(recorded)
            if index is None:
                raise race.suspensions()[0]  # every wait is recorded (Durable.suspension)
            durable.withdraw(race.suspensions())  # the losers' waits are over
            races.note(race.clocks[index].at)  # for a race this one is a branch of
            value = race.tasks[index].result()
            output = {"winner": index, "value": value, "steps": sorted(recorded)}
            await durable.journal(unique, "race", output, events=[])
            return index, value

    # -- plumbing --------------------------------------------------------------------

    def _need_durable(self) -> Durable:
        if self._durable is None:
            raise errors.ConfigurationError("durable calls need a context made by a worker")
        return self._durable

    def _durable_call(
        self, coro: Coroutine[Any, Any, T], convert: Callable[[Any], Any] | None = None
    ) -> Any:
        """Await ``coro`` in an async body; run it on the worker's loop from a sync one."""
        if self._async_body:
            return _counted(self._durable, coro, convert)
        value = self._bridge(coro)
        return convert(value) if convert else value

    def _in_thread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """Call plain ``fn`` in the worker's step pool (outside a worker, the loop's own),
        in a copy of this task's context, as ``asyncio.to_thread`` would."""
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return self._loop.run_in_executor(self._executor, call)

    def _bridge(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()


async def _counted(
    durable: Durable | None, coro: Coroutine[Any, Any, Any], convert: Callable[[Any], Any] | None
) -> Any:
    """``coro`` as one durable call of an async body (see :meth:`Durable.calling`)."""
    with durable.calling() if durable is not None else contextlib.nullcontext():
        value = await coro
    return convert(value) if convert else value


async def _awaited(value: Awaitable[T]) -> T:
    return await value


def _journaled_step(entry: JournalEntry) -> Any:
    """A journaled step's output, or its StepFailed again if it gave up."""
    if gave_up(entry):
        raise errors.StepFailed(entry.step_name, entry.attempts, entry.output["gave_up"])
    return entry.output


def _discard(branch: Awaitable[Any]) -> None:
    if inspect.iscoroutine(branch):
        branch.close()


def _seconds(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def _whole_ms(when: datetime) -> datetime:
    """``when`` rounded up to the millisecond. SQLite keeps times to the millisecond,
    rounding to the nearest: a wake-up time finer than that could be stored early, and the
    run claimed before its sleep ends, only to suspend again."""
    spare = when.microsecond % 1000
    return when if spare == 0 else when + timedelta(microseconds=1000 - spare)
