"""``simpleworkflow limits``: named rate limits, and which types obey them.

A rate limit lets at most N claims through per period (``10/s``, ``600/m``), counted in
the database for every worker at once; runs over it wait as pending until the next window
opens. See docs/flow-control.md. Concurrency limits live in the registry
(``simpleworkflow registry set-concurrency``).
"""

from __future__ import annotations

import argparse
from typing import Any

from simpleworkflow import names, rates
from simpleworkflow.admin import registry_dict
from simpleworkflow.cli import _common, _output
from simpleworkflow.models import RateLimit

LIMIT_COLUMNS = ("NAME", "RATE", "PER KEY", "UPDATED (UTC)")
#: What ``limits use`` takes for "obey no rate limit".
NONE = "none"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "limits",
        help="rate limits: N runs per period, shared by every worker",
        description="Named rate limits (N claims per period, optionally per concurrency key) "
        "and the types that obey them. Each ACTION has its own --help.",
    )
    commands = _common.add_commands(parser, dest="limits_command", metavar="ACTION")
    listing = commands.add_parser("list", help="every rate limit", description="Every rate limit.")
    _common.add_common_options(listing)
    listing.set_defaults(handler=list_limits)

    setting = commands.add_parser(
        "set",
        help="create or change a rate limit",
        description="At most RATE claims of the types that obey NAME: '10/s', '600/m', "
        "'5/10s', in windows of the period since the epoch. Runs over it wait as pending "
        "until the next window opens.",
    )
    setting.add_argument("name", metavar="NAME", help="e.g. partner-api")
    setting.add_argument("rate", metavar="RATE", help="N/period: 10/s, 600/m, 5/10s")
    setting.add_argument(
        "--per-key",
        action="store_true",
        help="count each concurrency key apart (runs without a key share one count)",
    )
    _common.add_common_options(setting)
    setting.set_defaults(handler=set_limit)

    deleting = commands.add_parser(
        "delete",
        help="delete a rate limit",
        description="Delete NAME; the types that obeyed it run unthrottled until it is set again.",
    )
    deleting.add_argument("name", metavar="NAME")
    _common.add_common_options(deleting)
    deleting.set_defaults(handler=delete_limit)

    using = commands.add_parser(
        "use",
        help="have a type obey a rate limit",
        description=f"Every claim of TYPE takes a token of NAME ('{NONE}': obey none). The "
        "type must be in the registry, the limit must exist.",
    )
    using.add_argument("type", metavar="TYPE")
    using.add_argument("name", metavar="NAME", help=f"a rate limit, or '{NONE}'")
    _common.add_common_options(using)
    using.set_defaults(handler=use_limit)


def list_limits(args: argparse.Namespace) -> int:
    with _common.admin_for(args) as admin:
        found = admin.rate_limits()
    if args.json:
        _output.emit_json({"limits": [limit.to_dict() for limit in found]})
    elif found:
        print(_output.table(LIMIT_COLUMNS, [_row(limit) for limit in found]))
    else:
        print("no rate limits; `simpleworkflow limits set NAME RATE` creates one")
    return 0


def set_limit(args: argparse.Namespace) -> int:
    rates.check_name(args.name)  # refused before any database is opened
    rates.parse(args.rate)
    with _common.admin_for(args, create=True) as admin:
        limit = admin.set_rate_limit(args.name, args.rate, per_key=args.per_key)
    if args.json:
        _output.emit_json(limit.to_dict())
    else:
        print(f"{limit.name}: {_rate(limit)}")
    return 0


def delete_limit(args: argparse.Namespace) -> int:
    rates.check_name(args.name)
    with _common.admin_for(args) as admin:
        deleted = admin.delete_rate_limit(args.name)
    if args.json:
        _output.emit_json({"deleted": deleted})
    else:
        print(f"{args.name}: {'deleted' if deleted else 'no such rate limit'}")
    return 0


def use_limit(args: argparse.Namespace) -> int:
    names.validate_type(args.type)
    name = None if args.name.strip().lower() == NONE else rates.check_name(args.name)
    with _common.admin_for(args) as admin:
        entry = admin.limit_rate(args.type, name)
    if args.json:
        _output.emit_json(registry_dict(entry))
    else:
        obeys = f"obeys rate limit {name}" if name else "obeys no rate limit"
        print(f"{entry.workflow_name}: {obeys}")
    return 0


def _rate(limit: RateLimit) -> str:
    per = ", per key" if limit.per_key else ""
    return f"{_described(limit)}{per}"


def _row(limit: RateLimit) -> list[str]:
    return [
        limit.name,
        _described(limit),
        "yes" if limit.per_key else "no",
        _output.when(limit.updated_at),
    ]


def _described(limit: RateLimit) -> str:
    """``10/s``; the raw values of a limit written by hand that cannot be read."""
    if isinstance(limit.max_runs, int) and isinstance(limit.period, int | float):
        return rates.describe(limit.max_runs, limit.period)
    return f"{limit.max_runs} per {limit.period} s (not applied)"
