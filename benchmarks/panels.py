"""The Grafana dashboard's panels (docs/grafana-dashboard.json), drawn from scraped series.

Each panel computes what its PromQL query asks, from the samples ``benchmarks.dashboard``
scraped: ``max by (type)`` of a gauge (every worker reports the same database), ``sum by
(...) (rate(...))`` of a counter (every worker counts its own), and ``histogram_quantile``
over summed bucket rates, interpolated within a bucket as Prometheus does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes

Series = dict[str, list[tuple[float, float]]]
#: Seconds a rate looks back, as ``rate(...[window])``.
WINDOW = 10.0

_BACKGROUND, _PANEL, _TEXT, _GRID = "#111217", "#181b1f", "#ccccdc", "#2c3235"
_COLOURS = ["#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9"]


def _summed(
    target: list[list[Any]], name: str, by: tuple[str, ...], match: dict[str, str]
) -> dict[tuple[str, ...], float]:
    """One target's samples of ``name`` matching ``match``, summed by the ``by`` labels."""
    sums: dict[tuple[str, ...], float] = defaultdict(float)
    for sample, labels, value in target:
        if sample == name and all(labels.get(k) == v for k, v in match.items()):
            sums[tuple(labels.get(label, "") for label in by)] += value
    return sums


def gauge(rounds: list[dict[str, Any]], name: str, by: str = "", **match: str) -> Series:
    """``max by (by) (name{match})``: the same value from every worker, taken once."""
    series: Series = defaultdict(list)
    keys = (by,) if by else ()
    for scrape in rounds:
        best: dict[tuple[str, ...], float] = {}
        for target in scrape["targets"]:
            for key, value in _summed(target, name, keys, match).items():
                best[key] = max(best.get(key, value), value)
        for key, value in best.items():
            series[key[0] if key else name].append((scrape["t"], value))
    return dict(series)


def _increases(
    rounds: list[dict[str, Any]],
    name: str,
    by: tuple[str, ...],
    match: dict[str, str],
    window: float,
) -> list[tuple[float, dict[tuple[str, ...], float]]]:
    """Per round, per label values: ``sum(increase(name[window])) / window`` over targets."""
    totals: list[dict[tuple[str, ...], float]] = [defaultdict(float) for _ in rounds]
    for number, scrape in enumerate(rounds):
        for target in scrape["targets"]:
            for key, value in _summed(target, name, by, match).items():
                totals[number][key] += value
    out = []
    for number, scrape in enumerate(rounds):
        back = next(
            (i for i in range(number, -1, -1) if scrape["t"] - rounds[i]["t"] >= window), None
        )
        if back is None:
            continue
        span = scrape["t"] - rounds[back]["t"]
        now, then = totals[number], totals[back]
        out.append((scrape["t"], {k: (now[k] - then.get(k, 0.0)) / span for k in now}))
    return out


def rate(rounds: list[dict[str, Any]], name: str, by: str, **match: str) -> Series:
    """``sum by (by) (rate(name{match}[WINDOW]))``: every worker's counts, added up."""
    series: Series = defaultdict(list)
    for t, rates in _increases(rounds, name, (by,), match, WINDOW):
        for (key,), value in rates.items():
            series[key].append((t, value))
    return dict(series)


def quantile(value: float, buckets: dict[float, float]) -> float:
    """Prometheus's ``histogram_quantile``: cumulative bucket counts by upper bound."""
    bounds = sorted(buckets)
    count = buckets[bounds[-1]] if bounds else 0.0
    if count <= 0:
        return math.nan
    rank, lower, below = value * count, 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if math.isinf(bound):
                return lower
            share = (rank - below) / (buckets[bound] - below) if buckets[bound] > below else 0
            return lower + (bound - lower) * share
        lower, below = bound, buckets[bound]
    return lower


def quantiles(
    rounds: list[dict[str, Any]], name: str, qs: tuple[float, ...], by: str = "", **match: str
) -> Series:
    """``histogram_quantile(q, sum by (le[, by]) (rate(name_bucket[WINDOW])))`` per q
    (and per value of ``by``)."""
    series: Series = defaultdict(list)
    keys = ("le", by) if by else ("le",)
    for t, rates in _increases(rounds, f"{name}_bucket", keys, match, WINDOW):
        grouped: dict[str, dict[float, float]] = defaultdict(dict)
        for key, value in rates.items():
            grouped[key[1] if by else ""][float(key[0])] = value
        for group, buckets in grouped.items():
            for q in qs:
                found = quantile(q, buckets)
                if not math.isnan(found):
                    label = f"p{round(q * 100)}" + (f" {group}" if group else "")
                    series[label].append((t, found))
    return dict(series)


PANELS: list[tuple[str, str, Callable[[list[dict[str, Any]]], Series]]] = [
    ("Queue depth: runs due", "runs", lambda r: gauge(r, "simpleworkflow_runs_due", "type")),
    (
        "Oldest due run",
        "seconds late",
        lambda r: gauge(r, "simpleworkflow_oldest_due_seconds", "type"),
    ),
    (
        "Throughput: runs succeeded",
        "per second",
        lambda r: rate(r, "simpleworkflow_attempts_finished_total", "type", outcome="succeeded"),
    ),
    (
        "Failures: attempts failed or retried",
        "per second",
        lambda r: {
            f"{k} {o}": v
            for o in ("retried", "failed", "lease_lost")
            for k, v in rate(r, "simpleworkflow_attempts_finished_total", "type", outcome=o).items()
        },
    ),
    (
        "Attempt duration, p50 / p99 by type",
        "seconds",
        lambda r: quantiles(r, "simpleworkflow_attempt_duration_seconds", (0.5, 0.99), "type"),
    ),
    (
        "Queue wait (due to claimed), p50 / p95 / p99",
        "seconds",
        lambda r: quantiles(r, "simpleworkflow_queue_wait_seconds", (0.5, 0.95, 0.99)),
    ),
    (
        "Run duration (created to finished), p50 / p95 / p99",
        "seconds",
        lambda r: quantiles(r, "simpleworkflow_run_duration_seconds", (0.5, 0.95, 0.99)),
    ),
    (
        "In flight: runs leased, workers seen",
        "",
        lambda r: {
            **gauge(r, "simpleworkflow_runs", "type", status="leased"),
            "workers": gauge(r, "simpleworkflow_workers_seen").get(
                "simpleworkflow_workers_seen", []
            ),
        },
    ),
    (
        "Step duration, p95 by step",
        "seconds",
        lambda r: quantiles(r, "simpleworkflow_step_duration_seconds", (0.95,), "step"),
    ),
    (
        "Step retries and failures",
        "per second",
        lambda r: {
            **{
                f"{k} retried": v
                for k, v in rate(r, "simpleworkflow_step_retries_total", "step").items()
            },
            **{
                f"{k} gave up": v
                for k, v in rate(
                    r, "simpleworkflow_steps_finished_total", "step", outcome="failed"
                ).items()
            },
        },
    ),
]


def _style(axes: Axes, title: str, unit: str) -> None:
    axes.set_facecolor(_PANEL)
    axes.set_title(title, color=_TEXT, loc="left", fontsize=11)
    axes.set_ylabel(unit, color=_TEXT, fontsize=9)
    axes.tick_params(colors=_TEXT, labelsize=8)
    axes.grid(color=_GRID, linewidth=0.6)
    for spine in axes.spines.values():
        spine.set_color(_GRID)


def _phases(axes: Axes, doc: dict[str, Any]) -> None:
    """Shade the burst and the outage, so each panel can be read against its cause."""
    load = doc["phases"]
    burst, outage = load[1], next(p for p in load if p["outage"])
    axes.axvspan(burst["start"], burst["end"] + 1, color="#5794f2", alpha=0.15, lw=0)
    axes.axvspan(outage["start"], outage["end"], color="#f2495c", alpha=0.12, lw=0)


def draw(doc: dict[str, Any], path: Path) -> None:
    """The panels in a grid, as the dashboard lays them out, written to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = doc["rounds"]
    figure, grid = plt.subplots(5, 2, figsize=(14, 17), facecolor=_BACKGROUND)
    for axes, (title, unit, compute) in zip(grid.flat, PANELS, strict=True):
        _style(axes, title, unit)
        _phases(axes, doc)
        for number, (label, points) in enumerate(sorted(compute(rounds).items())):
            if points:
                xs, ys = zip(*points, strict=True)
                axes.plot(xs, ys, label=label, color=_COLOURS[number % len(_COLOURS)], lw=1.4)
        axes.set_xlim(0, rounds[-1]["t"])
        axes.set_ylim(bottom=0)
        legend = axes.legend(fontsize=8, facecolor=_PANEL, edgecolor=_GRID, labelcolor=_TEXT)
        legend.get_frame().set_alpha(0.8)
    for axes in grid[-1]:
        axes.set_xlabel(
            "seconds into the run (blue: a burst of reports; red: the mail provider fails)",
            color=_TEXT,
            fontsize=9,
        )
    figure.suptitle(
        "simpleworkflow on Grafana's panels: two workers scraped every "
        f"{doc['interval']:g} s during a real run",
        color=_TEXT,
        fontsize=13,
    )
    figure.tight_layout(rect=(0, 0, 1, 0.98))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80, facecolor=_BACKGROUND)
    plt.close(figure)
