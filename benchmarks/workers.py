"""Worker processes for a measurement, and the drain: how fast they empty a queue.

Workers are real subprocesses (``benchmarks.worker``), as in production: their start-up
is kept out of the figure by starting them first and releasing them together, and the
figure itself comes from the audit trail by the database clock (see ``stores``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from tqdm import tqdm

from benchmarks.stores import BenchStore

_ROOT = Path(__file__).resolve().parent.parent
POLL_SECONDS = 0.25
STALL_SECONDS = 60.0  # a drain that makes no progress this long has failed


class WorkerProcess:
    """One worker process of a fault benchmark: ``python -m <module> --worker <args>``,
    returned once it prints ``ready``; its stderr goes to ``log``."""

    def __init__(self, module: str, args: list[str], name: str, log: Path) -> None:
        path = os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])
        self.name = name
        self.log = log
        with log.open("a") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, "--worker", *args],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env={**os.environ, "PYTHONPATH": path},
                cwd=_ROOT,
            )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{name} failed to start:\n{log.read_text()}")

    def stop(self, timeout: float) -> None:
        """SIGTERM (thawed first, should it be frozen), then SIGKILL after ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class WorkerPool:
    """``processes`` worker processes on ``store``, each with ``concurrency`` handler slots."""

    def __init__(
        self,
        store: BenchStore,
        processes: int,
        concurrency: int,
        env: dict[str, str] | None = None,
    ) -> None:
        self.store = store
        self.processes = processes
        self.concurrency = concurrency
        self.procs: list[subprocess.Popen[str]] = []
        self._env = env or {}
        self._logs: list[Path] = []
        self._tmp = tempfile.TemporaryDirectory(prefix="bench-workers-")

    def __enter__(self) -> WorkerPool:
        path = os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "PYTHONPATH": path, **self._env}
        for number in range(self.processes):
            log = Path(self._tmp.name) / f"worker-{number}.log"
            self._logs.append(log)
            with log.open("w") as err:
                self.procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "benchmarks.worker",
                            self.store.url,
                            self.store.schema,
                            str(self.concurrency),
                        ],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=err,
                        text=True,
                        env=env,
                        cwd=_ROOT,
                    )
                )
        for proc in self.procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a worker failed to start:\n{self.logs()}")
        return self

    def go(self) -> None:
        """Release every worker at once."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()

    def check(self) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"a worker exited with {proc.returncode}:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(log.read_text(errors="replace")[-4000:] for log in self._logs)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
        self._tmp.cleanup()


def drain(
    store: BenchStore,
    *,
    runs: int,
    processes: int,
    concurrency: int,
    load: Callable[[], None] | None = None,
    label: str = "drain",
    env: dict[str, str] | None = None,
) -> float:
    """Runs per second from the first claim to the ``runs``-th completion.

    ``load`` writes the runs once the workers are up and idle (nothing is claimed before
    :meth:`WorkerPool.go`); without it the runs must already be there. ``env`` is added
    to the workers' environment.
    """
    after = store.last_event()
    with WorkerPool(store, processes, concurrency, env) as pool:
        if load is not None:
            load()
        pool.go()
        wait_for(store, pool, after, runs, label)
    return runs / store.window(after, runs)


def wait_for(store: BenchStore, pool: WorkerPool, after: int, runs: int, label: str) -> None:
    done, last_change = 0, time.monotonic()
    with tqdm(total=runs, desc=label, unit="run", leave=False, disable=None) as bar:
        while done < runs:
            # Each poll counts the drain's events so far: slow enough that its cost stays
            # negligible next to the drain's, which is measured by the database clock anyway.
            time.sleep(POLL_SECONDS)
            count = store.successes(after)
            if count > done:
                bar.update(min(count, runs) - done)
                done, last_change = min(count, runs), time.monotonic()
            elif time.monotonic() - last_change > STALL_SECONDS:
                raise RuntimeError(f"{label}: no progress for {STALL_SECONDS:g}s:\n{pool.logs()}")
            pool.check()
