"""The handlers of tests/processes/test_metrics.py, run by ``simpleworkflow worker
metrics_app:app``.

Each fails or blocks in a way the test can count on: a run of FLAKY fails its first
attempt, DOOMED fails for good, the workflow STEPS retries one step once, sleeps and
waits for a signal, and BLOCKING holds its lease until a file the test names appears.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from simpleworkflow import App, Context, errors
from simpleworkflow.retry import RetryPolicy

QUICK = RetryPolicy(backoff="fixed", base=0.1, jitter=0)
OK = "metrics.ok.v1"
FLAKY = "metrics.flaky.v1"
DOOMED = "metrics.doomed.v1"
STEPS = "metrics.steps.v1"
BLOCKING = "metrics.blocking.v1"
UNCLAIMED = "metrics.unclaimed.v1"  # no handler: its runs wait

app = App(retry=QUICK)


@app.workflow(OK)
def ok(payload: Any) -> str:
    return "ok"


@app.workflow(FLAKY)
def flaky(payload: Any, ctx: Context) -> str:
    if ctx.attempt == 1:
        raise RuntimeError("first attempts fail")
    return "ok"


@app.workflow(DOOMED)
def doomed(payload: Any) -> None:
    raise errors.PermanentError("this one fails for good")


def fetch(marker: str) -> str:
    """Fails the first time (it leaves ``marker`` behind), then works."""
    path = Path(marker)
    if not path.exists():
        path.touch()
        raise ConnectionError("the first fetch fails")
    return "fetched"


def store(value: str) -> str:
    return value.upper()


@app.workflow(STEPS)
async def steps(payload: Any, ctx: Context) -> Any:
    value = await ctx.step("fetch", fetch, payload["marker"], retry=QUICK)
    stored = await ctx.step("store", store, value)
    await ctx.sleep("nap", "100ms")
    signal = await ctx.wait_for_event("approval", event="approved")
    return {"stored": stored, "signal": signal}


@app.workflow(BLOCKING)
def blocking(payload: Any) -> str:
    release = Path(payload["release"])
    while not release.exists():
        time.sleep(0.02)
    return "released"
