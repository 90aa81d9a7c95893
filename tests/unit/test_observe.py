"""Observers: hooks that raise are logged and ignored; wrappers nest and never eat errors."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from simpleworkflow import observe
from simpleworkflow.models import Run, RunStatus

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUN = Run(
    id="r1",
    type="demo.v1",
    payload={},
    status=RunStatus.LEASED,
    priority=0,
    run_at=NOW,
    idempotency_key=None,
    attempt=0,
    max_attempts=3,
    leased_by="w",
    lease_until=None,
    last_error=None,
    result=None,
    created_at=NOW,
    updated_at=NOW,
    deleted_at=None,
)


class Recorder(observe.Observer):
    def __init__(self, name: str, seen: list[str]) -> None:
        self.name, self.seen = name, seen

    def run_claimed(self, event: observe.RunClaimed) -> None:
        self.seen.append(f"{self.name} claimed {event.run.id}")

    @contextlib.contextmanager
    def around_step(self, run: Run, step: str, attempt: int) -> Iterator[None]:
        self.seen.append(f"{self.name} enter {step}")
        try:
            yield
        finally:
            self.seen.append(f"{self.name} leave {step}")


class Broken(observe.Observer):
    def run_claimed(self, event: observe.RunClaimed) -> None:
        raise RuntimeError("exporter down")

    def around_step(
        self, run: Run, step: str, attempt: int
    ) -> contextlib.AbstractContextManager[None]:
        raise RuntimeError("tracer down")


def test_each_observer_is_called_in_order_and_one_that_raises_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []
    observers = observe.Observers([Recorder("a", seen), Broken(), Recorder("b", seen)])
    with caplog.at_level(logging.DEBUG, logger="simpleworkflow.observe"):
        for _ in range(3):
            observers.run_claimed(observe.RunClaimed(RUN, "w", 0.0))
    assert seen == ["a claimed r1", "b claimed r1"] * 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "run_claimed" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None


def test_wrappers_nest_outermost_first_and_let_the_users_error_through() -> None:
    seen: list[str] = []
    observers = observe.Observers([Recorder("a", seen), Broken(), Recorder("b", seen)])
    with pytest.raises(ValueError, match="step failed"), observers.around_step(RUN, "charge", 1):
        seen.append("body")
        raise ValueError("step failed")
    assert seen == ["a enter charge", "b enter charge", "body", "b leave charge", "a leave charge"]


def test_no_observers_costs_a_null_context_and_refuses_what_is_not_an_observer() -> None:
    empty = observe.Observers()
    assert not empty
    assert isinstance(empty.around_attempt(RUN, "w"), contextlib.nullcontext)
    with pytest.raises(TypeError, match="subclass it"):
        empty.add(object())  # type: ignore[arg-type]


def test_observers_that_only_count_are_not_entered_around_attempts_and_steps() -> None:
    """The base class's wrappers do nothing: the composite skips them (a null context),
    nested composites too, and still enters an observer that overrides one."""
    seen: list[str] = []
    counting = observe.Observers([observe.Observer(), observe.Observer()])
    nested = observe.Observers([observe.Observer(), counting])
    assert isinstance(nested.around_attempt(RUN, "w"), contextlib.nullcontext)
    assert isinstance(nested.around_step(RUN, "charge", 1), contextlib.nullcontext)
    nested.add(observe.Observers([Recorder("b", seen)]))
    assert isinstance(nested.around_attempt(RUN, "w"), contextlib.nullcontext)  # steps only
    with nested.around_step(RUN, "charge", 1):
        seen.append("body")
    assert seen == ["b enter charge", "body", "b leave charge"]
    counting.add(Recorder("a", seen))  # inside a composite already asked: noticed
    seen.clear()
    with nested.around_step(RUN, "charge", 1):
        seen.append("body")
    assert seen == ["a enter charge", "b enter charge", "body", "b leave charge", "a leave charge"]


def test_a_composite_listens_to_the_hooks_its_observers_override_nested_too() -> None:
    """What the engine asks before it builds an event: an observer that overrides no hook
    is never called, and one added later, in a nested composite too, is heard."""
    seen: list[str] = []
    inner = observe.Observers([observe.Observer()])
    outer = observe.Observers([observe.Observer(), inner])
    assert not outer.listens("run_claimed") and not observe.listens(outer, "attempt_started")
    outer.run_claimed(observe.RunClaimed(RUN, "w", 0.0))  # nobody to call: nothing happens
    inner.add(Recorder("a", seen))
    assert outer.listens("run_claimed") and observe.listens(inner, "around_step")
    assert not outer.listens("attempt_started")
    assert observe.listens(Recorder("b", seen), "run_claimed")
    assert not observe.listens(Recorder("b", seen), "run_created")
    outer.run_claimed(observe.RunClaimed(RUN, "w", 0.0))
    assert seen == ["a claimed r1"]
