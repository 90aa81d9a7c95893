"""The floors under idle pick-up: hand-written LISTEN loops in psycopg.

``python -m benchmarks.listen_loop URL SCHEMA`` makes the reference's table in ``SCHEMA``,
listens on the channel named after it, prints ``ready``, then for every notification
leases the oldest queued row with one ``UPDATE ... RETURNING`` (the least a queue must do
before it runs a handler) and prints ``started <payload's n> <time.time()>``. The
producer's side (one statement: the insert and its ``pg_notify``) is in
``benchmarks.latency``; both statements are in ``benchmarks/sql/postgres.sql``.

``python -m benchmarks.listen_loop URL SCHEMA --same-work TYPE`` is the machine's ceiling
for the contract's work: on ``SCHEMA``'s migrated ``workflow_run`` (every index and
trigger of the project), it listens on the project's channel as a worker does, and on a
wake-up of its schema claims as seed 000 says (``same_work_claim``: the oldest due run of
``TYPE``, locked with skip locked, leased with a lease token, its ``leased`` and
``started`` events), its commit not waiting for the disk as the worker's claims do. The
producer runs the seed's plain insert (``same_work_insert``), whose trigger writes the
``created`` event and notifies.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import psycopg

from simpleworkflow.backends import queries

#: The same-work loop's lease, as the worker's default.
LEASE_SECONDS = 30.0


def main(argv: list[str]) -> None:
    url, schema = argv[0], argv[1]
    q = queries.load("benchmarks.sql", "postgres.sql", queries.quote_schema(schema))
    with psycopg.connect(url, autocommit=True) as conn:
        if argv[2:3] == ["--same-work"]:
            _same_work(conn, q, schema, argv[3])
        else:
            _bare(conn, q)


def _bare(conn: psycopg.Connection[Any], q: dict[str, str]) -> None:
    conn.execute(q["listen_ref_create"].encode())
    conn.execute(q["listen_ref_listen"].encode())
    claim = q["listen_ref_claim"].encode()
    print("ready", flush=True)
    while True:
        # The generator holds the connection until it ends: one notification at a
        # time, and those that come during the claim wait in psycopg's backlog.
        for _ in conn.notifies(stop_after=1):
            pass
        row = conn.execute(claim).fetchone()
        if row is None:
            continue
        started = time.time()
        print(f"started {row[1].get('n')} {started!r}", flush=True)


def _same_work(conn: psycopg.Connection[Any], q: dict[str, str], schema: str, type: str) -> None:
    conn.execute(b"set synchronous_commit = off")  # as the worker's claims (unflushed.py)
    conn.execute(b"listen simpleworkflow")
    claim = q["same_work_claim"].encode()
    params = {"types": [type], "worker_id": "same-work-loop", "lease": LEASE_SECONDS}
    mine = f"wake {schema} "
    print("ready", flush=True)
    while True:
        # Every schema's wake-ups come on this channel, as to a worker: claim on ours.
        woken = False
        for note in conn.notifies(stop_after=1):
            woken = note.payload.startswith(mine)
        if not woken:
            continue
        row = conn.execute(claim, params).fetchone()
        if row is None:
            continue
        started = time.time()
        print(f"started {row[1].get('n')} {started!r}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
