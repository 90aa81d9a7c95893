"""What every sub-command shares: its common options, and a client or an admin for the
chosen store (commands act through those, never on a backend)."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from simpleworkflow import config, errors
from simpleworkflow.admin import Admin
from simpleworkflow.client import Client


def add_store_options(parser: argparse.ArgumentParser, *, top_level: bool = False) -> None:
    """``--database-url/-d`` and ``--schema``, accepted before or after the sub-command.

    On a sub-command the defaults are suppressed, so that a value given before the
    sub-command is not reset when the option does not appear again after it.
    """
    default = None if top_level else argparse.SUPPRESS
    parser.add_argument(
        "--database-url",
        "-d",
        default=default,
        help=f"postgresql://... or sqlite:///file.db (default: ${config.ENV_VAR}, "
        f"else {config.DEFAULT_URL})",
    )
    parser.add_argument(
        "--schema",
        default=default,
        help=f"Postgres schema holding the tables (default: ${config.SCHEMA_ENV_VAR}, "
        f"else {config.DEFAULT_SCHEMA})",
    )


def add_commands(parser: argparse.ArgumentParser, *, dest: str, metavar: str) -> Any:
    """The sub-commands of ``parser``; given none, the command prints its help (exit 0)."""

    def show_help(args: argparse.Namespace) -> int:
        parser.print_help()
        return 0

    parser.set_defaults(handler=show_help)
    return parser.add_subparsers(dest=dest, required=False, metavar=metavar)


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """The options of every leaf command: where the store is, and ``--json`` for scripts."""
    add_store_options(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document instead of text meant for people",
    )


@contextlib.contextmanager
def client_for(args: argparse.Namespace, *, create: bool = False) -> Iterator[Client]:
    """A client for the store named by ``--database-url`` and ``--schema`` (or the environment).

    Only commands that write the schema or configuration (``create``), and ``start
    --create``, may make a new SQLite file: any other command finding no file is a typo or
    the wrong directory, and an empty new file would only hide that (a run started there
    would wait for ever, since no worker looks at that file).
    """
    if not create:
        require_existing_file(args.database_url)
    with Client(args.database_url, schema=args.schema) as client:
        yield client


@contextlib.contextmanager
def admin_for(
    args: argparse.Namespace,
    *,
    create: bool = False,
    url: str | None = None,
    schema: str | None = None,
) -> Iterator[Admin]:
    """An :class:`~simpleworkflow.admin.Admin` for the chosen store (``create`` as for
    :func:`client_for`); ``url`` and ``schema`` stand in for options not given."""
    url = args.database_url or url
    if not create:
        require_existing_file(url)
    with Admin(url, schema=args.schema or schema) as admin:
        yield admin


def require_existing_file(url: str | None) -> None:
    """Refuse a SQLite URL whose file does not exist, saying where it was looked for."""
    resolved = config.database_url(url)
    if config.scheme(resolved) != "sqlite":
        return
    path = config.sqlite_file(resolved)
    if path is not None and not os.path.exists(path):
        raise errors.ConfigurationError(
            f"no database at {path}; check -d/--database-url or ${config.ENV_VAR} and the "
            "directory you run in, or create it with `simpleworkflow migrate` (a worker, "
            "`simpleworkflow demo` and `simpleworkflow start --create` create it too)"
        )
