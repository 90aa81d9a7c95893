"""The handlers of ``python -m benchmarks.dashboard``: a small shop, run by real workers.

Every run's payload says how long it works and how many of its attempts fail (for a
step, how often a try fails), so the producer alone shapes the picture: a steady
trickle, a burst that backs a queue up, an outage of the mail provider. Workers import
this module as ``simpleworkflow worker benchmarks.dashboard_app:app``.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from simpleworkflow import App, Context, errors
from simpleworkflow.retry import RetryPolicy

MAIL = "mail.send.v1"
ORDER = "shop.order.v1"
REPORT = "report.build.v1"
TYPES = (MAIL, ORDER, REPORT)

app = App(retry=RetryPolicy(backoff="exponential", base=0.5, factor=2.0, jitter=0.2))
_RETRY = RetryPolicy(backoff="fixed", base=0.5, jitter=0.2, max_attempts=3)


def _work(payload: dict[str, Any], attempt: int) -> None:
    """Take ``seconds``; fail the first ``failures`` attempts, or every one if ``doomed``."""
    time.sleep(payload["seconds"])
    if payload.get("doomed"):
        raise errors.PermanentError("the address does not exist")
    if attempt <= payload.get("failures", 0):
        raise ConnectionError("the provider did not answer")


@app.workflow(MAIL)
def send_mail(payload: dict[str, Any], ctx: Context) -> str:
    _work(payload, ctx.attempt)
    return "sent"


@app.workflow(REPORT)
def build_report(payload: dict[str, Any], ctx: Context) -> str:
    _work(payload, ctx.attempt)
    return "built"


async def _pause(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def _charge(seconds: float, timeouts: float) -> str:
    """The payment provider times out on a share ``timeouts`` of the tries: a step retry."""
    await asyncio.sleep(seconds)
    if random.random() < timeouts:
        raise ConnectionError("the payment provider timed out")
    return "charged"


@app.workflow(ORDER)
async def place_order(payload: dict[str, Any], ctx: Context) -> str:
    await ctx.step("reserve", _pause, payload["seconds"])
    await ctx.step("charge", _charge, payload["seconds"] * 2, payload["timeouts"], retry=_RETRY)
    await ctx.sleep("cool-off", "1s")
    await ctx.step("ship", _pause, payload["seconds"])
    return "shipped"
