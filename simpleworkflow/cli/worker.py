"""``simpleworkflow worker MODULE:APP``: run the handlers of an app until SIGTERM.

The command imports the user's module the way ``python -m`` would from the current
directory, so that ``simpleworkflow worker myservice.workers:app`` works without
installing ``myservice``. Everything it can check before the worker starts (the import,
the attribute, the prefixes) is refused with one line and exit code 2, so that a
deployment with a typo fails at once instead of idling with nothing to claim.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import Any

from simpleworkflow import config, durations, errors, logs, retention
from simpleworkflow.app import App
from simpleworkflow.cli import _common, _imports, sweep
from simpleworkflow.worker import IntentPoller, WorkerOptions

DEFAULT_ATTRIBUTE = "app"
LOG_LEVELS = ("debug", "info", "warning", "error")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "worker",
        help="run the handlers of an app: claim, run and record runs until stopped",
        description="Import MODULE (from the current directory too), take its attribute APP "
        "(an App or an IntentPoller) and work until SIGTERM or Ctrl-C. The first signal "
        "stops claiming and lets running handlers finish within --grace; a second one "
        "exits at once.",
    )
    parser.add_argument(
        "target",
        metavar="MODULE:APP",
        help=f"e.g. myservice.workers:app (APP defaults to {DEFAULT_ATTRIBUTE!r})",
    )
    add_options(parser)
    parser.set_defaults(handler=run)


def add_options(parser: argparse.ArgumentParser) -> None:
    """The worker's options after its target, shared with Django's
    ``manage.py simpleworkflow_worker``."""
    _add_poller_options(parser)
    parser.add_argument(
        "--metrics-port",
        type=_port,
        metavar="N",
        help="serve Prometheus metrics at http://ADDRESS:N/metrics (0: any free port, "
        "logged); needs the metrics extra. One port per worker process",
    )
    parser.add_argument(
        "--metrics-address",
        default="0.0.0.0",
        metavar="ADDRESS",
        help="the address the metrics port listens on (default: 0.0.0.0, every interface)",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        metavar="LEVEL",
        help="debug, info, warning or error (default: info)",
    )
    parser.add_argument(
        "--log-format",
        choices=config.LOG_FORMATS,
        metavar="FORMAT",
        help="text (one line per record) or json (one JSON object per line); "
        f"default: ${config.LOG_FORMAT_ENV_VAR}, else text",
    )
    _common.add_store_options(parser)


def _add_poller_options(parser: argparse.ArgumentParser) -> None:
    """Options left unset keep the value of the poller given as APP, else the default."""
    parser.add_argument(
        "--prefix",
        dest="type_prefixes",
        action="append",
        metavar="PREFIX",
        help="claim only types matching this prefix, e.g. 'billing.%%' "
        "(repeat for several; default: every type with a handler)",
    )
    parser.add_argument(
        "--concurrency", type=int, metavar="N", help="handlers run at once (default: 10)"
    )
    parser.add_argument(
        "--claim-batch",
        type=int,
        metavar="N",
        help="runs held at most while handlers are quick, those beyond the free slots "
        "waiting in the worker for one (default: 100)",
    )
    parser.add_argument(
        "--lease",
        dest="lease_duration",
        metavar="DURATION",
        help="lease length, renewed by heartbeats: 30s, 2m (default: 30s)",
    )
    parser.add_argument(
        "--worker-id", metavar="ID", help="name in leases and events (default: host-pid)"
    )
    parser.add_argument(
        "--poll-interval",
        metavar="DURATION",
        help="look for due runs at least this often when idle (default: 1s)",
    )
    parser.add_argument(
        "--watch-interval",
        metavar="DURATION",
        help="SQLite: check this often whether another process wrote to the file, "
        "0 to rely on the poll alone (default: 5ms)",
    )
    parser.add_argument(
        "--grace",
        dest="shutdown_grace",
        metavar="DURATION",
        help="at shutdown, how long running handlers may take to finish (default: 30s)",
    )
    parser.add_argument(
        "--no-heartbeat-events",
        dest="heartbeat_events",
        action="store_false",
        default=None,
        help="extend leases without writing a heartbeat event each time",
    )
    sweeping = parser.add_mutually_exclusive_group()
    sweeping.add_argument(
        "--sweep",
        dest="sweep",
        action="store_const",
        const=True,
        help="run the retention sweeper (the default; kept for older command lines)",
    )
    sweeping.add_argument(
        "--no-sweep",
        dest="sweep",
        action="store_const",
        const=False,
        help="run no retention sweeper in this worker (by default every worker runs one, "
        "and one worker of the fleet sweeps at a time)",
    )
    parser.add_argument(
        "--sweep-every",
        metavar="DURATION",
        help="run the retention sweeper this often: 10m, 1h (default: "
        f"${retention.SWEEP_ENV}, else {retention.SWEEP_EVERY / 60:g}m)",
    )
    sweep.add_default_retention(parser)
    parser.add_argument(
        "--no-scheduler",
        dest="scheduler",
        action="store_false",
        default=None,
        help="start no runs of cron schedules from this worker (others still may)",
    )


POLLER_OPTIONS = (
    "type_prefixes",
    "concurrency",
    "claim_batch",
    "lease_duration",
    "worker_id",
    "poll_interval",
    "watch_interval",
    "shutdown_grace",
    "heartbeat_events",
    "sweep",
    "sweep_every",
    "default_retention",
    "scheduler",
)
#: Duration options by the flag that sets them, so that an error names the flag.
DURATION_FLAGS = {
    "lease_duration": "--lease",
    "poll_interval": "--poll-interval",
    "watch_interval": "--watch-interval",
    "shutdown_grace": "--grace",
    "sweep_every": "--sweep-every",
    "default_retention": "--default-retention",
}


def run(args: argparse.Namespace) -> int:
    log_format = config.log_format(args.log_format)
    poller = build_poller(load_target(args.target), args)
    logs.configure(args.log_level, log_format)
    if args.metrics_port is not None:
        serve_metrics(poller, args.metrics_port, args.metrics_address)
    try:
        poller.run()
    except errors.WorkerFailed:
        return 1  # the worker has logged why, with the traceback
    return 0


def serve_metrics(poller: IntentPoller, port: int, address: str) -> None:
    """Count what the poller does, and serve it with the database's gauges from a thread
    of this process; it lives as long as the process."""
    from simpleworkflow.metrics import Metrics  # the metrics extra, only when asked for

    metrics = Metrics(
        poller.options.database_url or poller.app.database_url,
        schema=poller.options.schema or poller.app.schema,
    )
    poller.app.observe(metrics.observer)
    server = metrics.serve(port, address)
    logging.getLogger("simpleworkflow.metrics").info("serving metrics on %s", server.url)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 0 to 65535, not {text!r}")
    return port


def load_target(target: str) -> App | IntentPoller:
    """The App or IntentPoller named by ``MODULE:APP``, or a one-line error saying why not."""
    module_name, _, attribute = target.partition(":")
    attribute = attribute or DEFAULT_ATTRIBUTE
    if not module_name or not attribute.isidentifier():
        raise errors.ConfigurationError(
            f"cannot read {target!r}: write MODULE:APP, e.g. myservice.workers:app"
        )
    module = _imports.import_module(module_name, attribute)
    try:
        value = getattr(module, attribute)
    except AttributeError:
        raise errors.ConfigurationError(
            f"module {module_name!r} has no attribute {attribute!r}; "
            f"name the App it defines, e.g. {module_name}:app"
        ) from None
    if not isinstance(value, App | IntentPoller):
        raise errors.ConfigurationError(
            f"{module_name}:{attribute} is not an App or an IntentPoller (its type is "
            f"{type(value).__name__}); point at the object made with simpleworkflow.App()"
        )
    return value


def build_poller(target: App | IntentPoller, args: argparse.Namespace) -> IntentPoller:
    """A poller for the target, with the command-line options over the target's own.

    ``-d`` and ``--schema`` replace the app's database; without them the app's (or the
    environment's) applies, as for any poller.
    """
    app = target.app if isinstance(target, IntentPoller) else target
    options = dataclasses.replace(
        target.options if isinstance(target, IntentPoller) else WorkerOptions(),
        database_url=getattr(args, "database_url", None),
        schema=getattr(args, "schema", None),
        **_given_options(args),
    )
    poller = IntentPoller(app, options=options)
    if not poller.types:
        raise errors.ConfigurationError(
            f"no handler matches the prefixes {', '.join(poller.type_prefixes)}; "
            f"the app has handlers for: {', '.join(sorted(app.definitions)) or 'nothing'}"
        )
    return poller


def _given_options(args: argparse.Namespace) -> dict[str, Any]:
    given = {name: getattr(args, name) for name in POLLER_OPTIONS}
    given = {name: value for name, value in given.items() if value is not None}
    for name, flag in DURATION_FLAGS.items():
        if name in given:
            given[name] = durations.to_seconds(given[name], what=flag)
    if given.get("sweep") is False:
        for name in ("sweep_every", "default_retention"):
            if name in given:
                raise errors.InvalidArgument(
                    f"{DURATION_FLAGS[name]} is the sweeper's, and --no-sweep runs none: "
                    "give one or the other"
                )
    return given
