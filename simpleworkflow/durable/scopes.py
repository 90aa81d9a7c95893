"""Where a durable call sits: the path of the loop iteration or join branch it runs in.

A loop's iteration 12 and a join's branch ``"crm"`` are *scopes*: the durable calls made
inside them are journaled under a path (``process-items/~12/fetch``,
``enrich/crm/fetch``), so the same step name repeats once per iteration or branch
without collisions, and a whole scope's rows can be found (met in bulk on a replay,
trimmed from an old iteration) by their prefix. The current scope is a context variable:
it follows the body into the tasks it starts (``asyncio.gather``) and, through the
bridge, into the durable calls of a ``def`` body's thread.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from simpleworkflow import errors, names
from simpleworkflow.durable.kinds import JournalKind

#: The prefix of the scope the code runs in: ``""`` outside every loop and join.
_SCOPE: contextvars.ContextVar[str] = contextvars.ContextVar("durable_scope", default="")

#: Calls judged by the calls inside them: such a call that is not journaled yet is not a
#: divergence by itself (its inner calls are met, or judged, as they run again).
CONTAINERS = frozenset(
    {JournalKind.RACE, JournalKind.LOOP, JournalKind.JOIN, JournalKind.JOIN_BRANCH}
)


def current() -> str:
    """The prefix of the scope the code runs in (``""`` outside every loop and join)."""
    return _SCOPE.get()


def path(name: str) -> str:
    """``name`` located in the current scope (itself outside every scope)."""
    prefix = _SCOPE.get()
    return prefix + name if prefix else name


@contextlib.contextmanager
def inside(prefix: str) -> Iterator[None]:
    """Run the block in the scope whose calls are journaled as ``prefix + name``."""
    token = _SCOPE.set(prefix)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def enter(prefix: str) -> None:
    """Make ``prefix`` the scope of the current context (a copy made for one branch)."""
    _SCOPE.set(prefix)


def check_part(value: object, what: str) -> str:
    """A loop's or join's name, or a branch name: a step name without ``/`` (the path's
    separator) that does not start with ``~`` (an iteration's mark)."""
    try:
        names.validate_step_name(value)
    except errors.InvalidArgument as exc:
        raise errors.InvalidArgument(f"{what}: {exc}") from None
    assert isinstance(value, str)
    if "/" in value or value.startswith("~"):
        raise errors.InvalidArgument(
            f"{what} must not contain '/' nor start with '~' (they separate and mark the "
            f"parts of a step's path), not {value!r:.80}"
        )
    return value


def iteration_of(name: str, prefix: str) -> int | None:
    """The iteration a journaled name under loop prefix ``prefix`` (``loop/~``) belongs
    to: ``12`` for ``loop/~12`` (its state) and ``loop/~12/fetch``; else ``None``."""
    if not name.startswith(prefix):
        return None
    number = name[len(prefix) :].partition("/")[0]
    return int(number) if number.isdigit() else None
