"""``simpleworkflow registry``: which runtime runs each type, and the pause switch.

A worker adds the types it can run when it starts (``python`` for this package) and
leaves existing entries alone; these commands are how an operator moves a type to
another runtime, or stops every worker from claiming it without touching its runs.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from simpleworkflow import errors, names, schema_check
from simpleworkflow.backends.base import Backend, Op, RegistryEntry
from simpleworkflow.cli import _common, _output

T = TypeVar("T")

REGISTRY_COLUMNS = ("TYPE", "RUNTIME", "STATE", "UPDATED (UTC)", "DESCRIPTION")
_RUNTIME = re.compile(r"[a-z][a-z0-9_]{0,31}")


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
    entries = _execute(args, lambda backend: backend.list_registry())
    if args.json:
        _output.emit_json({"registry": [entry_dict(entry) for entry in entries]})
    elif entries:
        print(_output.table(REGISTRY_COLUMNS, [_entry_row(entry) for entry in entries]))
    else:
        print("no registered types; a worker registers its types when it starts")
    return 0


def set_entry(args: argparse.Namespace) -> int:
    name = names.validate_type(args.type)
    runtime = _checked_runtime(args.runtime)
    entry = _execute(
        args, lambda backend: backend.set_registry(name, runtime, args.description), create=True
    )
    if args.json:
        _output.emit_json(entry_dict(entry))
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
    """Set ``is_enabled`` to ``args.enabled``; a type never registered is an error."""
    name = names.validate_type(args.type)
    entry = _execute(args, lambda backend: backend.enable_registry(name, args.enabled))
    if entry is None:
        raise errors.InvalidArgument(
            f"{name} is not in the registry (see `simpleworkflow registry list`); a worker "
            "adds its types when it starts, or add it with "
            f"`simpleworkflow registry set {name} --runtime python`"
        )
    if args.json:
        _output.emit_json(entry_dict(entry))
    return entry


def _execute(
    args: argparse.Namespace, make_op: Callable[[Backend], Op[T]], *, create: bool = False
) -> T:
    """Run one registry op, creating or upgrading the schema where the client would."""
    with _common.client_for(args, create=create) as client:
        schema_check.ensure(client.backend)
        return client.backend.execute(make_op(client.backend))


def _checked_runtime(runtime: str) -> str:
    if not _RUNTIME.fullmatch(runtime):
        raise errors.InvalidArgument(
            f"invalid runtime {runtime!r}: use a lowercase word such as python or go "
            "(letters, digits and '_', at most 32 characters)"
        )
    return runtime


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


def entry_dict(entry: RegistryEntry) -> dict[str, Any]:
    """A JSON-ready registry entry, times as ISO 8601 like every other JSON output."""
    return {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in (
            ("workflow_name", entry.workflow_name),
            ("intent_type", entry.intent_type),
            ("runtime", entry.runtime),
            ("is_enabled", entry.is_enabled),
            ("description", entry.description),
            ("created_at", entry.created_at),
            ("updated_at", entry.updated_at),
        )
    }
