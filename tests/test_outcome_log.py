"""The worker's lines about finished attempts: every failure, successes summed up."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from simpleworkflow.backends.base import Failure, Lease, Success
from simpleworkflow.models import Run, RunStatus
from simpleworkflow.outcome_log import OutcomeLog
from simpleworkflow.wording import plural

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def lease(n: int, type_name: str = "billing.invoice.v1", attempt: int = 0) -> Lease:
    run = Run(
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
    return Lease(run=run, token="t")


def success(n: int) -> Success:
    return Success(run_id=lease(n).run.id, token="t", result="{}")


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
    log.record(lease(1), success(1))
    assert lines() == [f"run {lease(1).run.id} (billing.invoice.v1) succeeded on attempt 1"]


def test_successes_that_follow_are_counted_in_one_line(lines: Lines) -> None:
    async def busy() -> None:
        log = OutcomeLog(logging.getLogger("test.outcomes"), interval=0.2)
        log.record(lease(0), success(0))
        for n in range(1, 11):
            log.record(lease(n, "billing.refund.v1" if n % 3 == 0 else "billing.invoice.v1"),
                       success(n))  # fmt: skip
        assert len(lines()) == 1  # the rest wait for the interval to pass
        await asyncio.sleep(0.6)
        log.record(lease(11), success(11))  # quiet for longer than the interval: at once

    asyncio.run(busy())
    assert lines()[1] == "10 runs succeeded (billing.invoice.v1: 7, billing.refund.v1: 3)"
    assert lines()[2].startswith(f"run {lease(11).run.id} (billing.invoice.v1) succeeded")
    assert len(lines()) == 3


def test_flush_reports_what_is_left(lines: Lines) -> None:
    async def stopping() -> None:
        log = OutcomeLog(logging.getLogger("test.outcomes"), interval=60)
        for n in range(3):
            log.record(lease(n), success(n))
        log.flush()  # as the worker does when it stops: no timer left behind

    asyncio.run(stopping())
    assert lines()[1:] == ["2 runs succeeded (billing.invoice.v1: 2)"]


def test_without_an_event_loop_a_success_is_said_at_once(lines: Lines) -> None:
    log = OutcomeLog(logging.getLogger("test.outcomes"), interval=60)
    log.record(lease(1), success(1))
    log.record(lease(2), success(2))
    assert len(lines()) == 2


def test_each_failure_is_a_line_of_its_own(lines: Lines) -> None:
    log = OutcomeLog(logging.getLogger("test.outcomes"))
    error = {"error": {"type": "RuntimeError", "message": "down"}}
    log.record(lease(1), Failure("r", "t", final=False, delay=4, error="x", data=error))
    log.record(lease(2, attempt=2), Failure("r", "t", final=True, delay=0, error="x", data=error))
    assert lines() == [
        f"run {lease(1).run.id} (billing.invoice.v1) attempt 1 failed: down; retrying in 4.0s",
        f"run {lease(2).run.id} (billing.invoice.v1) failed for good on attempt 3: down",
    ]


def test_plural() -> None:
    assert [plural(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]
    assert plural(2, "entry", "entries") == "2 entries"
