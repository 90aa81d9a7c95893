"""The floor under idle pick-up: a hand-written LISTEN loop in psycopg.

``python -m benchmarks.listen_loop URL SCHEMA`` makes the reference's table in ``SCHEMA``,
listens on the channel named after it, prints ``ready``, then for every notification
leases the oldest queued row with one ``UPDATE ... RETURNING`` (the least a queue must do
before it runs a handler) and prints ``started <payload's n> <time.time()>``. The
producer's side (one statement: the insert and its ``pg_notify``) is in
``benchmarks.latency``; both statements are in ``benchmarks/sql/postgres.sql``.
"""

from __future__ import annotations

import sys
import time

import psycopg

from simpleworkflow.backends import queries


def main(argv: list[str]) -> None:
    url, schema = argv[0], argv[1]
    q = queries.load("benchmarks.sql", "postgres.sql", queries.quote_schema(schema))
    with psycopg.connect(url, autocommit=True) as conn:
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


if __name__ == "__main__":
    main(sys.argv[1:])
