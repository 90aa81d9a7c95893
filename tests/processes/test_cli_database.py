"""Which database am I on? The commands say it, and never make one up by mistake.

Run as an operator runs them: the console script in a directory of its own. A command
that only reads (or changes a run that must already exist) refuses a SQLite file that is
not there instead of creating an empty one; a worker names the database it works on and
warns when it had to create it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from conftest import Store

SCRIPT = Path(sys.executable).with_name("simpleworkflow")
RUN_ID = "00000000-0000-4000-8000-000000000000"
APP_MODULE = """
from simpleworkflow import App

app = App()


@app.workflow("billing.invoice.v1")
def invoice(payload):
    return payload
"""

READ_ONLY = {
    "runs list": ["runs", "list"],
    "runs show": ["runs", "show", RUN_ID],
    "runs wait": ["runs", "wait", RUN_ID],
    "runs cancel": ["runs", "cancel", RUN_ID],
    "runs signal": ["runs", "signal", RUN_ID, "approved"],
    "runs steps": ["runs", "steps", RUN_ID],
    "runs stream": ["runs", "stream", RUN_ID, "tokens"],
    "runs retry": ["runs", "retry", RUN_ID],
    "stats": ["stats"],
    "registry list": ["registry", "list"],
    "registry pause": ["registry", "pause", "billing.invoice.v1"],
    "replay-check": ["replay-check", "jobs:app"],
}


def console(directory: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *argv], cwd=directory, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("argv", READ_ONLY.values(), ids=READ_ONLY.keys())
@pytest.mark.parametrize("given", [True, False], ids=["-d typo.db", "default URL"])
def test_a_command_that_needs_a_database_does_not_create_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], given: bool
) -> None:
    monkeypatch.delenv("SIMPLEWORKFLOW_DATABASE_URL", raising=False)
    (tmp_path / "jobs.py").write_text(APP_MODULE)
    name = "typo.db" if given else "simpleworkflow.db"
    store = ["-d", f"sqlite:///{name}"] if given else []
    done = console(tmp_path, *store, *argv)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"simpleworkflow: error: no database at {tmp_path / name}; ")
    assert done.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["jobs.py"]


@pytest.mark.parametrize("given", [True, False], ids=["-d typo.db", "default URL"])
def test_start_refuses_a_missing_file_unless_asked_to_create_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: bool
) -> None:
    """A producer on a misspelt path would write runs no worker ever sees."""
    monkeypatch.delenv("SIMPLEWORKFLOW_DATABASE_URL", raising=False)
    name = "typo.db" if given else "simpleworkflow.db"
    store = ["-d", f"sqlite:///{name}"] if given else []
    refused = console(tmp_path, *store, "start", "billing.invoice.v1")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith(f"simpleworkflow: error: no database at {tmp_path / name}; ")
    assert "`simpleworkflow migrate`" in refused.stderr
    assert "`simpleworkflow start --create`" in refused.stderr
    assert not (tmp_path / name).exists()
    created = console(tmp_path, *store, "start", "billing.invoice.v1", "--create")
    assert created.returncode == 0, created.stderr
    assert (tmp_path / name).exists()


def test_commands_that_write_create_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SIMPLEWORKFLOW_DATABASE_URL", raising=False)
    started = console(tmp_path, "start", "billing.invoice.v1", "--create")
    assert started.returncode == 0, started.stderr
    assert (tmp_path / "simpleworkflow.db").exists()
    listed = console(tmp_path, "runs", "list")
    assert listed.returncode == 0 and "billing.invoice.v1" in listed.stdout


def worker_log(directory: Path, *argv: str) -> str:
    """Start ``simpleworkflow worker jobs:app`` in ``directory`` and return what it logged
    up to the line that says what it claims (then kill it: only its start is of interest)."""
    (directory / "jobs.py").write_text(APP_MODULE)
    worker = subprocess.Popen(
        [str(SCRIPT), *argv, "worker", "jobs:app", "--worker-id", "w1"],
        cwd=directory,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stderr is not None
    lines = []
    try:
        for line in worker.stderr:
            lines.append(line)
            if " claiming " in line:
                break
    finally:
        worker.kill()
        worker.communicate()
    return "".join(lines)


def test_a_worker_that_creates_its_database_says_where_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SIMPLEWORKFLOW_DATABASE_URL", raising=False)
    log = worker_log(tmp_path)
    path = tmp_path / "simpleworkflow.db"
    assert f"WARNING simpleworkflow.worker: created a new, empty database at {path}:" in log
    assert "point it there" in log
    assert f"worker w1 claiming billing.invoice.v1 on {path} (concurrency 10)" in log


def with_password(url: str, password: str) -> str:
    """``url`` with a ``password`` query parameter (ignored by a server that trusts us)."""
    parts = urlsplit(url)
    query = f"{parts.query}&password={password}" if parts.query else f"password={password}"
    return urlunsplit(parts._replace(query=query))


def test_a_worker_names_the_database_it_works_on(store: Store, tmp_path: Path) -> None:
    if store.kind == "sqlite":
        url, shown = store.url, store.url.removeprefix("sqlite:///")
    else:
        url = with_password(store.url, "hunter2-secret")
        shown = f"{with_password(store.url, '***')} schema {store.schema}"
    log = worker_log(tmp_path, "-d", url, "--schema", store.schema)
    assert f"worker w1 claiming billing.invoice.v1 on {shown} (concurrency 10)" in log
    assert "hunter2-secret" not in log
    assert "created a new, empty database" not in log  # it was there already
