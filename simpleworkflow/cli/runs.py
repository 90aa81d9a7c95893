"""``simpleworkflow runs``: list, show, cancel, delete, wait for, signal, retry and fork
runs, and a run's timed steps and children."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from simpleworkflow import durations, models, names
from simpleworkflow.cli import _common, _output, start, streams, values


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "runs",
        help="list, show, cancel, delete, wait for, signal, retry and fork runs",
        description="Look at runs and act on them. Each ACTION has its own --help.",
    )
    commands = _common.add_commands(parser, dest="runs_command", metavar="ACTION")
    for add in (
        _add_list,
        _add_show,
        _add_steps,
        _add_children,
        _add_cancel,
        _add_delete,
        _add_wait,
        _add_signal,
        _add_retry,
        _add_fork,
        values.add_values,
        streams.add_stream,
    ):
        add(commands)


def _add_list(commands: Any) -> None:
    parser = commands.add_parser(
        "list",
        help="list runs, newest first",
        description="List runs, newest first, a page at a time; --status also takes what a "
        "pending run waits for (sleeping, waiting-signal, waiting-child, retrying, throttled).",
    )
    parser.add_argument(
        "--status",
        "-s",
        action="append",
        choices=[*(s.value for s in models.RunStatus), *models.WAITING_STATES],
        metavar="STATUS",
        help="only runs in this status: pending, leased, succeeded, failed or cancelled, or "
        "a pending run that is sleeping, waiting-signal, waiting-child, retrying or "
        "throttled (held back by a rate limit until its next window) "
        "(repeat for several)",
    )
    parser.add_argument(
        "--type", "-t", dest="type_prefix", metavar="PREFIX", help="type prefix, e.g. billing.%%"
    )
    parser.add_argument(
        "--limit", "-n", type=int, default=50, metavar="N", help="page size (default: 50)"
    )
    parser.add_argument(
        "--payload-contains",
        metavar="JSON",
        help='only runs whose payload contains this JSON, as jsonb @> decides: \'{"customer": '
        '"c_1"}\'',
    )
    parser.add_argument(
        "--created-since", metavar="TIME", help="created at or after (ISO 8601 with an offset)"
    )
    parser.add_argument(
        "--created-until", metavar="TIME", help="created before (ISO 8601 with an offset)"
    )
    parser.add_argument("--cursor", help="the next page, as printed after the previous one")
    parser.add_argument(
        "--all", "-a", dest="include_deleted", action="store_true", help="include deleted runs"
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=list_runs)


def _add_show(commands: Any) -> None:
    parser = commands.add_parser(
        "show",
        help="one run, its journal, its signals and its audit trail",
        description="Every field of the run, then its journal (a workflow's steps), the "
        "signals sent to it, and its audit trail.",
    )
    parser.add_argument("run_id", metavar="ID")
    _common.add_common_options(parser)
    parser.set_defaults(handler=show)


def _add_steps(commands: Any) -> None:
    parser = commands.add_parser(
        "steps",
        help="a workflow run's journal, with when each call started and how long it took",
        description="The run's journal, one durable call a line in the order they first "
        "ran, with when each started and completed and the time between (retries, sleeps "
        "and waits included).",
    )
    parser.add_argument("run_id", metavar="ID")
    _common.add_common_options(parser)
    parser.set_defaults(handler=steps)


def _add_children(commands: Any) -> None:
    parser = commands.add_parser(
        "children",
        help="the runs a workflow run started, oldest first",
        description="The runs the run started with ctx.start_child, oldest first.",
    )
    parser.add_argument("run_id", metavar="ID")
    parser.add_argument(
        "--limit", "-n", type=int, default=100, metavar="N", help="at most (default: 100)"
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=children)


def _add_cancel(commands: Any) -> None:
    parser = commands.add_parser(
        "cancel",
        help="cancel a pending or leased run",
        description="Cancel a pending or leased run and its unfinished children; a run that "
        "has already finished is left as it is (exit 0).",
    )
    parser.add_argument("run_id", metavar="ID")
    parser.add_argument("--reason", "-r", help="recorded in the cancelled event")
    _common.add_common_options(parser)
    parser.set_defaults(handler=cancel)


def _add_delete(commands: Any) -> None:
    parser = commands.add_parser(
        "delete",
        help="soft-delete a run: hidden from claims and listings",
        description="Soft-delete a run: workers no longer claim it and listings hide it "
        "(runs list --all shows it); its status does not change.",
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


def _add_signal(commands: Any) -> None:
    parser = commands.add_parser(
        "signal",
        help="send a signal to a run (a wait_for_event in it consumes it)",
        description="Store signal EVENT for the run. A wait_for_event for EVENT whose match "
        "the payload contains consumes it, whether the wait began before or after; a run "
        "waiting for it wakes at once. Exit status 2 if the run does not exist or has "
        "already finished.",
    )
    parser.add_argument("run_id", metavar="ID")
    parser.add_argument("event", metavar="EVENT", help="the event name, e.g. user.verified")
    parser.add_argument(
        "--payload",
        "-p",
        default="{}",
        metavar="JSON",
        help="the signal's payload as JSON text, @file.json, or - for stdin (default: {})",
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=signal)


def _add_retry(commands: Any) -> None:
    parser = commands.add_parser(
        "retry",
        help="run a failed or cancelled run again, on the same id",
        description="Give a failed or cancelled run a new attempt: it is pending again and "
        "due now, with at least one attempt left. A workflow replays the steps it "
        "finished; a step that used up its attempts runs again. Audited as "
        "retried_by_operator. Exit status 2 for a run that is pending, leased, succeeded "
        "or deleted (nothing changes).",
    )
    parser.add_argument("run_id", metavar="ID")
    _common.add_common_options(parser)
    parser.set_defaults(handler=retry)


def _add_fork(commands: Any) -> None:
    parser = commands.add_parser(
        "fork",
        help="start a new run of a finished run's type from one of its steps",
        description="Start a new run of the type of a finished run ID whose journal holds "
        "ID's entries before the step named by --from-step (or at journal --position): that "
        "step and every later one run again, with --payload or ID's payload. ID is not "
        "changed; the new run names it (forked_from). Exit status 2 for an unknown run or "
        "step, a run that has not finished, or a fork point that is refused.",
    )
    parser.add_argument("run_id", metavar="ID")
    point = parser.add_mutually_exclusive_group(required=True)
    point.add_argument("--from-step", metavar="NAME", help="the journal entry's name")
    point.add_argument("--position", type=int, metavar="N", help="the journal entry's position")
    parser.add_argument(
        "--payload",
        "-p",
        metavar="JSON",
        help="the new run's payload as JSON text, @file.json, or - for stdin "
        "(default: the original's)",
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=fork)


def _run_id(args: argparse.Namespace) -> str:
    """The run id given, checked before any database is opened: a malformed id is
    refused as such, even where there is no database."""
    return names.normalize_run_id(args.run_id)


def _moment(flag: str, text: str | None) -> datetime | None:
    return None if text is None else durations.parse_time(text, what=flag)


def list_runs(args: argparse.Namespace) -> int:
    with _common.client_for(args) as client:
        page = client.list(
            type_prefix=args.type_prefix,
            status=args.status,
            created_after=_moment("--created-since", args.created_since),
            created_before=_moment("--created-until", args.created_until),
            payload_contains=(
                None
                if args.payload_contains is None
                else start.parse_payload(args.payload_contains)
            ),
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
    run_id = _run_id(args)
    with _common.client_for(args) as client:
        run = client.get(run_id)
        steps = client.steps(run.id)
        signals = client.signals(run.id)
        events = client.events(run.id)
        forks = client.admin.forks(run.id)
    now = datetime.now(UTC)
    if args.json:
        _output.emit_json(
            {
                "run": run.to_dict(),
                "steps": [_output.step_dict(step, run, now) for step in steps],
                "signals": [s.to_dict() for s in signals],
                "events": [e.to_dict() for e in events],
                "forks": [fork.id for fork in forks],
            }
        )
        return 0
    print(_output.run_fields(run))
    if forks:
        shown = ", ".join(f"{f.id} (at step {f.forked_at_step!r})" for f in forks)
        print(f"\nforked as {shown}")
    if steps:
        print(f"\n{_output.steps_table(steps, run, now)}")
    if signals:
        print(f"\n{_output.signals_table(signals)}")
    print()
    print(_output.events_table(events) if events else "no events")
    return 0


def cancel(args: argparse.Namespace) -> int:
    """Cancel; finding the run already finished is an answer, not an error (exit 0)."""
    run_id = _run_id(args)
    with _common.client_for(args) as client:
        cancelled = client.cancel(run_id, reason=args.reason)
        run = client.get(run_id)
    if args.json:
        _output.emit_json({"id": run.id, "cancelled": cancelled, "status": run.status_text})
    elif cancelled:
        print(f"run {run.id} cancelled")
    else:
        print(f"run {run.id} was already {run.status_text}; nothing changed")
    return 0


def delete(args: argparse.Namespace) -> int:
    run_id = _run_id(args)
    with _common.client_for(args) as client:
        deleted = client.delete(run_id)
        run = client.get(run_id)
    if args.json:
        _output.emit_json({"id": run.id, "deleted": deleted, "status": run.status_text})
    elif deleted:
        print(f"run {run.id} deleted ({run.status_text}); hidden from claims and listings")
    else:
        print(f"run {run.id} was already deleted; nothing changed")
    return 0


def wait(args: argparse.Namespace) -> int:
    """Exit 0 when the run succeeded and 1 when it did not, so scripts can chain on it."""
    run_id = _run_id(args)
    with _common.client_for(args) as client:
        run = client.wait(run_id, timeout=args.timeout)
    if args.json:
        _output.emit_json(run.to_dict())
    else:
        print(_output.table(_output.RUN_COLUMNS, [_output.run_row(run)]))
        if run.last_error:
            print(f"last_error: {run.last_error}")
    return 0 if run.status is models.RunStatus.SUCCEEDED else 1


def signal(args: argparse.Namespace) -> int:
    payload = start.parse_payload(start.read_payload_text(args.payload))
    run_id = _run_id(args)
    with _common.client_for(args) as client:
        sent = client.signal(run_id, args.event, payload)
    if args.json:
        _output.emit_json(
            {"run_id": run_id, "event": args.event, "signal_id": sent.signal_id, "woke": sent.woke}
        )
    elif sent.woke:
        print(
            f"signal {args.event!r} stored for run {run_id}; it was waiting for it and resumes now"
        )
    else:
        print(
            f"signal {args.event!r} stored for run {run_id}; no wait of the run took it now, so "
            f"it stays stored until a wait_for_event({args.event!r}) whose match its payload "
            "satisfies consumes it (`simpleworkflow runs show` lists the run's signals)"
        )
    return 0


def steps(args: argparse.Namespace) -> int:
    run_id = _run_id(args)
    with _common.client_for(args) as client:
        run = client.get(run_id)
        journal = client.admin.steps(run.id)
    now = datetime.now(UTC)
    if args.json:
        steps = [_output.timed_step_dict(step, run, now) for step in journal]
        _output.emit_json({"run_id": run.id, "steps": steps})
    elif journal:
        print(_output.timed_steps_table(journal, run, now))
    else:
        print(f"run {run_id} has no journal: it is not a workflow, or has made no durable call")
    return 0


def children(args: argparse.Namespace) -> int:
    run_id = _run_id(args)
    with _common.admin_for(args) as admin:
        found = admin.children(run_id, limit=args.limit)
    if args.json:
        _output.emit_json({"run_id": run_id, "children": [run.to_dict() for run in found]})
    elif found:
        print(_output.runs_table(found))
    else:
        print(f"run {run_id} started no child")
    return 0


def retry(args: argparse.Namespace) -> int:
    run_id = _run_id(args)
    with _common.admin_for(args) as admin:
        run = admin.retry(run_id)
    if args.json:
        _output.emit_json(run.to_dict())
    else:
        print(
            f"run {run.id} retried: pending again and due now, for its attempt "
            f"{run.attempt + 1} of {run.max_attempts}"
        )
    return 0


def fork(args: argparse.Namespace) -> int:
    run_id = _run_id(args)
    payload = (
        None if args.payload is None else start.parse_payload(start.read_payload_text(args.payload))
    )
    point: str | int = args.from_step if args.from_step is not None else args.position
    with _common.admin_for(args) as admin:
        run = admin.fork(run_id, point, payload)
    if args.json:
        _output.emit_json(run.to_dict())
    else:
        print(
            f"run {run.id} forked from {run_id} at step {run.forked_at_step!r}: pending and "
            "due now; the steps before it replay from the copied journal"
        )
    return 0
