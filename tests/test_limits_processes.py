"""Flow control across worker processes (docs/flow-control.md): what held is read from
the audit trail, whatever the workers believe."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import Store, stop_processes
from limits_app import KEYED, RATED, STEPPED

from simpleworkflow import Client

TESTS = Path(__file__).parent
#: The events that end a lease.
LEASE_ENDS = ("succeeded", "failed", "retried", "released", "cancelled", "sleeping", "waiting")


@contextlib.contextmanager
def workers(store: Store, count: int, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = {**store.env, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    procs = []
    try:
        for n in range(count):
            with (tmp_path / f"w{n}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "simpleworkflow",
                            "worker",
                            "limits_app:app",
                            "--prefix",
                            "limits.%",
                            "--concurrency",
                            "2",
                            "--worker-id",
                            f"w{n}",
                            "--poll-interval",
                            "0.2",
                        ],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        logs = [tmp_path / f"w{n}.log" for n in range(count)]
        wait_for(lambda: all(" claiming " in log.read_text() for log in logs), tmp_path)
        yield procs
    finally:
        stop_processes(procs)


def wait_for(done: Callable[[], bool], tmp_path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.1)
    logs = "\n".join(p.read_text() for p in sorted(tmp_path.glob("w*.log")))
    raise AssertionError(f"not done after {timeout}s:\n{logs[-4000:]}")


def wait_finished(client: Client, ids: list[str], tmp_path: Path) -> None:
    wait_for(lambda: all(client.get(run_id).is_terminal for run_id in ids), tmp_path)


def lease_intervals(client: Client, run_id: str) -> list[tuple[int, int]]:
    """``(leased event id, id of the event that ended that lease)`` for each lease the
    run had. Event ids are taken in the order writes happen: a lease that began after
    another ended (its slot given back, committed) has a larger id than that end."""
    intervals, start = [], None
    for event in client.events(run_id):
        if event.event_type == "leased":
            start = event.id
        elif event.event_type in LEASE_ENDS and start is not None:
            intervals.append((start, event.id))
            start = None
    assert start is None, f"{run_id}: a lease never ended"
    return intervals


@pytest.mark.parametrize("processes", [2, 4])
def test_a_key_limit_of_one_is_never_exceeded_by_many_workers(
    store: Store, tmp_path: Path, processes: int
) -> None:
    with store.client() as client:
        client.admin.set_runtime(KEYED, "python")
        client.admin.set_concurrency(KEYED, None, per_key=1)
        with workers(store, processes, tmp_path):
            runs = client.start_many(
                [{"type": KEYED, "concurrency_key": f"customer-{n % 3}"} for n in range(60)]
            )
            wait_finished(client, [run.id for run in runs], tmp_path)
        by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for run in runs:
            assert client.get(run.id).status.value == "succeeded"
            by_key[str(run.concurrency_key)] += lease_intervals(client, run.id)
        workers_seen = {e.data.get("worker_id") for r in runs for e in client.events(r.id)}
    assert len(by_key) == 3
    for key, intervals in by_key.items():
        intervals.sort()
        overlaps = [(a, b) for a, b in itertools.pairwise(intervals) if b[0] < a[1]]
        assert not overlaps, f"{key}: leases held at once: {overlaps}"
    assert len(workers_seen - {None}) >= 2  # claims came from several processes


@pytest.mark.parametrize("processes", [2, 4])
def test_a_rate_limit_of_ten_a_second_holds_across_workers(
    store: Store, tmp_path: Path, processes: int
) -> None:
    """Shared by the claims of one type and the ctx.rate_limit calls of another's runs."""
    with store.client() as client:
        client.admin.set_runtime(RATED, "python")
        client.admin.set_rate_limit("partner-api", "10/s")
        client.admin.limit_rate(RATED, "partner-api")
        with workers(store, processes, tmp_path):
            runs = client.start_many([(RATED, {})] * 30 + [(STEPPED, {})] * 15)
            wait_finished(client, [run.id for run in runs], tmp_path)
        rated = [r for r in runs if r.type == RATED]
        starts = [
            e.created_at for r in rated for e in client.events(r.id) if e.event_type == "started"
        ]
        steps = [
            s.completed_at
            for r in runs
            if r.type == STEPPED
            for s in client.steps(r.id)
            if s.kind == "rate_limit"
        ]
        throttled = [
            e.data for r in runs for e in client.events(r.id) if e.event_type == "throttled"
        ]
    assert len(starts) == 30 and len(steps) == 15 and throttled
    assert all(client.get(r.id).status.value == "succeeded" for r in runs)
    # The limit's windows are whole seconds since the epoch, as the claims count them.
    taken = [*starts, *steps]
    per_second = Counter(int(at.timestamp()) for at in taken if at is not None)
    assert max(per_second.values()) <= 10, sorted(per_second.items())
    span = max(per_second) - min(per_second) + 1
    assert len(taken) <= 10 * span
