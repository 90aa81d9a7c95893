"""A SQLite worker through its file's faults: locked by another process, on a disk that
fills up, read-only. Nothing may be lost, no attempt charged, no journaled step run
twice; the outage is logged, with SQLite's own reason, and the worker carries on by
itself once the fault ends.

The full disk and the read-only file are a small tmpfs of the test's own, filled or
remounted read-only: mounting needs root (as in CI's container); elsewhere those tests
are skipped. A file cannot turn read-only under an open connection (Linux refuses to
remount a file system read-only while a file on it is open for writing), so the
read-only test starts a worker on a file that is read-only already: it must refuse to
start, saying why, and lose nothing.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Store, poller_thread
from worker_app import wait_until

from simpleworkflow import App, Client, Context, RunStatus, errors

TYPE = "sqlite.faults.v1"
STEPS = ("fetch", "transform", "store")
PAD = "x" * 2000  # payloads that make the file grow as the runs are written


class Witness:
    """Each step body's executions, counted outside the engine."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.executions: collections.Counter[tuple[str, str]] = collections.Counter()

    def ran(self, run_id: str, step: str) -> None:
        with self.lock:
            self.executions[(run_id, step)] += 1


def steps_app(store: Store, witness: Witness) -> App:
    app = App(store.url)

    @app.workflow(TYPE)
    def handler(payload: dict[str, Any], ctx: Context) -> str:
        for step in STEPS:

            def body(step: str = step) -> str:
                witness.ran(ctx.run_id, step)
                time.sleep(0.05)
                return step + PAD

            ctx.step(step, body)
        return "done"

    return app


def start(store: Store, count: int) -> list[str]:
    with store.client() as client:
        return [r.id for r in client.start_many([(TYPE, {"pad": PAD})] * count)]


def finished(store: Store, ids: list[str]) -> bool:
    with store.client() as client:
        return all(client.get(run_id).is_terminal for run_id in ids)


def assert_all_done_once(store: Store, witness: Witness, ids: list[str]) -> None:
    with Client(store.url) as client:
        runs = [client.get(run_id) for run_id in ids]
    assert [run.status for run in runs] == [RunStatus.SUCCEEDED] * len(ids)
    assert not {run.id: run.attempt for run in runs if run.attempt}, "attempts charged"
    repeated = {key: n for key, n in witness.executions.items() if n != 1}
    assert not repeated, f"steps run more than once: {repeated}"
    assert len(witness.executions) == len(ids) * len(STEPS)


def outage_log(caplog: pytest.LogCaptureFixture) -> tuple[list[str], int]:
    """The outage lines the worker logged, and how many ends of one."""
    lines = [r.getMessage() for r in caplog.records if r.name == "simpleworkflow.worker"]
    return [m for m in lines if "cannot reach the store" in m], sum(
        "answers again" in m for m in lines
    )


def test_a_file_locked_by_another_process_holds_the_worker_up_and_loses_nothing(
    tmp_path: Path,
) -> None:
    store = Store("sqlite", f"sqlite:///{tmp_path / 'runs.db'}").migrate()
    witness = Witness()
    ids = start(store, 30)
    locker = (
        "import sqlite3, sys, time\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "conn.execute('begin exclusive')\n"
        "print('locked', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
    )
    with poller_thread(steps_app(store, witness), concurrency=4, lease_duration=20):
        wait_until(lambda: len(witness.executions) >= 10, 60, "no progress")
        command = [sys.executable, "-c", locker, str(tmp_path / "runs.db"), "3"]
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as holder:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            during = len(witness.executions)
            time.sleep(2)
            # Steps already begun may finish, but none journals, so none follows them.
            assert len(witness.executions) <= during + 4
        wait_until(lambda: finished(store, ids), 60, "runs left unfinished")
    assert_all_done_once(store, witness, ids)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 4 MB of the test's own."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root only): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> Path:
    """Write a file until the disk is full; return it (delete it to free the disk)."""
    filler = path / "filler"
    # Unbuffered: a buffered file would keep the part of a write that did not fit and
    # raise again when it is closed, outside the suppress.
    with contextlib.suppress(OSError), filler.open("wb", buffering=0) as out:
        while True:
            out.write(b"\0" * 65536)
            os.fsync(out.fileno())
    return filler


def test_a_full_disk_holds_the_worker_up_until_there_is_room_again(
    disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    store = Store("sqlite", f"sqlite:///{disk / 'runs.db'}").migrate()
    witness = Witness()
    ids = start(store, 40)
    with poller_thread(steps_app(store, witness), concurrency=4, lease_duration=30):
        wait_until(lambda: len(witness.executions) >= 10, 60, "no progress")
        filler = fill(disk)
        wait_until(lambda: outage_log(caplog)[0], 30, "the full disk was not noticed")
        time.sleep(1)
        filler.unlink()
        wait_until(lambda: finished(store, ids), 90, "runs left unfinished")
    assert_all_done_once(store, witness, ids)
    began, ended = outage_log(caplog)
    assert "full" in began[0], began[0]
    assert ended >= 1


def test_a_worker_on_a_read_only_file_says_so_and_the_runs_wait_for_a_writable_one(
    disk: Path,
) -> None:
    """A worker starts only on a file it can write: on a read-only one it fails at once
    and says why (as a Postgres worker does with a server it cannot reach at start); the
    runs wait, and a worker started once the file is writable again runs them."""
    store = Store("sqlite", f"sqlite:///{disk / 'runs.db'}").migrate()
    witness = Witness()
    ids = start(store, 10)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    try:
        with (
            pytest.raises(errors.StoreUnavailable, match="read-only") as refused,
            poller_thread(steps_app(store, witness), concurrency=4),
        ):
            time.sleep(1)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
    assert str(disk / "runs.db") in str(refused.value)
    assert not witness.executions
    with poller_thread(steps_app(store, witness), concurrency=4):
        wait_until(lambda: finished(store, ids), 60, "runs left unfinished")
    assert_all_done_once(store, witness, ids)
