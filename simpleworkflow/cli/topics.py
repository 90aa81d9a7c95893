"""``simpleworkflow subscriptions`` and ``simpleworkflow publish``: topics from the shell.

A subscription has a workflow type run once for every event published on a topic its
pattern matches; ``publish`` is what a producer does through ``Client.publish`` (see
docs/topics.md). Subscriptions go through the admin facade, publishing through a client.
"""

from __future__ import annotations

import argparse
from typing import Any

from simpleworkflow import names
from simpleworkflow.cli import _common, _output
from simpleworkflow.cli.start import parse_payload, read_payload_text
from simpleworkflow.errors import plural
from simpleworkflow.models import DEFAULT_MAX_ATTEMPTS, Published, Subscription

SUBSCRIPTION_COLUMNS = ("PATTERN", "TYPE", "PRIORITY", "MAX ATTEMPTS", "CREATED (UTC)")


def register(subparsers: Any) -> None:
    _add_subscriptions(subparsers)
    _add_publish(subparsers)


def _add_subscriptions(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "subscriptions",
        help="which workflow types run for events published on which topics",
        description="A subscription has TYPE run once for every event published on a topic "
        "PATTERN matches: 'orders.created' that topic, 'orders.*' any one segment in place "
        "of the '*', 'orders.#' one or more after 'orders.'. Quote patterns with '*' in a "
        "shell. Each ACTION has its own --help.",
    )
    commands = _common.add_commands(parser, dest="subscriptions_command", metavar="ACTION")
    listing = commands.add_parser(
        "list",
        help="every subscription, or those of a type or matching a topic",
        description="The subscriptions, by pattern then type.",
    )
    listing.add_argument(
        "--topic", help="only those an event published on TOPIC would start a run for"
    )
    listing.add_argument("--type", help="only those of this workflow type")
    _common.add_common_options(listing)
    listing.set_defaults(handler=list_subscriptions)

    add = commands.add_parser(
        "add",
        help="subscribe a workflow type to a topic pattern",
        description="From now on, every event published on a topic PATTERN matches starts "
        "a run of TYPE (events published before are not delivered). Adding it again "
        "changes its options.",
    )
    _pattern_and_type(add)
    add.add_argument(
        "--priority",
        type=int,
        default=100,
        metavar="N",
        help="priority of the runs it starts; lower runs earlier (default: 100)",
    )
    add.add_argument(
        "--max-attempts",
        type=int,
        default=None,
        metavar="N",
        help="attempts before each run it starts fails (default: 3)",
    )
    _common.add_common_options(add)
    add.set_defaults(handler=add_subscription)

    remove = commands.add_parser(
        "remove",
        help="unsubscribe a workflow type from a topic pattern",
        description="Events published from now on no longer start runs of TYPE through "
        "PATTERN; runs already started go on.",
    )
    _pattern_and_type(remove)
    _common.add_common_options(remove)
    remove.set_defaults(handler=remove_subscription)


def _pattern_and_type(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pattern", metavar="PATTERN", help="e.g. orders.created, 'orders.*'")
    parser.add_argument("type", metavar="TYPE", help="e.g. billing.invoice.v1")


def _add_publish(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "publish",
        help="publish an event: start a run of each type subscribed to its topic",
        description="Start, in one transaction, a run of each workflow type subscribed to "
        "a pattern that matches TOPIC, with PAYLOAD. Publishing the same --event-id again "
        "starts nothing and shows the runs it started the first time.",
    )
    parser.add_argument("topic", metavar="TOPIC", help="e.g. orders.created")
    parser.add_argument(
        "payload",
        metavar="PAYLOAD",
        nargs="?",
        default="{}",
        help="the payload as JSON text, @file.json to read a file, or - for stdin (default: {})",
    )
    parser.add_argument(
        "--event-id",
        "-e",
        default=None,
        metavar="ID",
        help="the event's id: publishing it again starts nothing (default: a new one)",
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=publish)


def list_subscriptions(args: argparse.Namespace) -> int:
    topic = None if args.topic is None else names.validate_topic(args.topic)
    type_name = None if args.type is None else names.validate_type(args.type)
    with _common.admin_for(args) as admin:
        found = admin.subscriptions(topic=topic, type=type_name)
    if args.json:
        _output.emit_json({"subscriptions": [sub.to_dict() for sub in found]})
    elif found:
        print(_output.table(SUBSCRIPTION_COLUMNS, [_row(sub) for sub in found]))
    elif topic is not None:
        print(f"no subscription matches topic {topic!r}: an event published on it starts nothing")
    else:
        print("no subscriptions; add one with `simpleworkflow subscriptions add PATTERN TYPE`")
    return 0


def add_subscription(args: argparse.Namespace) -> int:
    _check(args)
    with _common.admin_for(args, create=True) as admin:
        sub = admin.subscribe(
            args.pattern, args.type, priority=args.priority, max_attempts=args.max_attempts
        )
    if args.json:
        _output.emit_json(sub.to_dict())
    else:
        print(
            f"{sub.workflow_type} subscribed to {sub.pattern}: each event published on a "
            f"matching topic starts a run (priority {sub.priority}, "
            f"{_attempts(sub)} attempts)"
        )
    return 0


def remove_subscription(args: argparse.Namespace) -> int:
    _check(args)
    with _common.admin_for(args) as admin:
        removed = admin.unsubscribe(args.pattern, args.type)
    if args.json:
        _output.emit_json({"pattern": args.pattern, "type": args.type, "removed": removed})
    elif removed:
        print(f"{args.type} unsubscribed from {args.pattern}; runs already started go on")
    else:
        print(f"{args.type} was not subscribed to {args.pattern}; nothing removed")
    return 0


def publish(args: argparse.Namespace) -> int:
    names.validate_topic(args.topic)  # refused before any database is opened
    if args.event_id is not None:
        names.validate_event_id(args.event_id)
    payload = parse_payload(read_payload_text(args.payload))
    with _common.client_for(args) as client:
        published = client.publish(args.topic, payload, event_id=args.event_id)
    if args.json:
        _output.emit_json(published.to_dict())
    else:
        print(published_text(published))
    return 0


def published_text(published: Published) -> str:
    """What ``publish`` prints for people: a summary line, then a line per run."""
    event = f"{published.topic} (event {published.event_id})"
    if not published.runs:
        return f"{event}: no subscription matches the topic; nothing started"
    started = len(published.started)
    again = len(published.runs) - started
    if not started:
        summary = f"{event}: published before; nothing new started"
    else:
        summary = f"{event}: {plural(started, 'run')} started"
        if again:
            summary += f", {again} already started for this event before"
    width = max(len(run.type) for run in published.runs)
    lines = [
        f"  {run.type.ljust(width)}  run {run.id}  "
        + ("started" if run.created else "already started")
        for run in published.runs
    ]
    return "\n".join([summary, *lines])


def _check(args: argparse.Namespace) -> None:
    """Refuse a bad pattern or type before any database is opened."""
    names.validate_topic_pattern(args.pattern)
    names.validate_type(args.type)


def _attempts(sub: Subscription) -> str:
    return str(DEFAULT_MAX_ATTEMPTS if sub.max_attempts is None else sub.max_attempts)


def _row(sub: Subscription) -> list[str]:
    return [
        sub.pattern,
        sub.workflow_type,
        str(sub.priority),
        _attempts(sub),
        _output.when(sub.created_at),
    ]
