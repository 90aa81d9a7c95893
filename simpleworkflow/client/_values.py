"""Reading the values a run publishes (``ctx.set_value``), and waiting for one to appear
or change: on Postgres the reader listens for the run's sets and reads the store once per
set; on SQLite it polls, quick at first, then once a second."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from simpleworkflow import durations, errors, names
from simpleworkflow.backends.ops import Op
from simpleworkflow.client import _waiting
from simpleworkflow.models import RunValue

if TYPE_CHECKING:
    from simpleworkflow.backends import Backend

#: The longest a listening reader goes without reading the store (a notification lost
#: while its connection was down is caught up then).
LONGEST_QUIET = 30.0


class ValueWait:
    """The arguments of one ``wait_value`` call, checked, and what answers it."""

    def __init__(
        self, run_id: str, key: str, timeout: durations.Duration | None, after: int | None
    ) -> None:
        self.run_id = names.normalize_run_id(run_id)
        self.key = names.validate_value_key(key)
        self.after = None if after is None else names.check_int("after", after, 0, 2**31 - 1)
        self.timeout = timeout
        self.deadline = _waiting.deadline(timeout)
        self.pauses = _waiting.pauses(self.deadline)

    def answers(self, value: RunValue | None) -> bool:
        """Whether ``value`` ends the wait: set at all, or set since version ``after``."""
        return value is not None and (self.after is None or value.version > self.after)

    def next_pause(self, listening: bool) -> float | None:
        """How long to wait for the next look; ``None`` once the deadline has passed."""
        pause = next(self.pauses)
        if pause is None or not listening:
            return pause
        if self.deadline is None:
            return LONGEST_QUIET
        return min(self.deadline - time.monotonic(), LONGEST_QUIET)

    def timed_out(self) -> errors.WaitTimeout:
        since = "" if self.after is None else f" past version {self.after}"
        return errors.WaitTimeout(
            f"run {self.run_id} set no value {self.key!r}{since} within {self.timeout}"
        )


def read_all(backend: Backend, run_id: str) -> Op[list[RunValue]]:
    """The op that reads the run's values, or raises RunNotFound."""
    return backend.of_run(names.normalize_run_id(run_id), backend.list_values)


def read_one(backend: Backend, run_id: str, key: str) -> Op[RunValue | None]:
    """The op that reads the run's value ``key``, or raises RunNotFound."""
    key = names.validate_value_key(key)
    return backend.of_run(names.normalize_run_id(run_id), lambda r: backend.get_value(r, key))


async def sleep_or_hear(notices: Any, pause: float) -> None:
    if notices is None:
        await asyncio.sleep(pause)
    else:
        await notices(pause)


def sleep_or_hear_sync(notices: Any, pause: float) -> None:
    if notices is None:
        time.sleep(pause)
    else:
        notices(pause)
