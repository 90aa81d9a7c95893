"""``simpleworkflow migrate``: create or upgrade the schema, or print its SQL.

Running it twice, or from two processes at once, is safe: each backend takes a lock,
and migrations already recorded are skipped.
"""

from __future__ import annotations

import argparse
from typing import Any

from simpleworkflow import config
from simpleworkflow.admin import Admin
from simpleworkflow.cli import _common, _output


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "migrate",
        help="create or upgrade the database schema",
        description="Create the schema, or apply the migrations it lacks. Idempotent.",
    )
    parser.add_argument(
        "--sql",
        action="store_true",
        help="print the SQL of every migration instead of running it (touches no database)",
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.sql:
        return _print_sql(args)
    with _common.admin_for(args, create=True) as admin:
        applied = admin.migrate()
        latest = admin.latest_version
    where = describe_target(args)
    if args.json:
        _output.emit_json({"database": where, "applied": applied, "version": latest})
    elif applied:
        versions = ", ".join(f"{v:04d}" for v in applied)
        print(f"{where}: applied migration {versions}; the schema is at version {latest}")
    else:
        print(f"{where}: the schema is up to date (version {latest}); nothing to do")
    return 0


def _print_sql(args: argparse.Namespace) -> int:
    """The script ``migrate`` would run, for teams that apply schemas with their own tools."""
    with Admin(args.database_url, schema=args.schema) as admin:
        sql = admin.migration_sql()
        backend = admin.backend.name
    if args.json:
        _output.emit_json({"backend": backend, "sql": sql})
    else:
        print(sql, end="")
    return 0


def describe_target(args: argparse.Namespace) -> str:
    """Which database (and Postgres schema) a command works on, without the password."""
    return config.describe(args.database_url, args.schema)
