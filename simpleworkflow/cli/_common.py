"""What every sub-command shares: its common options and a client for the chosen store."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from simpleworkflow import config
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


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """The options of every leaf command: where the store is, and ``--json`` for scripts."""
    add_store_options(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document instead of text meant for people",
    )


@contextlib.contextmanager
def client_for(args: argparse.Namespace) -> Iterator[Client]:
    """A client for the store named by ``--database-url`` and ``--schema`` (or the environment)."""
    with Client(args.database_url, schema=args.schema) as client:
        yield client
