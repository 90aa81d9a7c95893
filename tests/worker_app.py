"""A worker process for the multi-process tests, and the ledger its handlers keep.

Started as ``python tests/worker_app.py --worker-id w1 --prefix 'alpha.%' --ledger FILE``
with ``SIMPLEWORKFLOW_DATABASE_URL`` and ``SIMPLEWORKFLOW_SCHEMA`` in the environment.

Every handler appends JSON lines to the ledger, a file opened with ``O_APPEND`` so that
lines written by concurrent processes never interleave. The ledger lives outside the
engine: tests compare what it says ran, and where, with what the engine recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simpleworkflow import Context
from simpleworkflow.app import App
from simpleworkflow.retry import RetryPolicy
from simpleworkflow.worker import IntentPoller, leases

# Quick retries, so that a crashed attempt is retried within the test's patience.
app = App(retry=RetryPolicy(backoff="fixed", base=0.2, jitter=0))
QUICK_TYPES = ("alpha.x.v1", "beta.y.v1", "gamma.z.v1", "content.thumbnail.v1")
BLOCKING_TYPE = "slow.task.v1"
STEP_TYPE = "slow.step.v1"  # an async body whose plain def step blocks
CRASH_TYPE = "crash.task.v1"  # blocks like BLOCKING_TYPE, with the default retry policy
POISON_TYPE = "poison.task.v1"  # kills its worker process, every time
HEALTHY_TYPE = "poison.neighbour.v1"  # half a second of work
TICKING_TYPE = "fence.ticking.v1"  # an async step that ticks for long the first time
DEAF_TYPE = "fence.deaf.v1"  # a sync step deaf to stops, that waits for a file the first time


class Ledger:
    """Append-only JSON lines; one ``write`` is one ``os.write`` of one whole line."""

    def __init__(self, path: str | os.PathLike[str], prefixes: list[str] | None = None) -> None:
        self.path = Path(path)
        self.prefixes = prefixes or []

    def write(self, event: str, ctx: Context, **extra: Any) -> None:
        line = {
            "event": event,
            "run": ctx.run_id,
            "type": ctx.type,
            "worker": ctx.worker_id,
            "prefixes": self.prefixes,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            "at": time.time(),
            **extra,
        }
        data = (json.dumps(line) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        """Every complete line written so far."""
        if not self.path.exists():
            return []
        text = self.path.read_text()
        return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]

    def entries(self, event: str | None = None, **match: Any) -> list[dict[str, Any]]:
        """The lines of ``event`` (any event if None) whose fields equal ``match``."""
        return [
            e
            for e in self.read()
            if (event is None or e["event"] == event)
            and all(e.get(k) == v for k, v in match.items())
        ]


LEDGER = Ledger(os.environ.get("WORKER_APP_LEDGER", os.devnull))


def quick(payload: Any, ctx: Context) -> dict[str, Any]:
    LEDGER.write("done", ctx)
    return {"worker": ctx.worker_id}


for _type in QUICK_TYPES:
    app.register(_type, quick)


@app.workflow(BLOCKING_TYPE)
def blocking(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Blocks when the payload says so for this attempt or worker; otherwise returns at once.

    Payload: ``block_attempts`` / ``block_workers`` choose when to block; ``seconds`` bounds
    the block; ``go_file`` ends it early once the file exists; ``cooperative`` makes it stop
    (raising ``Cancelled``) when the worker asks it to. Uncooperative blocks note the request
    in the ledger and go on, as careless handlers do.
    """
    LEDGER.write("start", ctx)
    blocks = ctx.attempt in payload.get("block_attempts", ()) or ctx.worker_id in payload.get(
        "block_workers", ()
    )
    if blocks:
        deadline = time.monotonic() + payload.get("seconds", 60.0)
        go_file = payload.get("go_file")
        noticed = False
        while time.monotonic() < deadline and not (go_file and os.path.exists(go_file)):
            if ctx.is_cancelled() and not noticed:
                noticed = True
                LEDGER.write("noticed", ctx, reason=ctx.stop_reason)
                if payload.get("cooperative"):
                    LEDGER.write("stopped", ctx)
                    ctx.raise_if_cancelled()
            time.sleep(0.02)
    LEDGER.write("end", ctx)
    return {"worker": ctx.worker_id, "attempt": ctx.attempt}


app.register(CRASH_TYPE, blocking, retry=RetryPolicy())


def _blocking_step(payload: dict[str, Any], ctx: Context) -> str:
    """Sleeps ``seconds`` on the workers listed in ``block_workers``, deaf to every request
    to stop, as plain blocking code is; marks its start and end in the ledger."""
    LEDGER.write("step_start", ctx)
    if ctx.worker_id in payload.get("block_workers", ()):
        time.sleep(payload.get("seconds", 20.0))
    LEDGER.write("step_end", ctx)
    return ctx.worker_id


@app.workflow(STEP_TYPE)
async def blocking_step(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    return {"step_worker": await ctx.step("block", _blocking_step, payload, ctx)}


@app.workflow(POISON_TYPE)
def poison(payload: Any, ctx: Context) -> None:
    LEDGER.write("start", ctx)
    time.sleep(0.2)  # the runs claimed with it have started: they die with it
    os.kill(os.getpid(), signal.SIGKILL)


@app.workflow(HEALTHY_TYPE)
def neighbour(payload: Any, ctx: Context) -> dict[str, Any]:
    LEDGER.write("start", ctx)
    time.sleep(0.5)
    LEDGER.write("end", ctx)
    return {"worker": ctx.worker_id}


def _first(once_file: str) -> bool:
    """Whether this is the first execution to get here (it creates ``once_file``)."""
    try:
        os.close(os.open(once_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


async def _ticking(payload: dict[str, Any], ctx: Context) -> str:
    """Notes a ``tick`` in the ledger every 50 ms, for ``seconds`` in the execution that
    first creates ``once_file``, for a few ticks in the others; stops when asked to."""
    seconds = payload["seconds"] if _first(payload["once_file"]) else 0.2
    execution = uuid.uuid4().hex
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.is_cancelled():
            LEDGER.write("stopped", ctx, reason=ctx.stop_reason, execution=execution)
            ctx.raise_if_cancelled()
        LEDGER.write("tick", ctx, execution=execution)
        await asyncio.sleep(0.05)
    return ctx.worker_id


@app.workflow(TICKING_TYPE)
async def ticking(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    return {"step_worker": await ctx.step("tick", _ticking, payload, ctx)}


def _deaf(payload: dict[str, Any], ctx: Context) -> str:
    """The first execution waits for ``go_file``, deaf to every request to stop; each
    returns an id of its own, so that the journal shows which one it holds."""
    execution = uuid.uuid4().hex
    LEDGER.write("step_start", ctx, execution=execution)
    if _first(payload["once_file"]):
        while not os.path.exists(payload["go_file"]):
            time.sleep(0.02)
    LEDGER.write("step_end", ctx, execution=execution)
    return execution


@app.workflow(DEAF_TYPE)
def deaf(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    return {"step_output": ctx.step("deaf", _deaf, payload, ctx)}


# -- helpers for the tests that drive these workers -------------------------------------


def wait_until(
    predicate: Callable[[], Any], timeout: float, message: Callable[[], str] | str
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``message`` if never."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"after {timeout:g}s: {text}")
        time.sleep(0.05)


def break_heartbeats_when(trigger: Path) -> None:
    """A deliberate fault for ``test_supervisor``: once ``trigger`` exists, the worker's
    heartbeat service dies of an unexpected exception, at once and every time it is
    started again, as a bug in it would make it."""
    beat = leases.Keeper.beat

    async def breaking(self: leases.Keeper) -> None:
        running = asyncio.ensure_future(beat(self))
        try:
            while not trigger.exists() and not running.done():
                await asyncio.sleep(0.02)
        finally:
            running.cancel()
        raise RuntimeError("heartbeats broken on purpose by the test")

    leases.Keeper.beat = breaking  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--prefix", action="append", required=True, dest="prefixes")
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--grace", type=float, default=30.0)
    args = parser.parse_args(argv)

    LEDGER.path = Path(args.ledger)
    LEDGER.prefixes = args.prefixes
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(asctime)s {args.worker_id} %(levelname)s %(message)s",
    )
    if "WORKER_APP_BREAK_HEARTBEATS" in os.environ:
        break_heartbeats_when(Path(os.environ["WORKER_APP_BREAK_HEARTBEATS"]))
    poller = IntentPoller(
        app,
        type_prefixes=args.prefixes,
        lease_duration=args.lease,
        worker_id=args.worker_id,
        concurrency=args.concurrency,
        poll_interval=args.poll,
        shutdown_grace=args.grace,
    )
    poller.run()


if __name__ == "__main__":
    main()
