"""The operator commands of the admin facade: ``runs retry``, ``runs steps`` and ``stats``,
on every store, in-process as tests/test_cli.py runs the others."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import cli_durable_app
import pytest
from conftest import Store
from test_cli import THUMBNAIL, Result, finish, run_cli, start
from test_cli_durable import work_until


@pytest.fixture
def waiting_run(store: Store) -> str:
    """A signup run that has journaled a step and waits for its signal."""
    with store.client() as client:
        run_id = client.start(cli_durable_app.SIGNUP, {"email": "ada@example.com"}).id
    work_until(cli_durable_app.deployed, store, run_id, waiting=True)
    return run_id


def one_line_error(result: Result) -> str:
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith("simpleworkflow: error: ") and result.err.count("\n") == 1
    return result.err


# -- runs steps ---------------------------------------------------------------------------


def test_steps_shows_when_each_call_started_and_what_it_took(
    store: Store, capsys: pytest.CaptureFixture[str], waiting_run: str
) -> None:
    shown = run_cli(store, capsys, "runs", "steps", waiting_run)
    assert shown.code == 0, shown.err
    header, step, wait = shown.out.splitlines()
    assert header.split("  ")[:1] == ["#"]
    for column in ("STARTED (UTC)", "COMPLETED (UTC)", "TOOK", "OUTPUT"):
        assert column in header
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    assert step.split()[:6] == ["0", "create-account", "step", "completed", "1", today]
    # Waiting for what (and until when, with a timeout); not completed: no end, no time taken.
    waiting = r"waiting for signal 'confirm'(?: until [\d-]+ [\d:]+ UTC)?"
    assert re.match(rf"1\s+confirmed\s+wait\s+{waiting}\s+1\s+{today} [\d:]+\s+-\s+-", wait), wait

    steps = run_cli(store, capsys, "runs", "steps", waiting_run, "--json").json()
    assert steps["run_id"] == waiting_run
    created, confirmed = steps["steps"]
    assert created["step_name"] == "create-account"
    assert created["output"] == {"account": "acct:ada@example.com"}
    started = datetime.fromisoformat(created["started_at"])
    completed = datetime.fromisoformat(created["completed_at"])
    assert started <= completed and created["duration_seconds"] >= 0
    assert (confirmed["completed_at"], confirmed["duration_seconds"]) == (None, None)


def test_steps_of_a_run_without_a_journal(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = start(store, capsys)["id"]
    shown = run_cli(store, capsys, "runs", "steps", run_id)
    assert (shown.code, shown.out) == (
        0,
        f"run {run_id} has no journal: it is not a workflow, or has made no durable call\n",
    )
    assert run_cli(store, capsys, "runs", "steps", run_id, "--json").json()["steps"] == []
    missing = run_cli(store, capsys, "runs", "steps", "01a2167f-82c9-750a-a792-c096e68577ca")
    assert "no workflow run with id" in one_line_error(missing)


# -- runs retry ---------------------------------------------------------------------------


def test_retry_brings_a_cancelled_run_back(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = start(store, capsys)["id"]
    assert run_cli(store, capsys, "runs", "cancel", run_id).code == 0
    retried = run_cli(store, capsys, "runs", "retry", run_id)
    assert (retried.code, retried.out) == (
        0,
        f"run {run_id} retried: pending again and due now, for its attempt 1 of 3\n",
    )
    shown = run_cli(store, capsys, "runs", "show", run_id, "--json").json()
    assert shown["run"]["status"] == "pending"
    assert [e["event_type"] for e in shown["events"]] == [
        "created",
        "cancelled",
        "retried_by_operator",
    ]


def test_retry_refuses_what_has_not_failed_in_one_line(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    pending = start(store, capsys)["id"]
    refused = one_line_error(run_cli(store, capsys, "runs", "retry", pending))
    assert f"run {pending} cannot be retried: only a failed or cancelled run can be" in refused
    done = start(store, capsys)["id"]
    finish(store, done)
    assert "this one succeeded" in one_line_error(run_cli(store, capsys, "runs", "retry", done))
    assert "not a run id" in one_line_error(run_cli(store, capsys, "runs", "retry", "1234"))


def test_retry_json_is_the_run(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = start(store, capsys)["id"]
    run_cli(store, capsys, "runs", "cancel", run_id)
    retried = run_cli(store, capsys, "runs", "retry", run_id, "--json").json()
    assert (retried["id"], retried["status"], retried["attempts_made"]) == (run_id, "pending", 0)


# -- stats --------------------------------------------------------------------------------


def test_stats_counts_runs_by_type_and_says_how_late_each_queue_is(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(store, capsys, "stats").out == "no runs and no registered types yet\n"
    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    with store.client() as client:
        client.start(THUMBNAIL, run_at=datetime.fromisoformat(hour_ago))
        client.start(THUMBNAIL, delay="1d")
        cancelled = client.start(THUMBNAIL)
        client.cancel(cancelled.id)
        client.start("notify.email.v1", delay="1d")
    run_cli(store, capsys, "registry", "set", "notify.email.v1", "--runtime", "go")
    run_cli(store, capsys, "registry", "pause", "notify.email.v1")

    shown = run_cli(store, capsys, "stats")
    assert shown.code == 0, shown.err
    header, thumbnail, email = shown.out.splitlines()
    assert header.split() == [
        "TYPE", "REGISTRY", "PENDING", "LEASED", "SUCCEEDED", "FAILED", "CANCELLED",
        "OLDEST", "DUE", "WAITING",
    ]  # fmt: skip
    assert thumbnail.split()[:7] == [THUMBNAIL, "-", "2", "0", "0", "0", "1"]
    assert thumbnail.split()[7] in ("1h", "59m")  # the run due an hour ago
    assert email.split() == ["notify.email.v1", "go", "(paused)", "1", "0", "0", "0", "0", "-", "-"]

    stats = run_cli(store, capsys, "stats", "--json").json()["types"]
    assert [item["type"] for item in stats] == [THUMBNAIL, "notify.email.v1"]
    assert stats[0]["counts"]["pending"] == 2 and stats[0]["total"] == 3
    assert stats[0]["oldest_due_seconds"] >= 3500
    assert stats[1]["oldest_due_seconds"] is None
    assert stats[1]["registry"]["is_enabled"] is False


# -- payload-index ------------------------------------------------------------------------


def test_payload_index_is_created_described_and_dropped_on_postgres_only(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    if store.kind == "sqlite":
        for action in ("create", "drop", "status"):
            refused = run_cli(store, capsys, "payload-index", action)
            assert "sqlite store has no such index" in one_line_error(refused)
        return
    absent = run_cli(store, capsys, "payload-index", "status")
    assert (absent.code, absent.out) == (
        0,
        "idx_workflow_run_payload is absent: payload filters read runs newest first\n",
    )
    created = run_cli(store, capsys, "payload-index", "create")
    assert created.code == 0 and created.out.startswith("created idx_workflow_run_payload ("), (
        created.err
    )
    again = run_cli(store, capsys, "payload-index", "create", "--json").json()
    assert again == {**again, "present": True, "valid": True, "changed": False}
    shown = run_cli(store, capsys, "payload-index", "status")
    assert "exists and is valid" in shown.out and "served by it" in shown.out
    dropped = run_cli(store, capsys, "payload-index", "drop")
    assert dropped.out == "dropped idx_workflow_run_payload\n"
    gone = run_cli(store, capsys, "payload-index", "drop", "--json").json()
    assert (gone["present"], gone["changed"]) == (False, False)


# -- runs fork ----------------------------------------------------------------------------


def test_fork_starts_a_linked_run_from_a_step_and_refuses_an_unknown_step(
    store: Store, capsys: pytest.CaptureFixture[str], waiting_run: str
) -> None:
    assert run_cli(store, capsys, "runs", "cancel", waiting_run).code == 0
    names = [
        s["step_name"]
        for s in run_cli(store, capsys, "runs", "steps", waiting_run, "--json").json()["steps"]
    ]
    forked = run_cli(
        store,
        capsys,
        "runs",
        "fork",
        waiting_run,
        "--from-step",
        "confirmed",
        "--json",
        "--payload",
        '{"email": "bob@example.com"}',
    )
    assert forked.code == 0, forked.err
    fork = forked.json()
    assert (fork["forked_from"], fork["forked_at_step"], fork["status"]) == (
        waiting_run,
        "confirmed",
        "pending",
    )
    assert fork["payload"] == {"email": "bob@example.com"}
    copied = run_cli(store, capsys, "runs", "steps", fork["id"], "--json").json()["steps"]
    assert [s["step_name"] for s in copied] == names[: names.index("confirmed")]
    shown = run_cli(store, capsys, "runs", "show", waiting_run, "--json").json()
    assert shown["forks"] == [fork["id"]] and shown["run"]["status"] == "cancelled"
    text = run_cli(store, capsys, "runs", "show", waiting_run).out
    assert f"forked as {fork['id']} (at step 'confirmed')" in text
    plain = run_cli(store, capsys, "runs", "fork", waiting_run, "--position", "0")
    assert plain.code == 0 and f"forked from {waiting_run} at step" in plain.out
    refused = one_line_error(
        run_cli(store, capsys, "runs", "fork", waiting_run, "--from-step", "nope")
    )
    assert "'nope'" in refused and "'confirmed'" in refused
