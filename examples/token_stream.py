"""A model's answer, streamed to the reader token by token while the workflow runs.

The workflow's step calls a (fake) language model that yields tokens one at a time and
appends each to the run's stream ``tokens``; the step's result is the whole answer,
journaled as any step's. A reader follows the stream live with ``client.read_stream``
and prints the tokens as they come, here in the same process; a web page would read
``GET /api/v1/runs/{id}/streams/tokens`` as Server-Sent Events instead.

Run it end to end (a worker in this process, on a throw-away SQLite file)::

    python examples/token_stream.py                         # or pass a database URL:
    python examples/token_stream.py postgresql://localhost/app
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from simpleworkflow import App, AsyncClient, Context, Run

ANSWER = "chat.answer.v1"

app = App()


async def fake_model(question: str) -> AsyncIterator[str]:
    """Stands in for a language model's streaming API: a canned answer, a token at a time."""
    answer = f"You asked: {question} The answer is forty-two, give or take."
    for word in answer.split(" "):
        await asyncio.sleep(0.01)  # the model thinking
        yield word + " "


# [start answer]
@app.workflow(ANSWER)
async def answer(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    await ctx.stream_append("status", "thinking")  # from the body: a durable call

    async def generate() -> str:
        tokens = []
        async for token in fake_model(payload["question"]):
            ctx.stream_append("tokens", token)  # from a step: buffered, written in batches
            tokens.append(token)
        return "".join(tokens).strip()

    text = await ctx.step("generate", generate)
    await ctx.stream_close("tokens")  # readers of "tokens" stop here
    await ctx.stream_append("status", "done")
    return {"answer": text}


# [end answer]


async def ask(
    database_url: str, schema: str | None = None, *, question: str = "What is six times seven?"
) -> tuple[Run, list[str]]:
    """Ask with a worker in this process, printing the tokens as they come; return the
    finished run and the tokens the reader got."""
    worker = app.poller(
        database_url=database_url, schema=schema, worker_id="stream-example", poll_interval=0.2
    )
    async with AsyncClient(database_url, schema=schema) as client:
        await client.migrate()  # a no-op once the schema is there
        working = asyncio.create_task(worker.run_async())
        try:
            run = await client.start(ANSWER, {"question": question})
            got = []
            async for item in client.read_stream(run.id, "tokens"):  # live, until closed
                print(item.value, end="", flush=True)
                got.append(item.value)
            print()
            return await client.wait(run.id, timeout=60), got
        finally:
            worker.stop()
            await working


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{Path(tmp) / 'answers.db'}"
        run, tokens = asyncio.run(ask(url))
    print(f"{run.id}  {run.status.value}  {len(tokens)} tokens streamed")


if __name__ == "__main__":
    main()
