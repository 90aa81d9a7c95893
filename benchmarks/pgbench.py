"""The machine's ceiling: what one connection commits per second with pgbench.

Two custom scripts, one statement per transaction, one client, prepared statements: a
single-row insert (what starting a run is at heart) and a single-row update by primary
key (what claiming and completing one is). Every figure of the suite is also shown as a
share of these, so that a result from a faster or slower disk still reads the same.

A third script sends the very statement ``Client.start`` sends, into a migrated schema
(with its indexes and the trigger that writes the ``created`` event): how fast the server
takes one start, whatever the client.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import psycopg
from tqdm import tqdm

from benchmarks.stores import NOOP
from simpleworkflow import Client
from simpleworkflow.backends.records import NewRun

_SETUP = [
    "drop schema if exists bench_pgbench cascade",
    "create schema bench_pgbench",
    "create table bench_pgbench.inserts (id bigserial primary key, v integer not null, "
    "at timestamptz not null default now())",
    "create table bench_pgbench.updates (id integer primary key, v integer not null, "
    "at timestamptz not null default now())",
    "insert into bench_pgbench.updates (id, v) select i, 0 from generate_series(1, 100000) i",
    "vacuum analyze bench_pgbench.updates",
]
_SCRIPTS = {
    "insert": "\\set v random(1, 1000000)\ninsert into bench_pgbench.inserts (v) values (:v);\n",
    "update": "\\set id random(1, 100000)\n"
    "update bench_pgbench.updates set v = v + 1, at = now() where id = :id;\n",
}
_RUNS_SCHEMA = "bench_pgbench_runs"
_ID_STAND_IN = "00000000-0000-7000-8000-000000000000"
_TPS = re.compile(r"^tps = ([0-9.]+)", re.MULTILINE)


@dataclass(frozen=True)
class Ceilings:
    """Single-client transactions per second; ``None`` where pgbench could not run."""

    insert_tps: float | None
    update_tps: float | None
    pgbench: str | None
    seconds: float
    #: pgbench sending simple-workflow's own start statement (trigger and all), which
    #: tells the cost of the schema apart from the cost of the client.
    start_tps: float | None = None


def measure(url: str, pgbench: str | None, seconds: float) -> Ceilings:
    """Run the scripts for ``seconds`` each against the server at ``url``."""
    if pgbench is None:
        return Ceilings(None, None, None, seconds)
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in _SETUP:
            conn.execute(statement.encode())
    version = subprocess.run(
        [pgbench, "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    scripts = dict(_SCRIPTS, start=_start_script(url))
    try:
        results = {
            name: _run(pgbench, url, name, script, seconds) for name, script in scripts.items()
        }
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(b"drop schema if exists bench_pgbench cascade")
            conn.execute(f"drop schema if exists {_RUNS_SCHEMA} cascade".encode())
    return Ceilings(results["insert"], results["update"], version, seconds, results["start"])


def _start_script(url: str) -> str:
    """The statement ``Client.start(type, {})`` sends, with its parameters inlined.

    The client sends a new time-ordered id each time; in a script repeated as it is, the
    schema's own generator of such ids stands in for it.
    """
    with Client(url, schema=_RUNS_SCHEMA) as client:
        client.migrate()
        statement = next(client.backend.create_run(NewRun(type=NOOP, payload="{}")))
    params = dict(statement.params, id=_ID_STAND_IN)
    with psycopg.connect(url) as conn:
        text = psycopg.ClientCursor(conn).mogrify(statement.sql, params)
    literal = f"'{_ID_STAND_IN}'::uuid"
    assert literal in text, text
    text = text.replace(literal, f"{_RUNS_SCHEMA}.workflow_uuid_v7()")
    # pgbench reads one statement per line: drop the comments, then join the lines.
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return " ".join(" ".join(lines).split()) + ";\n"


def _run(pgbench: str, url: str, name: str, script: str, seconds: float) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-pgbench-") as tmp:
        path = Path(tmp) / f"{name}.sql"
        path.write_text(script)
        command = [
            pgbench,
            "--no-vacuum",
            "--client=1",
            "--jobs=1",
            "--protocol=prepared",
            f"--time={max(1, round(seconds))}",
            f"--file={path}",
            url,
        ]
        done = threading.Event()
        ticker = threading.Thread(target=_tick, args=(f"pgbench {name}", seconds, done))
        ticker.start()
        try:
            finished = subprocess.run(command, capture_output=True, text=True, check=False)
        finally:
            done.set()
            ticker.join()
    found = _TPS.search(finished.stdout)
    if finished.returncode != 0 or found is None:
        raise RuntimeError(f"pgbench {name} failed:\n{finished.stdout}\n{finished.stderr}")
    return float(found.group(1))


def _tick(label: str, seconds: float, done: threading.Event) -> None:
    """A progress bar for a subprocess that reports nothing until it ends."""
    steps = max(1, round(seconds * 4))
    with tqdm(total=steps, desc=label, unit="", leave=False, disable=None) as bar:
        for _ in range(steps):
            if done.wait(0.25):
                break
            bar.update()
