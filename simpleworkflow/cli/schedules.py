"""``simpleworkflow schedules``: cron schedules from the shell, through the admin facade's
``schedules`` (see docs/schedules.md). The runs are started by the scheduler that every
worker runs unless started with ``--no-scheduler``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from simpleworkflow import names, schedules
from simpleworkflow.cli import _common, _output
from simpleworkflow.cli.start import parse_payload, read_payload_text
from simpleworkflow.models import Schedule

COLUMNS = ("NAME", "TYPE", "CRON", "TIME ZONE", "MISSED", "STATE", "NEXT TICK (UTC)")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "schedules",
        help="cron schedules: start a run of a type at every tick",
        description="A schedule starts a run of its workflow type at every tick of its cron "
        "expression, in its time zone; every worker runs the scheduler, and each tick starts "
        "one run however many do. Each ACTION has its own --help.",
    )
    commands = _common.add_commands(parser, dest="schedules_command", metavar="ACTION")
    listing = commands.add_parser(
        "list", help="every schedule, or those of a type", description="The schedules, by name."
    )
    listing.add_argument("--type", help="only those that start this workflow type")
    _common.add_common_options(listing)
    listing.set_defaults(handler=list_schedules)
    _add_create(commands)
    for action, text, handler in (
        ("show", "one schedule, in full", show_schedule),
        ("pause", "start no more runs until resumed", pause_schedule),
        ("resume", "start runs again from the next tick after now", resume_schedule),
        ("trigger", "start one run now, outside the ticks; print its id", trigger_schedule),
        ("delete", "delete a schedule; runs it started go on", delete_schedule),
    ):
        command = commands.add_parser(action, help=text, description=text[0].upper() + text[1:])
        command.add_argument("name", metavar="NAME", help="the schedule's name")
        _common.add_common_options(command)
        command.set_defaults(handler=handler)


def _add_create(commands: Any) -> None:
    create = commands.add_parser(
        "create",
        help="create a schedule, or change the one of that name",
        description="Start a run of TYPE (default: NAME) at every tick of CRON: five fields "
        "(minute hour day-of-month month day-of-week), six with seconds first, or @hourly, "
        "@daily, @weekly, @monthly, @yearly. Quote it in a shell. Creating a schedule again "
        "changes it and keeps its pause.",
    )
    create.add_argument("name", metavar="NAME", help="e.g. billing.invoice.nightly")
    create.add_argument("cron", metavar="CRON", help="e.g. '0 2 * * *'")
    create.add_argument("--type", help="the workflow type it starts (default: NAME)")
    create.add_argument("--tz", default="UTC", help="IANA time zone of CRON (default: UTC)")
    create.add_argument(
        "--payload",
        default="{}",
        help="a JSON object each run gets, with schedule and scheduled_for added; "
        "@file.json reads a file (default: {})",
    )
    create.add_argument(
        "--missed",
        choices=schedules.MISSED_POLICIES,
        default="skip",
        help="ticks no scheduler started within a minute: skip them, start once for "
        "the latest, or each (default: skip)",
    )
    create.add_argument("--priority", type=int, default=100, metavar="N", help="default: 100")
    create.add_argument("--max-attempts", type=int, default=None, metavar="N", help="default: 3")
    _common.add_common_options(create)
    create.set_defaults(handler=create_schedule)


def list_schedules(args: argparse.Namespace) -> int:
    type_name = None if args.type is None else names.validate_type(args.type)
    with _common.admin_for(args) as admin:
        found = admin.schedules.list(type=type_name)
    if args.json:
        _output.emit_json({"schedules": [one.to_dict() for one in found]})
    elif found:
        print(_output.table(COLUMNS, [_row(one) for one in found]))
    else:
        print("no schedules; create one with `simpleworkflow schedules create NAME CRON`")
    return 0


def create_schedule(args: argparse.Namespace) -> int:
    payload = parse_payload(read_payload_text(args.payload))
    spec = schedules.define(  # refused before any database is opened
        args.name,
        args.type or args.name,
        cron=args.cron,
        tz=args.tz,
        payload=payload,
        missed=args.missed,
        priority=args.priority,
        max_attempts=args.max_attempts,
    )
    with _common.admin_for(args, create=True) as admin:
        made = admin.schedules.create(
            spec.name,
            spec.workflow_type,
            cron=spec.cron,
            tz=spec.timezone,
            payload=payload,
            missed=spec.missed,
            priority=spec.priority,
            max_attempts=spec.max_attempts,
        )
    _print(args, made, f"schedule {made.name}: {made.workflow_type} at {_when(made)}")
    return 0


def show_schedule(args: argparse.Namespace) -> int:
    with _common.admin_for(args) as admin:
        found = admin.schedules.get(names.validate_schedule_name(args.name))
    if args.json:
        _output.emit_json(found.to_dict())
        return 0
    fields = [
        ("name", found.name),
        ("type", found.workflow_type),
        ("cron", f"{found.cron} ({found.timezone})"),
        ("payload", _output.compact_json(found.payload)),
        ("missed", found.missed),
        ("priority", str(found.priority)),
        ("max attempts", str(found.max_attempts or 3)),
        ("state", _state(found)),
        ("next tick", _output.when(found.next_tick_at)),
        ("last tick", _output.when(found.last_tick_at)),
        ("declared", "in code (@app.schedule)" if found.in_code else "at run time"),
    ]
    if found.error:
        fields.append(("error", found.error))
    width = max(len(label) for label, _ in fields)
    print("\n".join(f"{label.ljust(width)}  {value}" for label, value in fields))
    return 0


def pause_schedule(args: argparse.Namespace) -> int:
    with _common.admin_for(args) as admin:
        found = admin.schedules.pause(names.validate_schedule_name(args.name))
    _print(args, found, f"schedule {found.name} paused: it starts no runs until resumed")
    return 0


def resume_schedule(args: argparse.Namespace) -> int:
    with _common.admin_for(args) as admin:
        found = admin.schedules.resume(names.validate_schedule_name(args.name))
    _print(
        args,
        found,
        f"schedule {found.name} resumed: next tick {_output.when(found.next_tick_at)} UTC",
    )
    return 0


def trigger_schedule(args: argparse.Namespace) -> int:
    """One run now, as a tick would start it; the next tick does not move, and a paused
    schedule may be triggered too. Twice within one second: the first run again."""
    with _common.admin_for(args) as admin:
        run = admin.schedules.trigger(names.validate_schedule_name(args.name))
    if not run.created:
        print(
            f"simpleworkflow: schedule {args.name} was triggered within this second already: "
            "that run",
            file=sys.stderr,
        )
    if args.json:
        _output.emit_json(run.to_dict())
    else:
        print(run.id)
    return 0


def delete_schedule(args: argparse.Namespace) -> int:
    name = names.validate_schedule_name(args.name)
    with _common.admin_for(args) as admin:
        deleted = admin.schedules.delete(name)
    if args.json:
        _output.emit_json({"name": name, "deleted": deleted})
    elif deleted:
        print(f"schedule {name} deleted; runs it started go on")
    else:
        print(f"no schedule named {name}; nothing deleted")
    return 0


def _print(args: argparse.Namespace, schedule: Schedule, text: str) -> None:
    if args.json:
        _output.emit_json(schedule.to_dict())
    else:
        print(text)


def _when(schedule: Schedule) -> str:
    """``'0 2 * * *' (Europe/Berlin), next tick 2026-11-27 01:00:00 UTC``."""
    return (
        f"'{schedule.cron}' ({schedule.timezone}), next tick "
        f"{_output.when(schedule.next_tick_at)} UTC" + (" (paused)" if schedule.paused else "")
    )


def _state(schedule: Schedule) -> str:
    if schedule.error:
        return "broken"
    return "paused" if schedule.paused else "active"


def _row(schedule: Schedule) -> list[str]:
    return [
        schedule.name,
        schedule.workflow_type,
        schedule.cron,
        schedule.timezone,
        schedule.missed,
        _state(schedule),
        _output.when(schedule.next_tick_at),
    ]
