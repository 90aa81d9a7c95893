"""The handlers of ``simpleworkflow demo``, also runnable on their own.

They pretend to do real work with short sleeps, so that the demo shows a worker
interleaving runs, a run that fails twice and then succeeds, and one that fails for good,
in a few seconds. Run them outside the demo with::

    simpleworkflow worker simpleworkflow.demo_app:app

The retry policy is seconds-scale for the same reason; the library default is minutes.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from simpleworkflow import App, Context, PermanentError, RetryPolicy

THUMBNAIL = "demo.content.thumbnail.v1"
EMAIL = "demo.notify.email.v1"
CHARGE = "demo.billing.charge.v1"
WEBHOOK = "demo.notify.webhook.v1"

#: Half a second, then one second: the retried run finishes within two seconds.
FAST_RETRY = RetryPolicy(backoff="exponential", base=0.5, factor=2.0, jitter=0.1)
#: The flaky handler gives up its failures after this many attempts.
FAILING_ATTEMPTS = 2

app = App(retry=FAST_RETRY)


@app.workflow(THUMBNAIL)
def make_thumbnail(payload: dict[str, Any]) -> dict[str, Any]:
    """Makes a thumbnail (a sync def: it runs in the worker's thread pool)."""
    width, height = payload.get("width", 300), payload.get("height", 300)
    time.sleep(random.uniform(0.05, 0.25))
    return {"thumbnail": f"thumbs/{payload['content_id']}_{width}x{height}.jpg"}


@app.workflow(EMAIL)
async def send_email(payload: dict[str, Any]) -> dict[str, Any]:
    """Sends an e-mail (an async def: it runs on the worker's event loop)."""
    await asyncio.sleep(random.uniform(0.05, 0.2))
    return {"to": payload["to"], "message_id": f"<{random.getrandbits(48):012x}@demo>"}


@app.workflow(CHARGE)
def charge_card(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Charges a card; the gateway times out twice, the third attempt succeeds."""
    if ctx.attempt <= FAILING_ATTEMPTS:
        raise ConnectionError(f"payment gateway timed out (attempt {ctx.attempt})")
    return {"charge_id": f"ch_{payload['order_id']}", "amount": payload["amount"]}


@app.workflow(WEBHOOK)
async def call_webhook(payload: dict[str, Any]) -> None:
    """Calls a webhook that refuses the request: a PermanentError, never retried."""
    await asyncio.sleep(0.05)
    raise PermanentError(f"{payload['url']} answered 410 Gone; retrying cannot help")
