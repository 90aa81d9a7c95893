"""Durable calls an async body made but never awaited.

``ctx.sleep(...)`` without ``await`` makes a coroutine and drops it: the sleep never
happens, the run goes on and succeeds, and the only sign is Python's "coroutine was never
awaited" on stderr. Each durable call of an async body is noted here, with the line of
the body that made it; when the body returns, a call still unstarted fails the attempt
with :class:`~simpleworkflow.errors.NotAwaited`, naming it and its line.

Cheap on the hot path: one list append and a short walk up the stack per call; calls
already started are dropped as the list grows. Only async bodies need it: a ``def`` body's
durable calls run as they are made.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Coroutine
from typing import Any

from simpleworkflow import errors

_PACKAGE = os.path.dirname(os.path.dirname(__file__)) + os.sep  # simpleworkflow/
#: Past this many noted calls, the ones already started are dropped.
_PRUNE_AT = 128
_Coro = Coroutine[Any, Any, Any]


class Calls:
    """The durable calls of one attempt's async body, to check at its return."""

    __slots__ = ("_limit", "_made")

    def __init__(self) -> None:
        self._made: list[tuple[_Coro, str, str, _Coro | None]] = []
        self._limit = _PRUNE_AT

    def note(
        self,
        coro: _Coro,
        what: str,
        inner: _Coro | None = None,
    ) -> _Coro:
        """Note ``coro``, the durable call ``what`` (``ctx.sleep('cool-off')``), made by
        the body's code on the stack now (``inner``: the coroutine it awaits); return it."""
        if len(self._made) >= self._limit:
            self._made = [made for made in self._made if _unstarted(made[0])]
            # Many made before any is awaited (a gather of thousands): prune less often.
            self._limit = max(_PRUNE_AT, 2 * len(self._made))
        self._made.append((coro, what, _caller(), inner))
        return coro

    def discard(self, call: object) -> None:
        """Close ``call``, which will never be awaited (a branch of a race that replays),
        and the coroutine it awaits: closing the outer one alone leaves Python to warn
        that the inner one was never awaited."""
        for coro, _, _, inner in self._made:
            if coro is call and inner is not None:
                inner.close()
                break
        if inspect.iscoroutine(call):
            call.close()

    def check(self) -> None:
        """Raise :class:`~simpleworkflow.errors.NotAwaited` if a call was never started
        (closing those calls, so that Python does not warn of them again)."""
        if not self._made:  # most bodies make no durable call: nothing to check
            return
        left = [made for made in self._made if _unstarted(made[0])]
        self._made = []
        if not left:
            return
        for coro, _, _, inner in left:
            coro.close()
            if inner is not None:
                inner.close()
        calls = "; ".join(f"{what} at {where}" for _, what, where, _ in left)
        raise errors.NotAwaited(
            f"the workflow returned without awaiting {calls}: a durable call does nothing "
            "until it is awaited (write `await ctx.sleep(...)`, `await ctx.step(...)`)"
        )


def _unstarted(coro: _Coro) -> bool:
    return inspect.getcoroutinestate(coro) == inspect.CORO_CREATED


def _caller() -> str:
    """``file:line`` of the innermost frame outside this package: the body's call."""
    frame = sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"
