"""Polling a partner's feed every hour, for as long as the partnership lasts.

Each poll fetches what is new since a cursor and stores it; between polls the run sleeps
durably and holds no worker. A run that polled forever would grow its journal by a few
rows an hour, and every resume replays them all: after a year, some 26,000 rows. So the
workflow polls ``polls_per_run`` times, then continues as new: the run ends, and a fresh
run of the same type carries on with an empty journal and the cursor handed over in its
payload. ``client.wait`` on the first run follows the chain to its end.

Run it end to end (a worker in this process, on a throw-away SQLite file; the hour is
shortened to a fraction of a second)::

    python examples/partner_poller.py                         # or pass a database URL:
    python examples/partner_poller.py postgresql://localhost/app
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from simpleworkflow import App, AsyncClient, Context, Run

POLL = "partners.feed.poll.v1"

app = App()


class FakePartner:
    """Stands in for a partner's API: numbered items, two new ones per poll, until the
    partner closes the feed after ``last`` items."""

    def __init__(self, last: int = 10) -> None:
        self.last = last

    def fetch(self, partner: str, cursor: int) -> dict[str, Any]:
        items = [f"{partner}:{n}" for n in range(cursor + 1, min(cursor + 2, self.last) + 1)]
        cursor += len(items)
        return {"items": items, "cursor": cursor, "closed": cursor >= self.last}


partner_api = FakePartner()
inbox: list[str] = []  # where a real service would insert rows


def store_items(items: list[str]) -> int:
    inbox.extend(items)
    return len(items)


# [start poll]
@app.workflow(POLL)
async def poll_partner(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    cursor = payload["cursor"]
    for _ in range(payload.get("polls_per_run", 24)):
        # Numbered by the engine (fetch, fetch#2 ...): the same names every replay.
        page = await ctx.step("fetch", partner_api.fetch, payload["partner"], cursor)
        await ctx.step("store", store_items, page["items"])
        cursor = page["cursor"]
        if page["closed"]:
            return {"partner": payload["partner"], "cursor": cursor}
        await ctx.sleep("next-poll", payload.get("every", "1h"))
    # A day of polls is journaled: end this run, carry on in a fresh one from the cursor.
    # (The call does not return: this run ends here.)
    return await ctx.continue_as_new({**payload, "cursor": cursor})


# [end poll]


async def run_poller(
    database_url: str, schema: str | None = None, *, partner: str = "acme"
) -> list[Run]:
    """Poll ``partner`` with a worker in this process until its feed closes; return the
    runs of the chain, first to last."""
    worker = app.poller(
        database_url=database_url, schema=schema, worker_id="poller-example", poll_interval=0.2
    )
    async with AsyncClient(database_url, schema=schema) as client:
        await client.migrate()  # a no-op once the schema is there
        working = asyncio.create_task(worker.run_async())
        try:
            payload = {"partner": partner, "cursor": 0, "polls_per_run": 2, "every": 0.1}
            first = await client.start(POLL, payload, idempotency_key=f"poll:{partner}")
            await client.wait(first.id, timeout=60)  # follows the chain to its last run
            chain = [await client.get(first.id)]
            while chain[-1].continued_as is not None:
                chain.append(await client.get(chain[-1].continued_as))
        finally:
            worker.stop()
            await working
        return chain


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{Path(tmp) / 'poller.db'}"
        chain = asyncio.run(run_poller(url))
    for run in chain:
        print(f"{run.id}  {run.status.value}  cursor {run.payload['cursor']}  ->  {run.result}")
    print(f"{len(chain)} runs, {len(inbox)} items stored")


if __name__ == "__main__":
    main()
