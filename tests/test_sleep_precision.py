"""A sleeping run is never claimed before its sleep ends, at any precision of the store.

SQLite keeps times to the millisecond, rounding to the nearest; a wake-up time finer than
that could be stored up to half a millisecond early, and the run claimed then, only to find
its sleep not over and suspend once more: one more claim and one more ``resumed`` event.
"""

from __future__ import annotations

from typing import Any

from conftest import Store
from test_durable import lifecycle, wait_terminal, working

from simpleworkflow import App, RunStatus
from simpleworkflow.context import Context

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
    assert run.status is RunStatus.SUCCEEDED, events
    assert events.count("sleeping") == SLEEPS, events
    assert events.count("resumed") == SLEEPS, events
