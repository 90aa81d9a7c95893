"""A worker's handler slots (``worker.slots.Slots``), driven as the runner drives them.

What the worker relies on, whatever the order of events: no more handlers hold a slot
than there are slots; runs claimed ahead take slots in claim order, each once; a run
stopped while queued never gets one; no run waits while a slot is free; closing the
slots tells every waiting run, and leaves no slot counted busy once handlers return.
The runner's task for a queued run asks for its slot a turn after the claim, so a slot
may be given back before or after the run asks: both are drawn here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from simpleworkflow.worker.slots import Slots

SIZE = 3


@dataclass
class Run:
    number: int
    state: str  # "holding", "unasked", "sleeping", "done"
    stopped: bool = False
    waiter: asyncio.Future[bool] | None = None
    held: int = 0  # times it held a slot


@dataclass
class Model:
    slots: Slots = field(default_factory=lambda: Slots(SIZE))
    runs: list[Run] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # queued runs, as each got its slot

    def claim(self, count: int) -> None:
        for _ in range(count):
            busy = self.slots.busy
            holding = self.slots.take_now()
            if holding:  # a new run goes before none that waits: each has its slot
                granted = [r for r in self.runs if r.held and r.state in ("holding", "sleeping")]
                assert not [r for r in self.runs if r.state == "sleeping" and not r.held]
                assert sum(r.state == "unasked" for r in self.runs) <= busy - len(granted)
            run = Run(len(self.runs), "holding" if holding else "unasked")
            run.held = int(holding)
            self.runs.append(run)

    def first(self, state: str) -> Run | None:
        return next((r for r in self.runs if r.state == state), None)

    def ask(self) -> None:
        """The next queued run's task runs (in claim order), as ``Runner._slot`` does."""
        run = self.first("unasked")
        if run is None:
            return
        slots = self.slots
        if slots.closed:
            slots.leave()
            run.state = "done"
            return
        waiter = slots.ask()
        if waiter is None:
            self.given(run)
            self.go_on(run)
        elif run.stopped:
            slots.stop(waiter)
            run.state = "done"
        else:
            run.state, run.waiter = "sleeping", waiter

    def given(self, run: Run) -> None:
        run.held += 1
        self.starts.append(run.number)

    def go_on(self, run: Run) -> None:
        """A run given a slot goes on: its handler is called, unless it was stopped (or
        the slots closed) meanwhile."""
        if self.slots.closed or run.stopped:
            self.slots.give_back()
            run.state = "done"
        else:
            run.state = "holding"

    def turn(self) -> None:
        """Sleeping runs whose futures are done go on (in the runner, a turn later)."""
        for run in self.runs:
            if run.state == "sleeping" and run.waiter is not None and run.waiter.done():
                granted, run.waiter = run.waiter.result(), None
                if granted:
                    if not run.held:  # granted by a give_back in this same turn
                        self.given(run)
                    self.go_on(run)
                else:
                    run.state = "done"

    def finish(self, pick: int) -> None:
        holding = [r for r in self.runs if r.state == "holding"]
        if holding:
            holding[pick % len(holding)].state = "done"
            self.slots.give_back()

    def stop(self, pick: int) -> None:
        queued = [r for r in self.runs if r.state in ("unasked", "sleeping") and not r.stopped]
        if queued:
            run = queued[pick % len(queued)]
            run.stopped = True
            if run.waiter is not None:  # its stop callback
                self.slots.stop(run.waiter)

    def close(self) -> None:
        if not self.slots.closed:
            self.slots.close()

    def note_grants(self) -> None:
        """Sleeping runs handed a slot since the last look (give_back sets one future)."""
        for run in self.runs:
            waiter = run.waiter
            granted = waiter is not None and waiter.done() and waiter.result()
            if run.state == "sleeping" and granted and run.held == 0:
                self.given(run)

    def check(self) -> None:
        slots = self.slots
        in_slots = [r for r in self.runs if r.held and r.state in ("holding", "sleeping")]
        assert len(in_slots) <= slots.busy <= SIZE
        assert all(r.held <= 1 for r in self.runs)  # each run gets a slot once at most
        assert not any(r.held for r in self.runs if r.stopped and r.state == "holding")
        waiting = [
            r for r in self.runs if r.state == "sleeping" and not (r.waiter and r.waiter.done())
        ]
        if not slots.closed and slots.busy < SIZE:
            assert not waiting  # nobody waits while a slot is free
        assert self.starts == sorted(self.starts)  # queued runs get slots in claim order

    def settle(self) -> None:
        """Let every task run and every handler return, until nothing is left."""
        for _ in range(10 * len(self.runs) + 10):
            self.ask()
            self.note_grants()
            self.turn()
            self.finish(0)
            self.note_grants()
            self.check()
        assert all(r.state == "done" for r in self.runs)
        assert self.slots.busy == 0
        assert self.slots.waiting == 0


OPS = st.lists(
    st.tuples(
        st.sampled_from(["claim", "ask", "turn", "finish", "stop", "close"]), st.integers(0, 9)
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(OPS)
def test_slots_hold_at_most_their_size_and_go_to_queued_runs_in_turn(
    ops: list[tuple[str, int]],
) -> None:
    async def drive() -> None:
        model = Model()
        for op, number in ops:
            if op == "claim":
                model.claim(number)
            elif op in ("finish", "stop"):
                getattr(model, op)(number)
            else:
                getattr(model, op)()
            model.note_grants()
            model.check()
        closed = model.slots.closed
        model.settle()
        if not closed:  # every run not stopped got its slot
            assert all(r.held == 1 for r in model.runs if not r.stopped)

    asyncio.run(drive())


def test_a_claim_s_queued_runs_wait_on_nothing_when_slots_free_up_before_they_ask() -> None:
    """As in a drain of quick handlers: the runs holding slots return before the queued
    runs' tasks first run, and each of those finds its slot held for it."""

    async def drive() -> None:
        model = Model()
        model.claim(10)
        for _ in range(10):
            model.finish(0)
            model.ask()
            assert model.first("sleeping") is None
            model.check()
        model.settle()
        assert model.starts == list(range(SIZE, 10))

    asyncio.run(drive())
