"""The pytest plugin of ``simpleworkflow.testing``, as a user's test session meets it: a
test file of theirs, run by pytest in a process of its own with only this plugin loaded."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

USER_TESTS = """
import asyncio
import threading

import pytest

from simpleworkflow import App
from simpleworkflow.models import RunStatus

app = App()


@app.workflow("shop.reminder.v1")
async def reminder(payload, ctx):
    await ctx.sleep("a-week", "7d")
    return await ctx.step("remind", lambda: f"reminded {payload['who']}")


@pytest.fixture
def workflow_app():
    return app


def test_sync(workflow_env, workflow_client, workflow_worker):
    run = workflow_client.start("shop.reminder.v1", {"who": "ada"})
    done = workflow_env.run_until_done(run.id)
    assert done.status is RunStatus.SUCCEEDED and done.result == "reminded ada"
    assert workflow_worker.worker_id


def test_async(workflow_env):
    async def scenario():
        async with workflow_env.async_client() as client:
            run = await client.start("shop.reminder.v1", {"who": "bob"})
            done = await workflow_env.run_until_done_async(run.id)
            assert (await client.get(run.id)).result == done.result
            return done.result

    assert asyncio.run(scenario()) == "reminded bob"


@pytest.mark.workflow_env(auto_skip=False)
def test_by_hand(workflow_env):
    run = workflow_env.start("shop.reminder.v1", {"who": "cy"})
    workflow_env.run_until_waiting(run.id, "sleep")
    workflow_env.advance("7d")
    assert workflow_env.run_until_done(run.id).result == "reminded cy"


def test_everything_stopped():
    assert [t.name for t in threading.enumerate() if "simpleworkflow-test" in t.name] == []
"""


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_users_tests_run_with_the_plugins_fixtures(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    (tmp_path / "test_reminders.py").write_text(textwrap.dedent(USER_TESTS))
    env = {}
    if store == "postgres":
        env["SIMPLEWORKFLOW_TESTING_POSTGRES_URL"] = request.getfixturevalue("postgres_url")
    done = users_pytest(tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout


def test_without_an_app_the_fixture_says_what_to_define(tmp_path: Path) -> None:
    (tmp_path / "test_no_app.py").write_text("def test_it(workflow_env):\n    pass\n")
    done = users_pytest(tmp_path, {})
    assert done.returncode != 0
    assert "define a fixture named workflow_app" in done.stdout + done.stderr


def users_pytest(directory: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """pytest on a user's test directory with only this plugin: as a user's session would
    load it from the entry point, whether or not this checkout's entry point is installed."""
    (directory / "pytest.ini").write_text("[pytest]\n")
    command = [sys.executable, "-m", "pytest", "-p", "simpleworkflow.testing.plugin", "-q"]
    return subprocess.run(
        [*command, "-p", "no:cacheprovider", str(directory)],
        cwd=directory,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **env},
        capture_output=True,
        text=True,
        timeout=240,
    )
