"""A failed attempt's error text: the exception the user should read first, the user's
frames kept, the library's folded into a count (``simpleworkflow.tracebacks``)."""

from __future__ import annotations

import asyncio

from simpleworkflow import errors
from simpleworkflow.durable import tracebacks


class OrderMissing(Exception):
    pass


def _lookup() -> None:
    try:
        {}["o7"]
    except KeyError as exc:
        raise OrderMissing("order o7 is gone") from exc


def _raised(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except BaseException as exc:
        return exc
    raise AssertionError("it did not raise")


def test_the_users_own_chain_keeps_its_order_and_the_raised_error_leads() -> None:
    text = tracebacks.describe(_raised(_lookup))
    lines = text.splitlines()
    assert lines[0] == "test_tracebacks.OrderMissing: order o7 is gone"
    assert lines[-1] == lines[0]  # still ends as a traceback does
    assert text.index("KeyError: 'o7'") < text.index("direct cause")  # causes first
    assert "in _lookup" in text and "left out" not in text  # no library frame to fold


def test_the_machinery_between_the_users_frames_is_folded() -> None:
    async def body() -> None:
        _lookup()

    text = tracebacks.describe(_raised(lambda: asyncio.run(body())))
    assert text.splitlines()[0] == "test_tracebacks.OrderMissing: order o7 is gone"
    assert "asyncio/" not in text and "library frames left out]" in text, text
    assert "in body" in text and "in _lookup" in text


def test_an_error_never_raised_is_its_summary() -> None:
    """What the worker makes itself (a passed deadline) has no frame to show."""
    text = tracebacks.describe(errors.DeadlineExceeded("the run's deadline has passed"))
    assert (
        text.splitlines()
        == ["simpleworkflow.errors.DeadlineExceeded: the run's deadline has passed"] * 2
    )


def test_a_long_text_keeps_its_headline_and_its_end() -> None:
    exc = _raised(_lookup)
    whole = tracebacks.describe(exc)
    cut = tracebacks.describe(exc, limit=200)
    assert len(cut) <= 200
    assert cut.splitlines()[0] == whole.splitlines()[0]
    assert cut.endswith(whole[-50:]) and "[... cut ...]" in cut
