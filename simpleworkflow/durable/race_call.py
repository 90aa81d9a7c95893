"""The durable call ``ctx.race``: run branches at once, journal the one whose outcome
happened first (who that is, is :mod:`~simpleworkflow.durable.races`'s to say)."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

from simpleworkflow import errors, payloads
from simpleworkflow.codec import reading
from simpleworkflow.durable import races
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.journal import Durable
from simpleworkflow.durable.kinds import JournalKind


async def run(
    state: AttemptState, unique: str, branches: tuple[Awaitable[Any], ...]
) -> tuple[int, Any]:
    """Race ``branches`` as call ``unique``: its journaled winner, or the first to finish."""
    durable = state.durable
    with durable.calling():
        entry = await durable.begin(unique, JournalKind.RACE, state.is_cancelled())
        if entry is not None:
            for branch in branches:
                state.calls.discard(branch)
            (await durable.load()).meet(entry.output["steps"])
            return int(entry.output["winner"]), entry.output["value"]
        recorded = durable.record_names()
        race = races.Race(branches, durable.db_now)
        index = None
        try:
            with races.not_reading():  # the branches read for themselves
                index = await race.winner()
        finally:
            await race.close(index)
            durable.stop_recording(recorded)
        if index is None:
            raise race.suspensions()[0]  # every wait is recorded (Durable.waits)
        durable.waits.withdraw(race.suspensions())  # the losers' waits are over
        races.note(race.clocks[index].at)  # for a race this one is a branch of
        value = race.tasks[index].result()
        output = {"winner": index, "value": value, "steps": sorted(recorded)}
        text, as_journaled = encoded(durable, unique, output)
        await durable.journal(unique, JournalKind.RACE, output, events=[], text=text)
        return index, json.loads(text)["value"] if as_journaled else value


def encoded(durable: Durable, name: str, output: dict[str, Any]) -> tuple[str, bool]:
    """The race's entry as JSON, and whether to hand its value back as a replay reads it
    (the journal's JSON, having no type to read it as): with a codec, and for a value a
    branch's ``type=`` made that strict JSON refuses (a ``Shipped`` of a ``date``)."""
    try:
        return durable.encode(name, output), durable.codec is not None
    except errors.InvalidPayload:
        if durable.codec is not None:
            raise
        return payloads.encode(output, what=f"output of step {name!r}", codec=reading(None)), True
