"""``simpleworkflow payload-index``: create, drop or describe the optional index that
serves ``payload_contains`` listings on Postgres.

It is opt-in because every run pays for it, whether or not anyone filters by payload:
each start, claim and completion adds the payload's entries to it (about a quarter more
database CPU per run for payloads of 400 bytes; docs/performance.md). Create it when
operators list runs by payload content beside many runs. Postgres only.
"""

from __future__ import annotations

import argparse
from typing import Any

from simpleworkflow.cli import _common, _output
from simpleworkflow.models import PAYLOAD_INDEX_NAME as NAME
from simpleworkflow.models import PayloadIndex


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "payload-index",
        help="the optional Postgres index that serves payload filters (create, drop, status)",
        description=f"The GIN index {NAME} serves listings filtered by payload content "
        "(payload_contains) on Postgres. Opt-in: every run's writes pay for it. Each ACTION "
        "has its own --help.",
    )
    commands = _common.add_commands(parser, dest="payload_index_command", metavar="ACTION")
    for action, help_text, description in (
        (
            "create",
            "build the index, concurrently (writes go on meanwhile)",
            "Build the index with CREATE INDEX CONCURRENTLY: the table's writes go on "
            "while it is built (about 3 s per million runs on a small server, longer "
            "under load). Idempotent; an invalid index left by an interrupted build is "
            "dropped and built again.",
        ),
        (
            "drop",
            "drop the index, concurrently",
            "Drop the index with DROP INDEX CONCURRENTLY; payload filters read runs newest "
            "first again. Idempotent.",
        ),
        (
            "status",
            "whether the index exists and serves queries",
            "Whether the index exists, whether it is valid (serves queries), and its size.",
        ),
    ):
        command = commands.add_parser(action, help=help_text, description=description)
        _common.add_common_options(command)
        command.set_defaults(handler=run, action=action)


def run(args: argparse.Namespace) -> int:
    with _common.admin_for(args) as admin:
        if args.action == "create":
            index = admin.create_payload_index()
        elif args.action == "drop":
            index = admin.drop_payload_index()
        else:
            index = admin.payload_index()
    if args.json:
        _output.emit_json(index.to_dict())
    else:
        print(describe(args.action, index))
    return 0


def describe(action: str, index: PayloadIndex) -> str:
    """One line for people: what was done, and how the index stands."""
    if action == "drop":
        return f"dropped {NAME}" if index.changed else f"{NAME} is absent; nothing to do"
    if not index.present:
        return f"{NAME} is absent: payload filters read runs newest first"
    size = _size(index.size_bytes)
    if not index.valid:
        return (
            f"{NAME} is INVALID ({size}): a concurrent build did not finish; it serves no "
            "query yet costs writes; `simpleworkflow payload-index create` rebuilds it"
        )
    if action == "create" and index.rebuilt:
        return f"found {NAME} invalid (an interrupted build): dropped and built it again ({size})"
    if action == "create" and index.changed:
        return f"created {NAME} ({size})"
    if action == "create":
        return f"{NAME} exists and is valid ({size}); nothing to do"
    return f"{NAME} exists and is valid ({size}): payload filters are served by it"


def _size(size_bytes: int) -> str:
    if size_bytes < 2**20:
        return f"{size_bytes / 2**10:,.0f} kB"
    return f"{size_bytes / 2**20:,.1f} MB"
