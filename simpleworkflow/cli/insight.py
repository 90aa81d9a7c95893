"""``simpleworkflow workers`` and ``simpleworkflow throughput``: what the dashboard shows
of the fleet, for a terminal or a script (``--json``), from the same admin verbs."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from simpleworkflow.admin import Minute, Worker
from simpleworkflow.cli import _common, _output

WORKER_COLUMNS = ("WORKER", "STATE", "HOST", "PID", "CLAIMS", "HELD", "RUNS", "LAST SEEN")
MINUTE_COLUMNS = ("MINUTE (UTC)", "SUCCEEDED", "FAILED", "RETRIED")


def register(subparsers: Any) -> None:
    workers: argparse.ArgumentParser = subparsers.add_parser(
        "workers",
        help="the workers running now, idle ones too, and those gone lately",
        description="One line per worker: live ones (each records itself once per "
        "heartbeat interval, idle or not), and those that stopped or were last seen within "
        "--gone-within; its host and pid, the type prefixes it claims, the runs it holds "
        "(of its concurrency) by type, and when it was last seen. A worker not seen for a "
        "lease's length is gone (it died, froze or lost the database).",
    )
    workers.add_argument(
        "--gone-within",
        default="1h",
        metavar="DURATION",
        help="list workers stopped or gone within this long (default: 1h; 0: live ones only)",
    )
    _common.add_common_options(workers)
    workers.set_defaults(handler=list_workers)

    throughput: argparse.ArgumentParser = subparsers.add_parser(
        "throughput",
        help="runs that succeeded or failed, and attempts retried, minute by minute",
        description="Minute by minute over the last --minutes (at most a day), oldest "
        "first, the current minute last: runs that succeeded, runs that failed for good, "
        "and attempts that failed and will be retried, by the database's clock.",
    )
    throughput.add_argument(
        "--minutes", "-m", type=int, default=15, metavar="N", help="how far back (default: 15)"
    )
    throughput.add_argument(
        "--all-minutes",
        action="store_true",
        help="print minutes where nothing finished too (the JSON always has every minute)",
    )
    _common.add_common_options(throughput)
    throughput.set_defaults(handler=show_throughput)


def list_workers(args: argparse.Namespace) -> int:
    with _common.admin_for(args) as admin:
        found = admin.workers(gone_within=args.gone_within)
    if args.json:
        _output.emit_json({"workers": [worker.to_dict() for worker in found]})
    elif found:
        print(workers_table(found, datetime.now(UTC)))
    else:
        print("no worker is running, nor stopped or gone within the window")
    return 0


def show_throughput(args: argparse.Namespace) -> int:
    with _common.admin_for(args) as admin:
        minutes = admin.throughput(args.minutes)
    if args.json:
        _output.emit_json({"minutes": [minute.to_dict() for minute in minutes]})
        return 0
    shown = [m for m in minutes if args.all_minutes or m.succeeded or m.failed or m.retried]
    if shown:
        print(minutes_table(shown))
    else:
        print(f"nothing finished in the last {args.minutes} minute(s)")
    return 0


def workers_table(workers: Sequence[Worker], now: datetime) -> str:
    """Live workers first, then the stopped and gone, each by id."""
    ordered = sorted(workers, key=lambda worker: worker.state != "live")
    return _output.table(WORKER_COLUMNS, [_worker_row(worker, now) for worker in ordered])


def _worker_row(worker: Worker, now: datetime) -> list[str]:
    held = str(worker.held) + (f"/{worker.concurrency}" if worker.concurrency else "")
    runs = ", ".join(f"{name}:{count}" for name, count in worker.runs.items()) or "idle"
    last = worker.last_seen or worker.last_renewed
    ago = "-" if last is None else _output.duration((now - last).total_seconds()) + " ago"
    return [
        worker.worker_id,
        worker.state,
        worker.host or "-",
        "-" if worker.pid is None else str(worker.pid),
        ",".join(worker.type_prefixes) or "-",
        held,
        runs,
        ago,
    ]


def minutes_table(minutes: Sequence[Minute]) -> str:
    return _output.table(
        MINUTE_COLUMNS,
        [
            [_output.when(m.start)[:-3], str(m.succeeded), str(m.failed), str(m.retried)]
            for m in minutes
        ],
    )
