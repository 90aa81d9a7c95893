"""The command line of durable execution: ``runs signal``, ``start --deadline``, the
journal and waits in ``runs show``, and ``replay-check`` as a deploy gate, on every store.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import cli_durable_app
import pytest
from conftest import Store
from test_cli import run_cli, start

from simpleworkflow.app import App
from simpleworkflow.models import Run
from simpleworkflow.worker import IntentPoller


async def _work_until(app: App, store: Store, run_id: str, *, waiting: bool) -> Run:
    """Run a worker for ``app`` until the run waits for a signal (or has finished)."""
    poller = IntentPoller(app, database_url=store.url, schema=store.schema, poll_interval=0.1)
    task = asyncio.create_task(poller.run_async())
    try:
        async with store.async_client() as client:
            for _ in range(300):
                await asyncio.sleep(0.05)
                run = await client.get(run_id)
                if (run.waiting_for is not None) if waiting else run.is_terminal:
                    return run
                assert not task.done(), "the worker stopped"
        raise AssertionError(f"run {run_id} did not get there: {run}")
    finally:
        poller.stop()
        await task


def work_until(app: App, store: Store, run_id: str, *, waiting: bool) -> Run:
    return asyncio.run(_work_until(app, store, run_id, waiting=waiting))


@pytest.fixture
def waiting_run(store: Store) -> str:
    """A signup run of the deployed code, suspended in its wait for ``confirm``."""
    with store.client() as client:
        run_id = client.start(cli_durable_app.SIGNUP, {"email": "ada@example.com"}).id
    work_until(cli_durable_app.deployed, store, run_id, waiting=True)
    return run_id


# -- start --deadline ---------------------------------------------------------------------


def test_start_with_a_deadline_as_a_duration_or_a_time(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    before = datetime.now(UTC)
    in_an_hour = start(store, capsys, "--deadline", "1h")
    deadline = datetime.fromisoformat(in_an_hour["deadline"])
    assert before + timedelta(minutes=59) < deadline < before + timedelta(minutes=61)

    fixed = start(store, capsys, "--deadline", "2030-01-31T09:00:00Z")
    assert datetime.fromisoformat(fixed["deadline"]) == datetime(2030, 1, 31, 9, tzinfo=UTC)
    assert start(store, capsys)["deadline"] is None


@pytest.mark.parametrize("bad", ["tomorrow", "2030-01-31T09:00:00", "5 minutes"])
def test_a_deadline_it_cannot_read_is_one_line_and_exit_2(
    store: Store, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    result = run_cli(store, capsys, "start", "content.thumbnail.v1", "--deadline", bad)
    assert result.code == 2
    assert result.err.startswith("simpleworkflow: error: ")
    assert result.err.count("\n") == 1
    assert store.count() == 0


# -- runs show, runs signal ---------------------------------------------------------------


def test_show_has_the_wait_the_code_version_and_the_journal(
    store: Store, capsys: pytest.CaptureFixture[str], waiting_run: str
) -> None:
    text = run_cli(store, capsys, "runs", "show", waiting_run).out
    assert '"kind":"signal"' in text and '"event":"confirm"' in text
    assert "code_version     1" in text
    assert "parent_id" not in text, "unset durable columns are not shown"
    lines = text.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("#  STEP")))
    assert lines[header + 1].split()[:5] == ["0", "create-account", "step", "completed", "1"]
    assert lines[header + 2].split()[:7] == [
        "1",
        "confirmed",
        "wait",
        "waiting",
        "for",
        "signal",
        "'confirm'",
    ]

    shown = run_cli(store, capsys, "runs", "show", waiting_run, "--json").json()
    assert shown["run"]["waiting_for"]["event"] == "confirm"
    assert [s["step_name"] for s in shown["steps"]] == ["create-account", "confirmed"]
    assert shown["steps"][0]["output"] == {"account": "acct:ada@example.com"}


def test_signal_wakes_a_waiting_run_then_a_finished_run_refuses_it(
    store: Store, capsys: pytest.CaptureFixture[str], waiting_run: str
) -> None:
    sent = run_cli(
        store, capsys, "runs", "signal", waiting_run, "confirm", "-p", '{"by": "link"}', "--json"
    )
    assert sent.code == 0, sent.err
    assert sent.json()["woke"] is True
    run = work_until(cli_durable_app.deployed, store, waiting_run, waiting=False)
    assert run.result == {"account": "acct:ada@example.com", "confirmed": {"by": "link"}}

    late = run_cli(store, capsys, "runs", "signal", waiting_run, "confirm")
    assert late.code == 2
    assert "has already finished (succeeded)" in late.err
    assert late.err.count("\n") == 1


def test_a_signal_to_a_run_not_waiting_is_kept_for_later(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = start(store, capsys)["id"]
    sent = run_cli(store, capsys, "runs", "signal", run_id, "user.verified")
    assert sent.code == 0, sent.err
    # What happened, and what will: no promise about "its next wait" (one whose match the
    # payload does not satisfy will not take it).
    assert sent.out == (
        f"signal 'user.verified' stored for run {run_id}; no wait of the run took it now, so "
        "it stays stored until a wait_for_event('user.verified') whose match its payload "
        "satisfies consumes it (`simpleworkflow runs show` lists the run's signals)\n"
    )
    assert store.count("workflow_signal") == 1


def test_show_lists_the_signals_consumed_and_pending(
    store: Store, capsys: pytest.CaptureFixture[str], waiting_run: str
) -> None:
    for event, payload in (("confirm", '{"by": "link"}'), ("unsubscribe", "{}")):
        assert run_cli(store, capsys, "runs", "signal", waiting_run, event, "-p", payload).code == 0
    work_until(cli_durable_app.deployed, store, waiting_run, waiting=False)

    shown = run_cli(store, capsys, "runs", "show", waiting_run, "--json").json()
    confirm, unsubscribe = shown["signals"]
    assert (confirm["event"], confirm["payload"], confirm["step_name"]) == (
        "confirm",
        {"by": "link"},
        "confirmed",
    )
    assert confirm["consumed_at"] is not None
    assert (unsubscribe["event"], unsubscribe["consumed_at"]) == ("unsubscribe", None)

    text = run_cli(store, capsys, "runs", "show", waiting_run).out
    table = text[text.index("SIGNAL  ") :].splitlines()
    assert table[0].split() == ["SIGNAL", "EVENT", "SENT", "(UTC)", "STATUS", "PAYLOAD"]
    assert table[1].split()[1:2] + table[1].split()[4:] == [
        "confirm",
        "consumed",
        "by",
        "confirmed",
        '{"by":"link"}',
    ]
    assert table[2].split()[1:2] + table[2].split()[4:] == ["unsubscribe", "pending", "{}"]


def test_a_signal_to_an_unknown_run_is_exit_2(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(
        store, capsys, "runs", "signal", "00000000-0000-4000-8000-000000000000", "confirm"
    )
    assert result.code == 2
    assert "no workflow run with id" in result.err


# -- replay-check -------------------------------------------------------------------------


def replay_check(store: Store, capsys: pytest.CaptureFixture[str], app: str, *more: str) -> Any:
    return run_cli(store, capsys, "replay-check", f"cli_durable_app:{app}", *more)


def test_replay_check_passes_the_same_steps_and_blocks_a_renamed_one(
    store: Store, capsys: pytest.CaptureFixture[str], waiting_run: str
) -> None:
    for app in ("deployed", "reworded"):
        result = replay_check(store, capsys, app)
        assert result.code == 0, result.out + result.err
        assert f"{waiting_run}  {cli_durable_app.SIGNUP}  ok" in result.out
        assert result.out.rstrip().endswith("1 run checked: 1 ok; ok to deploy")

    renamed = replay_check(store, capsys, "renamed", "--json")
    assert renamed.code == 1
    [report] = renamed.json()["reports"]
    assert (report["run_id"], report["verdict"]) == (waiting_run, "diverged")
    assert "create-account" in report["detail"]
    assert renamed.json()["ok"] is False

    bumped = replay_check(store, capsys, "bumped")
    assert bumped.code == 1
    assert "unknown version" in bumped.out and "NOT safe to deploy" in bumped.out


def test_replay_check_passes_a_rename_behind_a_patch_and_says_to_keep_it(
    store: Store, capsys: pytest.CaptureFixture[str], waiting_run: str
) -> None:
    result = replay_check(store, capsys, "patched")
    assert result.code == 0, result.out + result.err
    assert "takes the old side of patch 'open-account'" in result.out
    assert result.out.rstrip().endswith("patch 'open-account': 1 run on its old side; keep it")
    [report] = replay_check(store, capsys, "patched", "--json").json()["reports"]
    assert (report["verdict"], report["old_side"], report["new_side"]) == (
        "ok",
        ["open-account"],
        [],
    )


def test_replay_check_with_nothing_to_check_passes(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    start(store, capsys)  # a run of a type the app does not handle
    result = replay_check(store, capsys, "renamed")
    assert result.code == 0
    assert "nothing can diverge" in result.out


def test_replay_check_refuses_a_database_without_the_schema(
    empty_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    result = replay_check(empty_store, capsys, "deployed")
    assert result.code == 2
    assert "migrate" in result.err


def test_replay_check_names_a_module_it_cannot_import(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(store, capsys, "replay-check", "no_such_module:app")
    assert result.code == 2
    assert "cannot import module 'no_such_module'" in result.err
