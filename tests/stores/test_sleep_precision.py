"""A sleeping run is never claimed before its sleep ends, at any precision of the store.

SQLite keeps times to the millisecond, rounding to the nearest; a wake-up time finer than
that could be stored up to half a millisecond early, and the run claimed then, only to find
its sleep not over and suspend once more: one more claim and one more ``resumed`` event.
"""

from __future__ import annotations

from typing import Any

from conftest import Store
from test_durable import lifecycle, wait_terminal, working

from simpleworkflow import App, Context, RunStatus

SLEEPS = 15


def test_each_short_sleep_resumes_the_run_once(store: Store) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow("test.precision.naps.v1")
    async def naps(payload: Any, ctx: Context) -> int:
        for _ in range(SLEEPS):
            await ctx.sleep("nap", 0.03)
        return SLEEPS

    with store.client() as client, working(app):
        run_id = client.start("test.precision.naps.v1").id
        run = wait_terminal(client, run_id, timeout=60)
        events = lifecycle(client, run_id)
        naps = [e.data["until"] for e in client.events(run_id) if e.event_type == "sleeping"]
    assert run.status is RunStatus.SUCCEEDED, events
    # A sleep whose end has passed by the time its wake-up time is journaled (a loaded
    # machine) goes on without suspending; every one that suspended did so once, and its
    # run was claimed once, after it ended. Claimed early, it would suspend again (a second
    # sleeping event with the same end) and resume once more.
    assert naps, events
    assert len(set(naps)) == len(naps), events
    assert events.count("resumed") == len(naps), events
