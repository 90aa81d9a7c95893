"""``simpleworkflow runs``: list, show, cancel, delete and wait for runs."""

from __future__ import annotations

import argparse
from typing import Any

from simpleworkflow import models
from simpleworkflow.cli import _common, _output


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "runs", help="list, show, cancel, delete and wait for runs"
    )
    commands = parser.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    for add in (_add_list, _add_show, _add_cancel, _add_delete, _add_wait):
        add(commands)


def _add_list(commands: Any) -> None:
    parser = commands.add_parser("list", help="list runs, newest first")
    parser.add_argument(
        "--status",
        "-s",
        action="append",
        choices=[s.value for s in models.RunStatus],
        metavar="STATUS",
        help="only runs in this status: pending, leased, succeeded, failed or cancelled "
        "(repeat for several)",
    )
    parser.add_argument(
        "--type", "-t", dest="type_prefix", metavar="PREFIX", help="type prefix, e.g. billing.%%"
    )
    parser.add_argument(
        "--limit", "-n", type=int, default=50, metavar="N", help="page size (default: 50)"
    )
    parser.add_argument("--cursor", help="the next page, as printed after the previous one")
    parser.add_argument(
        "--all", "-a", dest="include_deleted", action="store_true", help="include deleted runs"
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=list_runs)


def _add_show(commands: Any) -> None:
    parser = commands.add_parser("show", help="one run and its audit trail")
    parser.add_argument("run_id", metavar="ID")
    _common.add_common_options(parser)
    parser.set_defaults(handler=show)


def _add_cancel(commands: Any) -> None:
    parser = commands.add_parser("cancel", help="cancel a pending or leased run")
    parser.add_argument("run_id", metavar="ID")
    parser.add_argument("--reason", "-r", help="recorded in the cancelled event")
    _common.add_common_options(parser)
    parser.set_defaults(handler=cancel)


def _add_delete(commands: Any) -> None:
    parser = commands.add_parser(
        "delete", help="soft-delete a run: hidden from claims and listings"
    )
    parser.add_argument("run_id", metavar="ID")
    _common.add_common_options(parser)
    parser.set_defaults(handler=delete)


def _add_wait(commands: Any) -> None:
    parser = commands.add_parser(
        "wait",
        help="wait until a run finishes",
        description="Wait until the run is succeeded, failed or cancelled. Exit status: "
        "0 succeeded, 1 failed or cancelled, 2 timed out or error.",
    )
    parser.add_argument("run_id", metavar="ID")
    parser.add_argument(
        "--timeout", metavar="DURATION", help="give up after this long: 30s, 5m (default: never)"
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=wait)


def list_runs(args: argparse.Namespace) -> int:
    with _common.client_for(args) as client:
        page = client.list(
            type_prefix=args.type_prefix,
            status=args.status,
            include_deleted=args.include_deleted,
            limit=args.limit,
            cursor=args.cursor,
        )
    if args.json:
        runs = [run.to_dict() for run in page.runs]
        _output.emit_json({"runs": runs, "next_cursor": page.next_cursor})
        return 0
    print(_output.runs_table(page.runs) if page.runs else "no runs")
    if page.next_cursor:
        print(f"\nmore runs: add --cursor {page.next_cursor}")
    return 0


def show(args: argparse.Namespace) -> int:
    with _common.client_for(args) as client:
        run = client.get(args.run_id)
        events = client.events(run.id)
    if args.json:
        _output.emit_json({"run": run.to_dict(), "events": [e.to_dict() for e in events]})
        return 0
    print(_output.run_fields(run))
    print()
    print(_output.events_table(events) if events else "no events")
    return 0


def cancel(args: argparse.Namespace) -> int:
    """Cancel; finding the run already finished is an answer, not an error (exit 0)."""
    with _common.client_for(args) as client:
        cancelled = client.cancel(args.run_id, reason=args.reason)
        run = client.get(args.run_id)
    if args.json:
        _output.emit_json({"id": run.id, "cancelled": cancelled, "status": run.status.value})
    elif cancelled:
        print(f"run {run.id} cancelled")
    else:
        print(f"run {run.id} was already {run.status.value}; nothing changed")
    return 0


def delete(args: argparse.Namespace) -> int:
    with _common.client_for(args) as client:
        deleted = client.delete(args.run_id)
        run = client.get(args.run_id)
    if args.json:
        _output.emit_json({"id": run.id, "deleted": deleted, "status": run.status.value})
    elif deleted:
        print(f"run {run.id} deleted ({run.status.value}); hidden from claims and listings")
    else:
        print(f"run {run.id} was already deleted; nothing changed")
    return 0


def wait(args: argparse.Namespace) -> int:
    """Exit 0 when the run succeeded and 1 when it did not, so scripts can chain on it."""
    with _common.client_for(args) as client:
        run = client.wait(args.run_id, timeout=args.timeout)
    if args.json:
        _output.emit_json(run.to_dict())
    else:
        print(_output.table(_output.RUN_COLUMNS, [_output.run_row(run)]))
        if run.last_error:
            print(f"last_error: {run.last_error}")
    return 0 if run.status is models.RunStatus.SUCCEEDED else 1
