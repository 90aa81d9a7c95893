"""``simpleworkflow schedules`` on every store, in-process as tests/test_cli.py runs the
other commands, and the worker's ``--no-scheduler``."""

from __future__ import annotations

import argparse
import time

import pytest
from conftest import Store
from test_cli import run_cli
from test_cli_admin import one_line_error

from simpleworkflow import App
from simpleworkflow.cli import build_parser
from simpleworkflow.cli.worker import build_poller

NIGHTLY = "billing.invoice.nightly"
INVOICE = "billing.invoice.v1"


def test_create_list_show_pause_resume_delete(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(store, capsys, "schedules", "list").out == (
        "no schedules; create one with `simpleworkflow schedules create NAME CRON`\n"
    )
    made = run_cli(
        store, capsys, "schedules", "create", NIGHTLY, "0 2 * * *", "--type", INVOICE,
        "--tz", "Europe/Berlin", "--payload", '{"region": "eu"}', "--missed", "once",
    )  # fmt: skip
    assert made.code == 0, made.err
    assert made.out.startswith(f"schedule {NIGHTLY}: {INVOICE} at '0 2 * * *' (Europe/Berlin), ")
    header, row = run_cli(store, capsys, "schedules", "list").out.splitlines()
    assert header.split()[:3] == ["NAME", "TYPE", "CRON"]
    assert row.split()[:9] == [NIGHTLY, INVOICE, "0", "2", "*", "*", "*", "Europe/Berlin", "once"]
    shown = run_cli(store, capsys, "schedules", "show", NIGHTLY, "--json").json()
    assert (shown["payload"], shown["paused"], shown["in_code"]) == ({"region": "eu"}, False, False)

    paused = run_cli(store, capsys, "schedules", "pause", NIGHTLY)
    assert paused.out == f"schedule {NIGHTLY} paused: it starts no runs until resumed\n"
    assert "paused" in run_cli(store, capsys, "schedules", "list").out
    assert run_cli(store, capsys, "schedules", "resume", NIGHTLY).out.startswith(
        f"schedule {NIGHTLY} resumed: next tick "
    )
    assert (
        run_cli(store, capsys, "schedules", "list", "--type", INVOICE, "--json").json()[
            "schedules"
        ][0]["name"]
        == NIGHTLY
    )
    deleted = run_cli(store, capsys, "schedules", "delete", NIGHTLY)
    assert deleted.out == f"schedule {NIGHTLY} deleted; runs it started go on\n"
    again = run_cli(store, capsys, "schedules", "delete", NIGHTLY, "--json")
    assert again.json() == {"name": NIGHTLY, "deleted": False}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["create", NIGHTLY, "0 25 * * *", "--type", INVOICE], "Bad hour"),
        (["create", NIGHTLY, "@daily", "--type", INVOICE, "--tz", "Nowhere"], "unknown time zone"),
        (["create", NIGHTLY, "@daily", "--type", INVOICE, "--payload", "[1]"], "JSON object"),
        (["create", "Nightly", "@daily", "--type", INVOICE], "invalid schedule name"),
        (["pause", "no.such"], "no schedule named 'no.such'"),
        (["show", "no.such"], "no schedule named 'no.such'"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    store: Store, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert message in one_line_error(run_cli(store, capsys, "schedules", *argv))
    assert store.count("workflow_schedule") == 0


def test_the_worker_runs_the_scheduler_unless_told_not_to() -> None:
    app = App()
    app.workflow(INVOICE)(lambda payload: None)
    parser = build_parser()

    def options(*flags: str) -> argparse.Namespace:
        return parser.parse_args(["worker", "x:app", *flags])

    assert build_poller(app, options()).options.scheduler is True
    assert build_poller(app, options("--no-scheduler")).options.scheduler is False


def test_trigger_prints_the_run_it_started(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    made = run_cli(store, capsys, "schedules", "create", NIGHTLY, "0 2 * * *", "--type", INVOICE)
    assert made.code == 0, made.err
    before = run_cli(store, capsys, "schedules", "show", NIGHTLY, "--json").json()
    for _ in range(5):  # two within one second start one run
        time.sleep(1 - time.time() % 1)
        started = run_cli(store, capsys, "schedules", "trigger", NIGHTLY)
        again = run_cli(store, capsys, "schedules", "trigger", NIGHTLY, "--json").json()
        if again["created"] is False:
            break
    assert started.code == 0, started.err
    run_id = started.out.strip()
    assert again["id"] == run_id and again["type"] == INVOICE
    assert again["payload"]["schedule"] == NIGHTLY and again["payload"]["triggered"] is True
    assert store.count("workflow_run") == 1
    after = run_cli(store, capsys, "schedules", "show", NIGHTLY, "--json").json()
    assert after["next_tick_at"] == before["next_tick_at"]
    assert "no schedule named 'no.such'" in one_line_error(
        run_cli(store, capsys, "schedules", "trigger", "no.such")
    )
    assert store.count("workflow_run") == 1
