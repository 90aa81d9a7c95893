"""What a ``payload_contains`` listing costs: on Postgres beside a big backlog, served by
the payload index; on SQLite, whose matcher runs in Python.

``python -m benchmarks.payload_filter --store postgres [--backlog 1000000] [--repeat 20]``

A fresh Postgres schema (on a private server, or ``--postgres-url``) gets ``backlog``
runs of 10,000 customers (a fifth pending, one in ten in region "eu"), loaded by SQL and
ANALYZEd; then the dashboard's listing (``Client.list``, a page of 50) is timed without a
filter and with filters that match one run in 10,000 (alone, with a status, and its next
page by cursor), one in 500, one in 10 and none, each with the plan's scans: first
without the payload index (what every filter costs unless an operator created it), then
with it, built as ``simpleworkflow payload-index create`` builds it (timed). Prints one
JSON document: medians in milliseconds, and each filtered listing as a multiple of the
unfiltered one.

``python -m benchmarks.payload_filter [--runs 20] [--elements 10000] [--values 250]``

A fresh SQLite file gets ``runs`` runs whose payloads each hold an array of ``elements``
tags and as many objects, beside a thousand small runs; a listing then asks for runs
whose payload holds ``values`` of those tags (and a few of the objects). SQLite evaluates
the filter under the store's lock, so its time is how long every other call of the
process waits. For comparison it also times the plain definition of containment (every
element of the filter against every element of the payload) on one payload: the cost
the matcher's index avoids. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import server
from benchmarks.stores import BenchStore
from simpleworkflow import Client
from simpleworkflow.admin import Admin
from simpleworkflow.backends.sqlite import matching

BIG = "bench.filter.v1"
SMALL = "bench.small.v1"


def payload(elements: int, n: int) -> dict[str, Any]:
    return {
        "n": n,
        "tags": [f"tag-{i}" for i in range(elements)],
        "lines": [{"sku": f"s{i}", "qty": i % 7} for i in range(elements)],
    }


def pattern(elements: int, values: int) -> dict[str, Any]:
    """About ``values`` values: tags spread over the array, and four objects."""
    step = max(1, elements // max(1, values - 12))
    lines = [{"sku": f"s{i}"} for i in range(0, elements, max(1, elements // 4))][:4]
    return {"tags": [f"tag-{i}" for i in range(0, elements, step)][: values - 12], "lines": lines}


def plain(doc: Any, wanted: Any) -> bool:
    """Containment as first written, every pair compared: the baseline (for this
    benchmark's strings and objects; it does not equate 1 and 1.0)."""
    if isinstance(wanted, dict):
        return isinstance(doc, dict) and all(
            k in doc and plain(doc[k], v) for k, v in wanted.items()
        )
    if isinstance(wanted, list):
        return isinstance(doc, list) and all(any(plain(d, w) for d in doc) for w in wanted)
    return not isinstance(doc, dict | list) and type(doc) is type(wanted) and doc == wanted


def measure(runs: int, elements: int, values: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        client = Client(f"sqlite:///{Path(folder) / 'filter.db'}")
        try:
            client.start_many([(BIG, payload(elements, n)) for n in range(runs)])
            client.start_many([(SMALL, {"n": n}) for n in range(1000)])
            wanted = pattern(elements, values)
            began = time.perf_counter()
            found = client.list(payload_contains=wanted, limit=1000).runs
            listing = time.perf_counter() - began
        finally:
            client.close()
    doc_text, wanted_text = json.dumps(payload(elements, 0)), json.dumps(wanted)
    began = time.perf_counter()
    assert matching.contains_json(doc_text, wanted_text) == 1
    indexed = time.perf_counter() - began
    began = time.perf_counter()
    assert plain(json.loads(doc_text), json.loads(wanted_text))
    pairwise = time.perf_counter() - began
    return {
        "runs": runs,
        "elements_per_array": elements,
        "filter_bytes": len(wanted_text),
        "matched": len(found),
        "listing_ms": round(listing * 1000, 1),
        "one_payload_indexed_ms": round(indexed * 1000, 2),
        "one_payload_every_pair_ms": round(pairwise * 1000, 1),
    }


#: Runs loaded per statement into the Postgres backlog.
LOAD_CHUNK = 100_000
#: The listings timed beside the backlog: ``Client.list`` arguments by name.
LISTINGS: dict[str, dict[str, Any]] = {
    "no filter": {},
    "one customer (1 in 10,000)": {"payload_contains": {"customer": "c_42"}},
    "one customer, pending": {"payload_contains": {"customer": "c_40"}, "status": "pending"},
    "one sku in lines (1 in 500)": {"payload_contains": {"lines": [{"sku": "s42"}]}},
    "one region (1 in 10)": {"payload_contains": {"region": "eu"}},
    "no run": {"payload_contains": {"customer": "nobody"}},
}


def load_postgres(store: BenchStore, backlog: int) -> float:
    """Load the backlog by SQL (the start path is not what is measured), then VACUUM
    and ANALYZE, as autovacuum would; return the seconds it took."""
    began = time.perf_counter()
    for first in range(0, backlog, LOAD_CHUNK):
        count = min(LOAD_CHUNK, backlog - first)
        store.execute("load_payloads", type=BIG, first=first, count=count, total=backlog)
    store.execute("vacuum_analyze")
    return time.perf_counter() - began


def _median_ms(call: Callable[[], object], repeat: int) -> float:
    call()  # warm: the plan, the pool's connection, the pages
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return round(statistics.median(times) * 1000, 2)


def _scans(store: BenchStore, client: Client, arguments: dict[str, Any]) -> list[str]:
    """The scans of the plan of the listing's statement, as the client sends it."""
    from simpleworkflow.client import _listing

    query = _listing.list_query(
        arguments.get("type_prefix"),
        arguments.get("status"),
        None,
        None,
        False,
        50,
        arguments.get("cursor"),
        arguments.get("payload_contains"),
    )
    statement = next(client.backend.list_runs(query))
    with psycopg.connect(store.url) as conn:
        rows = conn.execute(("explain " + statement.sql).encode(), statement.params).fetchall()
    return [str(row[0]).strip(" ->") for row in rows if "Scan" in str(row[0])]


def _listings(store: BenchStore, client: Client, repeat: int) -> dict[str, Any]:
    listings = {**LISTINGS}
    customer = LISTINGS["one customer (1 in 10,000)"]
    listings["one customer, next page"] = {
        **customer,
        "cursor": client.list(**customer).next_cursor,
    }
    found: dict[str, Any] = {}
    for name, arguments in listings.items():
        found[name] = {
            "ms": _median_ms(functools.partial(client.list, **arguments), repeat),
            "runs": len(client.list(**arguments).runs),
            "scans": _scans(store, client, arguments),
        }
    unfiltered = found["no filter"]["ms"]
    for figures in found.values():
        figures["of no filter"] = round(figures["ms"] / unfiltered, 2)
    return found


def measure_postgres(url: str, backlog: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        store = BenchStore.fresh("postgres", url, Path(folder))
        try:
            loading = load_postgres(store, backlog)
            with Admin(store.url, schema=store.schema) as admin, store.client() as client:
                unindexed = _listings(store, client, max(3, repeat // 4))
                began = time.perf_counter()
                admin.create_payload_index()  # as an operator would, concurrently
                building = time.perf_counter() - began
                table, index = store.execute("relation_sizes")[0]
                indexed = _listings(store, client, repeat)
                admin.drop_payload_index()
        finally:
            store.close()
    return {
        "backlog": backlog,
        "load_seconds": round(loading, 1),
        "index_build_seconds": round(building, 1),
        "table_mb": round(table / 2**20, 1),
        "payload_index_mb": round(index / 2**20, 1),
        "with_index": indexed,
        "without_index": unindexed,
    }


@contextlib.contextmanager
def _postgres(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with server.private_postgres() as private:
        yield private


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.payload_filter")
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--runs", type=int, default=20, help="SQLite: runs with large payloads")
    parser.add_argument("--elements", type=int, default=10_000, help="SQLite: elements per array")
    parser.add_argument("--values", type=int, default=250, help="SQLite: values in the filter")
    parser.add_argument("--backlog", type=int, default=1_000_000, help="Postgres: runs stored")
    parser.add_argument("--repeat", type=int, default=20, help="Postgres: listings timed each")
    parser.add_argument("--postgres-url", help="Postgres: this server, not a private one")
    args = parser.parse_args(argv)
    if args.store == "postgres":
        with _postgres(args.postgres_url) as url:
            result = measure_postgres(url, args.backlog, args.repeat)
    else:
        result = measure(args.runs, args.elements, args.values)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
