"""One measurement of one system: a new database, the driver's commands, the figures.

Drains start ``processes`` worker processes of the driver, wait until each says ``ready``,
say ``go`` to all at once and read the progress lines each prints (see
``drivers/_common.py``): the rate is the jobs over the time from the first handler call
to the moment the system's own tables first show every job finished (one count query per
system, polled), with start-up (imports, connections, a launch) left out as the main
suite leaves it out.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from benchmarks.peers.systems import System

_numbers = itertools.count()
STEPS_SHARE = 5  # a 10-step workflow case runs a fifth of the jobs


class Failed(Exception):
    """A measurement that did not complete; its message says why."""


def database_url(server_url: str, name: str) -> str:
    """``server_url`` pointed at database ``name``, as a URL every peer's driver accepts
    (a socket directory stays in the ``host`` query parameter)."""
    parts = urlsplit(server_url)
    user = parts.username or "postgres"  # as written: still percent-encoded
    secret = f":{parts.password}" if parts.password else ""
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme, f"{user}{secret}@{host}{port}", f"/{name}", parts.query, ""))


@contextlib.contextmanager
def fresh_database(server_url: str, system: str) -> Iterator[str]:
    """A new, empty database for one measurement; dropped (sessions and all) after."""
    slug = "".join(c if c.isalnum() else "_" for c in system.lower())
    name = f"peers_{os.getpid()}_{next(_numbers)}_{slug}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'create database "{name}"'.encode())
    try:
        yield database_url(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{name}" with (force)'.encode())


def call(system: System, *args: str, timeout: float = 600) -> Any:
    """Run one driver command; its last line of output, parsed as JSON (None if empty)."""
    try:
        done = subprocess.run(
            system.command(*args), env=system.env, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as error:
        raise Failed(f"{args[0]} timed out after {timeout:g} s") from error
    if done.returncode != 0:
        raise Failed(f"{args[0]} exited {done.returncode}: {_last_line(done.stderr)}")
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


class _Worker:
    """One worker process of a driver, its output read by a thread."""

    def __init__(self, system: System, url: str, mode: str, kind: str) -> None:
        # A file, not a pipe: a chatty worker must never block on a full pipe.
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            system.command("worker", url, mode, kind), env=system.env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == "ready":
                self.lines.put("ready")
                continue
            count, first, last = line.split()
            self.count, self.first, self.last = int(count), float(first), float(last)
        self.lines.put("")  # end of output

    def wait_ready(self, timeout: float) -> None:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            line = ""
        if line != "ready":
            raise Failed(f"a worker did not start: {self.stderr()}")

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()

    def stop(self) -> None:
        self.send("stop")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()

    def stderr(self) -> str:
        self.log.seek(0)
        return _last_line(self.log.read())


def drain(
    system: System, url: str, jobs: int, processes: int, mode: str, kind: str = "noop"
) -> float:
    """Load ``jobs`` jobs, then drain them with ``processes`` workers; jobs per second."""
    call(system, "load", url, str(jobs), kind)
    workers = [_Worker(system, url, mode, kind) for _ in range(processes)]
    try:
        for worker in workers:
            worker.wait_ready(120)
        for worker in workers:
            worker.send("go")
        deadline = time.monotonic() + max(120.0, jobs / 20)
        while sum(worker.count for worker in workers) < jobs:
            if time.monotonic() > deadline:
                done = sum(worker.count for worker in workers)
                raise Failed(f"drain timed out with {done} of {jobs} jobs done")
            for worker in workers:
                if worker.proc.poll() is not None:
                    raise Failed(f"a worker stopped: {worker.stderr()}")
            time.sleep(0.01)
        first = min(worker.first for worker in workers if worker.count)
        return jobs / max(_finished(system, url, jobs, deadline) - first, 1e-6)
    finally:
        for worker in workers:
            worker.stop()


def _finished(system: System, url: str, jobs: int, deadline: float) -> float:
    """When the system's own tables first show all ``jobs`` finished (polled every 5 ms):
    a handler's call is not its job's completion, which commits after it."""
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            now = time.time()
            row = conn.execute(system.done_sql.encode()).fetchone()
            if row and row[0] >= jobs:
                return now
            if time.monotonic() > deadline:
                raise Failed(f"drain timed out with {row[0] if row else 0} of {jobs} recorded")
            time.sleep(0.005)


def measure(
    system: System, case: str, server_url: str, jobs: int, samples: int
) -> dict[str, float]:
    """The figures of ``case`` for ``system`` on a new database, by metric name."""
    with fresh_database(server_url, system.name) as url:
        call(system, "setup", url)
        if case in ("start_one", "start_batch"):
            return {case: float(call(system, case, url, str(jobs))["rate"])}
        if case == "pickup":
            figures = call(system, "pickup", url, str(samples))
            return {"pickup_p50_ms": figures["p50_ms"], "pickup_p99_ms": figures["p99_ms"]}
        if case == "steps":
            return {case: drain(system, url, max(10, jobs // STEPS_SHARE), 1, "default", "steps")}
        processes = 2 if case == "drain_2" else 1
        mode = {"drain_tuned": "tuned", "drain_sync": "sync"}.get(case, "default")
        return {case: drain(system, url, jobs, processes, mode)}
