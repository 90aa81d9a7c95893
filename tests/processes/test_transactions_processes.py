"""Transactions with real processes: a producer's transaction decides whether its run
exists and whether any worker hears of it; workers killed with SIGKILL in the middle of
hundreds of transactional steps never leave a business row without its journal entry,
or an entry without its row. Workers are ``tests/tx_app.py`` processes.
"""

from __future__ import annotations

import contextlib
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Store, stop_processes
from tx_app import CONFIRM_TYPE, LEDGER_TYPE
from worker_app import wait_until

from simpleworkflow import Client, RunStatus, config, errors

TX_APP = Path(__file__).parents[1] / "tx_app.py"


class Pool:
    """Worker processes of ``tx_app.py`` on one store; ``close`` kills what is left."""

    def __init__(self, store: Store, tmp_path: Path) -> None:
        self.store = store
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        worker_id = f"w{len(self.procs)}"
        log = self.tmp_path / f"{worker_id}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(TX_APP), "--worker-id", worker_id, *args],
                env=self.store.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        log = self.tmp_path / f"w{self.procs.index(proc)}.log"
        wait_until(
            lambda: " claiming " in log.read_text(errors="replace"),
            20,
            lambda: f"the worker never started:\n{log.read_text(errors='replace')}",
        )

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-2000:] for p in self.tmp_path.glob("w*.log")
        )

    def close(self) -> None:
        stop_processes(self.procs)


@pytest.fixture
def pool(store: Store, tmp_path: Path) -> Iterator[Pool]:
    store.sql("create table orders (id integer primary key)")
    store.sql("create table business (run_id text not null, step text not null, worker text)")
    with contextlib.closing(Pool(store, tmp_path)) as started:
        yield started


def producer_connection(store: Store) -> Any:
    if store.kind == "sqlite":
        return sqlite3.connect(config.sqlite_path(store.url))
    return psycopg.connect(store.url, options=f"-c search_path={store.schema}")


def wakes_until_marker(listener: psycopg.Connection[Any], schema: str) -> list[str]:
    """The wake-ups for ``schema`` delivered before the marker, which was committed after
    every transaction of interest: Postgres delivers notifications in commit order."""
    got = []
    for note in listener.notifies(timeout=10):
        if note.channel == "tx_marker":
            return got
        if note.payload.split(" ")[1:2] == [schema]:
            got.append(note.payload)
    raise AssertionError(f"the marker never came; before it: {got}")


def test_a_rolled_back_start_wakes_no_one_and_a_committed_one_is_picked_up(
    store: Store, pool: Pool, client: Client
) -> None:
    # Polls every ten minutes: only a wake-up (NOTIFY, or SQLite's file watch) brings it.
    pool.wait_ready(pool.start("--poll", "600"))
    listener = None
    if store.kind == "postgres":
        listener = psycopg.connect(store.url, autocommit=True)
        listener.execute("listen simpleworkflow")
        listener.execute("listen tx_marker")

    def marker() -> None:
        with psycopg.connect(store.url, autocommit=True) as other:
            other.execute("notify tx_marker")

    conn = producer_connection(store)
    conn.execute("insert into orders (id) values (1)")
    dropped = client.start(CONFIRM_TYPE, {"order": 1}, connection=conn)
    conn.rollback()
    if listener is not None:
        marker()
        assert wakes_until_marker(listener, store.schema) == []

    conn.execute("insert into orders (id) values (2)")
    kept = client.start(CONFIRM_TYPE, {"order": 2}, connection=conn)
    conn.commit()
    conn.close()
    if listener is not None:
        marker()
        assert wakes_until_marker(listener, store.schema) == [f"wake {store.schema} {CONFIRM_TYPE}"]
        listener.close()

    wait_until(
        lambda: client.get(kept.id).status is RunStatus.SUCCEEDED,
        15,
        lambda: f"run {client.get(kept.id).status}; worker log:\n{pool.logs()}",
    )
    assert client.get(kept.id).result == {"order": 2, "worker": "w0"}
    with pytest.raises(errors.RunNotFound):
        client.get(dropped.id)
    assert store.count("workflow_run") == 1
    assert store.sql("select id from orders") == [(2,)]


RUNS = 300
STEPS = 4
WORKERS = 2
#: At most this many kills, one every 0.3 to 0.8 s while runs remain unfinished.
KILLS = 30


def test_killed_workers_never_split_a_step_from_its_business_row(
    store: Store, pool: Pool, client: Client
) -> None:
    run_ids = [r.id for r in client.start_many([(LEDGER_TYPE, {"steps": STEPS})] * RUNS)]
    rng = random.Random(18)
    witness = pool.tmp_path / "witness.txt"
    args = ("--lease", "1", "--concurrency", "16", "--witness", str(witness))
    workers = [pool.start(*args) for _ in range(WORKERS)]
    kills = 0

    def finished() -> bool:
        nonlocal kills
        done = store.sql("select count(*) from workflow_run where status = 'succeeded'")
        if int(done[0][0]) == RUNS:
            return True
        for n, proc in enumerate(workers):
            if proc.poll() is not None:
                workers[n] = pool.start(*args)
        if kills < KILLS:
            time.sleep(rng.uniform(0.3, 0.8))
            victim = rng.choice(workers)
            if victim.poll() is None:
                victim.send_signal(signal.SIGKILL)
                kills += 1
        return False

    wait_until(finished, 120, lambda: f"{kills} kills; {pool.logs()}")

    business = [(str(r), s) for r, s in store.sql("select run_id, step from business")]
    journal = [
        (str(r), s)
        for r, s in store.sql(
            "select run_id, step_name from workflow_step where status = 'completed'"
        )
    ]
    assert len(business) == len(set(business)), "a step's business row was written twice"
    assert sorted(business) == sorted(journal)
    assert len(journal) == RUNS * STEPS
    expected = [f"s{k}" for k in range(STEPS)]
    assert all(client.get(run_id).result == expected for run_id in run_ids)
    # The kills did land in the middle of runs (some were rescued after their lease), and
    # inside steps' transactions: rows were written that never committed.
    rescued = store.sql(
        "select count(distinct workflow_id) from workflow_event where event_type = 'retried'"
    )
    written = len(witness.read_text().splitlines())
    # (How many kills land before the runs finish depends on the machine: a fast one
    # finishes 300 runs in a few seconds.)
    assert kills >= 3 and int(rescued[0][0]) > 0, (kills, rescued)
    assert written > len(journal)
    print(
        f"{kills} kills; {rescued[0][0]} runs rescued after a kill; "
        f"{written - len(journal)} steps died between their insert and their commit"
    )
