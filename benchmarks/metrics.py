"""What the suite reports: each metric's meaning, unit, pgbench ceiling and target.

The targets are those of issue 5 ("Performance"). A ratio puts a figure next to the
machine's own ceiling: for a rate it is the share of pgbench's single-client rate
(0.25 = a quarter of it); for a latency it is how many pgbench transactions fit in it,
sent back to back or, for the idle cases, each after an idle pause.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    #: Which pgbench ceiling the ratio uses: "insert" or "update" (back to back, in
    #: transactions per second), "idle_insert_p50" or "idle_insert_p99" (one insert
    #: after an idle pause, in ms), or None.
    ceiling: str | None
    #: The issue's target, e.g. (">=", 6000); None where the issue sets none.
    target: tuple[str, float] | None = None

    @property
    def is_latency(self) -> bool:
        return self.unit == "ms"

    def ratio(self, value: float | None, ceilings: dict[str, Any]) -> float | None:
        if value is None or self.ceiling is None:
            return None
        milliseconds = ceilings.get(f"{self.ceiling}_ms")
        if milliseconds:
            return value / float(milliseconds)
        tps = ceilings.get(f"{self.ceiling}_tps")
        if not tps:
            return None
        return value * float(tps) / 1000 if self.is_latency else value / float(tps)

    def meets(self, value: float | None) -> bool | None:
        if value is None or self.target is None:
            return None
        op, bound = self.target
        return value >= bound if op == ">=" else value <= bound

    def target_text(self) -> str:
        if self.target is None:
            return ""
        op, bound = self.target
        return f"{'≥' if op == '>=' else '≤'} {bound:,g}"


FIXED = [
    Metric("start_one", "start one at a time (1 producer)", "runs/s", "insert", (">=", 6000)),
    Metric("start_many", "start_many, batches of 1,000", "runs/s", "insert", (">=", 60000)),
    # Not simple-workflow's client: pgbench (C, prepared) sending the statement that
    # start() sends, on the same server; the most one producer could reach with this schema.
    Metric("pgbench_start", "pgbench sending start's own statement", "runs/s", "insert"),
    Metric("pgbench_start_many", "pgbench sending start_many's statements", "runs/s", "insert"),
    Metric("drain_1", "drain, 1 worker process", "runs/s", "update", (">=", 8000)),
    Metric("drain_2", "drain, 2 worker processes", "runs/s", "update"),
    Metric("drain_4", "drain, 4 worker processes", "runs/s", "update"),
    Metric("drain_1_default", "drain, 1 process, default concurrency", "runs/s", "update"),
    Metric("drain_1_metrics", "drain, 1 process, Prometheus metrics on", "runs/s", "update"),
    Metric("step_overhead_ms", "per-step overhead (journaled no-op)", "ms", "insert", ("<=", 0.25)),
    Metric("ten_step", "10-step workflows", "runs/s", "insert"),
    Metric("idle_p50_ms", "idle worker: insert to start, p50", "ms", "idle_insert_p50", ("<=", 2)),
    Metric("idle_p99_ms", "idle worker: insert to start, p99", "ms", "idle_insert_p99", ("<=", 10)),
    # Not simple-workflow: pgbench's single-row insert, one every 40 ms on average. On a
    # machine whose idle CPUs wake slowly, one commit alone costs this much.
    Metric("pgbench_idle_p50_ms", "pgbench: one insert after an idle pause, p50", "ms", None),
    Metric("pgbench_idle_p99_ms", "pgbench: one insert after an idle pause, p99", "ms", None),
    Metric("signal_p50_ms", "signal to resume, p50", "ms", "update"),
    Metric("signal_p99_ms", "signal to resume, p99", "ms", "update"),
]


def backlog_metric(size: int) -> Metric:
    return Metric(
        f"backlog_{size}", f"drain, backlog {size:,} (+{size // 10:,} asleep)", "runs/s", "update"
    )


#: The slowest backlog's drain over the smallest's. The issue asks that 1M drain within
#: 10 % of 10k; the slowest size is the stricter reading, since a dip at a middle size
#: means the cost does grow with the backlog somewhere.
BACKLOG_KEPT = Metric(
    "backlog_kept", "drain at slowest backlog / smallest", "ratio", None, (">=", 0.9)
)


def catalogue(backlogs: list[int]) -> list[Metric]:
    """Every metric a run with these backlog sizes reports, in table order."""
    extra = [backlog_metric(size) for size in backlogs]
    return FIXED + extra + ([BACKLOG_KEPT] if len(backlogs) > 1 else [])
