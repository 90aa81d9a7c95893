"""Prometheus metrics, scraped from real ``/metrics`` endpoints on both stores.

Workers are ``simpleworkflow worker metrics_app:app --metrics-port 0`` processes; the
test reads each one's port from its log, scrapes it over HTTP, parses the text with
``prometheus_client``'s own parser, and holds the figures up against what ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import metrics_app
import pytest
from conftest import Store, stop_processes
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from worker_app import wait_until

from simpleworkflow import Client, RunStatus, observe
from simpleworkflow.metrics import OTHER, Metrics, MetricsObserver

TESTS = Path(__file__).parents[1]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of a scrape, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in samples.items() if n == name and wanted <= got)


def label_values(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(got)[label] for (n, got) in samples if n == name and label in dict(got)}


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        return parse(response.read().decode())


class Worker:
    """One ``simpleworkflow worker metrics_app:app --metrics-port 0`` process."""

    def __init__(self, store: Store, log: Path, *args: str) -> None:
        self.log_path = log
        command = [sys.executable, "-m", "simpleworkflow", "worker", "metrics_app:app"]
        command += ["--metrics-port", "0", "--metrics-address", "127.0.0.1", *args]
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                command, cwd=TESTS, env=store.env, stdout=out, stderr=subprocess.STDOUT
            )
        found = wait_until(self._port, 30, lambda: f"no metrics port in the log:\n{self.log()}")
        self.url = f"http://127.0.0.1:{found}/metrics"

    def _port(self) -> str | None:
        assert self.proc.poll() is None, f"the worker exited:\n{self.log()}"
        found = re.search(r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics", self.log())
        return found.group(1) if found and " claiming " in self.log() else None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def scrape(self) -> Samples:
        return scrape(self.url)


@pytest.fixture
def workers(store: Store, tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    stop_processes(worker.proc for worker in started)


@contextlib.contextmanager
def producer(store: Store) -> Iterator[tuple[Client, Metrics]]:
    """A client counted by metrics of its own (no gauges): the producer's side."""
    metrics = Metrics(store.url, schema=store.schema, gauges=False)
    try:
        with store.client(observers=[metrics.observer]) as client:
            yield client, metrics
    finally:
        metrics.close()


def test_counts_after_a_workload_are_what_ran(
    store: Store, workers: list[Worker], tmp_path: Path
) -> None:
    """20 runs: 15 succeed, 3 fail once and succeed on a retry, 1 fails for good, and a
    workflow retries a step, sleeps and waits for a signal (4 attempts)."""
    workers.append(Worker(store, tmp_path / "worker.log", "--concurrency", "4"))
    with producer(store) as (client, metrics):
        started = [client.start(metrics_app.OK) for _ in range(15)]
        started += [client.start(metrics_app.FLAKY) for _ in range(3)]
        started.append(client.start(metrics_app.DOOMED))
        flow = client.start(metrics_app.STEPS, {"marker": str(tmp_path / "fetched")})
        client.start(metrics_app.OK, idempotency_key="once")
        client.start(metrics_app.OK, idempotency_key="once")  # found: nothing new
        wait_until(
            lambda: (client.get(flow.id).waiting_for or {}).get("kind") == "signal",
            30,
            lambda: f"the workflow never waited for its signal: {client.get(flow.id)}",
        )
        client.signal(flow.id, "approved", {"by": "ada"})
        for run in [*started, flow]:
            wait_until(
                lambda run=run: client.get(run.id).is_terminal,
                30,
                lambda run=run: f"{client.get(run.id)} ran on:\n{workers[0].log()}",
            )
        assert client.get(started[-1].id).status is RunStatus.FAILED
        server = metrics.serve(0, "127.0.0.1")
        try:
            produced = scrape(server.url)
        finally:
            server.close()

    assert total(produced, "simpleworkflow_runs_started_total") == 21
    assert total(produced, "simpleworkflow_runs_deduplicated_total", type=metrics_app.OK) == 1
    assert total(produced, "simpleworkflow_signals_sent_total", signal="approved") == 1
    assert "simpleworkflow_runs" not in {name for name, _ in produced}  # gauges=False

    attempts = "simpleworkflow_attempts_finished_total"
    # The worker counts an attempt once its outcome is written: wait for the last one.
    seen = wait_until(
        lambda: (s := workers[0].scrape()) and total(s, attempts) >= 27 and s,
        30,
        lambda: f"the worker did not count 27 attempts:\n{workers[0].log()}",
    )
    assert total(seen, attempts) == 27  # 16 + 3 * 2 + 1 + 4
    assert total(seen, attempts, outcome="succeeded") == 16 + 3 + 1
    assert total(seen, attempts, outcome="retried") == 3
    assert total(seen, attempts, type=metrics_app.FLAKY, outcome="retried") == 3
    assert total(seen, attempts, outcome="failed") == 1
    assert total(seen, attempts, type=metrics_app.DOOMED, outcome="failed") == 1
    assert total(seen, attempts, outcome="suspended") == 3
    suspended = "simpleworkflow_runs_suspended_total"
    assert {k: total(seen, suspended, kind=k) for k in ("retry", "sleep", "signal")} == {
        "retry": 1,
        "sleep": 1,
        "signal": 1,
    }
    steps = "simpleworkflow_steps_finished_total"
    assert total(seen, steps, step="fetch", outcome="completed") == 1
    assert total(seen, steps, step="store", outcome="completed") == 1
    assert total(seen, steps, outcome="failed") == 0
    assert total(seen, "simpleworkflow_step_retries_total", step="fetch") == 1
    assert total(seen, "simpleworkflow_step_duration_seconds_count", step="fetch") == 2
    assert total(seen, "simpleworkflow_signals_consumed_total", signal="approved") == 1

    assert total(seen, "simpleworkflow_attempt_duration_seconds_count") == 27
    assert total(seen, "simpleworkflow_queue_wait_seconds_count") == 27  # a claim each
    runs = "simpleworkflow_run_duration_seconds_count"
    assert total(seen, runs, status="succeeded") == 20
    assert total(seen, runs, status="failed") == 1
    # Every observation falls in some bucket; +Inf holds them all.
    buckets = "simpleworkflow_attempt_duration_seconds_bucket"
    assert total(seen, buckets, le="+Inf") == 27
    assert total(seen, buckets, le="86400.0") == 27

    # The gauges, read from the database: nothing is left to do.
    assert total(seen, "simpleworkflow_store_up") == 1
    for name in (metrics_app.OK, metrics_app.FLAKY, metrics_app.STEPS, metrics_app.BLOCKING):
        assert total(seen, "simpleworkflow_runs", type=name) == 0  # registered: zeros
    assert total(seen, "simpleworkflow_workers_seen") == 0
    assert total(seen, "process_cpu_seconds_total") > 0  # the process's own metrics


def test_gauges_agree_across_two_worker_processes(
    store: Store, workers: list[Worker], tmp_path: Path
) -> None:
    """Two workers hold two blocking runs each; both report the same database."""
    for name in ("a", "b"):
        workers.append(Worker(store, tmp_path / f"{name}.log", "--concurrency", "2"))
    release = tmp_path / "release"
    with store.client() as client:
        late = datetime.now(UTC) - timedelta(minutes=10)
        client.start(metrics_app.UNCLAIMED, run_at=late)
        client.start_many([(metrics_app.UNCLAIMED, {})] * 2)
        for _ in range(2):
            client.start(metrics_app.BLOCKING, {"release": str(release)}, delay="1h")
        client.start_many([(metrics_app.BLOCKING, {"release": str(release)})] * 4)
        wait_until(
            lambda: sum(s.leased for s in client.admin.queues().types) == 4,
            30,
            lambda: f"the workers did not take 4 runs:\n{workers[0].log()}\n{workers[1].log()}",
        )
        first, second = (worker.scrape() for worker in workers)
        for seen in (first, second):
            assert (
                total(seen, "simpleworkflow_runs", type=metrics_app.BLOCKING, status="leased") == 4
            )
            assert (
                total(seen, "simpleworkflow_runs", type=metrics_app.BLOCKING, status="pending") == 2
            )
            assert total(seen, "simpleworkflow_runs_due", type=metrics_app.BLOCKING) == 0
            assert (
                total(seen, "simpleworkflow_runs", type=metrics_app.UNCLAIMED, status="pending")
                == 3
            )
            assert total(seen, "simpleworkflow_runs_due", type=metrics_app.UNCLAIMED) == 3
            oldest = total(seen, "simpleworkflow_oldest_due_seconds", type=metrics_app.UNCLAIMED)
            assert 600 <= oldest < 900
            assert total(seen, "simpleworkflow_oldest_due_seconds", type=metrics_app.BLOCKING) == 0
            assert total(seen, "simpleworkflow_workers_seen") == 2
            assert total(seen, "simpleworkflow_leases_expired") == 0
        gauges = ("simpleworkflow_runs", "simpleworkflow_runs_due", "simpleworkflow_workers_seen")
        assert {k: v for k, v in first.items() if k[0] in gauges} == {
            k: v for k, v in second.items() if k[0] in gauges
        }

        release.touch()
        attempts = "simpleworkflow_attempts_finished_total"
        wait_until(
            lambda: sum(total(w.scrape(), attempts) for w in workers) == 4,
            30,
            "the released runs were not all counted",
        )
        # Counters are per process: each worker counts its own two, Prometheus sums them.
        assert [total(w.scrape(), attempts, outcome="succeeded") for w in workers] == [2, 2]
        for worker in workers:
            seen = worker.scrape()
            assert total(seen, "simpleworkflow_runs", status="leased") == 0
            assert total(seen, "simpleworkflow_workers_seen") == 0


def test_a_second_worker_on_a_taken_port_is_refused(
    store: Store, workers: list[Worker], tmp_path: Path
) -> None:
    workers.append(Worker(store, tmp_path / "first.log"))
    port = workers[0].url.rsplit(":", 1)[1].split("/")[0]
    command = [sys.executable, "-m", "simpleworkflow", "worker", "metrics_app:app"]
    command += ["--metrics-port", port, "--metrics-address", "127.0.0.1"]
    done = subprocess.run(command, cwd=TESTS, env=store.env, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in done.stderr
    assert "its own --metrics-port" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("port", ["70000", "-1", "nine"])
def test_a_bad_metrics_port_is_refused(store: Store, port: str) -> None:
    command = [sys.executable, "-m", "simpleworkflow", "worker", "metrics_app:app"]
    done = subprocess.run(
        [*command, "--metrics-port", port], cwd=TESTS, env=store.env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "a port is a number from 0 to 65535" in done.stderr


def test_without_prometheus_client_the_worker_says_what_to_install(store: Store) -> None:
    probe = (
        "import sys; sys.modules['prometheus_client'] = None; "
        "from simpleworkflow.cli import main; "
        "sys.exit(main(['worker', 'metrics_app:app', '--metrics-port', '0']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=TESTS, env=store.env, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'simpleworkflow[metrics]'" in done.stderr


def test_a_scrape_without_the_database_still_serves_the_counters(empty_store: Store) -> None:
    """No schema yet: the gauges say so (store_up 0), the counters are there."""
    metrics = Metrics(empty_store.url, schema=empty_store.schema)
    try:
        metrics.observer.runs_deleted(observe.RunsDeleted(type="billing.invoice.v1", count=3))
        seen = parse(metrics.text().decode())
        seen_again = parse(metrics.text().decode())
    finally:
        metrics.close()
    for samples in (seen, seen_again):
        assert total(samples, "simpleworkflow_store_up") == 0
        assert total(samples, "simpleworkflow_runs_deleted_total") == 3
        assert "simpleworkflow_runs" not in {name for name, _ in samples}


def asgi_get(app: Any, headers: list[tuple[bytes, bytes]], method: str = "GET") -> dict[str, Any]:
    """One request to an ASGI app, without a server: its status, headers and body."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": "/metrics", "headers": headers}
    asyncio.run(app(scope, receive, send))
    start, body = sent
    return {"status": start["status"], "headers": dict(start["headers"]), "body": body["body"]}


def test_the_asgi_app_serves_the_same_metrics(store: Store, client: Client) -> None:
    client.start(metrics_app.OK, delay="1h")
    metrics = Metrics(store.url, schema=store.schema)
    try:
        app = metrics.asgi_app()
        plain = asgi_get(app, [])
        assert plain["status"] == 200
        assert plain["headers"][b"content-type"].startswith(b"text/plain")
        seen = parse(plain["body"].decode())
        assert total(seen, "simpleworkflow_runs", type=metrics_app.OK, status="pending") == 1
        assert total(seen, "simpleworkflow_store_up") == 1
        packed = asgi_get(app, [(b"Accept-Encoding", b"gzip")])
        assert packed["headers"][b"content-encoding"] == b"gzip"
        assert "simpleworkflow_runs_due" in gzip.decompress(packed["body"]).decode()
        open_metrics = asgi_get(app, [(b"Accept", b"application/openmetrics-text; version=1.0.0")])
        assert open_metrics["headers"][b"content-type"].startswith(b"application/openmetrics")
        assert asgi_get(app, [], method="HEAD")["body"] == b""
        refused = asgi_get(app, [], method="POST")
        assert (refused["status"], refused["headers"][b"allow"]) == (405, b"GET, HEAD")
    finally:
        metrics.close()


def test_step_and_signal_names_are_bounded_per_type(client: Client) -> None:
    """Names built from data (one per run) would make a series per run: past the limit
    they count as one."""
    registry = CollectorRegistry()
    observer = MetricsObserver(registry, max_names=3)
    run = client.start(metrics_app.STEPS)
    for n in range(5):
        observer.step_completed(observe.StepCompleted(run, f"charge-{n}", 1, 0.01))
        observer.signal_consumed(observe.SignalConsumed(run, f"paid-{n}"))
    other = client.start(metrics_app.OK)
    observer.step_completed(observe.StepCompleted(other, "charge-4", 1, 0.01))
    from prometheus_client import generate_latest

    seen = parse(generate_latest(registry).decode())
    steps = "simpleworkflow_steps_finished_total"
    assert label_values(seen, steps, "step") == {
        "charge-0",
        "charge-1",
        "charge-2",
        OTHER,
        "charge-4",
    }
    assert total(seen, steps, type=metrics_app.STEPS, step=OTHER) == 2
    assert total(seen, steps, type=metrics_app.OK, step="charge-4") == 1  # its own limit
    consumed = "simpleworkflow_signals_consumed_total"
    assert total(seen, consumed, signal=OTHER) == 2
    assert total(seen, steps) == 6


def exported_names(tmp_path: Path) -> dict[str, str]:
    """Every series name the metrics can have, with its metric's type. (A scrape of a
    store with no schema still lists every gauge, with no samples.)"""
    metrics = Metrics(f"sqlite:///{tmp_path / 'none.db'}")
    names: dict[str, str] = {}
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
    try:
        for family in metrics.registry.collect():
            if family.name.startswith("simpleworkflow_"):
                for suffix in suffixes.get(family.type, [""]):
                    names[family.name + suffix] = family.type
    finally:
        metrics.close()
    return names


def test_names_follow_prometheus_conventions(tmp_path: Path) -> None:
    names = exported_names(tmp_path)
    for name, kind in names.items():
        assert re.fullmatch(r"simpleworkflow_[a-z_]+", name), name
        if kind == "counter":
            assert name.endswith("_total"), name
        if kind == "histogram":
            assert re.search(r"_seconds_(bucket|sum|count)$", name), name
    assert len({n for n, kind in names.items() if kind == "gauge"}) == 8


def test_the_grafana_dashboard_reads_only_names_the_metrics_export(tmp_path: Path) -> None:
    dashboard = json.loads((TESTS.parent / "docs" / "grafana-dashboard.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    queries += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = {name for query in queries for name in re.findall(r"simpleworkflow_\w+", query)}
    exported = set(exported_names(tmp_path))
    assert used <= exported, used - exported
    titles = [panel["title"] for panel in dashboard["panels"]]
    for wanted in ("Queue depth", "Oldest due", "Throughput", "Failures", "p50 / p95 / p99"):
        assert any(wanted in title for title in titles), wanted
