"""What every sub-command shares: the ``--json`` flag and a client for the chosen store."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from simpleworkflow.client import Client


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Give a command the ``--json`` switch: one JSON document on stdout, for scripts."""
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
