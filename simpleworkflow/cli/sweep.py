"""``simpleworkflow sweep``: delete the finished runs past their retention, now.

What a worker started with ``--sweep`` does on a timer, run once by an operator (from
cron, or before a migration); ``--dry-run`` counts what would go and deletes nothing. Two
sweeps at once (this command beside a worker's sweeper) are safe: each batch skips the
rows another holds.
"""

from __future__ import annotations

import argparse
from typing import Any

from simpleworkflow import durations, retention
from simpleworkflow.admin import SweepReport
from simpleworkflow.cli import _common, _output

SWEEP_COLUMNS = ("TYPE", "RUNS")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sweep",
        help="delete finished runs past their retention (--dry-run to count them)",
        description="Delete the runs that finished longer ago than their retention (the "
        "run's own, else its type's in the registry, else the default; never more than "
        f"${retention.MAX_ENV}), with their events, journal and signals, at most 1,000 "
        "per transaction. Pending, leased, sleeping and waiting runs are never deleted.",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="count what would be deleted now, by type, and delete nothing",
    )
    add_default_retention(parser)
    _common.add_common_options(parser)
    parser.set_defaults(handler=run)


def add_default_retention(parser: argparse.ArgumentParser) -> None:
    """``--default-retention``, shared with ``simpleworkflow worker --sweep``."""
    parser.add_argument(
        "--default-retention",
        metavar="DURATION",
        help="how long runs are kept when neither their start nor their type chose: 30d, "
        f"12h (default: ${retention.DEFAULT_ENV} days, else {retention.DEFAULT_DAYS}d)",
    )


def run(args: argparse.Namespace) -> int:
    default = args.default_retention
    if default is not None:  # refused before any database is opened
        default = durations.to_seconds(default, what="--default-retention")
        retention.check(default, what="--default-retention")
    with _common.admin_for(args) as admin:
        report = admin.sweep(default_retention=default, dry_run=args.dry_run)
    if args.json:
        _output.emit_json(report.to_dict())
    else:
        print(describe(report))
    return 0


def describe(report: SweepReport) -> str:
    """What went (or would go), for people: one line, then a table by type."""
    rules = (
        f"default {retention.describe(report.default_retention)}, "
        f"ceiling {retention.describe(report.max_retention)}"
    )
    if not report.total:
        return f"no run is past its retention ({rules})"
    verb = "would delete" if report.dry_run else "deleted"
    head = f"{verb} {report.total:,} run(s) past their retention ({rules})"
    if report.dry_run:
        head += "; nothing was deleted"
    rows = [[name, f"{count:,}"] for name, count in sorted(report.runs.items())]
    return head + "\n" + _output.table(SWEEP_COLUMNS, rows)
