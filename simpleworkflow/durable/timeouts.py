"""Step timeouts: a try of a step that runs past its ``timeout`` fails with ``StepTimeout``.

The timeout is the call's ``timeout=``, else its retry policy's ``timeout``, else none (and
then nothing here runs: a step without one costs what it always did). What happens at
the timeout depends on where the function runs:

- an ``async def`` function is cancelled (``CancelledError`` at its ``await``);
- a ``def`` function runs on a thread, which Python cannot interrupt: the step stops
  waiting for it, its try is failed, and the thread runs on unheeded until the function
  returns, when its value (or error) is dropped, never journaled nor counted. In a ``def``
  body a step with a timeout therefore runs on a thread of the worker's step pool, not on
  the body's own, so that the body can stop waiting.

Either way the try counts as failed under the step's retry policy, exactly as a raise.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from simpleworkflow import durations, errors
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.retry import RetryPolicy, step_timeout

T = TypeVar("T")


def resolve(timeout: durations.Duration | None, retry: RetryPolicy | None) -> float | None:
    """The seconds a try of the step may take: the call's ``timeout``, else its policy's.
    Refuses a value that is not a duration above zero (``InvalidArgument``, named)."""
    if timeout is not None:
        return step_timeout(timeout, what="step timeout")
    if retry is not None and retry.timeout is not None:
        return step_timeout(retry.timeout, what="retry timeout")
    return None


async def within(awaitable: Awaitable[T], seconds: float, name: str) -> T:
    """``awaitable``'s value, or :class:`~simpleworkflow.errors.StepTimeout` once
    ``seconds`` have passed (the awaitable is cancelled). A ``TimeoutError`` the step's
    own code raises stays what it is."""
    limit = asyncio.timeout(seconds)
    try:
        async with limit:
            return await awaitable
    except TimeoutError:
        if limit.expired():
            raise errors.StepTimeout(name, seconds) from None
        raise


async def in_thread(
    state: AttemptState, call: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """``call`` on a thread of the worker's step pool, awaited on the worker's loop (for a
    ``def`` body, whose own thread then only waits, and can stop waiting)."""
    value = await state.in_thread(call, *args, **kwargs)
    if inspect.isawaitable(value):  # a ``def`` that returned one, as a def body awaits it
        value = await value
    return value
