"""Durable loops: journal rows and resume time after many iterations, trimmed or not.

A run loops ``--iterations`` times with one step per iteration (state committed every
10 iterations) and then waits for a signal inside the next iteration, so it is
suspended with its whole history behind it. Measured per store and per setting
(``history_every=None``: never trim; ``100``/``100``: trim): the run's journal rows, and
the time of one replay of the run (``replay-check``'s, which a resume does too: read
the journal, start from the latest committed state, replay the iterations since, stop
at the wait).

    python -m benchmarks.loops                      # 10,000 iterations, SQLite and Postgres
    python -m benchmarks.loops --iterations 200 --store sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.stores import BenchStore, each_store
from simpleworkflow import App, Break, Context, Continue
from simpleworkflow.admin import replaycheck
from simpleworkflow.worker import IntentPoller

TYPE = "bench.loops.batch.v1"
SETTINGS = {"untrimmed": None, "trimmed": 100}


def echo(value: int) -> int:
    return value


def build_app(store: BenchStore, iterations: int, history_every: int | None) -> App:
    app = App(store.url, schema=store.schema)

    @app.workflow(TYPE)
    async def body(payload: Any, ctx: Context) -> Any:
        async def iteration(n: int) -> Any:
            if n == iterations:
                await ctx.wait_for_event("go", event="go")
                return Break(n)
            await ctx.step("work", echo, n)
            return Continue(n + 1)

        return await ctx.loop(
            "items", 0, iteration, commit_every=10, history_every=history_every, history_keep=100
        )

    return app


def run_to_the_wait(store: BenchStore, app: App) -> tuple[str, float]:
    """Start a run and work it until it waits for its signal; its id and the seconds."""
    client = store.client()
    began = time.perf_counter()
    run_id = client.start(TYPE).id
    poller = IntentPoller(app, type_prefixes=["bench.%"], poll_interval=0.05)
    thread = threading.Thread(target=lambda: asyncio.run(poller.run_async()), daemon=True)
    thread.start()
    try:
        while (run := client.get(run_id)).waiting_for is None or run.status.value != "pending":
            if run.is_terminal:
                raise RuntimeError(f"the loop run ended {run.status}: {run.last_error}")
            time.sleep(0.05)
        return run_id, time.perf_counter() - began
    finally:
        while thread.is_alive():
            poller.stop()
            thread.join(0.1)
        client.close()


def replay_seconds(store: BenchStore, app: App, run_id: str, repeat: int) -> list[float]:
    backend = store.backend()
    client = store.client()
    try:
        run = client.get(run_id)
        seconds = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
            for _ in range(repeat):
                began = time.perf_counter()
                report = asyncio.run(replaycheck.check_run(app, backend, run, executor, 600))
                seconds.append(time.perf_counter() - began)
                assert report is not None and report.verdict == replaycheck.OK, report
        return seconds
    finally:
        backend.close()
        client.close()


def measure(iterations: int, repeat: int) -> Any:
    def on(store: BenchStore, _: Path) -> dict[str, Any]:
        figures = {}
        for label, history_every in SETTINGS.items():
            app = build_app(store, iterations, history_every)
            run_id, loop_seconds = run_to_the_wait(store, app)
            rows = store.client().steps(run_id)
            replays = replay_seconds(store, app, run_id, repeat)
            figures[label] = {
                "journal_rows": len(rows),
                "loop_seconds": round(loop_seconds, 2),
                "replay_ms_median": round(statistics.median(replays) * 1000, 1),
            }
        return figures

    return on


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loops")
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--store", default="sqlite,postgres", help="comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="replays timed per run")
    parser.add_argument("--postgres-url", help="Postgres: this server, not a private one")
    args = parser.parse_args(argv)
    kinds = args.store.split(",")
    results = each_store(
        kinds, args.postgres_url, "bench-loops-", measure(args.iterations, args.repeat)
    )
    print(json.dumps({"iterations": args.iterations, "results": results}, indent=2))


if __name__ == "__main__":
    main()
