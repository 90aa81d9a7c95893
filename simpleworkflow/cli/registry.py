"""``simpleworkflow registry``: which runtime runs each type, the pause switch, how long
each type's finished runs are kept, and how many may be leased at once.

A worker adds the types it can run when it starts (``python`` for this package) and
leaves existing entries alone; these commands are how an operator moves a type to
another runtime, stops every worker from claiming it without touching its runs, or sets
its retention (see docs/retention.md) or its concurrency limits (docs/flow-control.md).
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from simpleworkflow import durations, errors, names, retention
from simpleworkflow.admin import check_runtime, registry_dict
from simpleworkflow.admin.verbs import check_concurrency
from simpleworkflow.cli import _common, _output
from simpleworkflow.models import RegistryEntry

REGISTRY_COLUMNS = (
    "TYPE",
    "RUNTIME",
    "STATE",
    "RETENTION",
    "CONCURRENCY",
    "UPDATED (UTC)",
    "DESCRIPTION",
)
#: What the concurrency options take for "no limit".
NONE = "none"
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
    for add in (
        _add_list,
        _add_set,
        _add_pause,
        _add_resume,
        _add_set_retention,
        _add_set_concurrency,
    ):
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
    _add_limits(parser, "as set-concurrency does")
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
        description="Keep the runs of TYPE started from now on without a retention of "
        f"their own for DURATION after they finish (30d, 12h), or '{DEFAULT}' for the "
        "sweeper's default again; runs started before keep the retention they started "
        f"with. At most ${retention.MAX_ENV} days (365 unless set). The type must be in "
        "the registry (a worker adds it; `registry set` does too).",
    )
    parser.add_argument("type", metavar="TYPE")
    parser.add_argument("retention", metavar="DURATION", help=f"30d, 12h, or '{DEFAULT}'")
    _common.add_common_options(parser)
    parser.set_defaults(handler=set_retention)


def _add_set_concurrency(commands: Any) -> None:
    parser = commands.add_parser(
        "set-concurrency",
        help="how many runs of a type may be leased at once, in all and per key",
        description="At most N runs of TYPE leased at once across every worker "
        "(--concurrency), and at most N of those started with one concurrency_key "
        f"(--key-concurrency); '{NONE}' or an option left out: no such limit. Runs over a "
        "limit wait as pending; runs already leased finish. The type must be in the "
        "registry. See docs/flow-control.md.",
    )
    parser.add_argument("type", metavar="TYPE")
    _add_limits(parser, "")
    _common.add_common_options(parser)
    parser.set_defaults(handler=set_concurrency)


def _add_limits(parser: argparse.ArgumentParser, suffix: str) -> None:
    also = f", {suffix}" if suffix else ""
    parser.add_argument(
        "--concurrency",
        metavar="N",
        help=f"at most N runs of the type leased at once, or '{NONE}'{also}",
    )
    parser.add_argument(
        "--key-concurrency",
        metavar="N",
        help=f"at most N leased at once per concurrency key, or '{NONE}'{also}",
    )


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
    limits = _limits(args)
    with _common.admin_for(args, create=True) as admin:
        entry = admin.set_runtime(args.type, args.runtime, description=args.description)
        if args.retention is not None:
            entry = admin.set_retention(args.type, keep)
        if args.concurrency is not None or args.key_concurrency is not None:
            entry = admin.set_concurrency(args.type, limits[0], per_key=limits[1])
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


def set_concurrency(args: argparse.Namespace) -> int:
    names.validate_type(args.type)
    total, per_key = _limits(args)
    with _common.admin_for(args) as admin:
        entry = admin.set_concurrency(args.type, total, per_key=per_key)
    if args.json:
        _output.emit_json(registry_dict(entry))
    else:
        print(f"{entry.workflow_name}: {_concurrency(entry)}")
    return 0


def _limits(args: argparse.Namespace) -> tuple[int | None, int | None]:
    """``--concurrency`` and ``--key-concurrency`` as limits, checked before any database
    is opened."""
    return (
        _limit(args.concurrency, "--concurrency"),
        _limit(args.key_concurrency, "--key-concurrency"),
    )


def _limit(text: str | None, what: str) -> int | None:
    if text is None or text.strip().lower() == NONE:
        return None
    try:
        number = int(text)
    except ValueError:
        raise errors.InvalidArgument(
            f"{what} must be a whole number of runs or '{NONE}', not {text!r}"
        ) from None
    return check_concurrency(what, number)


def _concurrency(entry: RegistryEntry) -> str:
    """``4 leased at most, 1 per key``, as the listing and set-concurrency say it."""
    parts = []
    if entry.concurrency is not None:
        parts.append(f"{entry.concurrency} leased at most")
    if entry.key_concurrency is not None:
        parts.append(f"{entry.key_concurrency} per key")
    return ", ".join(parts) or "no concurrency limit"


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
    return f"{_retention_text(entry)} after they finish"


def _retention_text(entry: RegistryEntry) -> str:
    """The type's retention; one stored that cannot be read, as ``unreadable: <raw>``."""
    kept: Any = entry.retention
    if kept is None:
        return DEFAULT
    return retention.describe(kept.total_seconds()) if isinstance(kept, timedelta) else str(kept)


def _entry_row(entry: RegistryEntry) -> list[str]:
    return [
        entry.workflow_name,
        entry.runtime,
        _state(entry),
        _retention_text(entry),
        _concurrency(entry) if entry.concurrency or entry.key_concurrency else "-",
        _output.when(entry.updated_at),
        entry.description or "-",
    ]
