"""``simpleworkflow demo``: what a new user sees first must work, quickly, every time.

It runs in-process on every store (twice on the same one, as a user would), and once as a
real process in an empty directory with psycopg made unimportable, as after a plain
``pip install``.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import Store

from simpleworkflow import Client, cli, demo_app
from simpleworkflow.cli import demo
from simpleworkflow.models import Run, RunStatus

TOTAL = sum(count for _, count in demo.BATCH)


def demo_runs(client: Client) -> list[Run]:
    return client.list(type_prefix="demo.%", limit=1000).runs


def check_output(out: str) -> str:
    """Assert the report is complete; return the id of the retried run it shows."""
    assert f"{TOTAL}/{TOTAL} done: {TOTAL - 1} succeeded, 1 failed" in out
    assert re.search(rf"^all\s+{TOTAL}\s+{TOTAL - 1}\s+1$", out, re.MULTILINE)
    assert "failed at once, not retried:" in out
    assert "PermanentError: https://hooks.example.com/gone answered 410 Gone" in out
    assert re.search(r"^  simpleworkflow .*runs list$", out, re.MULTILINE)
    trail = re.search(
        r"Audit trail of run (\S+) \(demo\.billing\.charge\.v1\):\n(.*?)\n\n", out, re.S
    )
    assert trail, out
    events = [line.split()[1] for line in trail.group(2).splitlines()[1:]]
    assert events[-1] == "succeeded"
    assert events.count("retried") == 2
    assert "error=ConnectionError: payment gateway timed out (attempt 1)" in trail.group(2)
    assert re.search(rf"^  simpleworkflow .*runs show {trail.group(1)}$", out, re.MULTILINE)
    workflow = re.search(
        r"Audit trail of run (\S+) \(demo\.accounts\.onboard\.v1\), a workflow:\n(.*?)\n\n",
        out,
        re.S,
    )
    assert workflow, out
    steps = [line.split()[1] for line in workflow.group(2).splitlines()[1:]]
    assert steps.count("resumed") == 3  # after the sleep, the e-mail's retry, the signal
    assert steps[-3:] == ["started", "resumed", "succeeded"]
    assert "signal_received" in steps
    assert re.search(rf"^  simpleworkflow .*runs show {workflow.group(1)}$", out, re.MULTILINE)
    return trail.group(1)


def test_demo_in_process_twice_on_one_store(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["-d", store.url, "--schema", store.schema, "demo"]
    retried = []
    for _ in range(2):
        began = time.monotonic()
        assert cli.main(argv) == 0
        assert time.monotonic() - began < 20
        retried.append(check_output(capsys.readouterr().out))

    with store.client() as client:
        runs = demo_runs(client)
        assert len(runs) == 2 * TOTAL
        by_status = Counter((run.type, run.status.value) for run in runs)
        assert by_status[(demo_app.WEBHOOK, "failed")] == 2
        assert by_status[(demo_app.THUMBNAIL, "succeeded")] == 30
        for run_id in retried:
            run = client.get(run_id)
            assert (run.status.value, run.attempt, run.result["amount"]) == ("succeeded", 2, 1991)


def test_demo_as_a_new_user_runs_it(tmp_path: Path) -> None:
    """No configuration, an empty directory, and no psycopg installed."""
    blocker = tmp_path / "blocked"
    (blocker / "psycopg").mkdir(parents=True)
    (blocker / "psycopg" / "__init__.py").write_text("raise ImportError('psycopg is blocked')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLEWORKFLOW_")}
    # Ahead of the rest of the path, which must stay: a checkout may be on it.
    env["PYTHONPATH"] = os.pathsep.join([str(blocker), *sys.path[1:]])
    project = tmp_path / "project"
    project.mkdir()

    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "simpleworkflow", "demo"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < 30
    assert done.stderr == ""
    # The database is named by its absolute path: the user sees which file it is.
    assert done.stdout.startswith(f"simpleworkflow demo on {project / 'simpleworkflow.db'}\n")
    retried = check_output(done.stdout)
    with Client(f"sqlite:///{project / 'simpleworkflow.db'}") as client:
        assert len(demo_runs(client)) == TOTAL
        assert client.get(retried).status.value == "succeeded"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_rewrites_one_line_on_a_terminal() -> None:
    stream = Terminal()
    progress = demo.Progress(2, stream)
    with Client("sqlite:///:memory:") as client:
        pending = client.start(demo_app.EMAIL, {"to": "a@example.com"})
    finished = dataclasses.replace(pending, status=RunStatus.SUCCEEDED)
    progress.update([pending, pending])
    progress.update([pending, pending])  # unchanged: nothing written
    progress.update([pending, finished])
    progress.close()
    assert stream.getvalue() == (
        "\r  0/2 done: 2 pending\x1b[K\r  1/2 done: 1 pending, 1 succeeded\x1b[K\n"
    )


def test_progress_off_a_terminal_prints_lines_and_always_the_last() -> None:
    stream = io.StringIO()
    progress = demo.Progress(1, stream)
    with Client("sqlite:///:memory:") as client:
        pending = client.start(demo_app.EMAIL, {"to": "a@example.com"})
    progress.update([pending])
    progress.update([dataclasses.replace(pending, status=RunStatus.LEASED)])  # rate-limited
    progress.update([dataclasses.replace(pending, status=RunStatus.FAILED)])  # rate-limited
    progress.close()
    assert stream.getvalue() == "  0/1 done: 1 pending\n  1/1 done: 1 failed\n"


def test_event_data_summary_reads_times_of_both_stores() -> None:
    start = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    data = {
        "worker_id": "w1",
        "error": {"type": "ConnectionError", "message": "down", "traceback": "..."},
        "attempt": 1,
        "retry_at": "2025-01-01 12:00:01.500",  # SQLite: UTC, no offset
        "lease_until": "2025-01-01T13:00:02+01:00",  # Postgres: with offset
        "run_at": None,
    }
    assert demo.summary(data, start) == (
        "worker_id=w1  error=ConnectionError: down  attempt=1  retry_at=+1.500s  "
        "lease_until=+2.000s"
    )
    assert demo.summary([1, 2], start) == "[1,2]"
