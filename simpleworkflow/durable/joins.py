"""Joins (``ctx.join``): branches that all run, every outcome collected.

Branch ``b`` of join ``name`` runs in the scope ``name/b/`` (see ``scopes``): its durable
calls are journaled as ``name/b/fetch``, and its result, once it has one, as ``name/b``
(kind ``join_branch``), so a replay does not run a branch that has finished again. When
every branch has succeeded the mapping of results is journaled as ``name`` (kind
``join``); when any failed, :class:`~simpleworkflow.errors.JoinError` carries every
failure by branch name and the others' results. A branch that waits (a sleep, a signal,
a step's next attempt) suspends the run once the others have finished or wait too.

An ``async def`` body runs the branches as concurrent tasks; a ``def`` body runs them one
after the other in its thread (a ``def`` body makes one durable call at a time).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from simpleworkflow import errors
from simpleworkflow.durable import scopes
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.durable.replay import answered

if TYPE_CHECKING:
    from simpleworkflow.durable.attempt import AttemptState
    from simpleworkflow.durable.journal import Durable

#: Errors about the run rather than the branch: they end the run, not the branch.
_OF_THE_RUN = (errors.ReplayDivergence, errors.UnreadableRow, errors.DeadlineExceeded)


def check(branches: object, async_body: bool) -> dict[str, Any]:
    """The branches by name, or :class:`~simpleworkflow.errors.InvalidArgument` naming
    what is wrong: no branches, a bad branch name, a branch that cannot run."""
    if not isinstance(branches, Mapping) or not branches:
        raise errors.InvalidArgument(
            f"join's branches must be a non-empty mapping of branch name to "
            f"{'awaitable or callable' if async_body else 'callable'}, not {branches!r:.80}"
        )
    checked: dict[str, Any] = {}
    for name, branch in branches.items():
        scopes.check_part(name, "join branch name")
        runnable = callable(branch) or (async_body and inspect.isawaitable(branch))
        if not runnable:
            what = "an awaitable or a callable" if async_body else "a callable (a def body)"
            raise errors.InvalidArgument(f"join branch {name!r} must be {what}, not {branch!r:.80}")
        checked[name] = branch
    return checked


def run(state: AttemptState, name: str, branches: dict[str, Any], what: str) -> Any:
    """The join ``name`` (numbered already) as the body's durable call ``what``."""
    if state.async_body:
        return state.calls.note(_run_async(state, name, branches), what)
    return _run_sync(state, name, branches)


async def _run_async(state: AttemptState, name: str, branches: dict[str, Any]) -> Any:
    durable = state.durable
    join = _Join(durable, name)
    with durable.calling():
        done = await join.start(state.is_cancelled())
    if done is not None:
        for branch in branches.values():
            state.calls.discard(branch)
        return done
    tasks: dict[str, asyncio.Task[Any]] = {}
    for branch, run_branch in branches.items():
        if join.finished(branch):
            state.calls.discard(run_branch)
            continue
        context = contextvars.copy_context()
        context.run(scopes.enter, join.scope(branch))
        tasks[branch] = asyncio.create_task(join.branch(branch, run_branch), context=context)
    try:
        if tasks:
            await asyncio.wait(tasks.values())
    finally:
        # Still running only when the join itself was cancelled (a race it lost): the
        # branches end with it.
        running = [task for task in tasks.values() if not task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running)
    join.collect(tasks)
    with durable.calling():
        return await join.finish(list(branches))


def _run_sync(state: AttemptState, name: str, branches: dict[str, Any]) -> Any:
    join = _Join(state.durable, name)
    done = state.bridge(join.start(state.is_cancelled()))
    if done is not None:
        return done
    for branch, run_branch in branches.items():
        if join.finished(branch):
            continue
        try:
            with scopes.inside(join.scope(branch)):
                value = run_branch()
        except Exception as exc:
            join.failed(branch, exc)
            continue
        join.results[branch] = state.bridge(join.settle(branch, value))
    return state.bridge(join.finish(list(branches)))


class _Join:
    """One join's bookkeeping: what the journal has, what the branches gave."""

    def __init__(self, durable: Durable, name: str) -> None:
        self._durable = durable
        self._name = name
        self.results: dict[str, Any] = {}
        self._errors: dict[str, BaseException] = {}

    def scope(self, branch: str) -> str:
        return f"{self._name}/{branch}/"

    async def start(self, stopped: bool) -> dict[str, Any] | None:
        """The results of a join the journal has finished, else ``None``."""
        entry = await self._durable.begin(self._name, JournalKind.JOIN, stopped)
        if entry is None or not answered(entry):
            return None
        replay = await self._durable.load()
        replay.meet([row.step_name for row in replay.under(f"{self._name}/")])
        return dict(entry.output)

    def finished(self, branch: str) -> bool:
        """Whether the journal has this branch's result (then it is not run again)."""
        replay = self._durable.replay
        assert replay is not None
        row = replay.lookup(self._name + "/" + branch, JournalKind.JOIN_BRANCH)
        if row is None or not answered(row):
            return False
        replay.meet([r.step_name for r in replay.under(self.scope(branch))])
        self.results[branch] = row.output
        return True

    async def branch(self, branch: str, run: Callable[[], Any] | Awaitable[Any]) -> Any:
        """Run one branch (a task of an async body, in the branch's scope) and journal its
        result; a callable is called here, so that what it raises is the branch's."""
        value = run() if callable(run) else run
        if inspect.isawaitable(value):
            value = await value
        with self._durable.calling():
            return await self.settle(branch, value)

    async def settle(self, branch: str, value: Any) -> Any:
        """Journal a branch's result as ``name/branch``."""
        row = f"{self._name}/{branch}"
        try:
            text = self._durable.encode(row, value)
        except errors.InvalidPayload as exc:
            raise self._durable.refuse(exc) from None
        await self._durable.journal(row, JournalKind.JOIN_BRANCH, value, events=[], text=text)
        # With a codec, the result as a replay reads it back (the journal's JSON).
        return value if self._durable.codec is None else json.loads(text)

    def collect(self, tasks: dict[str, asyncio.Task[Any]]) -> None:
        """Note what the finished tasks gave; raise a suspension when any branch waits
        (every branch's wait is recorded: see ``Durable.waits``)."""
        suspension: errors.Suspend | None = None
        for branch, task in tasks.items():
            exc = task.exception()
            if exc is None:
                self.results[branch] = task.result()
            elif isinstance(exc, errors.Suspend):
                suspension = suspension or exc
            else:
                self.failed(branch, exc)
        if suspension is not None:
            raise suspension

    def failed(self, branch: str, exc: BaseException) -> None:
        """Note a branch's failure; raise at once what is the run's, not the branch's."""
        if not isinstance(exc, Exception) or isinstance(exc, _OF_THE_RUN):
            raise exc
        if self._durable.refused(exc) or isinstance(exc, errors.NotAwaited):
            raise exc
        self._errors[branch] = exc

    async def finish(self, order: list[str]) -> dict[str, Any]:
        """Journal every result as ``name`` and return them, or raise JoinError."""
        results = {branch: self.results[branch] for branch in order if branch in self.results}
        if self._errors:
            failures = {branch: self._errors[branch] for branch in order if branch in self._errors}
            raise errors.JoinError.of(self._name, failures, results)
        await self._durable.journal(self._name, JournalKind.JOIN, results, events=[])
        return results
