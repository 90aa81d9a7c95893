"""The systems under measurement: how to run each one's driver, and in which interpreter.

A peer gets a virtualenv of its own, made once under the cache folder and reused while
its marker names the same packages; what cannot be installed or imported is reported as
"not measured" with the reason, and the run goes on without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = Path(__file__).resolve().with_name("drivers")
CACHE = ROOT / "benchmarks" / ".peers-venvs"

#: Cases every system may take part in; ``drain_sync``, ``steps`` and ``api`` are narrower.
QUEUE_CASES = ("start_one", "start_batch", "drain_1", "drain_2", "drain_tuned", "pickup")


@dataclass
class System:
    """One system: its driver, the interpreter that runs it, what it supports."""

    name: str
    driver: str
    cases: tuple[str, ...]
    #: The documented knob its ``tuned`` row turns, as the table labels it.
    tuned: str = ""
    #: PyPI requirements of its virtualenv (none: this project's interpreter).
    packages: tuple[str, ...] = ()
    #: The distribution whose version the report records.
    distribution: str = ""
    #: Counts the jobs the system has recorded as finished: the drains' finish line.
    done_sql: str = ""
    python: str = sys.executable
    env: dict[str, str] = field(default_factory=dict)
    version: str = ""
    problem: str = ""  # why it is not measured, if it is not

    def command(self, *args: str) -> list[str]:
        return [self.python, str(DRIVERS / self.driver), *args]


PEERS: dict[str, System] = {
    system.name: system
    for system in (
        System(
            "procrastinate", "drive_procrastinate.py", QUEUE_CASES,
            tuned="concurrency 10", packages=("procrastinate",), distribution="procrastinate",
            done_sql="select count(*) from procrastinate_jobs where status = 'succeeded'",
        ),
        System(
            "dbos", "drive_dbos.py", (*QUEUE_CASES, "steps"),
            tuned="queue polling 0.1 s", packages=("dbos",), distribution="dbos",
            done_sql="select count(*) from dbos.workflow_status where status = 'SUCCESS'",
        ),
        System(
            "absurd", "drive_absurd.py", (*QUEUE_CASES, "steps"),
            tuned="concurrency 10", packages=("absurd-sdk", "absurdctl"),
            distribution="absurd-sdk",
            done_sql="select count(*) from absurd.t_bench where state = 'completed'",
        ),
        System(
            "pgqrs", "drive_pgqrs.py", QUEUE_CASES,
            tuned="batch 10", packages=("pgqrs",), distribution="pgqrs",
            done_sql="select count(*) from pgqrs_messages where archived_at is not null",
        ),
    )
}  # fmt: skip


def ours() -> System:
    """This working tree, run by this interpreter with the tree on ``PYTHONPATH``."""
    from importlib.metadata import PackageNotFoundError, version

    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    try:
        installed = version("simpleworkflow")
    except PackageNotFoundError:
        installed = "unknown"
    return System(
        "simple-workflow", "drive_ours.py",
        (*QUEUE_CASES, "drain_sync", "steps", "api"),
        tuned="100 slots", env=env, version=f"{installed} (working tree {_git_head()})",
        done_sql="select count(*) from workflow.workflow_run where status = 'succeeded'",
    )  # fmt: skip


def ours_at(ref: str, workdir: Path) -> System:
    """Another version of this project, from git ``ref``, driven by the same driver: the
    regression check of ``--against`` (the driver uses only the public API every version
    since the first benchmarks has had)."""
    from benchmarks import compare

    side = compare.installed(ref, workdir)
    return System(
        f"simple-workflow {side.name}", "drive_ours.py",
        (*QUEUE_CASES, "drain_sync", "steps"),
        tuned="100 slots", python=side.python, env=side.env, version=side.name,
        done_sql="select count(*) from workflow.workflow_run where status = 'succeeded'",
    )  # fmt: skip


def floor() -> System:
    """The hand-written psycopg references."""
    import psycopg

    return System(
        "psycopg floor", "drive_floor.py",
        ("start_one", "start_batch", "drain_1", "drain_2", "pickup"),
        env=dict(os.environ), version=f"psycopg {psycopg.__version__}",
        done_sql="select count(*) from job where status = 'done'",
    )  # fmt: skip


def _git_head() -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip() or "unknown"


def prepare(system: System, cache: Path = CACHE) -> System:
    """Make (or reuse) the peer's virtualenv; record its version, or why it has none."""
    venv = cache / system.name
    python = venv / "bin" / "python"
    marker = venv / "peers-installed.txt"
    wanted = "\n".join(system.packages)
    try:
        if not (marker.exists() and marker.read_text() == wanted and python.exists()):
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True,
                           capture_output=True)  # fmt: skip
            _run([str(python), "-m", "pip", "install", "--quiet", *system.packages])
            marker.write_text(wanted)
        system.version = _run(
            [str(python), "-c", "import importlib.metadata as m, sys; "
             f"print(m.version({system.distribution!r}))"]
        ).strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as error:
        system.problem = f"not measured: could not install {' '.join(system.packages)}: " + (
            _tail(getattr(error, "stderr", "") or str(error))
        )
        return system
    system.python = str(python)
    system.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return system


def _run(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def _tail(text: str) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "unknown error"
