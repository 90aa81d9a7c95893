"""``python -m benchmarks``: run the suite, print the table, write the JSON and the picture."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from benchmarks import report, suite
from benchmarks.options import Options

QUICK = {
    "items": 1000,
    "repeat": 1,
    "backlogs": "10000,100000",
    "samples": 50,
    "pgbench_seconds": 2.0,
}
FULL = {
    "items": 5000,
    "repeat": 3,
    "backlogs": "10000,100000,1000000",
    "samples": 200,
    "pgbench_seconds": 5.0,
}


def case_words(text: str) -> list[str]:
    """The words of ``--cases``: split at commas, but not at the ", " inside a case's name
    (``drain, 1 process``), so that one case can be named exactly."""
    return [word.strip() for word in re.split(r",(?!\s)", text) if word.strip()]


def parse(argv: list[str]) -> tuple[Options, Path, Path | None]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--stores", default="postgres,sqlite", help="comma-separated")
    parser.add_argument("--items", type=int, help="runs per throughput case (5000; quick 1000)")
    parser.add_argument("--repeat", type=int, help="runs of each case; the median is reported")
    parser.add_argument("--backlogs", help="backlog sizes, comma-separated")
    parser.add_argument("--samples", type=int, help="latency samples per repeat")
    parser.add_argument(
        "--concurrency", type=int, default=100, help="handler slots per worker process (100)"
    )
    parser.add_argument("--pgbench-seconds", type=float, help="duration of each pgbench run")
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat, no 1M")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    parser.add_argument(
        "--cases",
        help="run only the throughput/latency cases whose names contain one of these "
        "comma-separated words (e.g. 'steps' or 'start one,drain, 1 process': a comma "
        "followed by a space belongs to the name); pgbench and the "
        "backlog curve still run unless --pgbench-seconds 0 and --backlogs ''",
    )
    parser.add_argument(
        "--sqlite-synchronous",
        choices=["full", "normal"],
        default="full",
        help="SQLite's synchronous setting, given in the store's URL (full, the default)",
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/latest.json"))
    parser.add_argument("--plot", type=Path, default=Path("docs/performance-scaling.png"))
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    options = Options(
        stores=[s.strip() for s in args.stores.split(",") if s.strip()],
        items=args.items,
        repeat=args.repeat,
        backlogs=sorted({int(b) for b in str(args.backlogs).split(",") if b.strip()}),
        samples=args.samples,
        concurrency=args.concurrency,
        pgbench_seconds=args.pgbench_seconds,
        postgres_url=args.postgres_url,
        cases=case_words(args.cases or ""),
        sqlite_synchronous=args.sqlite_synchronous,
    )
    unknown = set(options.stores) - {"postgres", "sqlite"}
    if unknown:
        parser.error(f"unknown stores: {', '.join(sorted(unknown))}")
    return options, args.out, None if args.no_plot else args.plot


def main(argv: list[str]) -> None:
    options, out, picture = parse(argv)
    doc = suite.run(options)
    print(report.table(doc))
    for kind, plans in doc["claim_plan"].items():
        if options.backlogs:
            largest = max(options.backlogs)
            print(f"\nclaim plan on {kind} at backlog {largest:,}:\n{plans[str(largest)]}")
    report.write(doc, out)
    print(f"\nwrote {out}")
    if picture is not None and options.backlogs:
        report.plot(doc, picture)
        print(f"drew {picture}")


if __name__ == "__main__":
    main(sys.argv[1:])
