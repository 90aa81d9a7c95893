"""Onboarding a new user: a workflow that takes days, written as one function.

Create the account, wait a little, send a welcome e-mail, then wait for the user to click
the verification link; if they have not within the time allowed, nudge them once. A
worker may restart, be redeployed or crash at any point: the run picks up where it was,
because every step's result is journaled and the waits are durable.

Run it end to end (a worker in this process, on a throw-away SQLite file)::

    python examples/onboarding.py                         # or pass a database URL:
    python examples/onboarding.py postgresql://localhost/app
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from simpleworkflow import App, AsyncClient, Context, Event, RetryPolicy, Run

ONBOARD = "accounts.user.onboard.v1"
VERIFIED = "user.verified"

app = App()


class FakeMailer:
    """Stands in for an e-mail provider that is busy on the first try for each message."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self._tried: set[tuple[str, str]] = set()

    def send(self, to: str, template: str) -> dict[str, str]:
        if (to, template) not in self._tried:
            self._tried.add((to, template))
            raise ConnectionError(f"mail provider busy, {template!r} to {to} not sent")
        self.sent.append((to, template))
        return {"message_id": f"<{uuid.uuid4().hex[:12]}@mail.example>"}


mailer = FakeMailer()


def create_user(email: str) -> dict[str, str]:
    # A real service inserts a row here. The id is made inside the step, so it is made
    # once: every replay of the body gets the journaled id back.
    return {"id": f"u_{uuid.uuid4().hex[:8]}", "email": email}


# [start onboard]
# A busy mail provider is worth a few quick retries; this policy is the step's own, and
# the run is suspended (no worker slot held) between attempts.
MAIL_RETRY = RetryPolicy(backoff="exponential", base="1s", cap="1m", max_attempts=5)


@app.workflow(ONBOARD)
async def onboard(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    # The body runs from the top on every resume; only the steps' side effects are
    # skipped on replay. So everything with a side effect goes through ctx.step.
    user = await ctx.step("create-user", create_user, payload["email"])

    # Durable: the run goes back to the database and any worker resumes it later.
    # Callers may shorten the waits (the example does, to finish in seconds).
    await ctx.sleep("welcome-delay", payload.get("welcome_delay", "10m"))
    await ctx.step("send-welcome", mailer.send, user["email"], "welcome", retry=MAIL_RETRY)

    # The signal is stored whenever it is sent, so a click that comes before this line
    # runs is not lost. ``match`` keeps signals about another user from counting.
    verified = await ctx.wait_for_event(
        "email-verified",
        event=VERIFIED,
        match={"user_id": user["id"]},
        timeout=payload.get("verify_within", "3d"),
    )
    if verified is None:  # timed out
        await ctx.step("nudge", mailer.send, user["email"], "verify-reminder", retry=MAIL_RETRY)
    return {"user_id": user["id"], "verified": verified is not None, "nudged": verified is None}


# [end onboard]


async def run_onboarding(
    database_url: str, schema: str | None = None, *, email: str, verify: bool = True
) -> tuple[Run, list[Event]]:
    """Start one onboarding with a worker in this process; return the run and its trail."""
    worker = app.poller(
        database_url=database_url, schema=schema, worker_id="onboarding-example", poll_interval=0.2
    )
    async with AsyncClient(database_url, schema=schema) as client:
        await client.migrate()  # a no-op once the schema is there
        working = asyncio.create_task(worker.run_async())
        try:
            # [start produce]
            run = await client.start(
                ONBOARD,
                {"email": email, "welcome_delay": "1s", "verify_within": "2s"},
                idempotency_key=f"onboard:{email}",  # a double submit starts nothing new
            )
            if verify:
                # The user clicks the link in the welcome e-mail; the web app signals
                # the run. Here we learn the user id from what the run waits for.
                user_id = await _user_awaiting_verification(client, run.id)
                await client.signal(run.id, VERIFIED, {"user_id": user_id, "via": "link"})
            run = await client.wait(run.id, timeout=60)
            # [end produce]
        finally:
            worker.stop()
            await working
        return run, await client.events(run.id)


async def _user_awaiting_verification(client: AsyncClient, run_id: str) -> str:
    """Poll until the run waits for the verification signal; the id it matches on."""
    while True:
        waiting = (await client.get(run_id)).waiting_for
        if waiting and waiting.get("event") == VERIFIED:
            return str(waiting["match"]["user_id"])
        await asyncio.sleep(0.1)


def print_trail(run: Run, events: list[Event]) -> None:
    """The audit trail, one event a line, with the step or signal it concerns."""
    print(f"run {run.id} {run.status.value}: {run.result}")
    start = events[0].created_at
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        about = data.get("step") or data.get("event") or ""
        error = data.get("error", {}).get("message", "")
        after = (event.created_at - start).total_seconds()
        print(f"  {after:6.2f}s  {event.event_type:<16} {about:<16} {error}".rstrip())


def main(database_url: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        url = database_url or f"sqlite:///{Path(scratch) / 'onboarding.db'}"
        print_trail(*asyncio.run(run_onboarding(url, email="ada@example.com")))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
