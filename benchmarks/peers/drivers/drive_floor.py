"""The psycopg references ("floors"): the least a Postgres queue can do per job.

A table of jobs, as lean as a queue gets: starts are plain inserts (one row per
autocommit statement, or one multi-row ``insert`` of 100); a worker claims with ``for
update skip locked`` and marks done in the same statement, 100 rows at a time; the idle
worker waits on ``LISTEN`` and the producer's insert notifies in its transaction.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

TABLE = """
create table job (
    id bigint generated always as identity primary key,
    payload jsonb not null,
    status text not null default 'pending',
    created_at timestamptz not null default now()
);
create index job_pending on job (id) where status = 'pending';
create function job_notify() returns trigger language plpgsql as $$
begin perform pg_notify('job', ''); return null; end $$;
create trigger job_notify after insert on job for each statement execute function job_notify();
"""
INSERT = b"insert into job (payload) values (%s)"
CLAIM = b"""
update job set status = 'done' where id in (
    select id from job where status = 'pending' order by id limit %s for update skip locked
) returning id
"""


def _connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def setup(url: str) -> None:
    with _connect(url) as conn:
        conn.execute(TABLE.encode())


def start_one(url: str, count: str) -> dict[str, float]:
    with _connect(url) as conn:
        return _common.timed_rate(
            int(count), lambda: [conn.execute(INSERT, ("{}",)) for _ in range(int(count))]
        )


def _insert_many(conn: psycopg.Connection[Any], size: int) -> None:
    values = b",".join([b"(%s)"] * size)
    conn.execute(b"insert into job (payload) values " + values, ["{}"] * size)


def start_batch(url: str, count: str) -> dict[str, float]:
    with _connect(url) as conn:
        sizes = _common.batches(int(count))
        return _common.timed_rate(int(count), lambda: [_insert_many(conn, n) for n in sizes])


def load(url: str, count: str, kind: str) -> None:
    with _connect(url) as conn:
        for size in _common.batches(int(count)):
            _insert_many(conn, size)


def worker(url: str, mode: str, kind: str) -> None:
    conn = _connect(url)
    listener = _connect(url)
    listener.execute(b"listen job")

    def claim(limit: int) -> int:
        rows = conn.execute(CLAIM, (limit,)).fetchall()
        for _ in rows:
            _common.mark()
        return len(rows)

    def run() -> None:
        while True:
            while claim(100):
                pass
            for _ in listener.notifies(timeout=1.0, stop_after=1):
                pass

    _common.serve_worker(run)


def pickup(url: str, samples: str) -> dict[str, float]:
    with _connect(url) as conn:
        return _common.pickup(__file__, url, int(samples), lambda: conn.execute(INSERT, ("{}",)))


if __name__ == "__main__":
    _common.main(
        {"setup": setup, "start_one": start_one, "start_batch": start_batch, "load": load,
         "worker": worker, "pickup": pickup}
    )  # fmt: skip
