"""Reading the values a run publishes (``ctx.set_value``), and waiting for one to appear
or change: on Postgres the reader listens for the run's sets and reads the store once per
set; on SQLite it polls, quick at first, then once a second. A wait ends early, with
:class:`~simpleworkflow.errors.RunFinished`, once the run has ended without the value:
it can set none after its end."""

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

#: The longest a listening reader goes without reading the store: it learns then that the
#: run has ended (no notification says so), as a stream's reader does.
LONGEST_QUIET = 1.0


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

    def look(self, backend: Backend) -> Op[tuple[RunValue | None, str | None] | None]:
        """The op of one look: the value, and the run's status once it has ended."""
        return backend.await_value(self.run_id, self.key)

    def outcome(self, found: tuple[RunValue | None, str | None] | None) -> RunValue | None:
        """The value that ends the wait, or ``None`` to wait on; raises when the run is
        unknown, or has ended without such a value (it sets none after its end)."""
        if found is None:
            raise errors.RunNotFound(self.run_id)
        value, ended = found
        if self.answers(value):
            return value
        if ended is not None:
            raise self.never(ended)
        return None

    def never(self, status: str) -> errors.RunFinished:
        since = "" if self.after is None else f" past version {self.after}"
        return errors.RunFinished(
            f"run {self.run_id} has ended ({status}) without setting value {self.key!r}"
            f"{since}; a run sets no value after its end",
            run_id=self.run_id,
            status=status,
        )

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
