"""``python -m benchmarks.peers`` at its smallest, without the peers (CI installs none):
the working tree and the psycopg floors run every case, and the JSON has its shape.

Timings are never asserted; only that every figure is there and is a positive number.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from test_benchmarks import ran

from benchmarks.peers import report, systems
from benchmarks.peers.measure import database_url

OURS_METRICS = {
    "start_one", "start_batch", "drain_1", "drain_2", "drain_tuned", "drain_sync", "steps",
    "pickup_p50_ms", "pickup_p99_ms", "client_start", "api_start",
}  # fmt: skip
FLOOR_METRICS = {"start_one", "start_batch", "drain_1", "drain_2", "pickup_p50_ms", "pickup_p99_ms"}


def test_the_peers_runner_without_peers_reports_ours_and_the_floors(
    postgres_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "peers.json"
    command = [
        sys.executable, "-m", "benchmarks.peers", "--peers", "none",
        "--jobs", "20", "--rounds", "1", "--samples", "3",
        "--postgres-url", postgres_url, "--json", str(out),
    ]  # fmt: skip
    done = ran(command, timeout=300)
    doc = json.loads(out.read_text())

    assert doc["settings"]["jobs"] == 20 and doc["settings"]["rounds"] == 1
    assert doc["versions"]["postgres"] and doc["versions"]["simple-workflow"]
    assert set(doc["systems"]) == {report.OURS, report.FLOOR}
    for name, metrics in ((report.OURS, OURS_METRICS), (report.FLOOR, FLOOR_METRICS)):
        system = doc["systems"][name]
        assert system["status"] == "measured" and system["errors"] == {}, (name, system)
        assert set(system["medians"]) == metrics, name
        for metric, value in system["medians"].items():
            assert math.isfinite(value) and value > 0, (name, metric, value)
            assert len(system["samples"][metric]) == 1
    works = [row["work"] for row in doc["table"]]
    assert works[0] == "start one at a time /s" and len(works) == 11
    for row in doc["table"]:
        assert "best_peer" not in row or row["best_peer"] is None  # no peer was measured
    assert [goal["work"] for goal in doc["targets"]] == [t[0] for t in report.TARGETS]
    for goal in doc["targets"]:
        assert goal["ratio"] > 0 and goal["met"] in (True, False), goal
        assert goal["ratio"] == goal["ratio_of_medians"]  # one round: the same ratio
    assert "| target | ratio (median of rounds) |" in done.stdout


def test_a_database_url_keeps_the_server_and_names_the_database() -> None:
    socket = "postgresql://postgres:@/postgres?host=/tmp/pg"
    assert database_url(socket, "x") == "postgresql://postgres@localhost/x?host=/tmp/pg"
    tcp = "postgresql://u:p%40ss@db.local:5433/main?sslmode=disable"
    assert database_url(tcp, "y") == "postgresql://u:p%40ss@db.local:5433/y?sslmode=disable"


def test_a_peer_that_cannot_be_installed_is_reported_not_measured(tmp_path: Path) -> None:
    """No registry is asked: pip refuses an empty requirement list before looking."""
    broken = systems.System("broken", "drive_broken.py", ("start_one",), distribution="broken")
    prepared = systems.prepare(broken, cache=tmp_path)
    assert prepared.problem.startswith("not measured: could not install"), prepared.problem
    assert prepared.python != str(tmp_path / "broken" / "bin" / "python")


def test_against_a_ref_runs_that_version_beside_the_working_tree(
    postgres_url: str, tmp_path: Path
) -> None:
    """``--against REF``: the regression check of the issue's first target, per case."""
    out = tmp_path / "peers.json"
    command = [
        sys.executable, "-m", "benchmarks.peers", "--peers", "none", "--no-floor",
        "--against", "HEAD", "--cases", "start_one,drain_1,pickup",
        "--jobs", "20", "--rounds", "2", "--samples", "3",
        "--postgres-url", postgres_url, "--json", str(out),
    ]  # fmt: skip
    done = ran(command, timeout=300)
    doc = json.loads(out.read_text())

    reference = next(name for name in doc["systems"] if name.startswith("simple-workflow HEAD"))
    assert doc["systems"][reference]["errors"] == {}, doc["systems"][reference]
    rows = {row["metric"]: row for row in doc["against"]}
    assert set(rows) == {"start_one", "drain_1", "pickup_p50_ms", "pickup_p99_ms"}
    for row in rows.values():
        assert row["reference"] == reference and len(row["rounds"]) == 2
        assert math.isfinite(row["speed_ratio"]) and row["speed_ratio"] > 0, row
    assert "| start one at a time /s |" in done.stdout and "speed ratio" in done.stdout
