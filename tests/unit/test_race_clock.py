"""The race decision on its own: branches as plain coroutines that note times and say
when they read the store, as durable calls do. No store is involved: this is the pure
rule of :mod:`simpleworkflow.races`; tests/test_parallel_waits.py runs it on real ones."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from simpleworkflow import errors
from simpleworkflow.durable import races

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def now() -> datetime:
    return at(1000)


async def met(seconds: float, value: str, reads: int = 0) -> str:
    """A branch that reads the store for ``reads`` loop turns, then met something that
    happened at ``seconds``."""
    with races.reading():
        for _ in range(reads):
            await asyncio.sleep(0)
        races.note(at(seconds))
    return value


async def decide(*branches: Any) -> tuple[int | None, Any]:
    """What ``ctx.race`` does, without the journal."""
    with races.reading():
        race = races.Race(branches, now)
        index = None
        try:
            with races.not_reading():
                index = await asyncio.wait_for(race.winner(), 10)
        finally:
            await race.close(index)
        if index is None:
            return None, None
        races.note(race.clocks[index].at)  # for a race this one is a branch of
        return index, race.tasks[index].result()


def test_a_branch_still_reading_wins_when_what_it_met_came_first() -> None:
    # The timer needs no read and finishes first; the signal, read after it, is older.
    assert asyncio.run(decide(met(30, "timer"), met(10, "signal", reads=20))) == (1, "signal")


def test_a_tie_goes_to_the_lowest_index() -> None:
    assert asyncio.run(decide(met(10, "a", reads=5), met(10, "b"))) == (0, "a")


def test_a_branch_running_code_of_its_own_is_not_waited_for() -> None:
    forever = asyncio.Event()

    async def live() -> str:
        with races.reading(), races.not_reading():  # a step's function, say
            await forever.wait()
        return "never"

    async def own_code() -> str:
        await forever.wait()  # no durable call: nothing to wait for
        return "never"

    assert asyncio.run(decide(live(), own_code(), met(50, "signal", reads=3))) == (2, "signal")


def test_a_branch_that_notes_nothing_finished_when_it_returned() -> None:
    async def plain() -> str:
        return "plain"

    # The plain branch finished "now" (t=1000): an older signal read after it wins.
    assert asyncio.run(decide(plain(), met(999, "signal", reads=5))) == (1, "signal")


def test_every_branch_suspended_is_no_winner() -> None:
    async def waits() -> str:
        raise errors.Suspend("w", "waiting")

    assert asyncio.run(decide(waits(), waits())) == (None, None)


def test_a_nested_race_reading_holds_the_outer_one() -> None:
    async def inner() -> Any:
        _, value = await decide(met(40, "inner-timer"), met(5, "inner-signal", reads=30))
        return value

    # The outer race's first branch finishes at once (t=20); the inner race's branch is
    # still reading, and what it finds (t=5) is older.
    assert asyncio.run(decide(met(20, "outer"), inner())) == (1, "inner-signal")
