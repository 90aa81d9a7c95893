"""What a worker says about the attempts it finished: the first observer of every worker.

A failure is one line each (INFO when the run will be retried, WARNING when it failed for
good): each is worth reading. So is a step's failed try, which the run's outcome may never
show (the step is retried inside the run, or the workflow catches its failure): WARNING
when the step will be retried, ERROR with the traceback when it gives up.

Successes are most of what a busy worker does, so they are summed up: a success after a
quiet spell is logged at once, with its run id; the ones that follow within ``interval``
seconds wait for one line that counts them by type. The log says that work gets done
without a line per run.

It hears of attempts through ``attempt_finished`` like any observer (see ``observe``); the
worker registers it ahead of the app's observers and flushes it when it stops. Of steps
it hears only their failures (``AttemptState.step_log``), so a step that succeeds costs
nothing more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable

from simpleworkflow import observe
from simpleworkflow.errors import plural
from simpleworkflow.models import Run

#: Seconds between two lines about successes, at most one line per interval.
SUMMARY_INTERVAL = 5.0


class OutcomeLog(observe.Observer):
    """Logs finished attempts on ``log``; call :meth:`flush` when the worker stops."""

    def __init__(
        self,
        log: logging.Logger,
        *,
        interval: float = SUMMARY_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._interval = interval
        self._clock = clock
        self._counts: Counter[str] = Counter()
        self._first: Run | None = None  # named in the line when it is the only one
        self._last = -float("inf")
        self._timer: asyncio.TimerHandle | None = None

    def attempt_finished(self, event: observe.AttemptFinished) -> None:
        run = event.run
        if event.outcome == observe.SUCCEEDED:
            self._succeeded(run)
        elif event.outcome == observe.FAILED:
            self._log.warning(
                "run %s (%s) failed for good on attempt %s: %s",
                run.id,
                run.type,
                _number(run),
                event.error,
            )
        elif event.outcome == observe.RETRIED:
            self._log.info(
                "run %s (%s) attempt %s failed: %s; retrying in %.1fs",
                run.id,
                run.type,
                _number(run),
                event.error,
                event.retry_in,
            )
        elif event.outcome == observe.SUSPENDED:
            self._log.debug("run %s (%s) suspended: %s", run.id, run.type, event.waits)
        elif event.outcome == observe.CONTINUED:
            self._log.info("run %s (%s) continued as run %s", run.id, run.type, event.continued_as)

    def step_failed(self, event: observe.StepFailed) -> None:
        run, error = event.run, event.error
        summary = f"{type(error).__name__}: {error}"
        if event.retrying:
            self._log.warning(
                "run %s (%s) step %r attempt %d failed: %s; the step will be retried",
                run.id,
                run.type,
                event.step,
                event.attempt,
                summary,
            )
        else:
            self._log.error(
                "run %s (%s) step %r gave up on attempt %d: %s",
                run.id,
                run.type,
                event.step,
                event.attempt,
                summary,
                exc_info=(type(error), error, error.__traceback__),
            )

    def _succeeded(self, run: Run) -> None:
        self._counts[run.type] += 1
        self._first = self._first or run
        wait = self._last + self._interval - self._clock()
        if wait <= 0:
            self.flush()
        elif self._timer is None:
            try:
                self._timer = asyncio.get_running_loop().call_later(wait, self.flush)
            except RuntimeError:  # no event loop to wait on: say it now
                self.flush()

    def flush(self) -> None:
        """Log the successes not yet reported, in one line."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        total = sum(self._counts.values())
        if total == 1 and self._first is not None:
            first = self._first
            self._log.info(
                "run %s (%s) succeeded on attempt %d", first.id, first.type, first.attempt + 1
            )
        elif total:
            by_type = ", ".join(f"{t}: {n}" for t, n in self._counts.most_common())
            self._log.info("%s succeeded (%s)", plural(total, "run"), by_type)
        if total:
            self._last = self._clock()
        self._counts.clear()
        self._first = None


def _number(run: Run) -> str:
    """The attempt's number, or ``?`` when the stored count cannot be read."""
    return str(run.attempt + 1) if isinstance(run.attempt, int) else "?"
