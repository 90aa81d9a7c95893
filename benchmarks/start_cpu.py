"""``python -m benchmarks.start_cpu REF``: the CPU a start costs, the working tree against
another git ref, in microseconds per run: the client's and the Postgres server's, for
``Client.start``, ``start_many`` (batches of 100) and ``AsyncClient.start`` (uvloop, what
the HTTP API's start runs). CPU per run moves much less than a rate while other work
shares the machine. Each side is installed as ``benchmarks.compare`` installs it and runs
``benchmarks/start_cpu_case.py``; rounds alternate which side goes first, each in a new
schema of one warm server. The server's CPU is read from ``/proc``: give a server on this
machine (or none: one is started).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import compare, server

CASE_SCRIPT = Path(__file__).resolve().with_name("start_cpu_case.py")
CALLS = ("start", "start_many", "async_start")


def _measure(side: compare.Side, url: str, schema: str, starts: int) -> dict[str, list[float]]:
    done = subprocess.run(
        [side.python, str(CASE_SCRIPT), url, schema, str(starts)],
        env=side.env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{side.name}: exit {done.returncode}\n{done.stderr}")
    figures: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def run(
    ref: str, rounds: int, url: str | None, starts: int = 4000
) -> dict[str, dict[str, list[list[float]]]]:
    """Every round's ``[client µs, server µs]`` per call, by side name."""
    found: dict[str, dict[str, list[list[float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="simpleworkflow-start-cpu-") as tmp:
        sides = [compare.installed(ref, Path(tmp, "ref")), compare.working_tree()]
        with server.given_or_private(url) as pg:
            for number in range(rounds):
                for turn, side in enumerate(sides if number % 2 == 0 else sides[::-1]):
                    schema = f"start_cpu_{os.getpid()}_{number}_{turn}"
                    figures = _measure(side, pg, schema, starts)
                    compare._drop(pg, schema)
                    for call, pair in figures.items():
                        found.setdefault(side.name, {}).setdefault(call, []).append(pair)
                    print(f"round {number + 1}/{rounds} {side.name}: {figures}", file=sys.stderr)
    return found


def table(found: dict[str, dict[str, list[list[float]]]]) -> str:
    (before, old), (after, new) = found.items()
    lines = [
        f"| call (µs per run, medians) | client, {before} | client, {after} "
        f"| server, {before} | server, {after} |",
        "| --- | --- | --- | --- | --- |",
    ]
    for call in CALLS:
        cells = [
            statistics.median(pair[which] for pair in side[call])
            for which in (0, 1)
            for side in (old, new)
        ]
        lines.append(f"| {call} | " + " | ".join(f"{cell:.1f}" for cell in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.start_cpu", description=__doc__)
    parser.add_argument("ref", help="the git ref to compare the working tree against")
    parser.add_argument("--rounds", type=int, default=5, help="measurements of each side (5)")
    parser.add_argument(
        "--starts", type=int, default=4000, help="timed Client.start calls per round (4000)"
    )
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    args = parser.parse_args(argv)
    print(table(run(args.ref, args.rounds, args.postgres_url, args.starts)))


if __name__ == "__main__":
    main()
