"""The command line of ``python -m benchmarks.peers``: rounds, medians, table, JSON.

``python -m benchmarks.peers [--quick] [--jobs N] [--rounds R] [--samples S]
[--peers procrastinate,dbos,absurd,pgqrs|none] [--cases ...] [--against REF]
[--postgres-url URL] [--json PATH]``
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import server
from benchmarks.peers import measure, report, systems
from benchmarks.peers.systems import System

CASES = ("start_one", "start_batch", "drain_1", "drain_2", "drain_tuned", "drain_sync",
         "steps", "pickup", "api")  # fmt: skip
QUICK = {"jobs": 300, "rounds": 1, "samples": 20}
FULL = {"jobs": 2000, "rounds": 3, "samples": 100}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a small size: 300 jobs, 1 round")
    parser.add_argument("--jobs", type=int, help="jobs per start and drain case (2000)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds; figures are medians (3)")
    parser.add_argument("--samples", type=int, help="idle pick-up samples (100)")
    parser.add_argument("--peers", default=",".join(systems.PEERS),
                        help="comma-separated peers, or none (all four)")  # fmt: skip
    parser.add_argument("--cases", "--only", dest="cases", default=",".join(CASES),
                        help=f"comma-separated, of {','.join(CASES)}")  # fmt: skip
    parser.add_argument("--no-floor", action="store_true", help="leave out the psycopg floors")
    parser.add_argument("--against", metavar="REF",
                        help="also run this git ref of simple-workflow, every case but api, "
                        "and print the working tree's ratio to it")  # fmt: skip
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.cases = [case for case in args.cases.split(",") if case]
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}; use {', '.join(CASES)}")
    peers = [] if args.peers == "none" else [name for name in args.peers.split(",") if name]
    if set(peers) - set(systems.PEERS):
        parser.error(f"unknown peers: {args.peers}; use {', '.join(systems.PEERS)} or none")
    args.peers = peers
    if args.rounds < 1 or args.jobs < 10 or args.samples < 2:
        parser.error("--rounds >= 1, --jobs >= 10 and --samples >= 2")
    return args


def _api(server_url: str, jobs: int) -> dict[str, float]:
    """``POST /api/v1/runs`` one at a time against ``Client.start`` on one new database."""
    from benchmarks import api
    from benchmarks.stores import BenchStore

    with measure.fresh_database(server_url, "api") as url, tempfile.TemporaryDirectory() as tmp:
        store = BenchStore.fresh("postgres", url, Path(tmp))
        try:
            with (
                store.client() as client,
                api.server(store) as srv,
                contextlib.closing(api.Poster(srv)) as poster,
            ):
                api.client_start(client, api.WARM_UP)
                api.api_start(poster, api.WARM_UP)
                return {
                    "client_start": api.client_start(client, jobs)[0],
                    "api_start": api.api_start(poster, jobs)[0],
                }
        finally:
            store.close()


def _one(system: System, case: str, url: str, args: argparse.Namespace) -> dict[str, float]:
    if case == "api":
        if (
            importlib.util.find_spec("fastapi") is None
            or importlib.util.find_spec("uvicorn") is None
        ):
            raise measure.Failed("not measured: the server extra (fastapi, uvicorn) is missing")
        return _api(url, args.jobs)
    return measure.measure(system, case, url, args.jobs, args.samples)


def run(args: argparse.Namespace, url: str, workdir: Path) -> dict[str, Any]:
    """Every round: every case, each system in turn (the order reversed every other round)."""
    lineup = [systems.ours()]
    if args.against:
        lineup.append(systems.ours_at(args.against, workdir / "against"))
    if not args.no_floor:
        lineup.append(systems.floor())
    for name in args.peers:
        print(f"preparing {name} ...", file=sys.stderr, flush=True)
        lineup.append(systems.prepare(systems.PEERS[name]))
    active = [system for system in lineup if not system.problem]
    samples: dict[str, dict[str, list[float]]] = {system.name: {} for system in lineup}
    errors: dict[str, dict[str, str]] = {system.name: {} for system in lineup}
    began = time.monotonic()
    for number in range(args.rounds):
        order = active if number % 2 == 0 else active[::-1]
        for case in args.cases:
            for system in order:
                if case not in system.cases or case in errors[system.name]:
                    continue
                print(f"round {number + 1}/{args.rounds}: {system.name}, {case}",
                      file=sys.stderr, flush=True)  # fmt: skip
                try:
                    figures = _one(system, case, url, args)
                except measure.Failed as error:
                    errors[system.name][case] = str(error)
                    print(f"  {error}", file=sys.stderr, flush=True)
                    continue
                for metric, value in figures.items():
                    samples[system.name].setdefault(metric, []).append(value)
    medians = {
        name: {m: statistics.median(v) for m, v in got.items()} for name, got in samples.items()
    }
    peers = [system.name for system in active if system.name in systems.PEERS]
    tuned = {system.name: system.tuned for system in lineup}
    table = report.rows(medians, peers, tuned)
    return {
        "settings": {
            "jobs": args.jobs,
            "rounds": args.rounds,
            "samples": args.samples,
            "cases": args.cases,
            "seconds": round(time.monotonic() - began, 1),
            "load_average": list(os.getloadavg()),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "versions": {
            "postgres": _postgres_version(url),
            **{system.name: system.version for system in lineup},
        },
        "systems": {
            system.name: {
                "status": system.problem or "measured",
                "tuned": system.tuned,
                "medians": medians[system.name],
                "samples": samples[system.name],
                "errors": errors[system.name],
            }
            for system in lineup
        },
        "table": table,
        "targets": report.targets(medians, samples),
        "against": report.against(samples, lineup[1].name) if args.against else [],
    }


def _postgres_version(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(b"select current_setting('server_version')").fetchone()
    return str(row[0]) if row else "unknown"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    with (
        server.given_or_private(args.postgres_url) as url,
        tempfile.TemporaryDirectory(prefix="simpleworkflow-peers-") as workdir,
    ):
        result = run(args, url, Path(workdir))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.jobs} jobs per case, {args.rounds} round(s), medians; "
          f"load average {result['settings']['load_average'][0]:.1f}")  # fmt: skip
    print(", ".join(f"{name} {version}" for name, version in result["versions"].items()))
    for name, system in result["systems"].items():
        if system["status"] != "measured":
            print(f"{name}: {system['status']}")
        for case, error in system["errors"].items():
            print(f"{name}, {case}: {error}")
    medians = {name: system["medians"] for name, system in result["systems"].items()}
    tuned = {name: system["tuned"] for name, system in result["systems"].items()}
    print(report.per_system(medians, tuned))
    print()
    print(report.markdown(result["table"], result["targets"]))
    if result["against"]:
        print()
        print(report.against_markdown(result["against"]))
    return 0
