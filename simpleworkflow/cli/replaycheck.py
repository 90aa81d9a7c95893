"""``simpleworkflow replay-check MODULE:APP``: would the new code resume the unfinished runs?

Run it in a deploy pipeline with the code about to be deployed, against the production
database: it replays the journal of every unfinished run of the app's types (no step
function is called, nothing is written) and exits 1 when one would not resume, so the
pipeline stops before a worker fails those runs with ``ReplayDivergence``.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from typing import Any

from simpleworkflow.admin import replaycheck
from simpleworkflow.admin.replaycheck import ReplayReport
from simpleworkflow.app import App
from simpleworkflow.cli import _common, _output, worker
from simpleworkflow.errors import plural
from simpleworkflow.handlers import Handlers
from simpleworkflow.worker import IntentPoller

#: Verdicts that stop a deploy. An ``error`` too: a replay that crashed proves nothing.
BLOCKING = (replaycheck.DIVERGED, replaycheck.UNKNOWN_VERSION, replaycheck.ERROR)
COLUMNS = ("RUN ID", "TYPE", "VERDICT", "DETAIL")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "replay-check",
        help="replay unfinished runs against this code; exit 1 if any would not resume",
        description="Import MODULE:APP (the code about to be deployed) and replay the "
        "journal of every pending or leased run of its types, calling no step and writing "
        "nothing. Exit status: 0 every run replays, 1 a run diverged, started on a code "
        "version this code does not know, or failed to replay; 2 error.",
    )
    parser.add_argument(
        "target",
        metavar="MODULE:APP",
        help=f"e.g. myservice.workers:app (APP defaults to {worker.DEFAULT_ATTRIBUTE!r})",
    )
    _common.add_common_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    app = _app_of(worker.load_target(args.target))
    # On -d/--schema if given, else where the app (or the environment) points.
    with _common.admin_for(args, url=app.database_url, schema=app.schema) as admin:
        reports = admin.replay_check(app)
    if args.json:
        rows = [
            {
                "run_id": r.run_id,
                "type": r.type,
                "verdict": r.verdict,
                "detail": r.detail,
                "old_side": list(r.old_side),
                "new_side": list(r.new_side),
            }
            for r in reports
        ]
        _output.emit_json({"reports": rows, "ok": passed(reports)})
    else:
        print(report_text(reports))
    return 0 if passed(reports) else 1


def _app_of(target: App | IntentPoller) -> Handlers:
    return target.app if isinstance(target, IntentPoller) else target


def passed(reports: Sequence[ReplayReport]) -> bool:
    return not any(report.verdict in BLOCKING for report in reports)


def report_text(reports: Sequence[ReplayReport]) -> str:
    """The table of verdicts, then one line that says whether the deploy may go on."""
    if not reports:
        return "no unfinished run has a journal yet: nothing can diverge"
    rows = [[r.run_id, r.type, r.verdict, r.detail or "-"] for r in reports]
    counts = Counter(r.verdict for r in reports)
    tally = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
    verdict = "ok to deploy" if passed(reports) else "NOT safe to deploy"
    checked = plural(len(reports), "run")
    text = f"{_output.table(COLUMNS, rows)}\n\n{checked} checked: {tally}; {verdict}"
    return "\n".join([text, *patch_lines(reports)])


def patch_lines(reports: Sequence[ReplayReport]) -> list[str]:
    """One line per patch the replays met: still needed by runs on its old side, or not."""
    old = Counter(patch for r in reports for patch in r.old_side)
    met = sorted({patch for r in reports for patch in (*r.old_side, *r.new_side)})
    return [
        f"patch {patch!r}: {plural(old[patch], 'run')} on its old side; keep it"
        if old[patch]
        else f"patch {patch!r}: no unfinished run on its old side; it can be removed"
        for patch in met
    ]
