"""The side-by-side table and the issue's targets, computed from one run's medians.

Every ratio is ours over the other: above 1 is faster for rates, slower for latencies.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

OURS = "simple-workflow"
FLOOR = "psycopg floor"
Figures = dict[str, dict[str, float]]  # system -> metric -> median
Samples = dict[str, dict[str, list[float]]]  # system -> metric -> one figure per round


def _best(
    medians: Figures, peers: list[str], metric: str, lower: bool = False
) -> tuple[str, float] | None:
    found = [(name, medians[name][metric]) for name in peers if metric in medians.get(name, {})]
    if not found:
        return None
    return (min if lower else max)(found, key=lambda item: item[1])


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def rows(medians: Figures, peers: list[str], tuned: dict[str, str]) -> list[dict[str, Any]]:
    """One row per line of the issue's table: best peer, ours, the floor, the ratios."""
    ours = medians.get(OURS, {})
    floor = medians.get(FLOOR, {})
    table = []

    def add(work: str, metric: str, *, lower: bool = False, with_floor: bool = True,
            label: Callable[[str], str] = lambda name: name) -> None:  # fmt: skip
        best = _best(medians, peers, metric, lower)
        mine = ours.get(metric)
        reference = floor.get(metric) if with_floor else None
        table.append({
            "work": work, "metric": metric,
            "best_peer": label(best[0]) if best else None,
            "best_peer_value": best[1] if best else None,
            "ours": mine, "floor": reference,
            "vs_best_peer": _ratio(mine, best[1] if best else None),
            "vs_floor": _ratio(mine, reference),
        })  # fmt: skip

    add("start one at a time /s", "start_one")
    add("start batched x100 /s", "start_batch")
    add("drain, 1 process, defaults /s", "drain_1")
    add("drain, 2 processes /s", "drain_2")
    add("drain tuned /s", "drain_tuned", with_floor=False,
        label=lambda name: f"{name} ({tuned.get(name, 'tuned')})")  # fmt: skip
    add("idle pick-up p50 ms", "pickup_p50_ms", lower=True)
    add("idle pick-up p99 ms", "pickup_p99_ms", lower=True)
    add("10-step workflows /s", "steps", with_floor=False)
    for work, top, bottom in (
        ("ours: defaults vs 100 slots", "drain_1", "drain_tuned"),
        ("ours: plain def vs async def handlers", "drain_sync", "drain_1"),
        ("ours: POST /api/v1/runs vs Client.start", "api_start", "client_start"),
    ):
        mine, reference = ours.get(top), ours.get(bottom)
        table.append({"work": work, "metric": f"{top}/{bottom}", "ours": mine,
                      "reference": reference, "ratio": _ratio(mine, reference)})  # fmt: skip
    return table


#: (work, metric over reference, target, at least (True) or at most (False)).
TARGETS = (
    ("start one at a time vs single-row insert",
     ("start_one", OURS), ("start_one", FLOOR), 0.8, True),
    ("start_many x100 vs multi-row insert",
     ("start_batch", OURS), ("start_batch", FLOOR), 0.9, True),
    ("drain, defaults vs 100 slots", ("drain_1", OURS), ("drain_tuned", OURS), 0.9, True),
    ("drain, def vs async def handlers", ("drain_sync", OURS), ("drain_1", OURS), 0.85, True),
    ("idle pick-up p50 vs LISTEN loop",
     ("pickup_p50_ms", OURS), ("pickup_p50_ms", FLOOR), 1.2, False),
    ("idle pick-up p99 vs LISTEN loop",
     ("pickup_p99_ms", OURS), ("pickup_p99_ms", FLOOR), 1.5, False),
    ("POST /api/v1/runs vs Client.start", ("api_start", OURS), ("client_start", OURS), 0.5, True),
)  # fmt: skip


def targets(medians: Figures, samples: Samples | None = None) -> list[dict[str, Any]]:
    """Each target of the issue that this run measures, with its ratio and verdict.

    The ratio is the median of the rounds' own ratios when both sides have a figure in
    every round (the two are measured minutes apart, so the machine's load moves them
    together), else the ratio of the medians."""
    found = []
    for work, (metric, system), (ref_metric, ref_system), target, at_least in TARGETS:
        of_medians = _ratio(
            medians.get(system, {}).get(metric), medians.get(ref_system, {}).get(ref_metric)
        )
        mine = (samples or {}).get(system, {}).get(metric, [])
        theirs = (samples or {}).get(ref_system, {}).get(ref_metric, [])
        paired = len(mine) == len(theirs) > 0 and all(theirs)
        rounds = [a / b for a, b in zip(mine, theirs, strict=True)] if paired else []
        ratio = statistics.median(rounds) if rounds else of_medians
        met = None if ratio is None else (ratio >= target if at_least else ratio <= target)
        found.append(
            {
                "work": work,
                "ratio": ratio,
                "ratio_of_medians": of_medians,
                "target": f"{'>=' if at_least else '<='} {target}x",
                "met": met,
            }
        )
    return found


def against(samples: Samples, reference: str) -> list[dict[str, Any]]:
    """The working tree against another version of itself, metric by metric, as a speed
    ratio (above 1 is faster: rates ours over theirs, latencies theirs over ours), the
    median of the rounds' own ratios; the issue wants none below 1."""
    found = []
    for metric, label in LABELS.items():
        mine = samples.get(OURS, {}).get(metric, [])
        theirs = samples.get(reference, {}).get(metric, [])
        if not mine or len(mine) != len(theirs) or not all(mine) or not all(theirs):
            continue
        lower = metric.endswith("_ms")
        rounds = [(b / a) if lower else (a / b) for a, b in zip(mine, theirs, strict=True)]
        found.append({
            "work": label, "metric": metric, "reference": reference,
            "ours": statistics.median(mine), "theirs": statistics.median(theirs),
            "speed_ratio": statistics.median(rounds), "rounds": rounds,
        })  # fmt: skip
    return found


def against_markdown(rows: list[dict[str, Any]]) -> str:
    """``against``'s rows as Markdown: what the issue's first target reads."""
    name = rows[0]["reference"] if rows else "reference"
    lines = [f"| work | {name} | {OURS} | speed ratio (median of rounds) | not slower |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in rows:
        digits = 2 if row["metric"].endswith("_ms") else 0
        verdict = "✓" if row["speed_ratio"] >= 1.0 else "✗"
        theirs, mine = _num(row["theirs"], digits), _num(row["ours"], digits)
        ratio = _x(row["speed_ratio"])
        lines.append(f"| {row['work']} | {theirs} | {mine} | {ratio} | {verdict} |")
    return "\n".join(lines)


#: Each metric of the per-system table, as its row is labelled.
LABELS = {
    "start_one": "start one at a time /s",
    "start_batch": "start batched x100 /s",
    "drain_1": "drain, 1 process, defaults /s",
    "drain_2": "drain, 2 processes, defaults /s",
    "drain_tuned": "drain, 1 process, tuned /s",
    "drain_sync": "drain, 1 process, plain def handlers /s",
    "steps": "10-step workflows /s",
    "pickup_p50_ms": "idle pick-up p50 ms",
    "pickup_p99_ms": "idle pick-up p99 ms",
    "client_start": "Client.start one at a time /s (API case)",
    "api_start": "POST /api/v1/runs one at a time /s",
}


def per_system(medians: Figures, tuned: dict[str, str]) -> str:
    """Every median of every system, one column each, as Markdown."""
    names = list(medians)
    heads = [f"{name} (tuned: {tuned[name]})" if tuned.get(name) else name for name in names]
    lines = ["| work | " + " | ".join(heads) + " |", "| --- |" + " --- |" * len(names)]
    for metric, label in LABELS.items():
        if any(metric in medians[name] for name in names):
            digits = 2 if metric.endswith("_ms") else 0
            cells = [_num(medians[name].get(metric), digits) for name in names]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def markdown(table: list[dict[str, Any]], goals: list[dict[str, Any]]) -> str:
    """The two tables as Markdown, as docs/performance.md shows them."""
    lines = ["| work | best peer | simple-workflow | psycopg floor | vs best peer | vs floor |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in table:
        digits = 2 if row["metric"].endswith("_ms") else 0
        if "ratio" in row:
            lines.append(f"| {row['work']} | - | {_num(row['ours'])} vs {_num(row['reference'])} "
                         f"| - | - | {_x(row['ratio'])} |")  # fmt: skip
            continue
        best = (
            f"{row['best_peer']} {_num(row['best_peer_value'], digits)}"
            if row["best_peer"]
            else "-"
        )
        mine, floor = _num(row["ours"], digits), _num(row["floor"], digits)
        ratios = f"{_x(row['vs_best_peer'])} | {_x(row['vs_floor'])}"
        lines.append(f"| {row['work']} | {best} | {mine} | {floor} | {ratios} |")
    lines += ["", "| target | ratio (median of rounds) | ratio of medians | wanted | met |",
              "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for goal in goals:
        verdict = {True: "✓", False: "✗", None: "not measured"}[goal["met"]]
        ratios = f"{_x(goal['ratio'])} | {_x(goal['ratio_of_medians'])}"
        lines.append(f"| {goal['work']} | {ratios} | {goal['target']} | {verdict} |")
    return "\n".join(lines)
