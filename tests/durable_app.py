"""Workflows for the durable-execution process tests, and the worker that runs them.

Started as ``python tests/durable_app.py --worker-id w1 --ledger FILE`` with
``SIMPLEWORKFLOW_DATABASE_URL`` and ``SIMPLEWORKFLOW_SCHEMA`` in the environment; it
claims every ``durable.%`` type. Step bodies append a line to the ledger (see
:class:`worker_app.Ledger`) each time they run, so the tests can count executions
across processes without trusting the engine's own records.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from worker_app import Ledger

from simpleworkflow import Break, Context, Continue, errors
from simpleworkflow.app import App
from simpleworkflow.retry import RetryPolicy
from simpleworkflow.worker import IntentPoller

# A crashed attempt is retried after 0.2 s, well within the tests' patience.
app = App(retry=RetryPolicy(backoff="fixed", base=0.2, jitter=0))
LEDGER = Ledger("/dev/null")
STEPS = 5
PARK_SECONDS = 60.0  # far longer than any test waits: a parked worker is killed first


def step_value(previous: int, k: int) -> int:
    """What step ``k`` returns given the previous step's value: order matters."""
    return previous * 3 + k


def expected_values(seed: int) -> list[int]:
    values, value = [], seed
    for k in range(1, STEPS + 1):
        value = step_value(value, k)
        values.append(value)
    return values


def _parks(payload: dict[str, Any], ctx: Context, where: str, k: int) -> bool:
    """Whether this worker should stop dead here until it is killed (see the kill test)."""
    return (
        payload.get("park_worker") == ctx.worker_id
        and payload.get("park_where") == where
        and payload.get("park_step") == k
    )


def _work(ctx: Context, payload: dict[str, Any], k: int, previous: int) -> int:
    LEDGER.write("step", ctx, step=f"s{k}")
    if _parks(payload, ctx, "in", k):
        LEDGER.write("parked", ctx, step=f"s{k}")
        time.sleep(PARK_SECONDS)
    return step_value(previous, k)


async def _work_async(ctx: Context, payload: dict[str, Any], k: int, previous: int) -> int:
    LEDGER.write("step", ctx, step=f"s{k}")
    if _parks(payload, ctx, "in", k):
        LEDGER.write("parked", ctx, step=f"s{k}")
        await asyncio.sleep(PARK_SECONDS)
    return step_value(previous, k)


@app.workflow("durable.steps.sync.v1")
def five_steps(payload: dict[str, Any], ctx: Context) -> list[int]:
    """Five chained steps. The payload may park one worker inside step k's body
    (``park_where="in"``) or right after step k was journaled (``"after"``)."""
    values, value = [], payload["seed"]
    for k in range(1, STEPS + 1):
        value = ctx.step(f"s{k}", _work, ctx, payload, k, value)
        values.append(value)
        if _parks(payload, ctx, "after", k):
            LEDGER.write("parked", ctx, step=f"s{k}")
            time.sleep(PARK_SECONDS)
    return values


@app.workflow("durable.steps.async.v1")
async def five_steps_async(payload: dict[str, Any], ctx: Context) -> list[int]:
    """The async twin of :func:`five_steps`, so both kinds of body are killed."""
    values, value = [], payload["seed"]
    for k in range(1, STEPS + 1):
        value = await ctx.step(f"s{k}", _work_async, ctx, payload, k, value)
        values.append(value)
        if _parks(payload, ctx, "after", k):
            LEDGER.write("parked", ctx, step=f"s{k}")
            await asyncio.sleep(PARK_SECONDS)
    return values


def _noted(ctx: Context, step: str, value: int) -> int:
    LEDGER.write("step", ctx, step=step)
    return value


@app.workflow("durable.nap.v1")
async def nap(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """A step, a durable sleep of ``payload["seconds"]``, another step."""
    before = await ctx.step("before", _noted, ctx, "before", 1)
    await ctx.sleep("nap", payload["seconds"])
    after = await ctx.step("after", _noted, ctx, "after", 2)
    return {"before": before, "after": after, "worker": ctx.worker_id}


async def _begun(ctx: Context, k: int, pause: float) -> int:
    LEDGER.write("step", ctx, step=f"m{k}", at=time.time())
    if pause:
        await asyncio.sleep(pause)
    return k


def _begun_in_thread(ctx: Context, k: int, pause: float) -> int:
    LEDGER.write("step", ctx, step=f"m{k}", at=time.time())
    if pause:
        time.sleep(pause)
    return k


@app.workflow("durable.many.v1")
async def many_steps(payload: dict[str, Any], ctx: Context) -> int:
    """``payload["steps"]`` short steps in a row, each noting in the ledger, with the time,
    that it began; ``payload["pause"]`` seconds inside each (none by default). With
    ``payload["threads"]`` the steps are plain ``def`` functions, run in the step pool."""
    step = _begun_in_thread if payload.get("threads") else _begun
    for k in range(payload["steps"]):
        await ctx.step(f"m{k}", step, ctx, k, payload.get("pause", 0.0))
    return int(payload["steps"])


@app.workflow("durable.many.sync.v1")
def many_steps_sync(payload: dict[str, Any], ctx: Context) -> int:
    """:func:`many_steps` as a ``def`` body: its steps run on the handler's thread."""
    for k in range(payload["steps"]):
        ctx.step(f"m{k}", _begun_in_thread, ctx, k, payload.get("pause", 0.0))
    return int(payload["steps"])


@app.workflow("durable.gated.v1")
async def gated(payload: dict[str, Any], ctx: Context) -> None:
    """A step, then a wait outside any step until the file ``payload["gate"]`` exists,
    then another step."""
    await ctx.step("before", _noted, ctx, "before", 1)
    LEDGER.write("gate", ctx)
    while not os.path.exists(payload["gate"]):
        await asyncio.sleep(0.01)
    await ctx.step("after", _noted, ctx, "after", 2)


@app.workflow("durable.loop.v1")
async def durable_loop(payload: dict[str, Any], ctx: Context) -> int:
    """A loop of ``payload["iterations"]`` iterations of one step each, its state committed
    every 3 and its journal trimmed every 6 to the last 3; the body notes each iteration
    it runs, and may park one worker after iteration ``park_at``'s step."""

    async def iteration(n: int) -> Any:
        LEDGER.write("iteration", ctx, iteration=n)
        if n == payload["iterations"]:
            return Break(n)
        await ctx.step("work", _noted, ctx, f"work-{n}", n)
        if payload.get("park_worker") == ctx.worker_id and payload.get("park_at") == n:
            LEDGER.write("parked", ctx, iteration=n)
            await asyncio.sleep(PARK_SECONDS)
        return Continue(n + 1)

    return int(
        await ctx.loop("items", 0, iteration, commit_every=3, history_every=6, history_keep=3)
    )


def _undo(ctx: Context, payload: dict[str, Any], k: int) -> None:
    LEDGER.write("undo", ctx, step=f"u{k}")
    if payload.get("park_worker") == ctx.worker_id and payload.get("park_step") == k:
        LEDGER.write("parked", ctx, step=f"u{k}")
        time.sleep(PARK_SECONDS)


@app.workflow("durable.saga.sync.v1")
def saga(payload: dict[str, Any], ctx: Context) -> None:
    """Three steps, each registering its compensation, then a ``RollbackError``. The
    payload may park one worker inside compensation k (``park_step``)."""
    for k in range(1, 4):
        ctx.step(f"s{k}", _noted, ctx, f"s{k}", k)
        ctx.on_rollback(f"u{k}", _undo, ctx, payload, k)
    raise errors.RollbackError("roll the saga back")


async def _undo_async(ctx: Context, payload: dict[str, Any], k: int) -> None:
    LEDGER.write("undo", ctx, step=f"u{k}")
    if payload.get("park_worker") == ctx.worker_id and payload.get("park_step") == k:
        LEDGER.write("parked", ctx, step=f"u{k}")
        await asyncio.sleep(PARK_SECONDS)


@app.workflow("durable.saga.async.v1")
async def saga_async(payload: dict[str, Any], ctx: Context) -> None:
    """The async twin of :func:`saga`."""
    for k in range(1, 4):
        await ctx.step(f"s{k}", _noted, ctx, f"s{k}", k)
        await ctx.on_rollback(f"u{k}", _undo_async, ctx, payload, k)
    raise errors.RollbackError("roll the saga back")


def _link(ctx: Context, payload: dict[str, Any]) -> int:
    LEDGER.write("step", ctx, step=f"n{payload['n']}")
    if _parks(payload, ctx, "in", payload["n"]):
        LEDGER.write("parked", ctx, step=f"n{payload['n']}")
        time.sleep(PARK_SECONDS)
    return int(payload["n"])


@app.workflow("durable.chain.sync.v1")
def chain(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """One run per number from ``n`` to ``until``: a step, then continue-as-new with the
    next number. The payload may park one worker inside run k's step or right after it
    (before the run continues), as ``five_steps`` does."""
    n = ctx.step("link", _link, ctx, payload)
    if _parks(payload, ctx, "after", n):
        LEDGER.write("parked", ctx, step=f"n{n}")
        time.sleep(PARK_SECONDS)
    if n < payload["until"]:
        ctx.continue_as_new({**payload, "n": n + 1})
    return {"n": n}


@app.workflow("durable.chain.async.v1")
async def chain_async(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """The async twin of :func:`chain`."""
    n = await ctx.step("link", _link, ctx, payload)
    if _parks(payload, ctx, "after", n):
        LEDGER.write("parked", ctx, step=f"n{n}")
        await asyncio.sleep(PARK_SECONDS)
    if n < payload["until"]:
        await ctx.continue_as_new({**payload, "n": n + 1})
    return {"n": n}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--poll", type=float, default=0.2)
    args = parser.parse_args(argv)

    LEDGER.path = Path(args.ledger)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(asctime)s {args.worker_id} %(levelname)s %(message)s",
    )
    IntentPoller(
        app,
        type_prefixes=["durable.%"],
        lease_duration=args.lease,
        worker_id=args.worker_id,
        concurrency=args.concurrency,
        poll_interval=args.poll,
        shutdown_grace=5.0,
    ).run()


if __name__ == "__main__":
    main()
