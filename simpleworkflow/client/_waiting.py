"""``wait()``'s polling: quick at first, then at most once a second, until a deadline."""

from __future__ import annotations

import time
from collections.abc import Iterator

from simpleworkflow import durations, errors


def deadline(timeout: durations.Duration | None) -> float | None:
    if timeout is None:
        return None
    return time.monotonic() + durations.to_seconds(timeout, what="timeout")


def pauses(deadline: float | None) -> Iterator[float | None]:
    """Pauses between polls: quick at first, then at most a second; ``None`` at the deadline."""
    pause = 0.01
    while True:
        if deadline is None:
            yield pause
        else:
            left = deadline - time.monotonic()
            yield None if left <= 0 else min(pause, left)
        pause = min(pause * 1.5, 1.0)


def timed_out(run_id: str, timeout: durations.Duration | None) -> errors.WaitTimeout:
    return errors.WaitTimeout(
        f"run {run_id} did not finish within {timeout}; it goes on, and wait() can be called again"
    )
