"""The workflows the dashboard's browser tests watch and steer, run by a real worker:
``simpleworkflow worker dashboard_app:app`` from the tests folder."""

from __future__ import annotations

import time
from typing import Any

from simpleworkflow import App, Context, errors
from simpleworkflow.retry import RetryPolicy

app = App(retry=RetryPolicy(backoff="fixed", base=0.2, jitter=0))


@app.workflow("dash.order.v1")
async def order(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Two steps around a durable sleep: a timeline with a gap in it."""
    reserved = await ctx.step("reserve", lambda: _slow({"items": payload.get("items", 1)}))
    await ctx.sleep("cool-off", 1.0)
    charged = await ctx.step("charge", lambda: _slow({"charged": reserved["items"] * 10}))
    return {"customer": payload.get("customer"), **charged}


@app.workflow("dash.flaky.v1")
def flaky(payload: dict[str, Any], ctx: Context) -> str:
    """Fails its first attempt for good (the run has one attempt); an operator's retry
    gives it a second, which succeeds."""
    if ctx.attempt == 1:
        raise errors.PermanentError("the first attempt always fails")
    return "fine on a retry"


@app.workflow("dash.approval.v1")
async def approval(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Waits for a person's signal."""
    answer = await ctx.wait_for_event("approval", event="approved", timeout="1h")
    return {"approved": answer}


@app.workflow("dash.slow.v1")
async def slow(payload: dict[str, Any], ctx: Context) -> str:
    """Sleeps an hour: a run to cancel."""
    await ctx.sleep("nap", 3600)
    return "woke"


def _slow(value: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.2)  # long enough to draw a bar
    return value


@app.workflow("dash.chat.v1")
async def chat(payload: dict[str, Any], ctx: Context) -> str:
    """Streams "hello", then one word per signal ``word`` (its payload's ``word``) until
    one says ``close``: the test paces the writes, so each item can be seen arrive. The
    stream closed, it waits for ``done`` (a running run whose stream has ended)."""
    await ctx.stream_append("tokens", "hello")
    n = 0
    while True:
        said = await ctx.wait_for_event(f"word-{n}", event="word", timeout="1h")
        if said.get("close"):
            break
        await ctx.stream_append("tokens", said["word"])
        n += 1
    await ctx.stream_close("tokens")
    await ctx.wait_for_event("done", event="done", timeout="1h")
    return "done"
