"""Racing schedulers in real processes, on both stores: two and four worker processes
(at the same time, each group on a store of its own) run the scheduler over 30 ticks of a
schedule that ticks every second, and each tick starts exactly one run. Counted from the
database (the runs keyed by the schedule), not from what the workers say."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from conftest import Store, make_store, stop_processes
from schedule_app import SCHEDULE, TICK_TYPE
from test_schedules import scheduled_runs

TESTS = Path(__file__).resolve().parent
TICKS = 30


def start_workers(store: Store, count: int, logs: Path) -> list[subprocess.Popen[bytes]]:
    inherited = store.env.get("PYTHONPATH")
    env = {**store.env, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), inherited]))}
    procs = []
    for n in range(count):
        with (logs / f"worker-{count}-{n}.log").open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "simpleworkflow",
                        "worker",
                        "schedule_app:app",
                        "--worker-id",
                        f"w{count}-{n}",
                        "--poll-interval",
                        "0.2",
                    ],
                    env=env,
                    cwd=TESTS,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
    return procs


def test_two_and_four_worker_processes_start_each_tick_once(
    store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    other_dir = tmp_path / "four"
    other_dir.mkdir()
    stores = {2: store, 4: make_store(store.kind, other_dir, request).migrate()}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for count, where in stores.items():
            procs += start_workers(where, count, tmp_path)
        deadline = time.monotonic() + TICKS + 30
        while (
            time.monotonic() < deadline
            and min(len(scheduled_runs(where, SCHEDULE)) for where in stores.values()) < TICKS + 1
        ):
            assert all(p.poll() is None for p in procs), "a worker exited early"
            time.sleep(0.5)
        for where in stores.values():
            with where.client() as client:
                client.schedules.pause(SCHEDULE)
    finally:
        stop_processes(procs)
    for count, where in stores.items():
        runs = scheduled_runs(where, SCHEDULE)
        keys = [key for _, key, _ in runs]
        ticks = sorted({datetime.fromisoformat(p["scheduled_for"]) for _, _, p in runs})
        assert len(keys) == len(set(keys)) == len(ticks) > TICKS, count
        assert {t for t, _, _ in runs} == {TICK_TYPE}
        first = ticks[0]
        window = [first + timedelta(seconds=s) for s in range(TICKS)]
        assert ticks[:TICKS] == window, f"{count} workers left a tick without a run"
        assert ticks == [first + timedelta(seconds=s) for s in range(len(ticks))]
        assert where.count() == len(runs)  # no other run was started
