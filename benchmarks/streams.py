"""Streams: items per second from one step to a live reader, and append-to-read latency.

One run's step appends ``--items`` items as fast as it can (``burst``), then a second run's
step appends ``--paced`` items ``--pace-ms`` apart, as a model's tokens come (``paced``).
A reader on another thread (``client.read_stream``) follows each stream from before the
run starts. Each item carries the wall-clock time of its append; the reader notes when it
got it. Reported per store and case: items per second (first append to last item read),
and the latency from append to read, p50 and p99, in ms.

    python -m benchmarks.streams                          # 20,000 burst, 300 paced, both stores
    python -m benchmarks.streams --items 500 --paced 20 --store sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.stores import BenchStore, each_store
from simpleworkflow import App, Context
from simpleworkflow.worker import IntentPoller

TYPE = "bench.streams.tokens.v1"


def build_app(store: BenchStore) -> App:
    app = App(store.url, schema=store.schema)

    @app.workflow(TYPE)
    def body(payload: Any, ctx: Context) -> Any:
        def generate() -> int:
            pause = payload["pace_ms"] / 1000
            for n in range(payload["items"]):
                ctx.stream_append("tokens", {"n": n, "t": time.time()})
                if pause:
                    time.sleep(pause)
            return int(payload["items"])

        ctx.step("generate", generate)
        ctx.stream_close("tokens")

    return app


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def one_case(store: BenchStore, app: App, items: int, pace_ms: float) -> dict[str, Any]:
    client = store.client()
    run_id = client.start(TYPE, {"items": items, "pace_ms": pace_ms}).id
    latencies: list[float] = []
    first: list[float] = []
    last = [0.0]

    def read() -> None:
        with store.client() as own:
            for item in own.read_stream(run_id, "tokens"):
                now = time.time()
                if not first:
                    first.append(item.value["t"])
                latencies.append(now - item.value["t"])
                last[0] = now

    reader = threading.Thread(target=read)
    reader.start()
    poller = IntentPoller(app, type_prefixes=["bench.%"], poll_interval=0.05)
    worker = threading.Thread(target=lambda: asyncio.run(poller.run_async()), daemon=True)
    worker.start()
    try:
        reader.join(600)
    finally:
        while worker.is_alive():
            poller.stop()
            worker.join(0.1)
        client.close()
    assert len(latencies) == items, (len(latencies), items)
    return {
        "items": items,
        "items_per_second": round(items / max(last[0] - first[0], 1e-9)),
        "latency_p50_ms": round(statistics.median(latencies) * 1000, 1),
        "latency_p99_ms": round(quantile(latencies, 0.99) * 1000, 1),
    }


def measure(items: int, paced: int, pace_ms: float) -> Any:
    def on(store: BenchStore, _: Path) -> dict[str, Any]:
        app = build_app(store)
        return {
            "burst": one_case(store, app, items, 0),
            "paced": {**one_case(store, app, paced, pace_ms), "pace_ms": pace_ms},
        }

    return on


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.streams")
    parser.add_argument("--items", type=int, default=20_000, help="items of the burst case")
    parser.add_argument("--paced", type=int, default=300, help="items of the paced case")
    parser.add_argument("--pace-ms", type=float, default=10.0, help="between paced items")
    parser.add_argument("--store", default="sqlite,postgres", help="comma-separated")
    parser.add_argument("--postgres-url", help="Postgres: this server, not a private one")
    args = parser.parse_args(argv)
    results = each_store(
        args.store.split(","),
        args.postgres_url,
        "bench-streams-",
        measure(args.items, args.paced, args.pace_ms),
    )
    print(json.dumps({"results": results}, indent=2))


if __name__ == "__main__":
    main()
