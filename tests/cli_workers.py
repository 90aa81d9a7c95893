"""Worker processes started the way a user starts them, ``python -m simpleworkflow worker
APP``, with ``tests/`` on the path so that APP may be one of the test apps kept there
(``limits_app:app``, ``schedule_app:app``). One place for the command line, the
environment and the logs, so that the process tests differ only in what they check."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from conftest import Store, stop_processes

TESTS = Path(__file__).resolve().parent


class CliWorkers:
    """The worker processes of one test, each logging to ``logs/<worker id>.log``; leaving
    the ``with`` block kills whatever is left of them."""

    def __init__(self, target: str, logs: Path, *options: str) -> None:
        self.target = target
        self.logs = logs
        self.options = options
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log_paths: list[Path] = []

    def start(self, store: Store, worker_id: str) -> subprocess.Popen[bytes]:
        """Start one worker on ``store``, polling every 0.2 s (the tests' patience)."""
        inherited = store.env.get("PYTHONPATH")
        env = {**store.env, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), inherited]))}
        log = self.logs / f"{worker_id}.log"
        command = [sys.executable, "-m", "simpleworkflow", "worker", self.target]
        command += ["--worker-id", worker_id, "--poll-interval", "0.2", *self.options]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command, env=env, cwd=TESTS, stdout=out, stderr=subprocess.STDOUT
            )
        self.procs.append(proc)
        self.log_paths.append(log)
        return proc

    def wait_for(
        self, done: Callable[[], bool], timeout: float = 60, interval: float = 0.1
    ) -> None:
        """Poll ``done`` until it holds; fail with the workers' logs if it never does, or
        at once if a worker exited meanwhile (its log says why)."""
        deadline = time.monotonic() + timeout
        while not done():
            if any(proc.poll() is not None for proc in self.procs):
                raise AssertionError(f"a worker exited early:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not done after {timeout:g}s:\n{self.tail()}")
            time.sleep(interval)

    def wait_claiming(self, timeout: float = 60) -> None:
        """Wait until every worker started so far has begun to claim."""
        self.wait_for(lambda: all(" claiming " in p.read_text() for p in self.log_paths), timeout)

    def tail(self, chars: int = 1500) -> str:
        """The end of every worker's log, for a failure's message."""
        return "\n".join(p.read_text(errors="replace")[-chars:] for p in self.log_paths)

    def __enter__(self) -> CliWorkers:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        stop_processes(self.procs)
