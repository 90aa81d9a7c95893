"""``manage.py simpleworkflow_worker`` in a real Django project (tests/django_project), as
processes, on Django's default database (SQLite, then Postgres): the project's own
command saves an order and starts its run in one ``transaction.atomic()``, the worker
command ships it through the ORM, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Store, stop_processes

from simpleworkflow.models import RunStatus

pytest.importorskip("django")

ROOT = Path(__file__).resolve().parents[2]


def project_env(url: str) -> dict[str, str]:
    """The environment of the project's ``manage.py`` on the database at ``url``."""
    paths = [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "DJANGO_SETTINGS_MODULE": "django_project.settings",
        "SHOP_DATABASE_URL": url,
    }


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_worker_command_runs_a_run_started_in_django_s_transaction(
    kind: str, tmp_path: Path, make_database: Callable[[], str]
) -> None:
    store = Store(
        kind, f"sqlite:///{tmp_path / 'shop.db'}" if kind == "sqlite" else make_database()
    )
    store.migrate()
    env = project_env(store.url)
    made = manage(env, "migrate", "--run-syncdb", "--verbosity", "0")
    assert made.returncode == 0, made.stderr
    placed = manage(env, "place_order", "book")
    assert placed.returncode == 0, placed.stderr
    order_id, run_id = placed.stdout.split()

    worker = subprocess.Popen(
        [sys.executable, "-m", "django", "simpleworkflow_worker", "--poll-interval", "0.2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with store.client() as client:
            run = client.wait(run_id, timeout=60)
        assert run.status is RunStatus.SUCCEEDED, run.last_error
        assert run.result == {"order_id": int(order_id), "shipped": 1}
        table = "shop_order" if kind == "sqlite" else "public.shop_order"  # Django's schema
        assert store.sql(f"select status from {table} where id = ?", int(order_id)) == [
            ("shipped",)
        ]
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=60)
        assert worker.returncode == 0, output
        assert "claiming shop.order.ship.v1" in output
    finally:
        stop_processes([worker])


def test_the_worker_command_refuses_an_app_it_cannot_import(tmp_path: Path) -> None:
    env = project_env(f"sqlite:///{tmp_path / 'shop.db'}")
    done = manage(env, "simpleworkflow_worker", "no_such_module:app")
    assert done.returncode == 2
    assert "no_such_module" in done.stderr
    assert list(tmp_path.iterdir()) == [], "nothing was started, nor a database made"
