"""Durable sleeps (``ctx.sleep``, ``ctx.sleep_until``): the wake-up time is journaled as the
sleep begins, so every replay waits for the same moment; until then the run is suspended
and its slot given back."""

from __future__ import annotations

from datetime import datetime, timedelta

from simpleworkflow import errors
from simpleworkflow.durable import races
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.durable.suspension import whole_ms


async def sleep(state: AttemptState, name: str, when: datetime | None, seconds: float) -> None:
    """Sleep ``name`` until ``when``, or for ``seconds`` from now when ``when`` is ``None``."""
    durable = state.durable
    unique = durable.name(name)
    entry = await durable.begin(unique, JournalKind.SLEEP, state.is_cancelled())
    if entry is None:
        until = whole_ms(when or durable.db_now() + timedelta(seconds=seconds))
        await durable.journal(unique, JournalKind.SLEEP, {"until": until.isoformat()}, events=[])
    else:
        until = datetime.fromisoformat(entry.output["until"])
    if durable.db_now() >= until:
        races.note(until)  # it ended then, however late this replay comes
        return
    raise durable.waits.suspend(
        errors.Suspend(
            unique,
            "sleeping",
            data={"until": until.isoformat()},
            waiting_for={"kind": "sleep", "step": unique, "until": until.isoformat()},
            run_at=until,
        )
    )
