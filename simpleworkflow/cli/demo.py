"""``simpleworkflow demo``: the first thing a new user runs, on nothing but the stdlib.

It starts a worker for the handlers of :mod:`simpleworkflow.demo_app` in this process,
writes a batch of intents the way any producer would, follows them to the end, and shows
what the store recorded: the outcome of each type and the audit trail of the run that was
retried. The runs stay in the database, so the other commands have something to show.

Every demo writes its own batch (fresh idempotency keys) and reports only that batch, so
running it again on the same file works and says the same thing.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import shlex
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from simpleworkflow import config, demo_app, errors
from simpleworkflow.cli import _common, _output, migrate
from simpleworkflow.client import MAX_PAGE, AsyncClient
from simpleworkflow.models import Event, Run, RunStatus
from simpleworkflow.worker import IntentPoller

#: How many intents of each type one demo writes, in the order they are written.
BATCH = (
    (demo_app.ONBOARD, 1),
    (demo_app.CHARGE, 2),
    (demo_app.WEBHOOK, 1),
    (demo_app.THUMBNAIL, 15),
    (demo_app.EMAIL, 12),
)
TOTAL = sum(count for _, count in BATCH)
CONCURRENCY = 4
TIMEOUT = 60.0
REFRESH = 0.1
SAMPLE_PAYLOAD = shlex.quote(json.dumps({"content_id": "c_1"}))


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help=f"see it work: a worker, {TOTAL} runs, retries, a workflow and audit trails",
        description="Run a worker for a few example handlers in this process, write "
        f"{TOTAL} intents (one a durable workflow, which the demo signals), follow them to "
        "the end and show what the database recorded. Uses "
        f"{config.DEFAULT_URL} unless told otherwise; running it again is fine.",
    )
    _common.add_store_options(parser)
    parser.set_defaults(handler=run)


@dataclass
class Outcome:
    """What one demo produced: its runs as they ended, how long that took, the audit
    trail of the run that failed twice before it succeeded, and that of the workflow."""

    runs: list[Run]
    elapsed: float
    retried_events: list[Event]
    workflow_events: list[Event]

    @property
    def finished(self) -> bool:
        return all(run.is_terminal for run in self.runs)


def run(args: argparse.Namespace) -> int:
    print(f"simpleworkflow demo on {migrate.describe_target(args)}\n")
    print("The handlers, from simpleworkflow/demo_app.py:")
    print(_handlers_table())
    outcome = asyncio.run(_run_demo(args))
    print()
    _report(outcome, args)
    return 0 if outcome.finished else 1


def _handlers_table() -> str:
    """Each demo type with the first line of its handler's docstring."""
    rows = []
    for type_name, definition in demo_app.app.definitions.items():
        doc = inspect.getdoc(definition.fn) or "-"
        rows.append([type_name, doc.splitlines()[0]])
    return _output.table(("TYPE", "HANDLER"), rows)


async def _run_demo(args: argparse.Namespace) -> Outcome:
    poller = IntentPoller(
        demo_app.app,
        type_prefixes=["demo.%"],
        concurrency=CONCURRENCY,
        worker_id=f"demo-{os.getpid()}",
        database_url=args.database_url,
        schema=args.schema,
        poll_interval=0.2,
        shutdown_grace=5.0,
    )
    async with AsyncClient(args.database_url, schema=args.schema) as client:
        await client.migrate()  # idempotent; a new Postgres database gets its schema
        worker = asyncio.create_task(poller.run_async(), name="demo-worker")
        began = time.monotonic()
        try:
            started = await _produce(client)
            print(
                f"\nWorker {poller.worker_id} is up (concurrency {CONCURRENCY}); "
                f"wrote {len(started)} intents."
            )
            onboarding = next(run for run in started if run.type == demo_app.ONBOARD)
            verifier = asyncio.create_task(_verify_when_waiting(client, onboarding.id))
            try:
                runs = await _follow(client, started, worker, Progress(len(started), sys.stdout))
            finally:
                verifier.cancel()
        finally:
            await _stop(poller, worker)
        elapsed = time.monotonic() - began
        return Outcome(
            runs,
            elapsed,
            await _events_of_first(client, runs, demo_app.CHARGE),
            await _events_of_first(client, runs, demo_app.ONBOARD),
        )


async def _events_of_first(client: AsyncClient, runs: list[Run], type_name: str) -> list[Event]:
    run = next((run for run in runs if run.type == type_name), None)
    return await client.events(run.id) if run else []


async def _verify_when_waiting(client: AsyncClient, run_id: str) -> None:
    """Play the user who clicks the link: signal the workflow once it waits for it."""
    while True:
        waiting = (await client.get(run_id)).waiting_for
        if isinstance(waiting, dict) and waiting.get("event") == demo_app.VERIFIED:
            await client.signal(run_id, demo_app.VERIFIED, {"user_id": waiting["match"]["user_id"]})
            return
        await asyncio.sleep(REFRESH)


async def _produce(client: AsyncClient) -> list[Run]:
    """Write the batch under idempotency keys no earlier demo used."""
    batch = uuid.uuid4().hex[:8]
    started = []
    for type_name, count in BATCH:
        for i in range(1, count + 1):
            key = f"demo:{batch}:{type_name}:{i}"
            run = await client.start(type_name, _payload(type_name, i), idempotency_key=key)
            started.append(run)
    return started


def _payload(type_name: str, i: int) -> dict[str, Any]:
    if type_name == demo_app.THUMBNAIL:
        return {"content_id": f"c_{i:03d}", "width": 300, "height": 300}
    if type_name == demo_app.EMAIL:
        return {"to": f"user{i}@example.com", "template": "welcome"}
    if type_name == demo_app.CHARGE:
        return {"order_id": f"o_{i:03d}", "amount": 1990 + i, "currency": "EUR"}
    if type_name == demo_app.ONBOARD:
        # Seconds instead of minutes and days, and an address no earlier demo used (its
        # first e-mail meets a busy provider, which the retry shows).
        email = f"ada+{uuid.uuid4().hex[:6]}@example.com"
        return {"email": email, "welcome_delay": "1s", "verify_within": "30s"}
    return {"url": "https://hooks.example.com/gone"}


async def _follow(
    client: AsyncClient, started: list[Run], worker: asyncio.Task[None], progress: Progress
) -> list[Run]:
    """Poll this batch's runs until every one has ended, or ``TIMEOUT`` passes."""
    deadline = time.monotonic() + TIMEOUT
    since = min(run.created_at for run in started)
    ids = [run.id for run in started]
    while True:
        if worker.done():
            worker.result()  # raises what stopped the worker
            raise errors.ConfigurationError("the demo worker stopped before the runs ended")
        runs = await _fetch(client, ids, since)
        progress.update(runs)
        if all(run.is_terminal for run in runs) or time.monotonic() > deadline:
            progress.close()
            return runs
        await asyncio.sleep(REFRESH)


async def _fetch(client: AsyncClient, ids: list[str], since: datetime) -> list[Run]:
    """The runs with these ids, in this order, read page by page from one listing."""
    found: dict[str, Run] = {}
    cursor = None
    while True:
        page = await client.list(
            type_prefix="demo.%",
            created_after=since,
            include_deleted=True,
            limit=MAX_PAGE,
            cursor=cursor,
        )
        found.update((run.id, run) for run in page.runs)
        cursor = page.next_cursor
        if cursor is None:
            return [found[run_id] for run_id in ids if run_id in found]


async def _stop(poller: IntentPoller, worker: asyncio.Task[None]) -> None:
    await asyncio.sleep(0)  # let a worker task that never ran start, so stop() reaches it
    if not worker.done():
        poller.stop()
    await worker


class Progress:
    """One line that rewrites itself on a terminal; plain lines, at most two a second, else."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total = total
        self.stream = stream
        self.tty = stream.isatty()
        self._shown = ""
        self._shown_at = 0.0
        self._held = ""  # a line held back by the rate limit, shown at close

    def update(self, runs: Sequence[Run]) -> None:
        line = self.describe(runs)
        now = time.monotonic()
        if line == self._shown:
            return
        if not self.tty and now - self._shown_at < 0.5:
            self._held = line
            return
        self._show(line, now)

    def close(self) -> None:
        if self._held and self._held != self._shown:
            self._show(self._held, time.monotonic())
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _show(self, line: str, now: float) -> None:
        self._shown, self._shown_at, self._held = line, now, ""
        self.stream.write(f"\r{line}\x1b[K" if self.tty else f"{line}\n")
        self.stream.flush()

    def describe(self, runs: Sequence[Run]) -> str:
        counts = Counter(run.status for run in runs)
        done = sum(n for status, n in counts.items() if status.is_terminal)
        parts = ", ".join(f"{counts[s]} {s.value}" for s in RunStatus if counts[s])
        return f"  {done}/{self.total} done: {parts}"


def _report(outcome: Outcome, args: argparse.Namespace) -> None:
    print(f"Finished in {outcome.elapsed:.1f}s." if outcome.finished else _unfinished(outcome))
    print()
    print(outcome_table(outcome.runs))
    print()
    retried = outcome.retried_events
    if retried:
        print(f"Audit trail of run {retried[0].workflow_id} ({demo_app.CHARGE}):")
        print(audit_trail(retried))
        print()
    workflow = outcome.workflow_events
    if workflow:
        print(f"Audit trail of run {workflow[0].workflow_id} ({demo_app.ONBOARD}), a workflow:")
        print(audit_trail(workflow))
        print()
    for run in outcome.runs:
        if run.type == demo_app.WEBHOOK and run.status is RunStatus.FAILED:
            print(f"Run {run.id} ({run.type}) failed at once, not retried:")
            print(f"  {_last_line(run.last_error)}\n")
    workflow_id = workflow[0].workflow_id if workflow else "ID"
    print(_next_steps(args, retried[0].workflow_id if retried else "ID", workflow_id))


def _unfinished(outcome: Outcome) -> str:
    waiting = sorted({run.type for run in outcome.runs if not run.is_terminal})
    return (
        f"Some runs did not finish within {TIMEOUT:g}s ({', '.join(waiting)}). Is a type "
        "paused or moved to another runtime? See `simpleworkflow registry list`."
    )


def outcome_table(runs: Sequence[Run]) -> str:
    """Counts by type and status: one row per type, one column per status that occurs."""
    counts = Counter((run.type, run.status) for run in runs)
    statuses = [s for s in RunStatus if any(status is s for _, status in counts)]
    types = list(dict.fromkeys(run.type for run in runs))
    header = ["TYPE", "RUNS", *(s.value.upper() for s in statuses)]
    rows = [_count_row(t, statuses, counts) for t in types]
    rows.append(_count_row("all", statuses, _totals(counts)))
    return _output.table(header, rows)


def _totals(counts: Counter[tuple[str, RunStatus]]) -> Counter[tuple[str, RunStatus]]:
    totals: Counter[tuple[str, RunStatus]] = Counter()
    for (_, status), n in counts.items():
        totals[("all", status)] += n
    return totals


def _count_row(
    type_name: str, statuses: list[RunStatus], counts: Counter[tuple[str, RunStatus]]
) -> list[str]:
    cells = [str(counts[(type_name, s)]) for s in statuses]
    return [type_name, str(sum(counts[(type_name, s)] for s in RunStatus)), *cells]


def audit_trail(events: Sequence[Event]) -> str:
    """Each event with its time after the first, its type and the gist of its data."""
    start = events[0].created_at
    rows = [
        [f"+{(e.created_at - start).total_seconds():.3f}s", e.event_type, summary(e.data, start)]
        for e in events
    ]
    return _output.table(("AFTER", "EVENT", "DATA"), rows)


def summary(data: Any, start: datetime) -> str:
    """Event data in one short line: times as offsets, errors as ``Type: message``."""
    if not isinstance(data, dict):
        return _output.compact_json(data)
    return "  ".join(_summary_parts(data, start))


def _summary_parts(data: dict[str, Any], start: datetime) -> Iterator[str]:
    for key, value in data.items():
        if value is None or key in ("type", "traceback"):
            continue
        if key == "error" and isinstance(value, dict):
            yield f"error={value.get('type')}: {value.get('message')}"
        elif (key == "until" or key.endswith(("_at", "_until"))) and isinstance(value, str):
            yield f"{key}={_offset(value, start)}"
        else:
            yield f"{key}={value}"


def _offset(value: str, start: datetime) -> str:
    """A stored time as seconds after ``start`` (``+1.520s``); as stored if unreadable."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is None:  # SQLite stores UTC without an offset
        moment = moment.replace(tzinfo=UTC)
    return f"{(moment - start).total_seconds():+.3f}s"


def _last_line(text: str | None) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "-"


def _next_steps(args: argparse.Namespace, run_id: str, workflow_id: str) -> str:
    cmd = _command_prefix(args)
    steps = [
        ("every run, newest first (this demo's among them)", f"{cmd} runs list"),
        ("one run and its audit trail", f"{cmd} runs show {run_id}"),
        ("the workflow's journal: each step's recorded result", f"{cmd} runs show {workflow_id}"),
        ("write one more intent...", f"{cmd} start {demo_app.THUMBNAIL} -p {SAMPLE_PAYLOAD}"),
        (
            "...and run a worker for it (Ctrl-C stops it)",
            f"{cmd} worker simpleworkflow.demo_app:app",
        ),
    ]
    lines = [f"  # {why}\n  {command}" for why, command in steps]
    return "What to try next:\n" + "\n".join(lines)


def _command_prefix(args: argparse.Namespace) -> str:
    """``simpleworkflow`` plus the store options this demo was given, password hidden."""
    parts = ["simpleworkflow"]
    if args.database_url:
        parts += ["-d", shlex.quote(config.mask_url(args.database_url))]
    if args.schema:
        parts += ["--schema", shlex.quote(args.schema)]
    return " ".join(parts)
