"""Recovery after a crash: how soon the runs of a SIGKILLed worker start again elsewhere.

``python -m benchmarks.recovery [--stores postgres,sqlite] [--victims 6] [--lease 30]``

Worker processes with the default settings (the lease too, unless ``--lease`` is given)
claim runs whose handler blocks; each of them is then SIGKILLed at a random moment of its
heartbeat cycle, and one more worker, idle until then, takes the runs over. A sample is
the time from a victim's kill to the rescuer's handler starting one of its runs (the
handler's ``time.time()``; same machine, same clock). A run starts again one lease after
its worker's last heartbeat at the latest, so at the defaults the samples spread over
20-30 s plus whatever the recovery itself takes: the target is a p99 within the lease
plus 2 s. ``--json`` prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.stores import BenchStore, each_store
from benchmarks.workers import WorkerProcess
from simpleworkflow import App, Client

TYPE = "bench.recover.v1"
RUNS_PER_VICTIM = 5
DEFAULT_LEASE = 30.0  # IntentPoller's default, for the report


def worker_main(url: str, schema: str, worker_id: str, role: str, lease: float) -> None:
    """A worker process: a victim's handler blocks for an hour, a rescuer's returns at once."""
    app = App(url, schema=schema)

    @app.workflow(TYPE)
    def handler(payload: Any) -> dict[str, float]:
        if role == "victim":
            time.sleep(3600)
        return {"started": time.time()}

    options: dict[str, Any] = {"worker_id": worker_id}
    if lease > 0:
        options["lease_duration"] = lease
    poller = app.poller(**options)
    print("ready", flush=True)
    poller.run()


class Process(WorkerProcess):
    """One worker process of this benchmark."""

    def __init__(self, store: BenchStore, worker_id: str, role: str, lease: float, log: Path):
        args = [store.url, store.schema, worker_id, role, str(lease)]
        super().__init__("benchmarks.recovery", args, worker_id, log)
        self.worker_id = worker_id


@contextlib.contextmanager
def processes() -> Iterator[list[Process]]:
    """Worker processes to start; stopped (or killed) at the end, whatever happens."""
    started: list[Process] = []
    try:
        yield started
    finally:
        for process in started:
            process.stop(60)


def measure(store: BenchStore, victims: int, lease: float, tmp: Path) -> dict[str, float]:
    """Kill ``victims`` workers holding runs; seconds from each kill to each restart."""
    lease_s = lease if lease > 0 else DEFAULT_LEASE
    cycle = lease_s / 3  # the heartbeat interval
    with processes() as started, store.client() as client:
        for n in range(victims):
            started.append(Process(store, f"victim-{n}", "victim", lease, tmp / f"v{n}.log"))
        runs = [r.id for r in client.start_many([(TYPE, {})] * (victims * RUNS_PER_VICTIM))]
        _wait(lambda: _count(client, runs, "leased") == len(runs), 60, "runs never all leased")
        time.sleep(random.uniform(0, cycle))  # land the kills anywhere in the cycle
        started.append(Process(store, "rescuer", "rescuer", lease, tmp / "rescuer.log"))
        killed = _kill_at_random(started[:victims], cycle)
        _wait(lambda: _count(client, runs, "succeeded") == len(runs), 2 * lease_s + 60, "")
        samples, overheads = [], []
        for run_id in runs:
            holder, expiry = _lost_lease(client, run_id, lease_s)
            started_again = client.get(run_id).result["started"]
            samples.append(started_again - killed[holder])
            overheads.append(started_again - expiry)
    return {
        "runs": len(samples),
        "lease_s": lease_s,
        **_percentiles("recovery", samples),
        **_percentiles("after_expiry", overheads),
    }


def _percentiles(name: str, samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {
        f"{name}_p50_s": statistics.median(samples),
        f"{name}_p99_s": cuts[98],
        f"{name}_max_s": max(samples),
    }


def _kill_at_random(victims: list[Process], within: float) -> dict[str, float]:
    """SIGKILL each victim at a random moment of the next ``within`` seconds."""
    began = time.monotonic()
    plan = sorted((random.uniform(0, within), victim) for victim in victims)
    killed = {}
    for offset, victim in plan:
        time.sleep(max(0.0, began + offset - time.monotonic()))
        victim.proc.send_signal(signal.SIGKILL)
        killed[victim.worker_id] = time.time()
    for victim in victims:
        victim.proc.wait(10)
    return killed


def _count(client: Client, run_ids: list[str], status: str) -> int:
    return sum(client.get(run_id).status.value == status for run_id in run_ids)


def _lost_lease(client: Client, run_id: str, lease_s: float) -> tuple[str, float]:
    """Which victim held the run, and when (epoch seconds) its last lease expired: one
    lease after the claim or the last heartbeat, by the database's clock."""
    events = client.events(run_id)
    holder = str(next(e for e in events if e.event_type == "leased").data["worker_id"])
    renewed = [
        e.created_at.timestamp()
        for e in events
        if e.event_type in ("leased", "heartbeat") and e.data.get("worker_id") == holder
    ]
    return holder, max(renewed) + lease_s


def _wait(done: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s: {what or 'runs not recovered'}")
        time.sleep(0.2)


def run(kinds: list[str], victims: int, lease: float, postgres_url: str | None) -> dict[str, Any]:
    return each_store(
        kinds,
        postgres_url,
        "bench-recovery-",
        lambda store, tmp: measure(store, victims, lease, tmp),
    )


def main(argv: list[str]) -> None:
    if argv[:1] == ["--worker"]:
        url, schema, worker_id, role, lease = argv[1:]
        worker_main(url, schema, worker_id, role, float(lease))
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recovery", description=__doc__)
    parser.add_argument("--stores", default="postgres,sqlite", help="comma-separated")
    parser.add_argument("--victims", type=int, default=6, help="workers killed (6)")
    parser.add_argument("--lease", type=float, default=0, help="seconds; default: the default")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    kinds = [kind.strip() for kind in args.stores.split(",") if kind.strip()]
    results = run(kinds, args.victims, args.lease, args.postgres_url)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for kind, f in results.items():
        print(
            f"{kind:9} {f['runs']} runs, lease {f['lease_s']:g}s: started again "
            f"p50 {f['recovery_p50_s']:.1f}s, p99 {f['recovery_p99_s']:.1f}s, "
            f"max {f['recovery_max_s']:.1f}s after the kill; "
            f"p50 {f['after_expiry_p50_s']:.2f}s, p99 {f['after_expiry_p99_s']:.2f}s "
            "after the lease expired"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
