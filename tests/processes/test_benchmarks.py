"""The benchmark suite in its smallest size, on both stores: it runs and reports everything.

Timings are never asserted (the machines are shared and noisy): only that ``python -m
benchmarks`` finishes and writes a well-formed document with every metric, every ceiling,
the claim plans and the picture. The metric names are pinned here, so that renaming or
dropping one (which breaks whoever reads the JSON) is a deliberate change.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STORES = ["postgres", "sqlite"]
BACKLOGS = [200, 400]
METRICS = [
    "start_one",
    "start_many",
    "pgbench_start",
    "pgbench_start_many",
    "drain_1",
    "drain_2",
    "drain_4",
    "drain_1_default",
    "drain_1_metrics",
    "step_overhead_ms",
    "ten_step",
    "idle_p50_ms",
    "idle_p99_ms",
    "pgbench_idle_p50_ms",
    "pgbench_idle_p99_ms",
    "signal_p50_ms",
    "signal_p99_ms",
    "backlog_200",
    "backlog_400",
    "backlog_kept",
]
# A difference of two timings (steps' time less the same runs' without steps): on a
# loaded machine it can come out at or below zero, so only its being a number is checked
# (its median's and its ratio's).
DIFFERENCES = {"step_overhead_ms"}


def ran(command: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """``command`` run from the project's root; it must exit 0 (else its output says why)."""
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_smallest_run_reports_every_metric(postgres_url: str, tmp_path: Path) -> None:
    out, picture = tmp_path / "results.json", tmp_path / "scaling.png"
    command = [
        sys.executable, "-m", "benchmarks",
        "--stores", ",".join(STORES),
        "--items", "100",
        "--repeat", "1",
        "--backlogs", ",".join(map(str, BACKLOGS)),
        "--samples", "3",
        "--concurrency", "8",
        "--pgbench-seconds", "1",
        "--postgres-url", postgres_url,
        "--out", str(out),
        "--plot", str(picture),
    ]  # fmt: skip
    done = ran(command, timeout=120)
    doc = json.loads(out.read_text())

    assert list(doc["metrics"]) == METRICS
    for name, entry in doc["metrics"].items():
        assert entry["label"] and entry["unit"], name
        for store in STORES:
            if name.startswith("pgbench_") and store == "sqlite":  # pgbench is Postgres only
                assert entry[store]["median"] is None
                continue
            median = entry[store]["median"]
            assert isinstance(median, float) and math.isfinite(median), (name, store)
            assert name in DIFFERENCES or median > 0, (name, store, median)
            assert len(entry[store]["runs"]) == 1
        if entry["ceiling"] is not None:
            ratio = entry["ratio"]  # of a difference, as its median: a number, of any sign
            assert math.isfinite(ratio) and (name in DIFFERENCES or ratio > 0), name
    assert doc["ceilings"]["insert_tps"] > 0 and doc["ceilings"]["update_tps"] > 0
    assert doc["ceilings"]["start_tps"] > 0 and doc["ceilings"]["start_many_tps"] > 0
    assert 0 < doc["ceilings"]["idle_insert_p50_ms"] <= doc["ceilings"]["idle_insert_p99_ms"]
    assert set(doc["claim_plan"]) == set(STORES)
    for store in STORES:
        assert list(doc["claim_plan"][store]) == [str(size) for size in BACKLOGS]
    assert "workflow_run" in doc["claim_plan"]["postgres"]["400"]
    assert doc["machine"]["cpu_count"] >= 1 and doc["machine"]["postgres"]
    assert doc["options"]["postgres_url"] is None  # a URL may carry a password
    assert picture.read_bytes().startswith(b"\x89PNG")
    assert "| metric" in done.stdout


def test_the_recovery_benchmark_runs_and_reports_its_figures(postgres_url: str) -> None:
    """``python -m benchmarks.recovery`` at its smallest: a 2 s lease, one worker killed."""
    command = [
        sys.executable, "-m", "benchmarks.recovery",
        "--stores", ",".join(STORES),
        "--victims", "1",
        "--lease", "2",
        "--postgres-url", postgres_url,
        "--json",
    ]  # fmt: skip
    done = ran(command, timeout=120)
    doc = json.loads(done.stdout)
    assert list(doc) == STORES
    for store in STORES:
        figures = doc[store]
        assert figures["runs"] == 5 and figures["lease_s"] == 2
        for name in ("recovery", "after_expiry"):
            p50, p99 = figures[f"{name}_p50_s"], figures[f"{name}_p99_s"]
            assert math.isfinite(p50) and p50 <= p99 <= figures[f"{name}_max_s"], (store, name)


def test_the_api_benchmark_runs_and_reports_its_figures(postgres_url: str) -> None:
    """``python -m benchmarks.api`` at its smallest: API starts against Client.start."""
    command = [
        sys.executable, "-m", "benchmarks.api",
        "--stores", ",".join(STORES),
        "--requests", "20",
        "--rounds", "2",
        "--warm-up", "5",
        "--concurrency", "2",
        "--postgres-url", postgres_url,
        "--json",
    ]  # fmt: skip
    done = ran(command, timeout=120)
    doc = json.loads(done.stdout)
    assert list(doc) == STORES
    for store in STORES:
        figures = doc[store]
        for name in (
            "client_start", "client_cpu_us", "api_start", "api_server_cpu_us",
            "api_start_httpx", "api_vs_client", "httpx_vs_client",
            "async_client_start", "api_start_concurrent", "api_vs_async_client_concurrent",
        ):  # fmt: skip
            assert math.isfinite(figures[name]) and figures[name] > 0, (store, name)
        lowest, highest = figures["api_vs_client_lowest"], figures["api_vs_client_highest"]
        assert lowest <= figures["api_vs_client"] <= highest, store
    # The bare reference server (benchmarks.api_bare) speaks to Postgres only.
    for name in ("api_start_bare", "api_bare_server_cpu_us", "bare_vs_client", "api_vs_bare"):
        assert math.isfinite(doc["postgres"][name]) and doc["postgres"][name] > 0, name
    assert "api_start_bare" not in doc["sqlite"]


def test_the_api_benchmark_prints_serve_and_the_bare_servers_against_client_start(
    postgres_url: str,
) -> None:
    """Its table, and the lines that set ``serve`` beside the bare reference server, and
    beside the bare server starting through ``AsyncClient.start`` (``--bare-client``)."""
    command = [
        sys.executable, "-m", "benchmarks.api", "--stores", "postgres",
        "--requests", "10", "--rounds", "1", "--warm-up", "5", "--concurrency", "0",
        "--bare-client", "--postgres-url", postgres_url,
    ]  # fmt: skip
    done = ran(command, timeout=120)
    [row] = [line for line in done.stdout.splitlines() if line.startswith("postgres ")]
    assert float(row.split()[3]) > 0  # API /s
    [bare, through_client] = [line for line in done.stdout.splitlines() if "api_bare)" in line]
    for part in ("serve / Client.start", "bare / Client.start", "serve / bare "):
        assert part in bare
    for part in ("bare + AsyncClient.start / Client.start", "serve / bare + AsyncClient.start"):
        assert part in through_client


def test_compare_measures_the_api_start_of_both_sides(postgres_url: str, tmp_path: Path) -> None:
    """``--cases api_start``: each side's own ``simpleworkflow serve`` started and posted
    to, one run at a time."""
    out = tmp_path / "compare.json"
    command = [
        sys.executable, "-m", "benchmarks.compare", "HEAD", "--cases", "api_start",
        "--runs", "20", "--rounds", "1",
        "--postgres-url", postgres_url, "--json", str(out),
    ]  # fmt: skip
    done = ran(command, timeout=240)
    document = json.loads(out.read_text())
    assert list(document["ratios"]) == ["api_start"]
    assert [list(rates) for rates in document["rates"].values()] == [["api_start"]] * 2
    assert "| api_start |" in done.stdout


def test_compare_measures_the_tuned_drain_and_the_step_workflows(
    postgres_url: str, tmp_path: Path
) -> None:
    """``--cases drain_tuned,steps``: the drain at 100 slots and 10-step workflows, both
    sides (the steps case drains a fifth as many runs)."""
    out = tmp_path / "compare.json"
    command = [
        sys.executable, "-m", "benchmarks.compare", "HEAD", "--cases", "drain_tuned,steps",
        "--runs", "1000", "--rounds", "1",
        "--postgres-url", postgres_url, "--json", str(out),
    ]  # fmt: skip
    ran(command, timeout=240)
    document = json.loads(out.read_text())
    assert list(document["ratios"]) == ["drain_tuned", "steps"]
    for rates in document["rates"].values():
        assert list(rates) == ["drain_tuned", "steps"]
        assert all(rate > 0 for figures in rates.values() for rate in figures), rates


def test_the_pick_up_benchmark_measures_the_worker_beside_the_listen_loop(
    postgres_url: str, tmp_path: Path
) -> None:
    """``python -m benchmarks.latency`` at its smallest: HEAD's worker, the working
    tree's and the two LISTEN loops (the bare one, the one doing the contract's work),
    each with its percentiles and its ratios to each loop but itself."""
    out = tmp_path / "pickup.json"
    command = [
        sys.executable, "-m", "benchmarks.latency",
        "--samples", "5",
        "--against", "HEAD",
        "--postgres-url", postgres_url,
        "--json", str(out),
    ]  # fmt: skip
    done = ran(command, timeout=180)
    results = json.loads(out.read_text())["results"]
    assert list(results) == ["simple-workflow", "HEAD", "LISTEN loop, same work", "LISTEN loop"]
    for name, figures in results.items():
        for start in ("before", "after"):
            assert math.isfinite(figures[f"{start}_p50_ms"]), (name, start)
            assert figures[f"{start}_p50_ms"] <= figures[f"{start}_p99_ms"], (name, start)
        to_bare = {key for key in figures if key.endswith("_ratio")}
        to_same = {key for key in figures if key.endswith("_ratio_same_work")}
        assert len(to_bare) == (0 if name == "LISTEN loop" else 4), name
        assert len(to_same) == (0 if name == "LISTEN loop, same work" else 4), name
    assert "LISTEN loop, same work" in done.stdout


def test_the_claim_paths_benchmark_claims_each_run_on_every_path(postgres_url: str) -> None:
    """``python -m benchmarks.claim_paths`` at its smallest: every path leases the one
    run started for it (else it fails) and has its three medians."""
    command = [
        sys.executable, "-m", "benchmarks.claim_paths",
        "--samples", "3",
        "--postgres-url", postgres_url,
    ]  # fmt: skip
    done = ran(command, timeout=120)
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["pool", "listener", "same"]
    assert all(len(row) == 7 or len(row) == 8 for row in rows), done.stdout


def test_the_payload_filter_benchmark_lists_through_the_index(postgres_url: str) -> None:
    """``python -m benchmarks.payload_filter --store postgres`` at its smallest: every
    listing timed with the index and without, a selective filter served by the index."""
    command = [
        sys.executable, "-m", "benchmarks.payload_filter",
        "--store", "postgres",
        "--backlog", "20000",
        "--repeat", "1",
        "--postgres-url", postgres_url,
    ]  # fmt: skip
    done = ran(command, timeout=120)
    doc = json.loads(done.stdout)
    assert doc["backlog"] == 20000 and doc["payload_index_mb"] > 0
    assert doc["index_build_seconds"] >= 0
    assert list(doc["with_index"]) == list(doc["without_index"])
    selective = doc["with_index"]["one customer (1 in 10,000)"]
    assert selective["runs"] == 2 and math.isfinite(selective["ms"])
    assert any("idx_workflow_run_payload" in scan for scan in selective["scans"]), selective
    unindexed = doc["without_index"]["one customer (1 in 10,000)"]["scans"]
    assert not any("idx_workflow_run_payload" in scan for scan in unindexed)


def test_the_payload_index_benchmark_prices_every_variant(postgres_url: str) -> None:
    """``python -m benchmarks.payload_index`` at its smallest: a row per variant."""
    command = [
        sys.executable, "-m", "benchmarks.payload_index",
        "--runs", "200",
        "--repeat", "1",
        "--postgres-url", postgres_url,
    ]  # fmt: skip
    done = ran(command, timeout=120)
    lines = done.stdout.splitlines()
    assert [line.split("  ")[0] for line in lines[1:]] == [
        "none",
        "gin",
        "gin, no fastupdate",
        "none, one value",
        "gin, one value",
    ]
    assert all(line.count("µs") >= 4 for line in lines[1:]), done.stdout


def test_compare_measures_both_sides_of_every_case(postgres_url: str, tmp_path: Path) -> None:
    """``python -m benchmarks.compare HEAD``: the ref installed in a virtualenv of its own
    and the working tree each measured on every case, the table and the JSON written."""
    out = tmp_path / "compare.json"
    command = [
        sys.executable, "-m", "benchmarks.compare", "HEAD",
        "--runs", "60", "--rounds", "2",
        "--postgres-url", postgres_url, "--json", str(out),
    ]  # fmt: skip
    done = ran(command, timeout=240)
    document = json.loads(out.read_text())
    assert sorted(document["ratios"]) == ["drain", "start", "start_many"]
    assert all(math.isfinite(ratio) and ratio > 0 for ratio in document["ratios"].values())
    assert len(document["rates"]) == 2  # the ref and the working tree
    for rates in document["rates"].values():
        assert {case: len(figures) for case, figures in rates.items()} == {
            "start": 2, "start_many": 2, "drain": 2,
        }  # fmt: skip
    assert "| drain |" in done.stdout


def test_floors_measure_each_start_case_beside_its_psycopg_floor(postgres_url: str) -> None:
    """``python -m benchmarks.floors``: both cases, the client and its floor, each ratio
    printed with its target."""
    command = [
        sys.executable, "-m", "benchmarks.floors",
        "--runs", "200", "--rounds", "2", "--postgres-url", postgres_url,
    ]  # fmt: skip
    done = ran(command, timeout=240)
    rows = [line for line in done.stdout.splitlines() if line.startswith("| start")]
    assert [row.split("|")[1].strip() for row in rows] == ["start", "start_many"]
    assert all("≥ 0." in row and ("✓" in row or "✗" in row) for row in rows)
    assert done.stderr.count("client:") == done.stderr.count("floor:") == 4


def test_start_cpu_measures_each_call_on_both_sides(postgres_url: str) -> None:
    """``python -m benchmarks.start_cpu HEAD``: the client's and the server's CPU per run
    of each start call, for the ref and the working tree."""
    command = [
        sys.executable, "-m", "benchmarks.start_cpu", "HEAD",
        "--starts", "100", "--rounds", "2", "--postgres-url", postgres_url,
    ]  # fmt: skip
    done = ran(command, timeout=240)
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines()[2:]]
    assert [row[0].strip() for row in rows] == ["start", "start_many", "async_start"]
    assert all(float(cell) > 0 for row in rows for cell in row[1:])
    assert done.stderr.count("round ") == 4


def test_api_cpu_pairs_the_servers_cpu_per_request_of_both_sides(postgres_url: str) -> None:
    """``python -m benchmarks.api_cpu HEAD``: a ``serve`` of the ref and one of the working
    tree, alternated; each side's server CPU per request and the paired difference."""
    command = [
        sys.executable, "-m", "benchmarks.api_cpu", "HEAD",
        "--rounds", "2", "--requests", "50", "--postgres-url", postgres_url,
    ]  # fmt: skip
    done = ran(command, timeout=240)
    [row] = [line.split("|")[1:-1] for line in done.stdout.splitlines()[2:]]
    assert row[0].strip() == "postgres"
    assert float(row[1]) > 0 and float(row[2]) > 0
    assert row[4].strip().endswith("/2")
    assert done.stderr.count("round ") == 2


def test_the_loops_benchmark_counts_rows_and_times_a_replay(postgres_url: str) -> None:
    """``python -m benchmarks.loops`` at its smallest: on both stores, the trimmed loop's
    journal keeps the last 100 iterations while the untrimmed one keeps them all."""
    command = [
        sys.executable, "-m", "benchmarks.loops",
        "--iterations", "250",
        "--repeat", "1",
        "--postgres-url", postgres_url,
    ]  # fmt: skip
    done = ran(command, timeout=180)
    doc = json.loads(done.stdout)
    assert doc["iterations"] == 250 and sorted(doc["results"]) == STORES
    for kind, figures in doc["results"].items():
        untrimmed, trimmed = figures["untrimmed"], figures["trimmed"]
        # 250 steps, 25 committed states and the wait's row; trimmed: iterations 100 to
        # 250 are kept (the trim after iteration 199 drops 0 to 99): 150 steps, 16 states.
        assert (untrimmed["journal_rows"], trimmed["journal_rows"]) == (276, 167), kind
        for setting in (untrimmed, trimmed):
            assert math.isfinite(setting["replay_ms_median"]), kind


def test_the_streams_benchmark_delivers_every_item_and_reports_rates_and_latency(
    postgres_url: str,
) -> None:
    """``python -m benchmarks.streams`` at its smallest, on both stores."""
    command = [
        sys.executable, "-m", "benchmarks.streams",
        "--items", "300",
        "--paced", "10",
        "--pace-ms", "2",
        "--postgres-url", postgres_url,
    ]  # fmt: skip
    done = ran(command, timeout=180)
    doc = json.loads(done.stdout)
    assert sorted(doc["results"]) == STORES
    for kind, cases in doc["results"].items():
        assert (cases["burst"]["items"], cases["paced"]["items"]) == (300, 10), kind
        for case in cases.values():
            assert case["items_per_second"] > 0, kind
            assert 0 <= case["latency_p50_ms"] <= case["latency_p99_ms"], kind


def test_the_payload_codec_benchmark_reports_each_row() -> None:
    """``python -m benchmarks.payload_codec`` at its smallest: CPU µs for every row (and
    orjson's beside when it is installed)."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.payload_codec",
        "--number",
        "50",
        "--repeat",
        "1",
        "--json",
    ]
    done = ran(command, timeout=120)
    doc = json.loads(done.stdout)
    assert doc["bytes"] > 300
    assert {"encode, no codec (default)", "decode, codec, into the dataclass"} <= set(doc["micros"])
    assert all(math.isfinite(us) and us >= 0 for us in doc["micros"].values())
    assert doc["orjson"] == "not installed" or doc["orjson"]["NaN"].startswith("writes")


def test_slot_gaps_lays_each_call_on_the_slot_that_freed_first() -> None:
    """Two slots: the third call takes the slot freed at 1, the fourth the one at 2;
    each gap is split where the worker reached the call."""
    from benchmarks.slot_gaps import gaps

    calls = [(4.5, 5, 6), (0, 0, 1), (2.5, 3, 4), (0, 0, 2)]  # (entered, began, returned)
    assert gaps(calls, 2) == [(1.5, 0.5), (2.5, 0.5)]


@pytest.mark.parametrize("store", STORES)
def test_the_slot_gaps_benchmark_drains_both_kinds_of_handler(
    postgres_url: str, store: str
) -> None:
    """``python -m benchmarks.slot_gaps`` at its smallest: one drain of each kind, each
    reported with its gaps."""
    command = [
        sys.executable, "-m", "benchmarks.slot_gaps",
        "--store", store,
        "--runs", "200",
        "--rounds", "1",
        "--postgres-url", postgres_url,
    ]  # fmt: skip
    done = ran(command, timeout=120)
    lines = done.stdout.splitlines()
    assert [line.split(":")[0].split()[2:] for line in lines] == [["async", "def"], ["def"]]
    assert all("gaps median" in line and "wait to begin" in line for line in lines), done.stdout


def test_the_handler_floor_drains_by_hand_and_by_the_worker_with_each_kind(
    postgres_url: str, tmp_path: Path
) -> None:
    """``python -m benchmarks.handler_floor`` at its smallest: every hand-written drain
    and the worker's, of 250 runs (claims of 100 and one of 50), each with its rate and
    CPU (split by thread), then every ratio."""
    out = tmp_path / "floor.json"
    command = [
        sys.executable, "-m", "benchmarks.handler_floor",
        "--runs", "250", "--rounds", "1", "--postgres-url", postgres_url, "--out", str(out),
    ]  # fmt: skip
    done = ran(command, timeout=240)
    from benchmarks.handler_floor import RATIOS, VARIANTS

    rows = [line for line in done.stdout.splitlines() if "runs/s" in line]
    assert [row.split("  ")[0].strip() for row in rows] == list(VARIANTS), done.stdout
    named = [line.split(" rate ")[0].strip() for line in done.stdout.splitlines()[len(rows) :]]
    assert named == [name for name, _variant, _reference in RATIOS], done.stdout
    document = json.loads(out.read_text())
    for variant in VARIANTS:
        figures = document[variant]
        assert figures["rate"] > 0 and figures["cpu_us_per_run"] > 0 and figures["loop_us"] > 0
        assert figures["others_us"] >= 0 and figures["switches"] >= 0
        assert figures["postgres_us"] > 0 and figures["claims"] >= 3 and figures["completions"] >= 3
    assert sorted(document["ratios"]["rate"]) == sorted(name for name, _, _ in RATIOS)
