"""Retry policies: how long to wait before the next attempt, and which errors never retry."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from simpleworkflow import durations, errors

Backoff = Literal["fixed", "linear", "exponential", "quadratic"]


@dataclass(frozen=True)
class RetryPolicy:
    """Delay after the n-th failed attempt, before jitter and ``cap``:

    ``fixed``: base; ``linear``: base * n; ``exponential``: base * factor ** (n - 1);
    ``quadratic``: base * n ** 2. Jitter adds up to ``jitter`` times the delay at random,
    so that runs failing together do not retry together.

    The default for runs is quadratic with a one-minute base and 10 % jitter: about 1, 4,
    9 ... minutes. How many attempts a run gets is its ``max_attempts`` column; a step's
    policy sets ``max_attempts`` itself (default for steps: 3, exponential 1 s to 60 s,
    20 % jitter).

    ``timeout`` (steps only) bounds each try of a step given this policy, unless the call
    gives its own ``timeout=``: a try that runs longer fails with ``StepTimeout``
    (docs/durable.md, "Step timeouts"). A workflow's own policy refuses it: a whole
    attempt's limit is the workflow's ``timeout=``.
    """

    backoff: Backoff = "quadratic"
    base: durations.Duration = 60.0
    factor: float = 2.0
    cap: durations.Duration = 6 * 3600.0
    jitter: float = 0.1
    non_retryable: tuple[type[BaseException], ...] = field(default=())
    max_attempts: int | None = None
    timeout: durations.Duration | None = None

    def __post_init__(self) -> None:
        if self.backoff not in ("fixed", "linear", "exponential", "quadratic"):
            raise errors.InvalidArgument(
                f"unknown backoff {self.backoff!r}; use fixed, linear, exponential or quadratic"
            )
        durations.to_seconds(self.base, what="retry base")
        durations.to_seconds(self.cap, what="retry cap")
        if not _number(self.jitter) or not 0 <= self.jitter <= 1:
            raise errors.InvalidArgument(f"jitter must be within 0..1, not {self.jitter!r:.40}")
        if not _number(self.factor) or not 1 <= self.factor < math.inf:
            raise errors.InvalidArgument(
                f"factor must be a finite number, at least 1, not {self.factor!r:.40}"
            )
        if self.max_attempts is not None and self.max_attempts < 1:
            raise errors.InvalidArgument("max_attempts must be at least 1")
        if self.timeout is not None:
            step_timeout(self.timeout, what="retry timeout")

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after ``failures`` failed attempts (1 after the first failure)."""
        base = durations.to_seconds(self.base)
        n = max(failures, 1)
        if self.backoff == "fixed":
            delay = base
        elif self.backoff == "linear":
            delay = base * n
        elif self.backoff == "exponential":
            try:
                delay = base * self.factor ** min(n - 1, 64)
            except OverflowError:  # a large factor: the cap is reached long before
                delay = math.inf
        else:
            delay = base * n * n
        delay = min(delay, durations.to_seconds(self.cap))
        return delay + delay * self.jitter * rand()

    def retries(self, exc: BaseException) -> bool:
        """False for errors that no retry can fix."""
        return not isinstance(exc, (errors.PermanentError, *self.non_retryable))


def step_timeout(value: durations.Duration, *, what: str = "step timeout") -> float:
    """``value`` in seconds, if it can bound a step's try: a duration above zero."""
    seconds = durations.to_seconds(value, what=what)
    if seconds <= 0:
        raise errors.InvalidArgument(f"{what} must be more than 0 seconds, not {value!r:.40}")
    return seconds


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


DEFAULT_RUN_POLICY = RetryPolicy()
DEFAULT_STEP_POLICY = RetryPolicy(
    backoff="exponential", base=1.0, cap=60.0, jitter=0.2, max_attempts=3
)
