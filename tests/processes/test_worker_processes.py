"""Workers as real processes, on both stores: partitioning, crashes, stalls and shutdown.

Each worker is ``tests/worker_app.py`` in a process of its own. Its handlers write a
ledger outside the engine (see :class:`worker_app.Ledger`); the tests hold what the engine
recorded up against it, and against what a user would check: statuses, results, events.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import test_seed_sql as seed_sql
from conftest import Store, every_store, stop_processes
from worker_app import BLOCKING_TYPE, Ledger, wait_until

from simpleworkflow import Client, RunStatus, names
from simpleworkflow.backends import open_backend

WORKER_APP = Path(__file__).parents[1] / "worker_app.py"


class WorkerProcess:
    """One ``worker_app.py`` process, its log, and ways to wait for it."""

    def __init__(self, worker_id: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.worker_id = worker_id
        self.log_path = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER_APP), "--worker-id", worker_id, *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 20.0) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, f"{self.worker_id} exited early:\n{self.log()}"
            return " claiming " in self.log()

        wait_until(ready, timeout, lambda: f"{self.worker_id} never started:\n{self.log()}")

    def wait_log(self, text: str, timeout: float = 15.0) -> None:
        wait_until(
            lambda: text in self.log(),
            timeout,
            lambda: f"{self.worker_id} never logged {text!r}:\n{self.log()}",
        )

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.worker_id} still running after {timeout:g}s:\n{self.log()}"
            ) from None


class Workers:
    """Starts worker processes against one store; ``close`` kills whatever is left."""

    def __init__(self, store: Store, ledger: Ledger, tmp_path: Path) -> None:
        self.store = store
        self.ledger = ledger
        self.tmp_path = tmp_path
        self.started: list[WorkerProcess] = []

    def start(
        self,
        worker_id: str,
        *prefixes: str,
        lease: float = 5.0,
        concurrency: int = 8,
        poll: float = 1.0,
        grace: float = 30.0,
        env: dict[str, str] | None = None,
        ready: bool = True,
    ) -> WorkerProcess:
        args = ["--ledger", str(self.ledger.path)]
        for prefix in prefixes:
            args += ["--prefix", prefix]
        args += ["--lease", str(lease), "--concurrency", str(concurrency)]
        args += ["--poll", str(poll), "--grace", str(grace)]
        worker = WorkerProcess(
            worker_id, args, env or self.store.env, self.tmp_path / f"{worker_id}.log"
        )
        self.started.append(worker)
        if ready:
            worker.wait_ready()
        return worker

    def close(self) -> None:
        stop_processes(worker.proc for worker in self.started)


@pytest.fixture
def workers(store: Store, ledger: Ledger, tmp_path: Path) -> Iterator[Workers]:
    with contextlib.closing(Workers(store, ledger, tmp_path)) as started:
        yield started


def as_json(value: Any) -> Any:
    """A JSON column as Python: Postgres hands jsonb over parsed, SQLite as text."""
    return json.loads(value) if isinstance(value, str) else value


def lifecycle(client: Client, run_id: str) -> list[str]:
    """The run's event types in order, heartbeats left out."""
    return [e.event_type for e in client.events(run_id) if e.event_type != "heartbeat"]


def wait_status(client: Client, run_id: str, status: RunStatus, timeout: float) -> None:
    def describe() -> str:
        run = client.get(run_id)
        return f"run {run_id} is {run.status}, not {status}; events: {lifecycle(client, run_id)}"

    wait_until(lambda: client.get(run_id).status is status, timeout, describe)


def blocking_run(client: Client, **payload: Any) -> str:
    return client.start(BLOCKING_TYPE, payload).id


# -- partitioning ------------------------------------------------------------------------

PARTITION = {
    "w-alpha": ("alpha.%",),
    "w-beta": ("beta.%",),
    "w-gamma": ("gamma.%",),
    "w-alphabeta": ("alpha.%", "beta.%"),
}
MIXED_TYPES = ("alpha.x.v1", "beta.y.v1", "gamma.z.v1")
MIXED_RUNS = 2000


def test_workers_drain_mixed_runs_each_by_a_matching_worker(
    store: Store, client: Client, workers: Workers, ledger: Ledger
) -> None:
    for worker_id, prefixes in PARTITION.items():
        workers.start(worker_id, *prefixes, lease=15, concurrency=8, ready=False)
    for worker in workers.started:
        worker.wait_ready()

    for i in range(MIXED_RUNS):
        client.start(MIXED_TYPES[i % len(MIXED_TYPES)], {"i": i})

    def statuses() -> dict[str, int]:
        return dict(store.sql("select status, count(*) from workflow_run group by status"))

    wait_until(
        lambda: statuses() == {"succeeded": MIXED_RUNS},
        120,
        lambda: f"runs by status: {statuses()}; ledger lines: {len(ledger.read())}",
    )

    done = ledger.entries("done")
    runs_per_id = collections.Counter(entry["run"] for entry in done)
    twice = [run_id for run_id, n in runs_per_id.items() if n > 1]
    assert not twice, f"{len(twice)} runs executed more than once, e.g. {twice[:3]}"
    assert len(runs_per_id) == MIXED_RUNS

    executed_by = {entry["run"]: entry for entry in done}
    misrouted = [
        (e["type"], e["worker"])
        for e in done
        if not any(names.prefix_matches(p, e["type"]) for p in PARTITION[e["worker"]])
        or e["prefixes"] != list(PARTITION[e["worker"]])
    ]
    assert not misrouted, f"runs executed by a worker whose prefixes do not match: {misrouted[:5]}"
    assert {e["worker"] for e in done if e["type"] == "gamma.z.v1"} == {"w-gamma"}

    rows = store.sql("select id, type, leased_by, result, attempt from workflow_run")
    for run_id, type_, leased_by, result, attempt in rows:
        entry = executed_by[str(run_id)]
        assert entry["type"] == type_
        # The recorded outcome is the one the executing worker produced.
        assert (leased_by, as_json(result), attempt) == (
            entry["worker"],
            {"worker": entry["worker"]},
            0,
        ), f"run {run_id}"

    by_run: dict[str, list[str]] = collections.defaultdict(list)
    for run_id, event_type in store.sql(
        "select workflow_id, event_type from workflow_event "
        "where event_type <> 'heartbeat' order by id"
    ):
        by_run[str(run_id)].append(event_type)
    wrong = {
        run_id: events
        for run_id, events in by_run.items()
        if events != ["created", "leased", "started", "succeeded"]
    }
    assert not wrong, f"{len(wrong)} runs with unexpected events, e.g. {list(wrong.items())[:3]}"
    assert len(by_run) == MIXED_RUNS


# -- crashes and stalls ------------------------------------------------------------------


def test_run_of_a_killed_worker_is_finished_by_another(
    client: Client, workers: Workers, ledger: Ledger
) -> None:
    doomed = workers.start("w-doomed", "slow.%", lease=2)
    run_id = blocking_run(client, block_workers=["w-doomed"], seconds=60)
    wait_until(
        lambda: ledger.entries("start", run=run_id),
        15,
        lambda: f"the handler never started:\n{doomed.log()}",
    )

    doomed.signal(signal.SIGKILL)
    assert doomed.wait_exit(10) == -signal.SIGKILL
    rescuer = workers.start("w-rescuer", "slow.%", lease=2)

    wait_status(client, run_id, RunStatus.SUCCEEDED, timeout=20)
    run = client.get(run_id)
    # The crash of a worker that held the run is not charged to it at once: the run is
    # retried alone first (see test_poison_runs.py).
    assert run.attempt == 0
    assert run.result == {"worker": "w-rescuer", "attempt": 1}
    assert run.leased_by == "w-rescuer"
    assert lifecycle(client, run_id) == [
        "created",
        "leased",
        "started",
        "retried",
        "leased",
        "started",
        "succeeded",
    ]
    events = client.events(run_id)
    retried = next(e for e in events if e.event_type == "retried")
    assert retried.data["reason"] == "lease_expired"
    assert retried.data["worker_id"] == "w-doomed"
    assert (retried.data["charged"], retried.data["attempt"]) == (False, 0)
    assert [e.data["worker_id"] for e in events if e.event_type == "leased"] == [
        "w-doomed",
        "w-rescuer",
    ]
    assert [(e["worker"], e["event"]) for e in ledger.entries(run=run_id)] == [
        ("w-doomed", "start"),
        ("w-rescuer", "start"),
        ("w-rescuer", "end"),
    ]
    assert "lease expired" in (run.last_error or "")
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait_exit(15) == 0


def _stop_outside_write(worker: WorkerProcess, store: Store) -> None:
    """SIGSTOP ``worker`` at a moment it holds no SQLite write lock.

    A process stopped inside a write transaction keeps the file locked and stalls every
    other writer: real, but not what the stall tests are about. Postgres has no such lock.
    """
    for _ in range(20):
        worker.signal(signal.SIGSTOP)
        if store.kind != "sqlite" or _sqlite_writable(store):
            return
        worker.signal(signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError(f"{worker.worker_id} kept the SQLite database locked")


def _sqlite_writable(store: Store) -> bool:
    import sqlite3

    from simpleworkflow import config

    conn = sqlite3.connect(config.sqlite_path(store.url), timeout=0.5, isolation_level=None)
    try:
        conn.execute("begin immediate")
        conn.execute("rollback")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def test_a_stalled_worker_is_fenced_off_after_its_lease_is_taken_over(
    store: Store, client: Client, workers: Workers, ledger: Ledger, tmp_path: Path
) -> None:
    go_file = tmp_path / "go"
    paused = workers.start("w-paused", "slow.%", lease=2)
    run_id = blocking_run(client, block_workers=["w-paused"], go_file=str(go_file), seconds=60)
    wait_until(lambda: ledger.entries("start", run=run_id), 15, "the handler never started")

    _stop_outside_write(paused, store)
    try:
        rival = workers.start("w-rival", "slow.%", lease=2)
        wait_status(client, run_id, RunStatus.SUCCEEDED, timeout=20)
    finally:
        paused.signal(signal.SIGCONT)
    taken_over = client.get(run_id)
    # The stall is not charged to the run: it held the worker with others (see recovery).
    assert taken_over.result == {"worker": "w-rival", "attempt": 1}

    # Awake again, the paused worker finds its lease ended unrenewed and gives it up...
    wait_until(
        lambda: ledger.entries("noticed", run=run_id, worker="w-paused"),
        10,
        lambda: f"the paused worker never noticed:\n{paused.log()}",
    )
    assert ledger.entries("noticed", run=run_id)[0]["reason"] == "lease lost"
    paused.wait_log("lease lost")
    # ...and when its handler finally returns, its result is thrown away.
    go_file.touch()
    wait_until(lambda: ledger.entries("end", run=run_id, worker="w-paused"), 10, "no end")
    time.sleep(1.0)
    after = client.get(run_id)
    assert (after.status, after.result, after.attempt) == (
        RunStatus.SUCCEEDED,
        {"worker": "w-rival", "attempt": 1},
        0,
    )
    assert after.updated_at == taken_over.updated_at, "a fenced-off worker wrote to the run"
    assert lifecycle(client, run_id).count("succeeded") == 1
    heartbeats = [e for e in client.events(run_id) if e.event_type == "heartbeat"]
    assert all(
        e.created_at < taken_over.updated_at or e.data["worker_id"] == "w-rival" for e in heartbeats
    ), "the paused worker extended a lease it no longer held"

    # The paused worker goes on working: with its rival gone, it runs the next run.
    rival.signal(signal.SIGTERM)
    assert rival.wait_exit(15) == 0
    next_id = blocking_run(client)
    wait_status(client, next_id, RunStatus.SUCCEEDED, timeout=15)
    assert client.get(next_id).result == {"worker": "w-paused", "attempt": 1}
    paused.signal(signal.SIGTERM)
    assert paused.wait_exit(15) == 0


# -- shutdown ----------------------------------------------------------------------------


@dataclass
class Leaving:
    """One store's side of the shutdown test: the worker told to leave, and its runs."""

    kind: str
    client: Client
    ledger: Ledger
    workers: Workers
    worker: WorkerProcess
    short: str
    stubborn: str
    polite: str

    def wait_started(self) -> None:
        wait_until(
            lambda: len(self.ledger.entries("start")) == 3,
            15,
            lambda: f"{self.kind}: handlers started: {self.ledger.read()}\n{self.worker.log()}",
        )

    def check_left(self) -> None:
        """The short handler finished; the long ones were released, and the polite one
        noticed why."""
        client, kind = self.client, self.kind
        done = client.get(self.short)
        assert (done.status, done.result) == (
            RunStatus.SUCCEEDED,
            {"worker": "w-leaving", "attempt": 1},
        ), kind
        for run_id in (self.stubborn, self.polite):
            run = client.get(run_id)
            assert (run.status, run.attempt, run.leased_by) == (RunStatus.PENDING, 0, None), kind
            assert lifecycle(client, run_id) == ["created", "leased", "started", "released"]
            released = client.events(run_id)[-1]
            assert released.data == {"worker_id": "w-leaving", "reason": "shutdown"}, kind
        assert [e["reason"] for e in self.ledger.entries("noticed", run=self.polite)] == [
            "shutdown"
        ], kind
        assert self.ledger.entries("stopped", run=self.polite), kind

    def check_taken_over(self) -> None:
        for run_id in (self.stubborn, self.polite):
            wait_status(self.client, run_id, RunStatus.SUCCEEDED, timeout=15)
            run = self.client.get(run_id)
            assert (run.attempt, run.result) == (0, {"worker": "w-next", "attempt": 1}), self.kind


def test_sigterm_finishes_short_handlers_and_releases_long_ones(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Both stores at once, each with a worker of its own, signalled together: every check
    is made on each store, and the grace period and the released runs' delay are waited
    out once."""
    with contextlib.ExitStack() as stack:
        sides: list[Leaving] = []
        for store, where in every_store(tmp_path, request):
            ledger = Ledger(where / "ledger.jsonl")
            workers = stack.enter_context(contextlib.closing(Workers(store, ledger, where)))
            client = stack.enter_context(store.client())
            leaving = workers.start("w-leaving", "slow.%", concurrency=3, grace=2.5, ready=False)
            short = blocking_run(client, block_workers=["w-leaving"], seconds=1.0)
            stubborn = blocking_run(client, block_workers=["w-leaving"], seconds=60)
            polite = blocking_run(client, block_workers=["w-leaving"], seconds=60, cooperative=True)
            sides.append(
                Leaving(store.kind, client, ledger, workers, leaving, short, stubborn, polite)
            )
        for side in sides:
            side.worker.wait_ready()
            side.wait_started()

        started = time.monotonic()
        for side in sides:
            side.worker.signal(signal.SIGTERM)
        for side in sides:
            assert side.worker.wait_exit(20) == 0
            assert time.monotonic() - started >= 2.0, f"{side.kind}: exited before the grace"
        for side in sides:
            side.check_left()

        taking_over = [side.workers.start("w-next", "slow.%", ready=False) for side in sides]
        for side, worker in zip(sides, taking_over, strict=True):
            worker.wait_ready()
            side.check_taken_over()


# -- wake-ups ----------------------------------------------------------------------------


def test_idle_postgres_worker_wakes_for_a_run_inserted_with_plain_sql(
    make_database: Callable[[], str], ledger: Ledger, tmp_path: Path
) -> None:
    url = make_database()
    backend = open_backend(url, schema="workflow")
    try:
        backend.migrate()
    finally:
        backend.close()
    env = {**os.environ, "SIMPLEWORKFLOW_DATABASE_URL": url, "SIMPLEWORKFLOW_SCHEMA": "workflow"}
    workers = Workers(Store("postgres", url), ledger, tmp_path)
    try:
        idle = workers.start("w-idle", "content.%", poll=60, env=env)
        with psycopg.connect(url, autocommit=True) as conn:
            wait_until(
                lambda: conn.execute(
                    "select 1 from pg_stat_activity "
                    "where datname = current_database() and query = 'listen simpleworkflow'"
                ).fetchone(),
                10,
                lambda: f"the worker never listened:\n{idle.log()}",
            )
            time.sleep(0.5)  # past its first claim: idle until woken or 60 s from now
            inserted = time.monotonic()
            row = conn.execute(seed_sql.CREATE).fetchone()
            assert row is not None
            run_id = str(row[0])
            wait_until(
                lambda: ledger.entries("done", run=run_id),
                5,
                lambda: f"the idle worker did not wake up:\n{idle.log()}",
            )
        assert time.monotonic() - inserted < 5
        with Client(url, schema="workflow") as client:
            wait_status(client, run_id, RunStatus.SUCCEEDED, timeout=5)
    finally:
        workers.close()


def test_idle_worker_in_another_process_picks_up_a_new_run_long_before_its_next_poll(
    store: Store, client: Client, workers: Workers, ledger: Ledger
) -> None:
    # Postgres wakes it with a notification; on SQLite it sees the file change.
    poll = 30.0
    idle = workers.start("w-idle", "alpha.%", poll=poll)
    time.sleep(0.5)  # past its first claim: idle until woken or 30 s from now
    for _ in range(3):
        run_id = client.start("alpha.x.v1", {}).id
        wait_status(client, run_id, RunStatus.SUCCEEDED, timeout=poll / 2)
    assert len(ledger.entries("done")) == 3, idle.log()
