"""Graceful shutdown is bounded, and never leaves a run claimable while its code still runs.

Python cannot interrupt a thread: a plain ``def`` step of an async body, or a sync handler,
goes on after the worker asked it to stop. The worker process must still exit within its
grace period plus a few seconds, and another worker must not start the run before the
process that runs its code has gone; an embedded worker (``run_async``) keeps such a run
leased until its code returns. Checked with real worker processes and a real ledger of
when each execution of the step began and ended.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import Store, poller_thread
from test_worker_processes import Workers, lifecycle, wait_status
from worker_app import STEP_TYPE, Ledger, wait_until

from simpleworkflow import App, Client, Context, RunStatus

GRACE = 2.0
# Exit within the grace period plus this: a second to stop, the last writes, start-up of
# the interpreter's exit. Generous for a busy two-core machine, and far below the 20 s the
# stubborn step sleeps.
MARGIN = 8.0


@pytest.fixture
def workers(store: Store, ledger: Ledger, tmp_path: Path) -> Iterator[Workers]:
    with contextlib.closing(Workers(store, ledger, tmp_path)) as started:
        yield started


def executions(ledger: Ledger, run_id: str, died: dict[int, float]) -> list[tuple[float, float]]:
    """When each execution of the run's step began and ended: at its ``step_end`` mark, or
    else when its process died (``died``: pid to wall-clock time)."""
    ends = {e["pid"]: e["at"] for e in ledger.entries("step_end", run=run_id)}
    return sorted(
        (e["at"], ends.get(e["pid"], died.get(e["pid"], float("inf"))))
        for e in ledger.entries("step_start", run=run_id)
    )


def test_sigterm_exits_in_time_while_a_sync_step_runs_and_the_step_never_runs_twice_at_once(
    client: Client, workers: Workers, ledger: Ledger
) -> None:
    leaving = workers.start("w-leaving", "slow.%", grace=GRACE)
    run_id = client.start(STEP_TYPE, {"block_workers": ["w-leaving"], "seconds": 20}).id
    wait_until(
        lambda: ledger.entries("step_start", run=run_id),
        15,
        lambda: f"the step never started:\n{leaving.log()}",
    )
    workers.start("w-next", "slow.%")  # idle, ready to take the run over

    signalled = time.monotonic()
    leaving.signal(signal.SIGTERM)
    status = leaving.wait_exit(30)
    took = time.monotonic() - signalled
    died = {leaving.proc.pid: time.time()}
    assert status == 0, leaving.log()
    assert took < GRACE + MARGIN, f"exit took {took:.1f}s with a {GRACE:g}s grace period"

    wait_status(client, run_id, RunStatus.SUCCEEDED, timeout=20)
    run = client.get(run_id)
    assert (run.result, run.attempt) == ({"step_worker": "w-next"}, 0)
    runs = executions(ledger, run_id, died)
    assert len(runs) == 2, ledger.entries(run=run_id)
    (_, first_end), (second_start, _) = runs
    assert second_start > first_end, "the step ran in two processes at the same time"
    events = [e for e in lifecycle(client, run_id) if not e.startswith("step_")]
    assert events == ["created", "leased", "started", "released", "leased", "started", "succeeded"]


def test_an_embedded_worker_keeps_a_run_leased_until_its_stubborn_handler_returns(
    store: Store, client: Client
) -> None:
    app = App(store.url, schema=store.schema)
    release = threading.Event()
    started = threading.Event()

    @app.workflow("test.stubborn.v1")
    def stubborn(payload: Any, ctx: Context) -> None:
        started.set()
        release.wait(30)  # deaf to the stop request

    run_id = client.start("test.stubborn.v1").id
    with poller_thread(app, shutdown_grace=0.5, lease_duration=2, poll_interval=0.2):
        assert started.wait(15)
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 0.5 + MARGIN

    # The worker has stopped, the handler's thread has not: the run stays leased, its
    # lease kept alive past two lease durations, so that no other worker may take it.
    time.sleep(4)
    run = client.get(run_id)
    assert (run.status, run.attempt) == (RunStatus.LEASED, 0), lifecycle(client, run_id)
    assert run.lease_until is not None and run.lease_until > datetime.now(UTC)
    release.set()
    wait_until(
        lambda: client.get(run_id).status is RunStatus.PENDING,
        10,
        lambda: f"the run was not given back: {lifecycle(client, run_id)}",
    )
    run = client.get(run_id)
    assert (run.attempt, run.leased_by) == (0, None)
    assert lifecycle(client, run_id)[-1] == "released"
