"""A batch processor: a cursor over many items, as one durable loop whose journal stays small.

Each iteration fetches a page of items after the cursor and processes it, two steps
journaled under the iteration's path (``process-items/~12/fetch``). The loop's state (the
cursor and a count) is committed every 5 iterations, so a crash costs at most 5
iterations' replay; every 10 iterations the journal rows of all but the last 10 are
deleted, so a cursor over a million items leaves as many rows as one over a thousand.

Run it end to end (a worker in this process, on a throw-away SQLite file)::

    python examples/batch_processor.py                    # or pass a database URL:
    python examples/batch_processor.py postgresql://localhost/app
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from simpleworkflow import App, AsyncClient, Break, Context, Continue, JournalEntry, Run

PROCESS = "catalog.items.reindex.v1"

app = App()


class Catalog:
    """Stands in for a table of items read page by page, and a search index to fill."""

    def __init__(self, size: int) -> None:
        self.items = [f"item-{n:05}" for n in range(size)]
        self.indexed: list[str] = []

    def page(self, after: str | None, limit: int) -> dict[str, Any]:
        start = 0 if after is None else self.items.index(after) + 1
        items = self.items[start : start + limit]
        return {"items": items, "next": items[-1] if items else after}

    def index(self, items: list[str]) -> int:
        self.indexed.extend(items)
        return len(items)


catalog = Catalog(size=1_000)


# [start batch]
@app.workflow(PROCESS)
async def reindex(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    async def batch(state: dict[str, Any]) -> Continue[dict[str, Any]] | Break[int]:
        # The same step names every iteration: they are journaled by path,
        # process-items/~0/fetch, process-items/~1/fetch ...
        page = await ctx.step("fetch", catalog.page, state["cursor"], payload["page_size"])
        if not page["items"]:
            return Break(state["processed"])
        done = await ctx.step("process", catalog.index, page["items"])
        return Continue({"cursor": page["next"], "processed": state["processed"] + done})

    processed = await ctx.loop(
        "process-items",
        {"cursor": None, "processed": 0},
        batch,
        commit_every=5,  # a crash replays at most 5 iterations
        history_every=10,  # every 10 iterations, trim the journal ...
        history_keep=10,  # ... to the last 10 iterations
    )
    return {"processed": processed}


# [end batch]


async def run_batch(
    database_url: str, schema: str | None = None, *, page_size: int = 25
) -> tuple[Run, list[JournalEntry]]:
    """Process the catalog with a worker in this process; return the run and its journal."""
    worker = app.poller(
        database_url=database_url, schema=schema, worker_id="batch-example", poll_interval=0.2
    )
    async with AsyncClient(database_url, schema=schema) as client:
        await client.migrate()  # a no-op once the schema is there
        working = asyncio.create_task(worker.run_async())
        try:
            run = await client.start(PROCESS, {"page_size": page_size})
            run = await client.wait(run.id, timeout=120)
        finally:
            worker.stop()
            await working
        return run, await client.steps(run.id)


def main(database_url: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        url = database_url or f"sqlite:///{Path(scratch) / 'batch.db'}"
        run, journal = asyncio.run(run_batch(url))
        print(f"run {run.id} {run.status.value}: {run.result}")
        print(f"{len(journal)} journal rows left, from {journal[0].step_name} on")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
