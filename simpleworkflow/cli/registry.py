"""``simpleworkflow registry``: which runtime runs each type, and the pause switch.

A worker adds the types it can run when it starts (``python`` for this package) and
leaves existing entries alone; these commands are how an operator moves a type to
another runtime, or stops every worker from claiming it without touching its runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from simpleworkflow import names
from simpleworkflow.admin import check_runtime, registry_dict
from simpleworkflow.backends.records import RegistryEntry
from simpleworkflow.cli import _common, _output

REGISTRY_COLUMNS = ("TYPE", "RUNTIME", "STATE", "UPDATED (UTC)", "DESCRIPTION")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "registry",
        help="which runtime runs each type; pause and resume types",
        description="The registry says which runtime (python, go ...) runs each type, and "
        "which types are paused. Each ACTION has its own --help.",
    )
    commands = _common.add_commands(parser, dest="registry_command", metavar="ACTION")
    for add in (_add_list, _add_set, _add_pause, _add_resume):
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
    with _common.admin_for(args, create=True) as admin:
        entry = admin.set_runtime(args.type, args.runtime, description=args.description)
    if args.json:
        _output.emit_json(registry_dict(entry))
    else:
        print(f"{entry.workflow_name}: runs on {entry.runtime} ({_state(entry)})")
    return 0


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


def _entry_row(entry: RegistryEntry) -> list[str]:
    return [
        entry.workflow_name,
        entry.runtime,
        _state(entry),
        _output.when(entry.updated_at),
        entry.description or "-",
    ]
