"""``simpleworkflow runs values``: the values a run publishes (``ctx.set_value``), read
or waited for from the shell."""

from __future__ import annotations

import argparse
from typing import Any

from simpleworkflow import errors, names
from simpleworkflow.cli import _common, _output

VALUE_COLUMNS = ("KEY", "VERSION", "SET (UTC)", "STEP", "VALUE")


def add_values(commands: Any) -> None:
    parser = commands.add_parser(
        "values",
        help="the values a run published, or wait for one",
        description="The values the run published with ctx.set_value, the last of each key; "
        "with KEY, that one. --wait waits for KEY to be set (with --after N: set again, to "
        "a version newer than N). Exit status: 0 found, 1 KEY not set, 2 timed out or error.",
    )
    parser.add_argument("run_id", metavar="ID")
    parser.add_argument("key", metavar="KEY", nargs="?", help="one value's key, e.g. status")
    parser.add_argument(
        "--wait", metavar="DURATION", help="wait this long for KEY to be set: 30s, 5m"
    )
    parser.add_argument(
        "--after", metavar="VERSION", type=int, help="with --wait: a version newer than this"
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=values)


def values(args: argparse.Namespace) -> int:
    run_id = names.normalize_run_id(args.run_id)
    if args.key is None and (args.wait is not None or args.after is not None):
        raise errors.InvalidArgument("--wait and --after need a KEY")
    with _common.client_for(args) as client:
        if args.key is None:
            found = client.values(run_id)
        elif args.wait is not None:
            found = [client.wait_value(run_id, args.key, args.wait, after=args.after)]
        else:
            one = client.value(run_id, args.key)
            found = [] if one is None else [one]
    if args.json:
        _output.emit_json([value.to_dict() for value in found])
    elif found:
        rows = [
            [v.key, str(v.version), _output.when(v.updated_at), v.step_name, _json(v.value)]
            for v in found
        ]
        print(_output.table(VALUE_COLUMNS, rows))
    elif args.key is None:
        print(f"run {run_id} has published no value")
    else:
        print(f"run {run_id} has set no value {args.key!r}")
    return 1 if args.key is not None and not found else 0


def _json(value: Any) -> str:
    return _output.compact_json(value)
