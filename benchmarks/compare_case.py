"""One measurement of ``python -m benchmarks.compare``, run by the interpreter of the side
being measured: ``python benchmarks/compare_case.py CASE URL SCHEMA RUNS``.

The same file measures every version, so it touches nothing but the public API that every
version since the first benchmarks has had (``App``, ``Client.start``, ``start_many``,
``IntentPoller``, ``simpleworkflow serve``) and plain SQL on the seed's columns. It runs as
a script, not as a module of the checkout: the ``simpleworkflow`` it imports is the one
installed for that side. It prints one JSON line: ``{"case": ..., "rate": runs per second}``.
"""

from __future__ import annotations

import asyncio
import functools
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import psycopg

from simpleworkflow import App, Client, Context, IntentPoller

NOOP = "compare.noop.v1"
#: A workflow of ``STEP_COUNT`` durable steps that do nothing (the ``steps`` case).
STEPS = "compare.steps.v1"
STEP_COUNT = 10
#: The ``steps`` case runs this share of ``RUNS`` workflows (each is ten steps' work).
STEPS_SHARE = 5
#: Runs per ``start_many`` call when a drain's backlog is loaded (not timed).
LOAD_BATCH = 1000
#: Runs per ``start_many`` call in the batched start case.
START_BATCH = 100


def _migrate(client: Client) -> None:
    # Versions before the admin facade had ``Client.migrate``.
    migrate = getattr(client, "migrate", None) or client.admin.migrate
    migrate()


def start_one(url: str, schema: str, runs: int) -> float:
    """Runs started one call at a time, per second."""
    client = Client(url, schema=schema)
    try:
        _migrate(client)
        began = time.perf_counter()
        for number in range(runs):
            client.start(NOOP, {"n": number})
        return runs / (time.perf_counter() - began)
    finally:
        client.close()


def start_many(url: str, schema: str, runs: int) -> float:
    """Runs started in calls of ``START_BATCH``, per second."""
    client = Client(url, schema=schema)
    try:
        _migrate(client)
        batches = [
            [(NOOP, {"n": n}) for n in range(start, min(start + START_BATCH, runs))]
            for start in range(0, runs, START_BATCH)
        ]
        began = time.perf_counter()
        for batch in batches:
            client.start_many(batch)
        return runs / (time.perf_counter() - began)
    finally:
        client.close()


def drain(
    url: str,
    schema: str,
    runs: int,
    *,
    sync: bool = False,
    concurrency: int | None = None,
    steps: bool = False,
) -> float:
    """Runs of a handler that does nothing, finished per second by one worker at its
    default settings; timed by the database clock from the first run finished to the
    last, so the worker's start-up is left out. ``sync``: a plain ``def`` handler;
    ``concurrency``: that many slots; ``steps``: workflows of ten no-op durable steps,
    a fifth as many."""
    kind = STEPS if steps else NOOP
    runs = max(10, runs // STEPS_SHARE) if steps else runs
    client = Client(url, schema=schema)
    try:
        _migrate(client)
        for start in range(0, runs, LOAD_BATCH):
            client.start_many(
                [(kind, {"n": n}) for n in range(start, min(start + LOAD_BATCH, runs))]
            )
    finally:
        client.close()
    # As autovacuum would on a real backlog: with statistics, Postgres plans each claim
    # anew (a custom plan per call), which a drain of never-analyzed tables would not show.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"analyze {schema}.workflow_run".encode())
    app = App(url, schema=schema)

    if sync:

        @app.workflow(NOOP)
        def noop_sync(payload: Any) -> None:
            return None

    else:

        @app.workflow(NOOP)
        async def noop(payload: Any) -> None:
            return None

    @app.workflow(STEPS)
    async def ten_steps(payload: Any, ctx: Context) -> None:
        for number in range(STEP_COUNT):
            await ctx.step(f"s{number}", _nothing)

    options: dict[str, Any] = {} if concurrency is None else {"concurrency": concurrency}
    asyncio.run(_work_until_done(IntentPoller(app, **options), url, schema, runs))
    with psycopg.connect(url) as conn:
        row = conn.execute(
            f"select count(*), extract(epoch from max(updated_at) - min(updated_at))"
            f" from {schema}.workflow_run where status = 'succeeded'".encode()
        ).fetchone()
    assert row is not None
    finished, span = int(row[0]), float(row[1] or 0.0)
    if finished != runs or span <= 0:
        raise SystemExit(f"drain: {finished} of {runs} runs succeeded in {span} s")
    return (finished - 1) / span


async def _nothing() -> None:
    return None


async def _work_until_done(poller: IntentPoller, url: str, schema: str, runs: int) -> None:
    worker = asyncio.create_task(poller.run_async())
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await wait_succeeded(conn, schema, runs, worker)
    poller.stop()
    await worker


async def wait_succeeded(
    conn: psycopg.AsyncConnection[Any], schema: str, runs: int, worker: asyncio.Task[Any]
) -> None:
    """Return once ``runs`` runs of ``schema`` have succeeded, or ``worker`` has ended."""
    count = f"select count(*) from {schema}.workflow_run where status = 'succeeded'".encode()
    while not worker.done():
        row = await (await conn.execute(count)).fetchone()
        if row is not None and row[0] >= runs:
            return
        await asyncio.sleep(0.02)


def api_start(url: str, schema: str, runs: int) -> float:
    """Runs started by ``POST /api/v1/runs`` one at a time, per second: to this side's
    ``simpleworkflow serve`` (one process, access log off), over one keep-alive
    connection of ``http.client``."""
    client = Client(url, schema=schema)
    try:
        _migrate(client)
    finally:
        client.close()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SIMPLEWORKFLOW_API_")},
        "SIMPLEWORKFLOW_DATABASE_URL": url,
        "SIMPLEWORKFLOW_SCHEMA": schema,
    }
    command = [sys.executable, "-m", "simpleworkflow", "serve", "--port", "0", "--no-access-log"]
    # Not from the checkout's folder: ``-m`` would import the checkout's simpleworkflow
    # first, whichever side this is.
    elsewhere = tempfile.mkdtemp(prefix="simpleworkflow-compare-serve-")
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True, cwd=elsewhere)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[4].split(":")[2].split("/")[0])
        connection = http.client.HTTPConnection("127.0.0.1", port)
        headers = {"content-type": "application/json"}

        def post(number: int) -> None:
            connection.request("POST", "/api/v1/runs", json.dumps(_body(number)), headers)
            answer = connection.getresponse()
            answer.read()
            if answer.status != 201:
                raise RuntimeError(f"POST /api/v1/runs answered {answer.status}")

        _wait_until_served(post)
        began = time.perf_counter()
        for number in range(runs):
            post(number)
        return runs / (time.perf_counter() - began)
    finally:
        server.terminate()
        server.wait(15)
        os.rmdir(elsewhere)


def _body(number: int) -> dict[str, Any]:
    return {"type": NOOP, "payload": {"n": number}}


def _wait_until_served(post: Callable[[int], None]) -> None:
    """Post until the server answers (it listens before its app has started)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            post(-1)
            return
        except (OSError, http.client.HTTPException):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


CASES: dict[str, Callable[[str, str, int], float]] = {
    "start": start_one,
    "api_start": api_start,
    "start_many": start_many,
    "drain": drain,
    "drain_sync": functools.partial(drain, sync=True),
    "drain_tuned": functools.partial(drain, concurrency=100),
    "steps": functools.partial(drain, steps=True),
}


def main(argv: list[str]) -> None:
    case, url, schema, runs = argv[1], argv[2], argv[3], int(argv[4])
    rate = CASES[case](url, schema, runs)
    print(json.dumps({"case": case, "rate": rate}))


if __name__ == "__main__":
    main(sys.argv)
