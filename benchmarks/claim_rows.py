"""``python -m benchmarks.claim_rows [--old PATH]``: the Python a claim spends on its rows,
from the result in hand to the worker's leases, per 100 rows, this tree against another
source tree (``--old``, e.g. a ``git archive`` of ``integrate``) put on ``PYTHONPATH``.

Each side runs this file as a script (``python benchmarks/claim_rows.py URL``) with its
own ``simpleworkflow``: 100 runs are started and leased by plain SQL, a statement with
the claim's columns is run once on the cursor that side's claim is read on, and its
result is then fetched again and handed to ``claim_runs`` as the claim's rows, 20 times
a sample (process CPU time: the server does nothing meanwhile); then the same for the
answer of an outcomes' write (``finish``, 100 successes: a run id a row). Best of 30
samples; sides alternate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: The claim's columns: every column of the run, and those the claim adds.
COLUMNS = """select r.*, r.waiting_for as was_waiting_for, now() as db_now,
       false as counted, null::boolean as limited
from {schema}.workflow_run r order by r.id"""


def sample(url: str, samples: int) -> list[float]:
    """ms per 100 rows, ``samples`` times, with the ``simpleworkflow`` on the path."""
    import psycopg

    from benchmarks.stores import NOOP, BenchStore
    from simpleworkflow.backends.postgres import driving, loading
    from simpleworkflow.backends.records import Claim, Outcomes, Success

    with tempfile.TemporaryDirectory() as workdir:
        store = BenchStore.fresh("postgres", url, Path(workdir))
        with store.client() as client:
            client.start_many([{"type": NOOP, "payload": {"n": n}} for n in range(100)])
        backend = store.backend()
        claim = Claim(worker_id="w", types=(NOOP,), limit=100, lease_seconds=30)
        conn: Any = psycopg.connect(url, autocommit=True)
        conn.execute(
            f"update {store.schema}.workflow_run set status = 'leased', leased_by = 'w', "
            "lease_until = now(), lease_token = gen_random_uuid()".encode()
        )
        loading.guard(conn)  # as the pools' connections are
        stream = next(backend.claim_runs(claim))
        statement = list(stream.statements)[-1]  # type: ignore[attr-defined]
        reading = getattr(driving, "cursor_for", None)  # trees before it read dicts
        cursor = reading(conn, statement) if reading else driving._pool_cursor(conn)
        cursor.execute(COLUMNS.format(schema=store.schema).encode())
        found: list[float] = []
        for _ in range(samples):
            began = time.process_time()
            for _ in range(20):
                cursor.scroll(0, "absolute")
                op = backend.claim_runs(claim)
                next(op).take(cursor.fetchall())  # type: ignore[attr-defined]
                try:
                    op.send([])
                except StopIteration as stop:
                    assert len(stop.value.leases) == 100
            found.append((time.process_time() - began) / 20 * 1000)
        # The outcomes' answer: a run id a row, the statement's rows read on its cursor.
        outcomes = Outcomes(succeeded=[Success(str(n), str(n), "null", False) for n in range(100)])
        first = next(backend.finish(outcomes, "w"))
        ids = reading(conn, first) if reading else driving._pool_cursor(conn)
        ids.execute(f"select id from {store.schema}.workflow_run".encode())
        spent: list[float] = []
        for _ in range(samples):
            began = time.process_time()
            for _ in range(20):
                ids.scroll(0, "absolute")
                answer = backend.finish(outcomes, "w")
                next(answer)
                try:
                    answer.send(ids.fetchall())
                except StopIteration as stop:
                    assert len(stop.value) == 100
            spent.append((time.process_time() - began) / 20 * 1000)
        conn.close()
        backend.close()
    return [*found, *(-ms for ms in spent)]  # the outcomes' negative, to tell apart


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.claim_rows", description=__doc__)
    parser.add_argument("--old", help="another source tree to compare with")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--postgres-url")
    args = parser.parse_args(argv)
    from benchmarks import server

    sides = [("this tree", str(ROOT))] + ([("old", args.old)] if args.old else [])
    results: dict[str, list[float]] = {name: [] for name, _ in sides}
    answers: dict[str, list[float]] = {name: [] for name, _ in sides}
    with server.given_or_private(args.postgres_url) as url:
        for pair in range(args.pairs):
            for name, path in sides if pair % 2 == 0 else sides[::-1]:
                env = {**os.environ, "PYTHONPATH": path}
                out = subprocess.run(
                    [sys.executable, __file__, url],
                    env=env,
                    cwd=path,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                values = [float(line) for line in out.split()]
                best = min(v for v in values if v > 0)
                answer = min(-v for v in values if v < 0)
                results[name].append(best)
                answers[name].append(answer)
                print(
                    f"pair {pair + 1}: {name}: claim {best:.3f}, outcomes {answer:.3f} ms "
                    "per 100 rows",
                    flush=True,
                )
    for name, found in results.items():
        claims, outcomes = statistics.median(found), statistics.median(answers[name])
        print(f"{name}: medians, claim {claims:.3f}, outcomes {outcomes:.3f} ms per 100 rows")


if __name__ == "__main__":
    if len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        print("\n".join(f"{ms:.4f}" for ms in sample(sys.argv[1], 30)))
    else:
        main(sys.argv[1:])
