"""Workflows with transactional steps, and the worker that runs them, for the process
tests of test_transactions_processes.py.

Started as ``python tests/tx_app.py --worker-id w1`` with ``SIMPLEWORKFLOW_DATABASE_URL``
and ``SIMPLEWORKFLOW_SCHEMA`` in the environment; it claims every ``tx.%`` type. Each
step of ``tx.ledger.v1`` inserts a row into the application's table ``business`` in the
transaction that journals the step, and lingers a little inside it, so that a worker
killed at a random instant is often killed inside one.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
from typing import Any

from simpleworkflow import Context, config
from simpleworkflow.app import App
from simpleworkflow.retry import RetryPolicy
from simpleworkflow.worker import IntentPoller

app = App(retry=RetryPolicy(backoff="fixed", base=0.2, jitter=0))
LEDGER_TYPE = "tx.ledger.v1"
CONFIRM_TYPE = "tx.confirm.v1"


def _insert_sql() -> Any:
    """The application's insert, named as the store's connections see its table."""
    if config.scheme(config.database_url(None)) == "sqlite":
        return "insert into business (run_id, step, worker) values (?, ?, ?)"
    schema = config.schema_name(None)
    return f'insert into "{schema}".business (run_id, step, worker) values (%s, %s, %s)'.encode()


INSERT = _insert_sql()
#: A file where each step notes, once its row is inserted and before its transaction
#: commits, that it got that far: more notes than journal entries means that some
#: worker died (or was fenced) with a step's row written but not committed.
WITNESS = {"path": os.devnull}


def book(conn: Any, run_id: str, step: str, worker: str) -> str:
    conn.execute(INSERT, (run_id, step, worker))
    fd = os.open(WITNESS["path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{run_id} {step} {worker}\n".encode())
    finally:
        os.close(fd)
    # inside the transaction: a window to die in, wide enough that some kill lands in it
    # even when a loaded machine spends most of the time elsewhere (0-4 ms was not, once)
    time.sleep(random.uniform(0.002, 0.012))
    return step


@app.workflow(LEDGER_TYPE)
def ledger(payload: dict[str, Any], ctx: Context) -> list[str]:
    """``payload["steps"]`` transactional steps, each booking one business row."""
    return [
        ctx.transaction(f"s{k}", book, ctx.run_id, f"s{k}", ctx.worker_id)
        for k in range(payload["steps"])
    ]


@app.workflow(CONFIRM_TYPE)
def confirm(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """What a producer's transaction asked for: done by whichever worker was woken."""
    return {"order": payload.get("order"), "worker": ctx.worker_id}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--poll", type=float, default=0.2)
    parser.add_argument("--witness", default=os.devnull)
    args = parser.parse_args(argv)
    WITNESS["path"] = args.witness
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(asctime)s {args.worker_id} %(levelname)s %(message)s",
    )
    IntentPoller(
        app,
        type_prefixes=["tx.%"],
        lease_duration=args.lease,
        worker_id=args.worker_id,
        concurrency=args.concurrency,
        poll_interval=args.poll,
        shutdown_grace=5.0,
    ).run()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
