"""``simpleworkflow runs stream``: a run's stream (``ctx.stream_append``) printed as it is
written, until it is closed or the run ends; Ctrl-C stops following (exit status 130)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from simpleworkflow import names
from simpleworkflow.cli import _common, _output
from simpleworkflow.client import Client
from simpleworkflow.models.streams import StreamItem

#: Items read at a time without ``--follow``.
PAGE = 500


def add_stream(commands: Any) -> None:
    parser = commands.add_parser(
        "stream",
        help="print a run's stream as it is written, until it closes",
        description="The items of the run's stream KEY (ctx.stream_append), one a line "
        "(OFFSET, then the value as JSON), printed as they are written until the stream "
        "is closed or the run ends; Ctrl-C stops (exit status 130). --no-follow prints "
        "what is stored now. --json prints one JSON object per item and line. Exit "
        "status: 0 read, 1 the run has no stream KEY, 2 error (an unknown run).",
    )
    parser.add_argument("run_id", metavar="ID")
    parser.add_argument("key", metavar="KEY", help="the stream's key, e.g. tokens")
    parser.add_argument(
        "--after",
        metavar="OFFSET",
        type=int,
        help="only items after this offset (the last one read, to resume)",
    )
    parser.add_argument(
        "--follow",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait for items until the stream closes or the run ends (the default); "
        "--no-follow: print the stored items and stop",
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=stream)


def stream(args: argparse.Namespace) -> int:
    run_id = names.normalize_run_id(args.run_id)
    key = names.check_stream_key(args.key)
    after = names.check_stream_offset(args.after)
    with _common.client_for(args) as client:
        run = client.get(run_id)  # an unknown run is an error, before anything is read
        known = any(found.key == key for found in client.streams(run_id))
        if not known and (run.is_terminal or not args.follow):
            return _no_stream(run_id, key)
        if not known:
            print(
                f"simpleworkflow: warning: run {run_id} has no stream {key!r} yet; waiting for "
                "its first item (Ctrl-C to stop)",
                file=sys.stderr,
                flush=True,
            )
        items = client.read_stream(run_id, key, after=after) if args.follow else None
        printed = _print(items if items is not None else _stored(client, run_id, key, after), args)
        if not known and not printed:
            return _no_stream(run_id, key)  # the run ended without writing it
    return 0


def _stored(client: Client, run_id: str, key: str, after: int) -> Iterable[StreamItem]:
    """The items stored now, a page at a time."""
    while True:
        page = client.stream_items(run_id, key, after=after, limit=PAGE)
        yield from page
        if len(page) < PAGE:
            return
        after = page[-1].offset


def _print(items: Iterable[StreamItem], args: argparse.Namespace) -> int:
    """Print each item as it comes (flushed: a pipe sees it at once); how many."""
    count = 0
    for item in items:
        if args.json:
            line = json.dumps(item.to_dict(), ensure_ascii=False, separators=(",", ":"))
        else:
            line = f"{item.offset}\t{_output.compact_json(item.value)}"
        print(line, flush=True)
        count += 1
    return count


def _no_stream(run_id: str, key: str) -> int:
    print(f"run {run_id} has no stream {key!r}", file=sys.stderr)
    return 1
