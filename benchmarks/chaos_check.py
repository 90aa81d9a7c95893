"""The chaos benchmark's checker: what the witness ledger, the journals, the runs and the
audit trail say happened, compared.

The ledger has one JSON line per tick of a step body (``run``, ``step``, ``exec``: that
execution's id, which the step returns and the journal keeps; ``attempt``, ``pid``,
``at``: ``time.time()``) and one ``woke`` line each time a durable sleep returns. Times in
the journal and the audit trail come from the database's clock; it runs on this machine,
so they compare with the ledger's.
"""

from __future__ import annotations

import collections
import itertools
import json
import statistics
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks import chaos_recovery as recovery
from benchmarks.chaos_faults import Fault
from simpleworkflow.models import Event, JournalEntry

COUNTS = (
    "lost",
    "stuck",
    "failed",
    "duplicate_journal_rows",
    "events_after_terminal",
    "overlapping_executions",
    "unexplained_reexecutions",
    "fenced_writes_accepted",
    "early_wakeups",
)
TERMINAL = recovery.TERMINAL
#: Faults after which the struck workers must find the database again.
DATABASE = ("restart", "terminate", "silence", "half_open")

Tick = dict[str, Any]


def read(path: Path) -> list[Tick]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def stamp(moment: datetime | None) -> float:
    return float("inf") if moment is None else moment.timestamp()


def overlaps(ticks: list[Tick]) -> int:
    """Runs two attempts of which wrote ledger lines in intersecting intervals."""
    overlapping = 0
    for attempts in _spans(ticks).values():
        ordered = sorted(attempts.values())
        overlapping += any(b[0] < a[1] for a, b in itertools.pairwise(ordered))
    return overlapping


def _spans(ticks: list[Tick]) -> dict[str, dict[str, tuple[float, float]]]:
    """By run, by attempt: the first and last step tick's time."""
    spans: dict[str, dict[str, tuple[float, float]]] = collections.defaultdict(dict)
    for tick in ticks:
        if "step" not in tick:
            continue
        first, last = spans[tick["run"]].get(tick["attempt"], (tick["at"], tick["at"]))
        spans[tick["run"]][tick["attempt"]] = (min(first, tick["at"]), max(last, tick["at"]))
    return spans


def reexecutions(
    ticks: list[Tick], faults: list[Fault], events: dict[str, list[Event]], names: dict[int, str]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Steps (run, step) executed again, not explained by a fault: those whose earlier
    execution's lease lapsed (:func:`lapses`: its worker, struck by no fault, did not
    renew it in time and a reaper recovered the run), and the rest, unexplained.
    A fault explains a re-execution when it struck the process of the earlier execution
    while that process held the run (from the claim of the attempt that ran it) and
    before the next execution began, or was still in force at that claim (a restart or
    a silence dealt a moment before): a fault during a holding can cost its lease after
    it ended (a freeze leaves too little of the lease for the next heartbeat; a
    half-open connection holds the heartbeat until the worker notices it, about a second
    later). ``names``: each worker process's name, by pid."""
    struck = _struck(faults)
    lapsed_leases = {(e.workflow_id, e.id) for e in lapses(faults, events)}
    executions: dict[tuple[str, str], dict[str, tuple[float, int]]] = collections.defaultdict(dict)
    for tick in ticks:
        if "step" in tick:
            key = (tick["run"], tick["step"])
            executions[key].setdefault(tick["exec"], (tick["at"], tick["pid"]))
    lapsed, unexplained = [], []
    for key, runs in executions.items():
        ordered = sorted(runs.values())
        for (began, pid), (again, _) in itertools.pairwise(ordered):
            name = names.get(pid, "")
            claimed, given_up = _holding(events.get(key[0], []), name, began)
            if any(start <= again and end >= claimed for start, end in struck[name]):
                continue
            if given_up is not None and (key[0], given_up.id) in lapsed_leases:
                lapsed.append(key)
            else:
                unexplained.append(key)
    return lapsed, unexplained


def lapses(faults: list[Fault], events: dict[str, list[Event]]) -> list[Event]:
    """Leases recovered by a reaper (``retried``, ``lease_expired``) whose holder met no
    fault from its claim to the recovery: it was running and could reach the database,
    but did not renew the lease in time (see :func:`lapse_causes`)."""
    struck = _struck(faults)
    found = []
    for trail in events.values():
        claimed: dict[str, float] = {}
        for event in trail:
            data = event.data if isinstance(event.data, dict) else {}
            if event.event_type == "leased":
                claimed[data.get("worker_id", "")] = recovery.stamp(event)
            elif event.event_type == "retried" and data.get("reason") == "lease_expired":
                holder, at = data.get("worker_id", ""), recovery.stamp(event)
                since = claimed.get(holder, at)
                if not any(start <= at and end >= since for start, end in struck[holder]):
                    found.append(event)
    return found


def lapse_causes(
    found: list[Event], faults: list[Fault], events: dict[str, list[Event]], lease: float
) -> dict[str, int]:
    """The lapses ``found``, by cause: ``store took no writes`` (between the holder's last
    renewal and the recovery nobody wrote for over ``chaos_recovery.STALL`` seconds: on
    SQLite, another worker frozen inside a write transaction); ``claim answered late``
    (never renewed, and within a lease before the claim a fault on the holder ended or
    the store took no writes: the claim was sent before and answered after, and a worker
    counts its lease from the moment it sent the claim, so it gave the lease up at once
    or soon); ``renewal late`` (the rest: the heartbeat, or its answer, came too late)."""
    struck = _struck(faults)
    writes = sorted(recovery.stamp(e) for trail in events.values() for e in trail)
    causes: collections.Counter[str] = collections.Counter()
    for lapse in found:
        holder = lapse.data["worker_id"]
        claimed, renewed = _renewals(events[lapse.workflow_id], holder, recovery.stamp(lapse))
        if recovery.stalled(writes, renewed, recovery.stamp(lapse)) > recovery.STALL:
            causes["store took no writes"] += 1
        elif renewed == claimed and (
            any(claimed - lease <= end <= claimed for _, end in struck[holder])
            or recovery.stalled(writes, claimed - lease, claimed) > recovery.STALL
        ):
            causes["claim answered late"] += 1
        else:
            causes["renewal late"] += 1
    return dict(sorted(causes.items()))


def _renewals(trail: list[Event], holder: str, before: float) -> tuple[float, float]:
    """When ``holder`` last claimed the run before ``before``, and last renewed the lease
    (that claim, or a heartbeat since)."""
    claimed = renewed = 0.0
    for event in trail:
        at = recovery.stamp(event)
        data = event.data if isinstance(event.data, dict) else {}
        if at >= before or data.get("worker_id") != holder:
            continue
        if event.event_type == "leased":
            claimed = renewed = at
        elif event.event_type == "heartbeat":
            renewed = at
    return claimed, renewed


def _struck(faults: list[Fault]) -> dict[str, list[tuple[float, float]]]:
    """By worker name: when each fault that struck it began and ended (a kill or a
    SIGTERM ends the process: in force from then on)."""
    struck: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for fault in faults:
        end = float("inf") if fault.kind in ("kill", "term") else (fault.back or fault.at)
        for name in fault.workers:
            struck[name].append((fault.at, end))
    return struck


def _holding(trail: list[Event], name: str, began: float) -> tuple[float, Event | None]:
    """The holding of worker ``name`` in which a step began at ``began``: when it claimed
    the run (``began`` if the trail does not say) and how it let it go, the first event
    after that claim that ends a holding (``chaos_recovery.LET_GO``), if one did."""
    claim = None
    for event in trail:
        data = event.data if isinstance(event.data, dict) else {}
        before = recovery.stamp(event) <= began
        if event.event_type == "leased" and before:
            claim = event if data.get("worker_id") == name else None
        elif claim is not None and event.event_type in recovery.LET_GO:
            if not before:
                return recovery.stamp(claim), event
            claim = None  # a holding that ended before the step began
    return (began if claim is None else recovery.stamp(claim)), None


def evidence(
    key: tuple[str, str], ticks: list[Tick], faults: list[Fault], trail: list[Event], why: str
) -> dict[str, Any]:
    """What is known of a step executed more than once (``why``: ``lapsed`` or
    ``unexplained``, see :func:`reexecutions`), or with the step ``""`` of every step of
    a run (``lapse``: a lease of it lapsed; ``stuck``: open at the end): each execution
    (its process, attempt, first and last tick), the run's audit trail, and the faults
    dealt from 10 s before the trail's first event to its last."""
    spans: dict[str, dict[str, Any]] = {}
    for tick in ticks:
        if "step" not in tick or tick["run"] != key[0] or key[1] not in ("", tick["step"]):
            continue
        span = spans.setdefault(
            tick["exec"],
            {"step": tick["step"], "pid": tick["pid"], "attempt": tick["attempt"]}
            | {"first": tick["at"], "ticks": 0},
        )
        span["last"] = tick["at"]
        span["ticks"] += 1
    runs = sorted(spans.values(), key=lambda span: span["first"])
    times = [e.created_at.timestamp() for e in trail]
    start, end = min(times) - 10, max(times)
    return {
        "why": why,
        "run": key[0],
        "step": key[1],
        "executions": runs,
        "events": [
            {"type": e.event_type, "at": e.created_at.timestamp(), "data": e.data} for e in trail
        ],
        "faults": [
            {"kind": f.kind, "at": f.at, "back": f.back, "workers": f.workers}
            for f in faults
            if start <= f.at <= end
        ],
    }


def fenced_writes(ticks: list[Tick], journals: dict[str, list[JournalEntry]]) -> int:
    """Journal rows written by an attempt after a later attempt of the same run began its
    steps: the later one was claimed only once the earlier had lost its lease, so the
    store should have refused the write (each step journals the id of its execution)."""
    attempt_of: dict[str, str] = {}
    for tick in ticks:
        if "step" in tick:
            attempt_of.setdefault(tick["exec"], tick["attempt"])
    spans = _spans(ticks)
    accepted = 0
    for run_id, entries in journals.items():
        for entry in entries:
            writer = attempt_of.get(entry.output) if isinstance(entry.output, str) else None
            if writer is None:
                continue
            began = spans[run_id][writer][0]
            later = [first for first, _ in spans[run_id].values() if first > began]
            accepted += any(first < stamp(entry.completed_at) for first in later)
    return accepted


def early_wakeups(ticks: list[Tick], journals: dict[str, list[JournalEntry]]) -> int:
    """Durable sleeps that returned before the time their journal entry says."""
    until = {
        (run_id, entry.step_name): datetime.fromisoformat(entry.output["until"]).timestamp()
        for run_id, entries in journals.items()
        for entry in entries
        if entry.kind == "sleep"
    }
    return sum(
        tick["at"] < until.get((tick["run"], tick["woke"]), 0.0) for tick in ticks if "woke" in tick
    )


def recoveries(
    found: list[recovery.Sample], faults: list[Fault], lines: list[dict[str, Any]]
) -> dict[str, tuple[list[float], ...]]:
    """By fault kind: seconds from the fault to the next claim of each run a struck
    worker gave up because of it (``chaos_recovery.samples``); the part of it from the
    run being given up to that claim; the whole less the time the database was
    restarting meanwhile; and the whole less the time no other worker was healthy
    (``lines``, the samples described: nobody could give up or claim a run then)."""
    by_kind: dict[str, tuple[list[float], ...]] = collections.defaultdict(lambda: ([], [], [], []))
    outages = [(f.at, f.back) for f in faults if f.kind == "restart" and f.back is not None]
    for sample, line in zip(found, lines, strict=True):
        fault, claimed = sample.fault, sample.claimed
        down = sum(max(0.0, min(claimed, b) - max(fault.at, a)) for a, b in outages)
        figures = by_kind[fault.kind]
        figures[0].append(sample.total)
        figures[1].append(sample.wait)
        figures[2].append(sample.total - down)
        figures[3].append(sample.total - line["no_healthy_s"])
    return by_kind


def resumptions(
    faults: list[Fault], ticks: list[Tick], survivors: set[int]
) -> tuple[dict[str, list[float]], int]:
    """By fault kind: for each struck worker, seconds from the database being reachable
    again to the worker's first new step execution (a step begins only after a claim or a
    journal write: work has resumed); and how many struck workers that were still running
    at the end (``survivors``) never began one again. A fault that strikes a worker before
    it resumed takes the sample over; a fault still in force when another ended (a silent
    network) delays the database's return to that worker until it ends."""
    first_ticks = _first_ticks(ticks)
    samples: dict[str, list[float]] = collections.defaultdict(list)
    never = 0
    for fault in faults:
        if fault.kind not in DATABASE or fault.back is None:
            continue
        for pid in fault.workers.values():
            others = [f for f in faults if f is not fault and pid in f.workers.values()]
            back = _reachable(fault.back, others)
            later = [at for at in first_ticks.get(pid, []) if at > back]
            if later and any(back < f.at < later[0] for f in others):
                continue  # struck again before it resumed: the later fault's sample
            if later:
                samples[fault.kind].append(later[0] - back)
            else:
                never += pid in survivors
    return samples, never


def _reachable(back: float, others: list[Fault]) -> float:
    """When the database is reachable again for a worker whose fault ended at ``back``:
    later, if another fault on it is still in force then (its connections ended while
    its network is silent: it can reconnect only once the network heals)."""
    in_force = [f.back for f in others if f.back is not None and f.at <= back < f.back]
    return max([back, *in_force])


def _first_ticks(ticks: Iterable[Tick]) -> dict[int, list[float]]:
    """By process: when each of its step executions began, in order."""
    began: dict[str, tuple[float, int]] = {}
    for tick in ticks:
        if "step" in tick:
            began.setdefault(tick["exec"], (tick["at"], tick["pid"]))
    by_pid: dict[int, list[float]] = collections.defaultdict(list)
    for at, pid in sorted(began.values()):
        by_pid[pid].append(at)
    return by_pid


def summary(samples: list[float]) -> dict[str, Any]:
    """How many ``samples``, and their median, 99th percentile and maximum."""
    if not samples:
        return {"n": 0}
    cuts = (
        statistics.quantiles(samples, n=100, method="inclusive")
        if len(samples) > 1
        else samples * 99
    )
    return {
        "n": len(samples),
        "p50_s": round(statistics.median(samples), 2),
        "p99_s": round(cuts[98], 2),
        "max_s": round(max(samples), 2),
    }
