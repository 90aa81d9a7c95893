"""The handlers of ``simpleworkflow demo``, also runnable on their own.

They pretend to do real work with short sleeps, so that the demo shows a worker
interleaving runs, a run that fails twice and then succeeds, one that fails for good, and
a durable workflow (the onboarding of ``examples/onboarding.py``, with seconds for days),
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
ONBOARD = "demo.accounts.onboard.v1"
VERIFIED = "user.verified"

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


#: The first attempt of each e-mail meets a busy provider: the step is retried.
_MAIL_RETRY = RetryPolicy(backoff="fixed", base=0.5, jitter=0.0, max_attempts=3)
_busy_once: set[tuple[str, str]] = set()


def _send_mail(to: str, template: str) -> dict[str, str]:
    if (to, template) not in _busy_once:
        _busy_once.add((to, template))
        raise ConnectionError(f"mail provider busy, {template!r} to {to} not sent")
    return {"message_id": f"<{random.getrandbits(48):012x}@demo>"}


@app.workflow(ONBOARD)
async def onboard(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Onboards a user: steps, a durable sleep, a retried e-mail, a wait for a signal."""
    user = await ctx.step("create-user", lambda: {"id": f"u_{random.getrandbits(32):08x}"})
    await ctx.sleep("welcome-delay", payload.get("welcome_delay", "10m"))
    await ctx.step("send-welcome", _send_mail, payload["email"], "welcome", retry=_MAIL_RETRY)
    verified = await ctx.wait_for_event(
        "email-verified",
        event=VERIFIED,
        match={"user_id": user["id"]},
        timeout=payload.get("verify_within", "3d"),
    )
    if verified is None:
        await ctx.step("nudge", _send_mail, payload["email"], "reminder", retry=_MAIL_RETRY)
    return {"user_id": user["id"], "verified": verified is not None}
