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
from simpleworkflow.backends.records import JournalEntry

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


def unexplained(ticks: list[Tick], faults: list[Fault]) -> list[tuple[str, str]]:
    """Steps (run, step) executed again although the process that executed them before
    met no fault after it began them."""
    struck: dict[int, list[float]] = collections.defaultdict(list)
    for fault in faults:
        for pid in fault.workers.values():
            struck[pid].append(fault.at)
    executions: dict[tuple[str, str], dict[str, tuple[float, int]]] = collections.defaultdict(dict)
    for tick in ticks:
        if "step" in tick:
            key = (tick["run"], tick["step"])
            executions[key].setdefault(tick["exec"], (tick["at"], tick["pid"]))
    found = []
    for key, runs in executions.items():
        for began, pid in sorted(runs.values())[:-1]:
            if not any(at >= began for at in struck[pid]):
                found.append(key)
    return found


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
