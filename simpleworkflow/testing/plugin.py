"""The pytest plugin of ``simpleworkflow.testing``: fixtures for an app's tests.

A test module (or a ``conftest.py``) defines ``workflow_app``, the :class:`App` under
test; ``workflow_env`` is then a fresh :class:`Environment` for each test (SQLite in the
test's ``tmp_path``, or Postgres when ``--simpleworkflow-postgres URL`` or
``$SIMPLEWORKFLOW_TESTING_POSTGRES_URL`` is given), closed after it. Options of the
environment go in a marker: ``@pytest.mark.workflow_env(auto_skip=False)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simpleworkflow import App, Client
from simpleworkflow.testing.environment import Environment
from simpleworkflow.worker import IntentPoller

POSTGRES_ENV = "SIMPLEWORKFLOW_TESTING_POSTGRES_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simpleworkflow")
    group.addoption(
        "--simpleworkflow-postgres",
        dest="simpleworkflow_postgres",
        default=None,
        metavar="URL",
        help=f"run workflow_env on this Postgres server (a schema per test; ${POSTGRES_ENV} "
        "also sets it)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "workflow_env(**options): options of the test's simpleworkflow Environment "
        "(auto_skip=, worker=, worker settings)",
    )


@pytest.fixture
def workflow_app() -> App:
    """The app under test: define this fixture (a module's or a conftest's)."""
    raise pytest.UsageError(
        "define a fixture named workflow_app that returns your simpleworkflow App"
    )


@pytest.fixture
def workflow_env(
    workflow_app: App, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Environment]:
    """A fresh store, a client and an in-process worker for ``workflow_app``."""
    marker = request.node.get_closest_marker("workflow_env")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    url = request.config.getoption("simpleworkflow_postgres") or os.environ.get(POSTGRES_ENV)
    with Environment(workflow_app, database_url=url or None, directory=tmp_path, **options) as env:
        yield env


@pytest.fixture
def workflow_client(workflow_env: Environment) -> Client:
    """The environment's blocking client."""
    return workflow_env.client


@pytest.fixture
def workflow_worker(workflow_env: Environment) -> IntentPoller:
    """The environment's in-process worker."""
    assert workflow_env.worker is not None, "this environment runs no worker (worker=False)"
    return workflow_env.worker
