"""``simpleworkflow stats``: every workflow type at a glance, for operators.

Runs by status, what pending runs wait for, how late each queue is (the age of its oldest
due run; a run sleeping until tomorrow is not late) and each type's runtime and pause
switch, from the admin facade the HTTP API and dashboard read too.
"""

from __future__ import annotations

import argparse
from typing import Any

from simpleworkflow.cli import _common, _output


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "stats",
        help="runs of each type by status, and how late each queue is",
        description="One line per workflow type: its runtime (and whether it is paused), "
        "its runs by status (deleted runs left out), the age of its oldest due pending "
        "run, and what its pending runs wait for (sleeping, waiting-signal, waiting-child, "
        "retrying, throttled; a run waiting in several ways counts in each).",
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    with _common.admin_for(args) as admin:
        stats = admin.stats()
    if args.json:
        _output.emit_json({"types": [item.to_dict() for item in stats]})
    elif stats:
        print(_output.stats_table(stats))
    else:
        print("no runs and no registered types yet")
    return 0
