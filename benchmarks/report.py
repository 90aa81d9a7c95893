"""Results out: the JSON document, the table on the terminal, the scaling picture.

The document carries the machine it ran on (CPU, memory, load before and after, versions,
commit), so that a figure is never read apart from the conditions it was taken under.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import sqlite3
import statistics
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.metrics import catalogue

if TYPE_CHECKING:
    from benchmarks.options import Options
    from benchmarks.pgbench import Ceilings

FORMAT_VERSION = 1
COLOURS = {"postgres": "tab:blue", "sqlite": "tab:orange"}
#: How the "vs pgbench" column names each ceiling.
CEILING_WORDS = {
    "insert": "inserts",
    "update": "updates",
    "idle_insert_p50": "idle inserts (p50)",
    "idle_insert_p99": "idle inserts (p99)",
}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine(versions: dict[str, str | None]) -> dict[str, Any]:
    """What the figures depend on besides the code."""
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "postgres": versions.get("postgres"),
        "sqlite": sqlite3.sqlite_version,
        "commit": _git("rev-parse", "--short", "HEAD"),
        # Uncommitted changes to the engine or the suite: the commit alone does not say
        # what was measured.
        "dirty": bool(_git("status", "--porcelain", "--", "simpleworkflow", "benchmarks")),
    }


def document(
    *,
    options: Options,
    ceilings: Ceilings | None,
    results: dict[str, dict[str, list[float]]],
    plans: dict[str, dict[str, str]],
    versions: dict[str, str | None],
    seconds: float,
    load: tuple[list[float], list[float]],
) -> dict[str, Any]:
    """The JSON-ready results: every metric of the catalogue, per store, median and runs."""
    tps: dict[str, Any] = {"insert_tps": None, "update_tps": None}
    if ceilings is not None:
        tps = dataclasses.asdict(ceilings)
    metrics = {}
    for metric in catalogue(options.backlogs):
        entry: dict[str, Any] = {
            "label": metric.label,
            "unit": metric.unit,
            "ceiling": metric.ceiling,
            "target": metric.target_text() or None,
        }
        for kind in options.stores:
            runs = results.get(kind, {}).get(metric.name, [])
            median = statistics.median(runs) if runs else None
            entry[kind] = {"median": median, "runs": runs, "meets_target": metric.meets(median)}
        postgres = entry.get("postgres", {}).get("median")
        entry["ratio"] = metric.ratio(postgres, tps)
        metrics[metric.name] = entry
    return {
        "format": FORMAT_VERSION,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "machine": machine(versions),
        "load_average": {"before": load[0], "after": load[1]},
        "options": dataclasses.asdict(options) | {"postgres_url": None},
        "ceilings": tps,
        "metrics": metrics,
        "backlogs": options.backlogs,
        "claim_plan": plans,
    }


def table(doc: dict[str, Any]) -> str:
    """The results as a Markdown table (it reads as well on a terminal)."""
    stores = doc["options"]["stores"]
    header = ["metric", *stores, "vs pgbench", "target"]
    lines = [header, ["---"] * len(header)]
    for entry in doc["metrics"].values():
        cells = [f"{entry['label']} ({entry['unit']})"]
        cells += [_number(entry[kind]["median"], entry[kind]["meets_target"]) for kind in stores]
        cells += [_ratio(entry), entry["target"] or ""]
        lines.append(cells)
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join(
        "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |"
        for row in lines
    )


def write(doc: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


def plot(doc: dict[str, Any], path: Path) -> None:
    """Drain rate against backlog size, one line per store, with the 10 % band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = doc["backlogs"]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for kind in doc["options"]["stores"]:
        colour = COLOURS.get(kind, "tab:gray")
        runs = [doc["metrics"][f"backlog_{size}"][kind]["runs"] for size in sizes]
        medians = [statistics.median(r) if r else float("nan") for r in runs]
        low = [m - min(r) if r else 0 for m, r in zip(medians, runs, strict=True)]
        high = [max(r) - m if r else 0 for m, r in zip(medians, runs, strict=True)]
        ax.errorbar(
            sizes, medians, yerr=[low, high], marker="o", capsize=4, color=colour, label=kind
        )
        if medians and medians[0] == medians[0]:
            ax.axhline(
                0.9 * medians[0],
                color=colour,
                linestyle=":",
                linewidth=1,
                label=f"{kind}: 90 % of smallest backlog",
            )
    ax.set_xscale("log")
    ax.set_xticks(sizes, [_short(size) for size in sizes])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_xlabel("pending runs already in the table (plus 10 % sleeping)")
    ax.set_ylabel("runs drained per second (1 worker process)")
    ax.set_title(
        f"Drain rate vs backlog ({doc['machine']['cpu_count']} cores, {doc['date'][:10]}, "
        f"{doc['options']['items']:,} runs drained, median of {doc['options']['repeat']})",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _short(size: int) -> str:
    for unit, name in ((1_000_000, "M"), (1_000, "k")):
        if size >= unit and size % unit == 0:
            return f"{size // unit}{name}"
    return f"{size:,}"


def _number(value: float | None, meets: bool | None) -> str:
    if value is None:
        return "-"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"
    return text + {True: " ✓", False: " ✗", None: ""}[meets]


def _ratio(entry: dict[str, Any]) -> str:
    ratio = entry["ratio"]
    if ratio is None:
        return ""
    ceiling = CEILING_WORDS.get(entry["ceiling"], entry["ceiling"])
    if entry["unit"] == "ms":
        return f"{ratio:.1f} {ceiling}"
    return f"{ratio:.0%} of {ceiling}"


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent.parent,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()
