"""What a handler sees of its run: identity, the request to stop, and durable calls.

In an ``async def`` body every durable call is awaited (``await ctx.step(...)``); in a
``def`` body, which runs in a worker thread, the same calls return their value directly.
:class:`Context` checks each call's arguments, then hands it to the module of that call
(``steps``, ``transactional``, ``sleeps``, ``signals``, ``children``, ``throttle``).
"""

from __future__ import annotations

import contextlib
import random as _random
import uuid as _uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from datetime import datetime
from typing import Any, TypeVar

from simpleworkflow import durations, errors, names
from simpleworkflow.durable import (
    children,
    compensations,
    continuation,
    joins,
    loops,
    patches,
    race_call,
    scopes,
    signals,
    sleeps,
    steps,
    streams,
    throttle,
    timeouts,
    transactional,
    values,
)
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.journal import Durable
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.models import Run
from simpleworkflow.retry import RetryPolicy

T = TypeVar("T")


class Context:
    """Passed to a handler as its second argument (when it takes one).

    ``is_cancelled()`` turns true when this attempt should stop: the run was cancelled,
    the worker lost its lease, the handler ran past its timeout, or the worker is shutting
    down past its grace period.
    Sync handlers check it (or call ``raise_if_cancelled()``) between units of work; an
    async handler is also interrupted with ``asyncio.CancelledError``. Durable calls
    (``step``, ``sleep``, ``wait_for_event`` ...) check it at every step boundary.

    The handler's view of the worker's :class:`~simpleworkflow.durable.attempt.AttemptState`:
    it reads the attempt's state and asks its journal, and changes neither itself.
    """

    def __init__(self, state: AttemptState) -> None:
        self._state = state  # the worker's: this object only reads it and asks it

    # -- identity --------------------------------------------------------------------

    @property
    def run(self) -> Run:
        return self._state.run

    @property
    def worker_id(self) -> str:
        return self._state.worker_id

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
        return self._state.stop_reason

    def is_cancelled(self) -> bool:
        return self._state.is_cancelled()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~simpleworkflow.errors.Cancelled` if this attempt should stop."""
        if self.is_cancelled():
            raise errors.Cancelled(self.stop_reason)

    async def wait_cancelled(self) -> None:
        """Return once this attempt is asked to stop."""
        await self._state.stopped()

    # -- durable calls ---------------------------------------------------------------

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: durations.Duration | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once for this run: its JSON result is journaled and
        returned again on every replay. A repeated name is numbered (``name#2`` ...).

        On an exception the step is retried as ``retry`` says (default: 3 attempts,
        exponential backoff from 1 s to 60 s, 20 % jitter), with the run suspended in
        between; after the last attempt :class:`~simpleworkflow.errors.StepFailed` is
        raised in the body, and fails the run unless the body handles it. A try that runs
        past ``timeout`` (default: ``retry``'s) fails with
        :class:`~simpleworkflow.errors.StepTimeout` (see ``durable.timeouts``).
        """
        state = self._state
        with self._checking():
            seconds = (
                None  # no call of its own: a step without a timeout costs what it did
                if timeout is None and (retry is None or retry.timeout is None)
                else timeouts.resolve(timeout, retry)
            )
            unique = state.durable.name(name)
        step = steps.Plain(state, unique, fn, args, kwargs, seconds)
        if state.async_body:
            return state.calls.note(steps.run_async(state, step, retry), f"ctx.step({name!r})")
        return steps.run_sync(state, step, retry)

    def transaction(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(conn, *args, **kwargs)`` once for this run, inside a transaction of the
        store's database that also journals the step: what ``fn`` writes through ``conn``
        and the step's journal entry commit together, or neither does, whenever the
        worker dies (see docs/transactions.md). For workflows whose store is the
        application's own database.

        ``conn`` is a psycopg ``Connection`` for a ``def`` function (run on a thread), an
        ``AsyncConnection`` for an ``async def`` one; on SQLite a ``sqlite3.Connection``,
        for a ``def`` function only. Leave the commit to the step: do not commit or roll
        ``conn`` back. Retried as :meth:`step` is, each failed attempt's writes rolled
        back; a replay returns the journaled result without calling ``fn``.
        """
        state = self._state
        with self._checking():
            transactional.check_policy(retry)
            unique = state.durable.name(name)
        step = transactional.Transactional(state, unique, fn, args, kwargs)
        if state.async_body:
            coro = steps.run_async(state, step, retry)
            return state.calls.note(coro, f"ctx.transaction({name!r})")
        return steps.run_sync(state, step, retry)

    def sleep(self, name: str, duration: durations.Duration) -> Any:
        """Sleep durably: the run gives its slot back and resumes on any worker afterwards.

        The wake-up time is journaled, so a replay waits for the same moment."""
        with self._checking():
            names.validate_step_name(name)
            seconds = durations.to_seconds(duration, what="sleep duration")
        return self._durable_call(
            sleeps.sleep(self._state, name, None, seconds), f"ctx.sleep({name!r})"
        )

    def sleep_until(self, name: str, when: datetime) -> Any:
        """Sleep durably until ``when`` (a timezone-aware datetime)."""
        with self._checking():
            names.validate_step_name(name)
            when = durations.check_time(when, what="sleep_until's time")
        return self._durable_call(
            sleeps.sleep(self._state, name, when, 0.0), f"ctx.sleep_until({name!r})"
        )

    def rate_limit(self, limit: str, key: str | None = None, *, name: str | None = None) -> Any:
        """Take a token of the rate limit named ``limit`` before going on: at most N calls
        (and claims of the types that obey it) per period, across every worker. Without
        a token left the run gives its slot back and resumes when the limit's next
        window opens, where the call tries again. A token taken is journaled (as step
        ``name``, default ``rate:<limit>``): a replay takes no second one.

        ``key`` picks the window of a ``per_key`` limit (default: the run's concurrency
        key); other limits ignore it. A limit that does not exist raises
        :class:`~simpleworkflow.errors.InvalidArgument` in the body. See
        docs/flow-control.md."""
        with self._checking():
            limit, key, step = throttle.check(limit, key, name)
            unique = self._state.durable.name(step)
        return self._durable_call(
            throttle.take(self._state, unique, limit, key), f"ctx.rate_limit({limit!r})"
        )

    def wait_for_event(
        self,
        name: str,
        *,
        event: str,
        match: Any = None,
        timeout: durations.Duration | None = None,
        type: Any = None,
    ) -> Any:
        """Wait durably for signal ``event`` whose payload contains ``match`` (JSON
        containment, like ``jsonb @>``); return its payload (read as ``type``, a type
        hint, through the app's codec: docs/payloads.md), or ``None`` on timeout.

        Signals are stored, so one sent before the wait began is consumed too (the
        oldest matching one first)."""
        with self._checking():
            names.validate_step_name(name)
            names.validate_event(event)
            match_text = None if match is None else self._state.durable.payload(match, "match")
            seconds = None if timeout is None else durations.to_seconds(timeout, what="timeout")
        return self._durable_call(
            signals.wait_for_event(self._state, name, event, match, match_text, seconds, type),
            f"ctx.wait_for_event({name!r})",
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
        with self._checking():
            names.validate_type(type)
            step = names.validate_step_name(name or f"child:{type}")
            text = self._state.durable.payload({} if payload is None else payload)
            priority = names.check_priority(priority)
            max_attempts = names.check_max_attempts(max_attempts)
        return self._durable_call(
            children.start_child(self._state, step, type, text, priority, max_attempts),
            f"ctx.start_child({type!r})",
        )

    def wait_child(self, child_id: str, *, name: str | None = None, type: Any = None) -> Any:
        """Wait durably for a child run; return its result (read as ``type``, if given), or raise
        :class:`~simpleworkflow.errors.ChildFailed` if it failed or was cancelled."""
        child_id = names.normalize_run_id(child_id)
        with self._checking():
            step = names.validate_step_name(name or f"child-result:{child_id}")
        return self._durable_call(
            children.wait_child(self._state, step, child_id, type),
            f"ctx.wait_child({child_id!r})",
        )

    def now(self, name: str = "@now") -> Any:
        """The database's current time, recorded on first execution and replayed after."""
        with self._checking():
            names.validate_step_name(name)
        return self._durable_call(
            self._recorded(name, JournalKind.NOW, lambda d: d.db_now().isoformat()),
            "ctx.now()",
            convert=datetime.fromisoformat,
        )

    def uuid(self, name: str = "@uuid") -> Any:
        """A random UUID (string), recorded on first execution and replayed after."""
        with self._checking():
            names.validate_step_name(name)
        return self._durable_call(
            self._recorded(name, JournalKind.UUID, lambda d: str(_uuid.uuid4())), "ctx.uuid()"
        )

    def random(self, name: str = "@random") -> Any:
        """A random float in [0, 1), recorded on first execution and replayed after."""
        with self._checking():
            names.validate_step_name(name)
        return self._durable_call(
            self._recorded(name, JournalKind.RANDOM, lambda d: _random.random()), "ctx.random()"
        )

    async def _recorded(self, name: str, kind: JournalKind, make: Callable[[Durable], Any]) -> Any:
        durable = self._state.durable
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
        with self._checking():
            if not branches:
                raise errors.InvalidArgument("race needs at least one branch")
            unique = self._state.durable.name(name)
        return await race_call.run(self._state, unique, branches)

    # -- code changes under runs in flight (see ``patches``) ---------------------------

    def patched(self, patch_id: str) -> Any:
        """Whether this run takes the new side of code change ``patch_id``: ``True`` for a
        run that reaches this point on code that has the patch, ``False`` for one whose
        journal shows it went past this point before the patch was deployed. Journaled the
        first time, so every replay (and every later call with the same id) answers the
        same. See docs/durable.md, "Versions and replay-check"."""
        with self._checking():
            marker = patches.marker(patch_id)
        return self._durable_call(
            patches.patched(self._state, marker), f"ctx.patched({patch_id!r})"
        )

    # -- scopes: loops and joins (see docs/durable.md) -----------------------------------

    def loop(
        self,
        name: str,
        state: Any,
        body: Callable[[Any], Any],
        *,
        commit_every: int = loops.COMMIT_EVERY,
        history_every: int | None = loops.HISTORY_EVERY,
        history_keep: int = loops.HISTORY_KEEP,
    ) -> Any:
        """Run ``body(state)`` until it returns ``Break(result)`` (each ``Continue(new)``
        runs it again on ``new``); return ``result``. Iteration ``i``'s durable calls are
        journaled as ``name/~i/...``; the state is journaled every ``commit_every``
        iterations and a replay starts from the latest; every ``history_every``
        iterations (``None``: never) the rows of all but the last ``history_keep``
        are deleted. See :mod:`~simpleworkflow.durable.loops`."""
        with self._checking():
            settings = loops.check_settings(commit_every, history_every, history_keep)
            if not callable(body):
                raise errors.InvalidArgument(f"loop's body must be callable, not {body!r:.80}")
            unique = self._state.durable.name(scopes.check_part(name, "loop name"))
        return loops.run(self._state, unique, state, body, settings, f"ctx.loop({name!r})")

    def join(self, name: str, branches: dict[str, Any]) -> Any:
        """Run every branch (an ``async def`` body: concurrently; a ``def`` body: one after
        the other) and return their results by branch name; when any fails, raise
        :class:`~simpleworkflow.errors.JoinError` with every failure and the others'
        results. Branch ``b``'s durable calls are journaled as ``name/b/...``, its
        result as ``name/b``: a replay does not run a finished branch again."""
        with self._checking():
            checked = joins.check(branches, self._state.async_body)
            unique = self._state.durable.name(scopes.check_part(name, "join name"))
        return joins.run(self._state, unique, checked, f"ctx.join({name!r})")

    # -- compensations ----------------------------------------------------------------

    def on_rollback(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> Any:
        """Register ``fn(*args, **kwargs)`` as the compensation of what the run did so far
        (await it in an async body). If the run fails for good, its compensations run in
        reverse order of registration, each once, as step ``rollback/<name>`` retried as
        ``retry`` says; then the run ends ``failed`` with its own error. Journaled: a
        replay registers the same list again without running anything. A cancelled run
        runs none. See docs/durable.md."""
        with self._checking():
            compensations.check(fn, retry)
            unique = self._state.durable.name(compensations.REGISTRATION_PATH + name)
        compensation = compensations.Compensation(fn, args, kwargs, retry)
        return self._durable_call(
            compensations.register(self._state, unique, compensation),
            f"ctx.on_rollback({name!r})",
        )

    # -- continue-as-new --------------------------------------------------------------

    def continue_as_new(self, payload: Any = None) -> Any:
        """End this run and carry it on in a new run of the same type, with ``payload``
        and an empty journal; the two are linked both ways (docs/durable.md,
        "Continue-as-new"). Does not return: the body stops here (await it in an async body)."""
        with self._checking():
            text = self._state.durable.payload({} if payload is None else payload)
        return self._durable_call(
            continuation.continue_as_new(self._state, text), "ctx.continue_as_new()"
        )

    # -- values ----------------------------------------------------------------------

    def set_value(self, key: str, value: Any, *, name: str | None = None) -> Any:
        """Publish ``value`` (JSON) as the run's value ``key``, readable by clients the
        moment it commits (``client.value``, ``client.wait_value``); a later set of the
        same key replaces it, and each set is logged as a ``value_set`` event. Journaled
        (as step ``name``, default ``value:<key>``): a replay publishes nothing again.
        See docs/durable.md, "Values a run publishes"."""
        with self._checking():
            key = names.validate_value_key(key)
            text = self._state.durable.payload(value, f"value {key!r}")
            unique = self._state.durable.name(f"value:{key}" if name is None else name)
        return self._durable_call(
            values.set_value(self._state, unique, key, text), f"ctx.set_value({key!r})"
        )

    # -- streams (see ``streams``) ---------------------------------------------------

    def stream_append(self, key: str, value: Any) -> Any:
        """Append JSON ``value`` to this run's stream ``key``, read live with
        ``client.read_stream``. From the body: a durable call (awaited in an async body).
        From a step's function: returns at once (awaiting it is allowed), the items are
        written in batches before the step is journaled. See docs/durable.md, "Streams"."""
        with self._checking():
            key, text = streams.check_key(key), streams.encode(self._state, key, value)
            step = streams.current_step()
            unique = None if step else self._state.durable.name(streams.PREFIX + key)
        if step is not None:
            return streams.writer(self._state).buffer(step, key, text)
        coro = streams.from_body(self._state, unique or "", key, text)
        return self._durable_call(coro, f"ctx.stream_append({key!r})")

    def stream_close(self, key: str) -> Any:
        """Close this run's stream ``key`` (from the body): its readers stop after its
        last item. Every stream also ends when the run does."""
        with self._checking():
            unique = self._state.durable.name(streams.PREFIX + streams.closable(key))
        coro = streams.from_body(self._state, unique, key, None)
        return self._durable_call(coro, f"ctx.stream_close({key!r})")

    # -- plumbing --------------------------------------------------------------------

    @contextlib.contextmanager
    def _checking(self) -> Iterator[None]:
        """Around a durable call's checks of its arguments: a refusal is the code's own
        mistake, which no retry can mend (see :meth:`Durable.refuse`)."""
        try:
            yield
        except errors.InvalidInput as exc:
            self._state.durable.refuse(exc)
            raise

    def _durable_call(
        self,
        coro: Coroutine[Any, Any, T],
        what: str,
        convert: Callable[[Any], Any] | None = None,
    ) -> Any:
        """Await ``coro`` in an async body (the durable call ``what``, noted until it is
        awaited); run it on the worker's loop from a sync one."""
        if self._state.async_body:
            return self._state.calls.note(_counted(self._state.durable, coro, convert), what, coro)
        value = self._state.bridge(coro)
        return convert(value) if convert else value


async def _counted(
    durable: Durable, coro: Coroutine[Any, Any, Any], convert: Callable[[Any], Any] | None
) -> Any:
    """``coro`` as one durable call of an async body (see :meth:`Durable.calling`)."""
    with durable.calling():
        value = await coro
    return convert(value) if convert else value
