"""``simpleworkflow registry``: which runtime runs each type, the pause switch, and how
long each type's finished runs are kept.

A worker adds the types it can run when it starts (``python`` for this package) and
leaves existing entries alone; these commands are how an operator moves a type to
another runtime, stops every worker from claiming it without touching its runs, or sets
its retention (see docs/retention.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from simpleworkflow import durations, names, retention
from simpleworkflow.admin import check_runtime, registry_dict
from simpleworkflow.backends.records import RegistryEntry
from simpleworkflow.cli import _common, _output

REGISTRY_COLUMNS = ("TYPE", "RUNTIME", "STATE", "RETENTION", "UPDATED (UTC)", "DESCRIPTION")
#: What ``set-retention`` takes to give a type the sweeper's default again.
DEFAULT = "default"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "registry",
        help="which runtime runs each type; pause and resume types; their retention",
        description="The registry says which runtime (python, go ...) runs each type, "
        "which types are paused, and how long each type's finished runs are kept. Each "
        "ACTION has its own --help.",
    )
    commands = _common.add_commands(parser, dest="registry_command", metavar="ACTION")
    for add in (_add_list, _add_set, _add_pause, _add_resume, _add_set_retention):
        add(commands)


def _add_list(commands: Any) -> None:
    parser = commands.add_parser(
        "list",
        help="every registered type with its runtime",
        description="Every registered type, the runtime that runs it, and whether it is paused.",
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=list_entries)


def _add_set(commands: Any) -> None:
    parser = commands.add_parser(
        "set",
        help="choose the runtime that runs a type (creates the entry if needed)",
        description="Only workers of RUNTIME claim runs of TYPE from now on; runs already "
        "leased finish where they are.",
    )
    parser.add_argument("type", metavar="TYPE", help="e.g. content.thumbnail.v1")
    parser.add_argument(
        "--runtime", required=True, help="a lowercase word: python, go ... (required)"
    )
    parser.add_argument("--description", help="what the type does, for people")
    parser.add_argument(
        "--retention",
        metavar="DURATION",
        help="keep its finished runs this long (90d), as set-retention does",
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=set_entry)


def _add_pause(commands: Any) -> None:
    parser = commands.add_parser(
        "pause",
        help="stop every worker from claiming a type; its runs wait as pending",
        description="Stop every worker from claiming TYPE until `registry resume`; runs "
        "already leased finish, new ones wait as pending.",
    )
    parser.add_argument("type", metavar="TYPE")
    _common.add_common_options(parser)
    parser.set_defaults(handler=pause, enabled=False)


def _add_resume(commands: Any) -> None:
    parser = commands.add_parser(
        "resume",
        help="let workers claim a paused type again",
        description="Let the workers of TYPE's runtime claim its runs again.",
    )
    parser.add_argument("type", metavar="TYPE")
    _common.add_common_options(parser)
    parser.set_defaults(handler=resume, enabled=True)


def _add_set_retention(commands: Any) -> None:
    parser = commands.add_parser(
        "set-retention",
        help="how long a type's finished runs are kept",
        description="Keep finished runs of TYPE that chose no retention at start for "
        f"DURATION after they finish (30d, 12h), or '{DEFAULT}' for the sweeper's default "
        f"again. At most ${retention.MAX_ENV} days (365 unless set). The type must be in "
        "the registry (a worker adds it; `registry set` does too).",
    )
    parser.add_argument("type", metavar="TYPE")
    parser.add_argument("retention", metavar="DURATION", help=f"30d, 12h, or '{DEFAULT}'")
    _common.add_common_options(parser)
    parser.set_defaults(handler=set_retention)


def list_entries(args: argparse.Namespace) -> int:
    with _common.admin_for(args) as admin:
        entries = admin.registry()
    if args.json:
        _output.emit_json({"registry": [registry_dict(entry) for entry in entries]})
    elif entries:
        print(_output.table(REGISTRY_COLUMNS, [_entry_row(entry) for entry in entries]))
    else:
        print("no registered types; a worker registers its types when it starts")
    return 0


def set_entry(args: argparse.Namespace) -> int:
    names.validate_type(args.type)  # refused before any database is opened
    check_runtime(args.runtime)
    keep = None if args.retention is None else _retention(args.retention, "--retention")
    with _common.admin_for(args, create=True) as admin:
        entry = admin.set_runtime(args.type, args.runtime, description=args.description)
        if args.retention is not None:
            entry = admin.set_retention(args.type, keep)
    if args.json:
        _output.emit_json(registry_dict(entry))
    else:
        print(f"{entry.workflow_name}: runs on {entry.runtime} ({_state(entry)})")
    return 0


def set_retention(args: argparse.Namespace) -> int:
    names.validate_type(args.type)
    keep = _retention(args.retention, "DURATION")
    with _common.admin_for(args) as admin:
        entry = admin.set_retention(args.type, keep)
    if args.json:
        _output.emit_json(registry_dict(entry))
    else:
        print(f"{entry.workflow_name}: finished runs kept {_kept(entry)}")
    return 0


def _retention(text: str, what: str) -> float | None:
    """A retention given on the command line, checked against the ceiling; ``default``
    (``None``) for the sweeper's default."""
    if text.strip().lower() == DEFAULT:
        return None
    return retention.check(durations.to_seconds(text, what=what), what=what)


def pause(args: argparse.Namespace) -> int:
    entry = _switch(args)
    if not args.json:
        print(
            f"{entry.workflow_name} paused: no worker claims its runs until "
            "`simpleworkflow registry resume`; new runs wait as pending"
        )
    return 0


def resume(args: argparse.Namespace) -> int:
    entry = _switch(args)
    if not args.json:
        print(f"{entry.workflow_name} resumed: {entry.runtime} workers claim its runs again")
    return 0


def _switch(args: argparse.Namespace) -> RegistryEntry:
    """Pause or resume (``args.enabled``); a type never registered is an error."""
    names.validate_type(args.type)
    with _common.admin_for(args) as admin:
        entry = admin.resume(args.type) if args.enabled else admin.pause(args.type)
    if args.json:
        _output.emit_json(registry_dict(entry))
    return entry


def _state(entry: RegistryEntry) -> str:
    return "enabled" if entry.is_enabled else "paused"


def _kept(entry: RegistryEntry) -> str:
    if entry.retention is None:
        return "for the sweeper's default retention"
    return f"{retention.describe(entry.retention.total_seconds())} after they finish"


def _entry_row(entry: RegistryEntry) -> list[str]:
    return [
        entry.workflow_name,
        entry.runtime,
        _state(entry),
        DEFAULT if entry.retention is None else retention.describe(entry.retention.total_seconds()),
        _output.when(entry.updated_at),
        entry.description or "-",
    ]
