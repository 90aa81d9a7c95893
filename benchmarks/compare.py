"""``python -m benchmarks.compare REF``: the working tree against another git ref, case by
case, interleaved in one sitting on one Postgres; prints each side's median and the ratio.

Absolute figures on a shared machine move by a third from day to day, so a change to a hot
path is judged by this ratio, measured in the same minutes as its reference. ``REF`` is
copied from ``git archive`` into a virtualenv of its own
that borrows this environment's dependencies; the working tree runs from the checkout.
Both sides run the same script, ``benchmarks/compare_case.py``, from the working tree, and
every measurement gets a new schema. Rounds alternate which side goes first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from benchmarks import server

ROOT = Path(__file__).resolve().parent.parent
CASE_SCRIPT = Path(__file__).resolve().with_name("compare_case.py")
CASES = ("start", "start_many", "drain", "api_start", "drain_sync", "drain_tuned", "steps")
#: What runs without ``--cases``: ``api_start`` (``POST /api/v1/runs`` one at a time, to a
#: ``simpleworkflow serve`` of each side), ``drain_sync`` (the drain with a plain ``def``
#: handler), ``drain_tuned`` (100 slots) and ``steps`` (10-step workflows) only when asked.
DEFAULT_CASES = CASES[:3]


@dataclass
class Side:
    """One version under measurement: how to run Python with it, and its figures."""

    name: str
    python: str
    env: dict[str, str]
    rates: dict[str, list[float]] = field(default_factory=dict)

    def measure(self, case: str, url: str, schema: str, runs: int) -> float:
        done = subprocess.run(
            [self.python, str(CASE_SCRIPT), case, url, schema, str(runs)],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"{self.name}, {case}: exit {done.returncode}\n{done.stderr}")
        rate = float(json.loads(done.stdout.strip().splitlines()[-1])["rate"])
        self.rates.setdefault(case, []).append(rate)
        return rate


def working_tree() -> Side:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return Side("working tree", sys.executable, env)


def installed(ref: str, workdir: Path) -> Side:
    """``ref`` from ``git archive``, in a virtualenv of its own under ``workdir``."""
    commit = _git("rev-parse", "--short", f"{ref}^{{commit}}").strip()
    source = workdir / "source"
    source.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    venv = workdir / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # The dependencies are this environment's: only simpleworkflow differs between sides.
    borrowed = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "_borrowed_dependencies.pth").write_text("\n".join(sorted(borrowed)) + "\n")
    # A pure-Python package: its folder is the whole install, and no build is needed.
    shutil.copytree(source / "simpleworkflow", Path(site, "simpleworkflow"))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    name = ref if commit.startswith(ref) else f"{ref} ({commit})"
    return Side(name, python, env)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout


def run(refs: list[str], cases: list[str], runs: int, rounds: int, url: str | None) -> list[Side]:
    """Measure ``refs`` (the first against the second, or against the working tree)."""
    with tempfile.TemporaryDirectory(prefix="simpleworkflow-compare-") as tmp:
        sides = [installed(ref, Path(tmp, str(number))) for number, ref in enumerate(refs)]
        if len(sides) == 1:
            sides.append(working_tree())
        with server.given_or_private(url) as pg:
            number = 0
            for round_number in range(rounds):
                order = sides if round_number % 2 == 0 else sides[::-1]
                for case in cases:
                    for side in order:
                        number += 1
                        schema = f"compare_{os.getpid()}_{number}"
                        rate = side.measure(case, pg, schema, runs)
                        _drop(pg, schema)
                        print(
                            f"round {round_number + 1}/{rounds} {case:<10} {side.name}: "
                            f"{rate:,.0f} runs/s",
                            file=sys.stderr,
                        )
        return sides


def _drop(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"drop schema if exists {schema} cascade".encode())


def table(sides: list[Side], cases: list[str]) -> tuple[str, dict[str, float]]:
    """The Markdown table of medians and the ratio (the second side over the first)."""
    before, after = sides
    lines = [
        f"| case (runs/s, medians) | {before.name} | {after.name} | ratio |",
        "| --- | --- | --- | --- |",
    ]
    ratios = {}
    for case in cases:
        old = statistics.median(before.rates[case])
        new = statistics.median(after.rates[case])
        ratios[case] = new / old
        lines.append(f"| {case} | {old:,.0f} | {new:,.0f} | {ratios[case]:.2f}x |")
    return "\n".join(lines), ratios


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__)
    parser.add_argument("ref", help="the git ref to compare the working tree against")
    parser.add_argument(
        "--cases", default=",".join(DEFAULT_CASES), help="comma-separated: " + ", ".join(CASES)
    )
    parser.add_argument(
        "--against", metavar="REF2", help="measure REF2 instead of the working tree"
    )
    parser.add_argument("--runs", type=int, default=5000, help="runs per measurement (5000)")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each side (3)")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    cases = [case.strip() for case in args.cases.split(",") if case.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {', '.join(CASES)}")
    refs = [args.ref] + ([args.against] if args.against else [])
    sides = run(refs, cases, args.runs, args.rounds, args.postgres_url)
    text, ratios = table(sides, cases)
    print(text)
    if args.json:
        figures = {side.name: side.rates for side in sides}
        args.json.write_text(json.dumps({"rates": figures, "ratios": ratios}, indent=2) + "\n")


if __name__ == "__main__":
    main()
