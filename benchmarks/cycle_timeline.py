"""``python -m benchmarks.cycle_timeline [--old PATH]``: where a worker's cycle waits, for
the ``drain_tuned`` and ``steps`` cases of ``benchmarks.compare``, this tree against
another source tree (``--old``, e.g. an unpacked 77f8b29 run with ``PYTHONPATH``).

Each side runs this file as a script (``python benchmarks/cycle_timeline.py CASE URL
SCHEMA RUNS``) with its own ``simpleworkflow`` on ``PYTHONPATH``, through
``compare_case.py``'s drain, with two things added that any version allows: every
``AsyncConnection.wait`` of psycopg is timed (when a statement or a pipeline's Sync was
handed to the socket, when its answer was back in the worker's task) and the handler /
step records when it was called. Medians over the middle 60 % of the drain, in ms:

- drain_tuned, per claim cycle from the claim sent: its rows back (its transaction's
  end), the first and last handler of its runs, their outcomes' write sent and committed,
  and the next claim sent;
- steps, per step of a workflow: from the step's call to its journal write sent, the
  write, from the write's answer to the next step's call; and the slots in use.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import functools
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: What names the statements in either version's SQL.
CLAIMS = ("with suspect as", "with candidates as")
OUTCOMES = "with outcomes as"
JOURNAL = ("with items as", "-- Journal the steps", "-- Journal a step")


def _label(gen: Any) -> str:
    """The generator's name, and its statement's first words when it has one."""
    name = getattr(gen, "__name__", type(gen).__name__)
    frame = getattr(gen, "gi_frame", None)
    query = None if frame is None else frame.f_locals.get("query")
    if isinstance(query, bytes):
        query = query.decode(errors="replace")
    text = " ".join(str(query).split())[:60] if isinstance(query, str) else ""
    return f"{name} {text}".strip()


def record(case: str, url: str, schema: str, runs: int) -> dict[str, Any]:
    """Drain ``case`` as ``compare_case`` does, timing every wait on a connection."""
    sys.path.insert(0, str(HERE))
    import asyncio

    import compare_case  # type: ignore[import-not-found]
    from psycopg import AsyncConnection

    waits: list[tuple[float, float, int, str]] = []
    calls: list[float] = []  # handlers (drain_tuned) or steps (steps) called
    tasks: list[int] = []  # the task each step ran in
    workflows: list[tuple[float, float]] = []
    original = AsyncConnection.wait

    async def wait(self: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
        sent = time.perf_counter()
        label = _label(gen)
        try:
            return await original(self, gen, *args, **kwargs)
        finally:
            waits.append((sent, time.perf_counter(), id(self), label))

    AsyncConnection.wait = wait  # type: ignore[method-assign]

    async def step() -> None:
        calls.append(time.perf_counter())
        tasks.append(id(asyncio.current_task()))

    compare_case._nothing = step
    base = compare_case.App

    class App(base):  # type: ignore[misc, valid-type]
        def workflow(self, name: str, *args: Any, **kwargs: Any) -> Any:
            register = base.workflow(self, name, *args, **kwargs)

            def timed(fn: Any) -> Any:
                if name == compare_case.STEPS:

                    @functools.wraps(fn)
                    async def whole(payload: Any, ctx: Any) -> Any:
                        began = time.perf_counter()
                        try:
                            return await fn(payload, ctx)
                        finally:
                            workflows.append((began, time.perf_counter()))

                    return register(whole)

                @functools.wraps(fn)
                async def noop(payload: Any) -> None:
                    calls.append(time.perf_counter())

                return register(noop)

            return timed

    compare_case.App = App
    rate = compare_case.CASES[case](url, schema, runs)
    return {"rate": rate, "waits": waits, "calls": calls, "tasks": tasks, "workflows": workflows}


def _median(values: list[float]) -> float:
    return statistics.median(values) * 1e3 if values else float("nan")


def _middle(rows: list[Any]) -> list[Any]:
    return rows[len(rows) // 5 : len(rows) * 4 // 5] or rows


def _claims_and_outcomes(
    waits: list[tuple[float, float, int, str]],
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(sent, answered) of every claim and every outcomes' write, with the transaction or
    pipeline around each: a claim is answered at its pipeline's end, and an outcomes'
    write sent with its BEGIN and answered with its COMMIT when it has them."""
    per_connection: dict[int, list[Any]] = collections.defaultdict(list)
    for wait in sorted(waits):
        per_connection[wait[2]].append(wait)
    claims, outcomes = [], []
    for mine in per_connection.values():
        for i, (sent, back, _, label) in enumerate(mine):
            if any(claim in label for claim in CLAIMS):
                for _, later, _, after in mine[i + 1 : i + 3]:  # its pipeline's end
                    if not after.startswith(("_fetch_gen", "_exit_gen", "_commit_gen")):
                        break
                    back = later
                claims.append((sent, back))
            elif OUTCOMES in label:
                before = mine[i - 1] if i else None
                if before and before[3].startswith("_enter_gen") and sent - before[1] < 0.005:
                    sent = before[0]  # its BEGIN
                if i + 1 < len(mine) and mine[i + 1][3].startswith("_exit_gen"):
                    back = mine[i + 1][1]  # its COMMIT
                outcomes.append((sent, back))
    return sorted(claims), sorted(outcomes)


def drain_cycles(data: dict[str, Any]) -> dict[str, float]:
    """Per claim cycle, ms from the claim sent (see the module's docstring)."""
    calls = sorted(data["calls"])
    claims, outcomes = _claims_and_outcomes(data["waits"])
    rows = []
    for (sent, back), (next_sent, next_back) in itertools.pairwise(claims):
        first, last = bisect.bisect(calls, back), bisect.bisect(calls, next_back)
        if first == last:
            continue
        j = bisect.bisect(outcomes, (calls[last - 1],))
        if j == len(outcomes):
            continue
        written, committed = outcomes[j]
        rows.append(
            {
                "rows back": back - sent,
                "first handler": calls[first] - sent,
                "last handler": calls[last - 1] - sent,
                "outcomes sent": written - sent,
                "outcomes committed": committed - sent,
                "next claim sent": next_sent - sent,
            }
        )
    middle = _middle(rows)
    return {key: _median([row[key] for row in middle]) for key in (rows[0] if rows else {})}


def step_cycles(data: dict[str, Any]) -> dict[str, float]:
    """Per step of a workflow, ms (see the module's docstring)."""
    writes = sorted(
        (sent, back)
        for sent, back, _, label in data["waits"]
        if any(journal in label for journal in JOURNAL)
    )
    starts = [sent for sent, _ in writes]
    by_task: dict[int, list[float]] = collections.defaultdict(list)
    for called, task in zip(data["calls"], data["tasks"], strict=True):
        by_task[task].append(called)
    to_write, write, to_next, whole = [], [], [], []
    for called in by_task.values():
        called.sort()
        for this, following in itertools.pairwise(called):
            i = bisect.bisect(starts, this)
            if following - this > 0.05 or i == len(writes) or writes[i][0] > following:
                continue  # another workflow in a task of the same id
            sent, back = writes[i]
            to_write.append(sent - this)
            write.append(back - sent)
            to_next.append(following - back)
            whole.append(following - this)
    spans = sorted(data["workflows"])
    begin, end = spans[len(spans) // 5][0], spans[len(spans) * 4 // 5][0]
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    running, area, last = 0, 0.0, begin
    for moment, change in edges:
        if moment > end:
            break
        if moment >= begin:
            area += running * (moment - last)
            last = moment
        running += change
    return {
        "step called -> journal write sent": _median(to_write),
        "journal write (sent -> answered)": _median(write),
        "write answered -> next step called": _median(to_next),
        "step -> next step": _median(whole),
        "workflow (10 steps)": _median([b - a for a, b in spans]),
        "workflows running (of 10)": area / (end - begin) if end > begin else 0.0,
    }


def _side(python_path: str, case: str, url: str, runs: int, number: int) -> dict[str, float]:
    schema = f"timeline_{os.getpid()}_{number}"
    out = Path(f"/tmp/{schema}.json")
    env = dict(os.environ, PYTHONPATH=python_path)
    command = [sys.executable, str(Path(__file__)), case, url, schema, str(runs), str(out)]
    subprocess.run(command, env=env, check=True, cwd="/")
    try:
        data = json.loads(out.read_text())
    finally:
        out.unlink()
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"drop schema if exists {schema} cascade".encode())
    figures = drain_cycles(data) if case == "drain_tuned" else step_cycles(data)
    return {"runs/s": data["rate"], **figures}


def main(argv: list[str] | None = None) -> None:
    prog = "python -m benchmarks.cycle_timeline"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--old", default="/work/old77", help="the other tree's PYTHONPATH")
    parser.add_argument("--cases", default="drain_tuned,steps")
    parser.add_argument("--runs", type=int, default=10000)
    parser.add_argument("--pairs", type=int, default=3, help="measurements of each side")
    parser.add_argument("--postgres-url")
    args = parser.parse_args(argv)
    from benchmarks import server

    sides = {"old": args.old, "this tree": str(ROOT)}
    figures: dict[tuple[str, str], list[dict[str, float]]] = collections.defaultdict(list)
    number = 0
    with server.given_or_private(args.postgres_url) as url:
        for pair in range(args.pairs):
            order = list(sides.items()) if pair % 2 == 0 else list(sides.items())[::-1]
            for case in args.cases.split(","):
                for name, path in order:
                    number += 1
                    figures[case, name].append(_side(path, case, url, args.runs, number))
    for case in args.cases.split(","):
        print(f"\n{case} (ms, medians of {args.pairs} drains' medians)")
        print(f"| | {' | '.join(sides)} |\n| --- | --- | --- |")
        for key in figures[case, "old"][0]:
            cells = [statistics.median(f[key] for f in figures[case, n]) for n in sides]
            print(f"| {key} | {' | '.join(f'{cell:.2f}' for cell in cells)} |")


if __name__ == "__main__" and len(sys.argv) == 6 and not sys.argv[1].startswith("-"):
    found = record(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
    Path(sys.argv[5]).write_text(json.dumps(found))
elif __name__ == "__main__":
    main()
