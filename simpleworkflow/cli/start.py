"""``simpleworkflow start``: record the intent to run a workflow type with a JSON payload."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from simpleworkflow import durations, errors
from simpleworkflow.admin import unclaimed
from simpleworkflow.cli import _common, _output
from simpleworkflow.client import OPTIONS, StartOptions, _options


def register(subparsers: Any) -> None:
    """Each start option is a flag whose ``dest`` is the option's name: ``run`` passes
    those given to ``Client.start`` without naming them."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "start",
        help="start a run of a workflow type",
        description="Write a pending run. It runs once a worker for its type is up; a "
        "type no worker or runtime has registered, or a paused one, is started all the "
        "same, with a warning on stderr.",
    )
    parser.add_argument("type", metavar="TYPE", help="versioned type, e.g. content.thumbnail.v1")
    parser.add_argument(
        "--payload",
        "-p",
        default="{}",
        metavar="JSON",
        help="the payload as JSON text, @file.json to read a file, or - for stdin (default: {})",
    )
    parser.add_argument(
        "--idempotency-key",
        "-k",
        default=None,
        metavar="KEY",
        help="a repeated key returns the run that holds it and writes nothing",
    )
    parser.add_argument(
        "--priority", type=int, default=100, metavar="N", help="lower runs earlier (default: 100)"
    )
    parser.add_argument(
        "--delay",
        default=None,
        metavar="DURATION",
        help="run no earlier than this from now: 30s, 5m",
    )
    parser.add_argument(
        "--max-attempts",
        type=int,
        default=None,
        metavar="N",
        help="attempts before failed (default: 3)",
    )
    parser.add_argument(
        "--deadline",
        default=None,
        metavar="WHEN",
        help="fail the run if it has not finished by then: a duration from now (1h, 3d) "
        "or an ISO 8601 time with an offset (2030-01-31T09:00:00Z)",
    )
    parser.add_argument(
        "--retention",
        default=None,
        metavar="DURATION",
        help="keep the run this long after it finishes (90d), instead of its type's "
        "retention or the default",
    )
    parser.add_argument(
        "--concurrency-key",
        default=None,
        metavar="KEY",
        help="count the run against its type's per-key concurrency limit under KEY (a "
        "customer id, say; see docs/flow-control.md)",
    )
    parser.add_argument(
        "--debounce",
        nargs=2,
        default=None,
        metavar=("KEY", "WINDOW"),
        help="collapse starts of TYPE with this KEY into one run, due WINDOW (30s) after "
        "the last of them; it takes this call's payload and options",
    )
    parser.add_argument(
        "--debounce-max-wait",
        default=None,
        metavar="DURATION",
        help="with --debounce: due no later than this long after the first call (5m)",
    )
    parser.add_argument(
        "--create",
        action="store_true",
        help="SQLite: make the database file if it does not exist (without it, a missing "
        "file is refused as a likely typo; `simpleworkflow migrate` makes it too)",
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    payload = parse_payload(read_payload_text(args.payload))
    given = {name: getattr(args, name, None) for name in OPTIONS}
    options = {name: value for name, value in given.items() if value is not None}
    if "deadline" in options:
        options["deadline"] = parse_deadline(options["deadline"])
    if "debounce" in options or args.debounce_max_wait is not None:
        options["debounce"] = parse_debounce(args.debounce, args.debounce_max_wait)
    # Checked before the store is opened, as the client will check it: bad input is
    # named as such, with or without a database file.
    _options.new_run(args.type, payload, options)
    with _common.client_for(args, create=args.create) as client:
        # Read first: a registry that cannot be read fails the command with nothing written.
        warnings = unclaimed.start_warnings(args.type, client.admin.registry())
        started = client.start(args.type, payload, **cast(StartOptions, options))
    for warning in warnings:
        print(f"simpleworkflow: warning: {warning}", file=sys.stderr)
    if args.json:
        _output.emit_json(started.to_dict())
    else:
        print(f"run {started.id} ({started.status.value})")
    return 0


def parse_deadline(text: str | None) -> datetime | float | None:
    """``--deadline``: seconds from now for a duration, else a timezone-aware time."""
    return None if text is None else durations.duration_or_time(text, what="--deadline")


def parse_debounce(given: list[str] | None, max_wait: str | None) -> dict[str, str | None]:
    """``--debounce KEY WINDOW`` and ``--debounce-max-wait``, as the option's mapping."""
    if given is None:
        raise errors.InvalidArgument("--debounce-max-wait needs --debounce KEY WINDOW")
    key, window = given
    return {"key": key, "window": window, "max_wait": max_wait}


def read_payload_text(source: str) -> str:
    """The payload text: given inline, from ``@file``, or from stdin for ``-``."""
    if source == "-":
        return sys.stdin.read()
    if source.startswith("@"):
        path = Path(source[1:])
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise errors.InvalidPayload(f"cannot read payload file {str(path)!r}: {exc}") from None
    return source


def parse_payload(text: str) -> Any:
    """Parse the payload JSON, refusing NaN and Infinity (which JSON proper has not)."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise errors.InvalidPayload(
            f"payload is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}; "
            """write it as JSON text, e.g. '{"content_id": "c_1"}'"""
        ) from None
    except RecursionError:
        raise errors.InvalidPayload("payload is nested too deeply") from None
    except ValueError as exc:  # an integer of more digits than Python reads (4300)
        raise errors.InvalidPayload(f"payload is not JSON: {exc}") from None


def _refuse_constant(name: str) -> Any:
    raise errors.InvalidPayload(
        f"payload contains {name}, which JSON cannot hold; use null or a string"
    )
