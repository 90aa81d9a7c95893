"""What a ``payload_contains`` listing costs on SQLite, whose matcher runs in Python.

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
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from simpleworkflow import Client
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.payload_filter")
    parser.add_argument("--runs", type=int, default=20, help="runs with large payloads")
    parser.add_argument("--elements", type=int, default=10_000, help="elements per array")
    parser.add_argument("--values", type=int, default=250, help="values in the filter")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.runs, args.elements, args.values), indent=2))


if __name__ == "__main__":
    main()
