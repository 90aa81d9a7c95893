"""The machine's ceiling: what one connection commits per second with pgbench.

Two custom scripts, one statement per transaction, one client, prepared statements: a
single-row insert (what starting a run is at heart) and a single-row update by primary
key (what claiming and completing one is). Every figure of the suite is also shown as a
share of these, so that a result from a faster or slower disk still reads the same.

Two more scripts send the very statements ``Client.start`` and ``Client.start_many``
(1,000 runs) send, into a migrated schema (with its indexes and the trigger that writes
the ``created`` event): how fast the server takes a start, whatever the client.

Last, the single-row insert again at 25 transactions per second, one every 40 ms on
average like the latency cases' pauses: what one commit costs when the machine has been
idle in between (a VM's idle CPUs wake slowly), the floor under "insert to handler start".
"""

from __future__ import annotations

import re
import statistics
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from tqdm import tqdm

from benchmarks.stores import NOOP
from simpleworkflow import Client
from simpleworkflow.backends.base import Statement
from simpleworkflow.backends.ops import ATOMIC, Stream
from simpleworkflow.backends.records import NewRun
from simpleworkflow.names import new_run_id

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
_MANY = 1000  # runs per start_many call, as in the start_many case
_IDLE_RATE = 25  # transactions per second for the idle insert
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
    #: Runs per second when pgbench sends start_many's statements for 1,000 runs.
    start_many_tps: float | None = None
    #: One insert after an idle pause: its latency, median and 99th percentile.
    idle_insert_p50_ms: float | None = None
    idle_insert_p99_ms: float | None = None


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
    try:
        with Client(url, schema=_RUNS_SCHEMA) as client, psycopg.connect(url) as conn:
            client.migrate()
            start, start_many = _start_script(client, conn), _start_many_script(client, conn)
        scripts = dict(_SCRIPTS, start=start, start_many=start_many)
        tps = {name: _run(pgbench, url, name, script, seconds) for name, script in scripts.items()}
        idle = _idle_latencies(pgbench, url, seconds)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(b"drop schema if exists bench_pgbench cascade")
            conn.execute(f"drop schema if exists {_RUNS_SCHEMA} cascade".encode())
    return Ceilings(
        insert_tps=tps["insert"],
        update_tps=tps["update"],
        pgbench=version,
        seconds=seconds,
        start_tps=tps["start"],
        start_many_tps=tps["start_many"] * _MANY,
        idle_insert_p50_ms=statistics.median(idle),
        idle_insert_p99_ms=statistics.quantiles(idle, n=100, method="inclusive")[98],
    )


def _start_script(client: Client, conn: psycopg.Connection[Any]) -> str:
    """The statement ``Client.start(type, {})`` sends, with its parameters inlined."""
    statement = next(client.backend.create_run(NewRun(type=NOOP, payload="{}")))
    return _line(conn, statement) + "\n"


def _start_many_script(client: Client, conn: psycopg.Connection[Any]) -> str:
    """The statements ``Client.start_many`` sends for 1,000 runs: one transaction of
    several chunks (see ``run_ops.create_runs``)."""
    op = client.backend.create_runs(
        (new_run_id(), NewRun(type=NOOP, payload="{}")) for _ in range(_MANY)
    )
    assert next(op) is ATOMIC
    stream = op.send([])
    assert isinstance(stream, Stream), stream
    lines = [_line(conn, statement) for statement in stream.statements]
    return "\n".join(["begin;", *lines, "commit;", ""])


def _line(conn: psycopg.Connection[Any], statement: Statement) -> str:
    """One statement with its parameters inlined, on one line (pgbench reads a statement
    per line). The client sends new time-ordered ids each time; in a script repeated as
    it is, the schema's own generator of such ids stands in for them."""
    params = dict(statement.params)
    if "id" in params:
        params["id"] = _ID_STAND_IN
    text = psycopg.ClientCursor(conn).mogrify(statement.sql, params)
    generated = f"{_RUNS_SCHEMA}.workflow_uuid_v7()"
    literal, column = f"'{_ID_STAND_IN}'::uuid", "select i.id,"
    assert (literal in text) != (column in text), text
    text = text.replace(literal, generated).replace(column, f"select {generated},")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return " ".join(" ".join(lines).split()) + ";"


def _run(pgbench: str, url: str, name: str, script: str, seconds: float) -> float:
    """Transactions per second of ``script``, sent back to back."""
    stdout, _ = _pgbench(pgbench, url, name, script, seconds)
    found = _TPS.search(stdout)
    if found is None:
        raise RuntimeError(f"pgbench {name} printed no rate:\n{stdout}")
    return float(found.group(1))


def _idle_latencies(pgbench: str, url: str, seconds: float) -> list[float]:
    """Milliseconds each single-row insert took when sent at ``_IDLE_RATE`` per second.

    Each is the transaction's time less its schedule lag (how late pgbench woke up to
    send it), as the latency cases start their clock after their own pause.
    """
    seconds = max(seconds, 2.0)
    rate = (f"--rate={_IDLE_RATE}", "--log", "--log-prefix=log")
    _, log = _pgbench(pgbench, url, "idle insert", _SCRIPTS["insert"], seconds, rate)
    # client, transaction, time (µs), script, epoch s, epoch µs, schedule lag (µs)
    rows = [line.split() for line in log.splitlines()]
    found = [(int(row[2]) - int(row[6])) / 1000 for row in rows if len(row) >= 7]
    if len(found) < 2:
        raise RuntimeError(f"pgbench idle insert logged too few transactions:\n{log}")
    return found


def _pgbench(
    pgbench: str, url: str, name: str, script: str, seconds: float, extra: tuple[str, ...] = ()
) -> tuple[str, str]:
    """Run one client on ``script`` for ``seconds``; its output and transaction log."""
    with tempfile.TemporaryDirectory(prefix="bench-pgbench-") as tmp:
        path = Path(tmp) / "script.sql"
        path.write_text(script)
        command = [
            pgbench,
            "--no-vacuum",
            "--client=1",
            "--jobs=1",
            "--protocol=prepared",
            f"--time={max(1, round(seconds))}",
            f"--file={path}",
            *extra,
            url,
        ]
        done = threading.Event()
        ticker = threading.Thread(target=_tick, args=(f"pgbench {name}", seconds, done))
        ticker.start()
        try:
            finished = subprocess.run(command, capture_output=True, text=True, check=False, cwd=tmp)
        finally:
            done.set()
            ticker.join()
        if finished.returncode != 0:
            raise RuntimeError(f"pgbench {name} failed:\n{finished.stdout}\n{finished.stderr}")
        log = "".join(p.read_text() for p in Path(tmp).glob("log*"))
    return finished.stdout, log


def _tick(label: str, seconds: float, done: threading.Event) -> None:
    """A progress bar for a subprocess that reports nothing until it ends."""
    steps = max(1, round(seconds * 4))
    with tqdm(total=steps, desc=label, unit="", leave=False, disable=None) as bar:
        for _ in range(steps):
            if done.wait(0.25):
                break
            bar.update()
