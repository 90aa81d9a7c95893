"""The worker's lines about finished attempts: every failure, successes summed up.

``OutcomeLog`` is an observer: it hears of attempts through ``attempt_finished`` events."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from simpleworkflow import observe
from simpleworkflow.errors import plural
from simpleworkflow.models import Run, RunStatus
from simpleworkflow.worker.log_observer import OutcomeLog

NOW = datetime(2030, 1, 1, tzinfo=UTC)
INVOICE = "billing.invoice.v1"


def run(n: int, type_name: str = "billing.invoice.v1", attempt: int = 0) -> Run:
    return Run(
        id=f"00000000-0000-4000-8000-{n:012d}",
        type=type_name,
        payload={},
        status=RunStatus.LEASED,
        priority=100,
        run_at=NOW,
        idempotency_key=None,
        attempt=attempt,
        max_attempts=3,
        leased_by="w1",
        lease_until=NOW,
        last_error=None,
        result=None,
        created_at=NOW,
        updated_at=NOW,
        deleted_at=None,
    )


def success(n: int, type_name: str = "billing.invoice.v1") -> observe.AttemptFinished:
    return observe.AttemptFinished(run(n, type_name), "w1", observe.SUCCEEDED, 0.1)


class Lines:
    """The messages logged so far on ``test.outcomes``."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self._caplog = caplog

    def __call__(self) -> list[str]:
        return self._caplog.messages


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> Lines:
    caplog.set_level(logging.DEBUG, logger="test.outcomes")
    return Lines(caplog)


def test_a_lone_success_is_logged_at_once_with_its_run(lines: Lines) -> None:
    log = OutcomeLog(logging.getLogger("test.outcomes"))
    log.attempt_finished(success(1))
    assert lines() == [f"run {run(1).id} (billing.invoice.v1) succeeded on attempt 1"]


def test_successes_that_follow_are_counted_in_one_line(lines: Lines) -> None:
    async def busy() -> None:
        log = OutcomeLog(logging.getLogger("test.outcomes"), interval=0.2)
        log.attempt_finished(success(0))
        for n in range(1, 11):
            log.attempt_finished(success(n, "billing.refund.v1" if n % 3 == 0 else INVOICE))
        assert len(lines()) == 1  # the rest wait for the interval to pass
        await asyncio.sleep(0.6)
        log.attempt_finished(success(11))  # quiet for longer than the interval: at once

    asyncio.run(busy())
    assert lines()[1] == "10 runs succeeded (billing.invoice.v1: 7, billing.refund.v1: 3)"
    assert lines()[2].startswith(f"run {run(11).id} (billing.invoice.v1) succeeded")
    assert len(lines()) == 3


def test_flush_reports_what_is_left(lines: Lines) -> None:
    async def stopping() -> None:
        log = OutcomeLog(logging.getLogger("test.outcomes"), interval=60)
        for n in range(3):
            log.attempt_finished(success(n))
        log.flush()  # as the worker does when it stops: no timer left behind

    asyncio.run(stopping())
    assert lines()[1:] == ["2 runs succeeded (billing.invoice.v1: 2)"]


def test_without_an_event_loop_a_success_is_said_at_once(lines: Lines) -> None:
    log = OutcomeLog(logging.getLogger("test.outcomes"), interval=60)
    log.attempt_finished(success(1))
    log.attempt_finished(success(2))
    assert len(lines()) == 2


def test_each_failure_is_a_line_of_its_own(lines: Lines) -> None:
    log = OutcomeLog(logging.getLogger("test.outcomes"))
    log.attempt_finished(
        observe.AttemptFinished(run(1), "w1", observe.RETRIED, 0.1, error="down", retry_in=4)
    )
    log.attempt_finished(
        observe.AttemptFinished(run(2, attempt=2), "w1", observe.FAILED, 0.1, error="down")
    )
    assert lines() == [
        f"run {run(1).id} (billing.invoice.v1) attempt 1 failed: down; retrying in 4.0s",
        f"run {run(2).id} (billing.invoice.v1) failed for good on attempt 3: down",
    ]


def test_a_step_try_that_failed_is_a_warning_and_one_that_gave_up_an_error_with_its_trace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="test.outcomes")
    log = OutcomeLog(logging.getLogger("test.outcomes"))
    try:
        raise TimeoutError("card network")
    except TimeoutError as exc:
        error = exc
    log.step_failed(observe.StepFailed(run(1), "charge", 1, 0.2, error, retrying=True))
    log.step_failed(observe.StepFailed(run(1), "charge", 3, 0.2, error, retrying=False))
    retried, gave_up = caplog.records
    assert (retried.levelno, retried.getMessage(), retried.exc_info) == (
        logging.WARNING,
        f"run {run(1).id} (billing.invoice.v1) step 'charge' attempt 1 failed: "
        "TimeoutError: card network; the step will be retried",
        None,
    )
    assert (gave_up.levelno, gave_up.getMessage()) == (
        logging.ERROR,
        f"run {run(1).id} (billing.invoice.v1) step 'charge' gave up on attempt 3: "
        "TimeoutError: card network",
    )
    assert gave_up.exc_text and 'raise TimeoutError("card network")' in gave_up.exc_text


def test_plural() -> None:
    assert [plural(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]
    assert plural(2, "entry", "entries") == "2 entries"


def test_a_suspension_is_a_debug_line_and_a_stop_says_nothing(lines: Lines) -> None:
    log = OutcomeLog(logging.getLogger("test.outcomes"))
    log.attempt_finished(
        observe.AttemptFinished(run(1), "w1", observe.SUSPENDED, 0.1, waits="sleeping")
    )
    for outcome in (observe.CANCELLED, observe.LEASE_LOST, observe.STOPPED):
        log.attempt_finished(observe.AttemptFinished(run(2), "w1", outcome, 0.1))
    assert lines() == [f"run {run(1).id} (billing.invoice.v1) suspended: sleeping"]
