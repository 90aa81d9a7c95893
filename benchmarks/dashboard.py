"""``python -m benchmarks.dashboard``: the Grafana dashboard's panels, from a real run.

Two ``simpleworkflow worker benchmarks.dashboard_app:app --metrics-port 0`` processes
work a small shop's runs while a producer shapes the load: a steady trickle of mails,
orders and reports, a burst of reports that backs their queue up, and an outage of the
mail provider (most mails fail, are retried, some for good). Every ``--interval``
seconds both workers' ``/metrics`` are scraped, as Prometheus would; the series are
written to JSON, and ``benchmarks.panels`` draws the dashboard's panels from them
(docs/observability-dashboard.png).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from benchmarks import panels, server
from benchmarks.dashboard_app import MAIL, ORDER, REPORT
from simpleworkflow import Client
from simpleworkflow.backends import open_backend

_ROOT = Path(__file__).resolve().parent.parent
_PORT = re.compile(r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics")
#: Reports started at once in the burst: half a minute of both workers' slots.
BURST = 900


@dataclass(frozen=True)
class Phase:
    """From ``start`` to ``end`` seconds: runs started per second of each type, and the
    share of mails whose provider fails (every attempt, for ``outage`` of them)."""

    start: float
    end: float
    rates: dict[str, float]
    outage: float = 0.0


def phases(seconds: float) -> list[Phase]:
    """The load, scaled to ``seconds``: steady, a burst of reports, steady, an outage of
    the mail provider, steady, then nothing (the queues drain)."""

    def at(share: float) -> float:
        return seconds * share

    steady = {MAIL: 12.0, ORDER: 4.0, REPORT: 2.0}
    burst = BURST / (at(0.23) - at(0.2))
    return [
        Phase(0, at(0.2), steady),
        Phase(at(0.2), at(0.23), {**steady, REPORT: burst}),
        Phase(at(0.23), at(0.5), steady),
        Phase(at(0.5), at(0.65), steady, outage=0.6),
        Phase(at(0.65), at(0.85), steady),
    ]


def payload(kind: str, outage: float, rng: random.Random) -> dict[str, Any]:
    """How long a run works and how many of its attempts fail, drawn here so that the
    workers only follow orders."""
    if kind == REPORT:
        return {"seconds": rng.uniform(0.2, 0.6)}
    if kind == ORDER:
        return {"seconds": rng.uniform(0.01, 0.04), "timeouts": 0.1}
    broken = rng.random() < outage
    return {
        "seconds": rng.uniform(0.005, 0.03) * (4 if broken else 1),
        "failures": 3 if broken else int(rng.random() < 0.02),
        "doomed": rng.random() < 0.005,
    }


class Worker:
    """A worker process with its metrics port, read from its log."""

    def __init__(self, url: str, schema: str, log: Path) -> None:
        self.log = log
        command = [sys.executable, "-m", "simpleworkflow", "worker"]
        command += ["benchmarks.dashboard_app:app", "--concurrency", "8"]
        command += ["--metrics-port", "0", "--metrics-address", "127.0.0.1"]
        env = {
            **os.environ,
            "SIMPLEWORKFLOW_DATABASE_URL": url,
            "SIMPLEWORKFLOW_SCHEMA": schema,
            "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                command, cwd=_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while not (found := _PORT.search(log.read_text(errors="replace"))):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"a worker did not start:\n{log.read_text()}")
            time.sleep(0.1)
        self.url = f"http://127.0.0.1:{found.group(1)}/metrics"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def scrape(url: str) -> list[list[Any]]:
    """``[name, labels, value]`` for every simpleworkflow sample of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return [
        [sample.name, sample.labels, sample.value]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("simpleworkflow_")
    ]


def produce(client: Client, load: list[Phase], began: float, rng: random.Random) -> None:
    """Start runs at the phases' rates, ten times a second, until the last phase ends."""
    owed: dict[str, float] = {}
    for phase in load:
        while (now := time.monotonic() - began) < phase.end:
            for kind, rate in phase.rates.items():
                owed[kind] = owed.get(kind, 0.0) + rate * 0.1
            batch = [
                (kind, payload(kind, phase.outage, rng))
                for kind in sorted(owed)
                for _ in range(int(owed[kind]))
            ]
            owed = {kind: owed[kind] % 1 for kind in owed}
            if batch:
                client.start_many(batch)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - began - now)))


def record(workers: list[Worker], seconds: float, interval: float) -> list[dict[str, Any]]:
    """Scrape every worker every ``interval`` seconds, producing meanwhile."""
    rounds: list[dict[str, Any]] = []
    began = time.monotonic()
    while (now := time.monotonic() - began) <= seconds:
        rounds.append({"t": now, "targets": [scrape(worker.url) for worker in workers]})
        time.sleep(max(0.0, interval * len(rounds) - (time.monotonic() - began)))
    return rounds


@contextlib.contextmanager
def _store(postgres_url: str | None) -> Iterator[tuple[str, str]]:
    if postgres_url:
        yield postgres_url, f"dashboard_{os.getpid()}"
        return
    with server.private_postgres() as url:
        yield url, "workflow"


def run(seconds: float, interval: float, postgres_url: str | None) -> dict[str, Any]:
    """The whole run; returns the scraped series and the load that made them."""
    load = phases(seconds)
    with _store(postgres_url) as (url, schema), tempfile.TemporaryDirectory() as tmp:
        backend = open_backend(url, schema=schema)
        backend.migrate()
        backend.close()
        workers = [Worker(url, schema, Path(tmp) / f"worker-{n}.log") for n in range(2)]
        try:
            with Client(url, schema=schema) as client:
                began = time.monotonic()
                producer = threading.Thread(
                    target=produce, args=(client, load, began, random.Random(7)), daemon=True
                )
                producer.start()
                rounds = record(workers, seconds, interval)
                producer.join()
        finally:
            for worker in workers:
                worker.stop()
    return {
        "interval": interval,
        "phases": [{"start": p.start, "end": p.end, "outage": p.outage} for p in load],
        "rounds": rounds,
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard", description=__doc__)
    parser.add_argument("--seconds", type=float, default=180.0, help="length of the run")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between scrapes")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/dashboard.json"))
    parser.add_argument("--plot", type=Path, default=Path("docs/observability-dashboard.png"))
    args = parser.parse_args(argv)
    doc = run(args.seconds, args.interval, args.postgres_url)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc))
    panels.draw(doc, args.plot)
    print(f"wrote {args.out} and {args.plot}")


if __name__ == "__main__":
    main(sys.argv[1:])
