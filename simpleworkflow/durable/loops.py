"""Durable loops (``ctx.loop``): iterations whose state is committed now and then, and
whose old journal rows are trimmed, so a long loop's journal and resume stay small.

Iteration ``i`` of loop ``name`` runs in the scope ``name/~i/`` (see ``scopes``): its
durable calls are journaled as ``name/~i/fetch``. Every ``commit_every`` iterations the
state the next iteration starts from is journaled as ``name/~i`` (kind ``loop_state``);
a replay starts from the latest such state, counts the rows of the iterations before it
as met, and runs the iterations since (their steps replay from the journal). Every
``history_every`` iterations the rows of the iterations before the last
``history_keep`` are deleted, but never those of iterations after the latest committed
state, which a resume must replay. The result is journaled as ``name`` (kind ``loop``).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from simpleworkflow import errors
from simpleworkflow.durable import scopes
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.durable.replay import answered

if TYPE_CHECKING:
    from simpleworkflow.durable.attempt import AttemptState
    from simpleworkflow.durable.journal import Durable

S = TypeVar("S")
R = TypeVar("R")

#: How often a loop journals its state, unless told: a resume re-runs (replays) at most
#: this many iterations.
COMMIT_EVERY = 10
#: How often, in iterations, a loop trims its journal, unless told.
HISTORY_EVERY = 100
#: How many recent iterations a trim keeps in the journal, unless told.
HISTORY_KEEP = 100


@dataclasses.dataclass(frozen=True)
class Continue(Generic[S]):
    """What a loop's body returns to run another iteration, starting from ``state``."""

    state: S


@dataclasses.dataclass(frozen=True)
class Break(Generic[R]):
    """What a loop's body returns to end the loop: ``ctx.loop`` returns ``result``."""

    result: R


@dataclasses.dataclass(frozen=True)
class Settings:
    commit_every: int = COMMIT_EVERY
    history_every: int | None = HISTORY_EVERY  # None: never trim
    history_keep: int = HISTORY_KEEP


def check_settings(commit_every: object, history_every: object, history_keep: object) -> Settings:
    """The loop's settings, or :class:`~simpleworkflow.errors.InvalidArgument` naming the
    one that is not a whole number of at least 1 (``history_every`` may be ``None``)."""
    for field, value in (
        ("commit_every", commit_every),
        ("history_every", history_every),
        ("history_keep", history_keep),
    ):
        if field == "history_every" and value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            allowed = "a whole number of at least 1" + (
                " or None (never trim)" if field == "history_every" else ""
            )
            raise errors.InvalidArgument(f"loop's {field} must be {allowed}, not {value!r:.80}")
    return Settings(commit_every, history_every, history_keep)  # type: ignore[arg-type]


def run(
    state: AttemptState,
    name: str,
    initial: Any,
    body: Callable[[Any], Any],
    settings: Settings,
    what: str,
) -> Any:
    """The loop ``name`` (numbered already) as the body's durable call ``what``."""
    if state.async_body:
        return state.calls.note(_run_async(state, name, initial, body, settings), what)
    return _run_sync(state, name, initial, body, settings)


async def _run_async(
    state: AttemptState, name: str, initial: Any, body: Callable[[Any], Any], settings: Settings
) -> Any:
    loop = _Loop(state.durable, name, settings, state.is_cancelled)
    with state.durable.calling():
        done, value = await loop.start(initial)
    while not done:
        with scopes.inside(loop.scope):
            outcome = body(value)
            if inspect.isawaitable(outcome):
                outcome = await outcome
        with state.durable.calling():
            done, value = await loop.after(outcome)
    return value


def _run_sync(
    state: AttemptState, name: str, initial: Any, body: Callable[[Any], Any], settings: Settings
) -> Any:
    loop = _Loop(state.durable, name, settings, state.is_cancelled)
    done, value = state.bridge(loop.start(initial))
    while not done:
        with scopes.inside(loop.scope):
            outcome = body(value)
        done, value = state.bridge(loop.after(outcome))
    return value


class _Loop:
    """One loop's bookkeeping: where it resumes, what it commits, what it trims."""

    def __init__(
        self, durable: Durable, name: str, settings: Settings, stopped: Callable[[], bool]
    ) -> None:
        self._durable = durable
        self._name = name
        self._prefix = f"{name}/~"
        self._settings = settings
        self._stopped = stopped
        self.iteration = 0
        self._committed = 0  # the iteration whose starting state is journaled (or given)

    @property
    def scope(self) -> str:
        return f"{self._prefix}{self.iteration}/"

    async def start(self, initial: Any) -> tuple[bool, Any]:
        """``(True, result)`` of a loop the journal has finished, else ``(False, state)``
        to resume from: the latest committed state, or ``initial``."""
        durable = self._durable
        entry = await durable.begin(self._name, JournalKind.LOOP, self._stopped())
        replay = await durable.load()
        rows = replay.under(self._prefix)
        if entry is not None and answered(entry):
            replay.meet([row.step_name for row in rows])
            return True, entry.output
        commits = {
            number: row
            for row in rows
            if row.kind == JournalKind.LOOP_STATE
            and (number := scopes.iteration_of(row.step_name, self._prefix)) is not None
            and row.step_name == f"{self._prefix}{number}"
        }
        if not commits:
            return False, initial
        latest = max(commits)
        replay.lookup(commits[latest].step_name, JournalKind.LOOP_STATE)
        # The iterations before it are done: their rows are met without running them.
        replay.meet([row.step_name for row in rows if self._before(row.step_name, latest)])
        self.iteration = self._committed = latest
        return False, commits[latest].output["state"]

    async def after(self, outcome: Any) -> tuple[bool, Any]:
        """Act on what an iteration returned: journal the result of a ``Break``, or go on
        with a ``Continue``'s state, committing it and trimming the journal when due."""
        durable = self._durable
        if isinstance(outcome, Break):
            text = self._encode(self._name, outcome.result)
            await self._journal(self._name, JournalKind.LOOP, outcome.result, text)
            return True, outcome.result if durable.codec is None else json.loads(text)
        if not isinstance(outcome, Continue):
            raise durable.refuse(
                errors.InvalidArgument(
                    f"the body of loop {self._name!r} must return Continue(state) or "
                    f"Break(result), not {outcome!r:.80}"
                )
            )
        self.iteration += 1
        settings = self._settings
        state, text = outcome.state, ""
        if durable.codec is not None:  # the state as a resume reads it, at every iteration
            text = self._encode(f"{self._prefix}{self.iteration}", {"state": state})
            state = json.loads(text)["state"]
        if self.iteration % settings.commit_every == 0:
            row, output = f"{self._prefix}{self.iteration}", {"state": outcome.state}
            await self._journal(
                row, JournalKind.LOOP_STATE, output, text or self._encode(row, output)
            )
            self._committed = self.iteration
        if settings.history_every is not None and self.iteration % settings.history_every == 0:
            await self._trim()
        return False, state

    def _encode(self, name: str, output: Any) -> str:
        try:
            return self._durable.encode(name, output)
        except errors.InvalidPayload as exc:
            raise self._durable.refuse(exc) from None

    async def _journal(self, name: str, kind: JournalKind, output: Any, text: str) -> None:
        await self._durable.journal(name, kind, output, events=[], text=text)

    async def _trim(self) -> None:
        """Delete the rows of the iterations before the last ``history_keep``; those since
        the latest committed state stay, for a resume to replay."""
        cutoff = min(self.iteration - self._settings.history_keep, self._committed)
        replay = await self._durable.load()
        old = [
            row.step_name
            for row in replay.under(self._prefix)
            if self._before(row.step_name, cutoff)
        ]
        if old:
            await self._durable.trim(old)

    def _before(self, name: str, iteration: int) -> bool:
        number = scopes.iteration_of(name, self._prefix)
        return number is not None and number < iteration
