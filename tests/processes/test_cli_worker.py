"""``simpleworkflow registry`` and ``simpleworkflow worker``, on every store.

The registry commands run in-process. The worker runs as an operator runs it: the console
script in a project directory holding an app module that is not installed, stopped with
SIGTERM, on a SQLite file and on a Postgres schema.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import Store

from simpleworkflow import cli
from simpleworkflow.cli import worker as worker_command

INVOICE = "billing.invoice.v1"
REFUND = "billing.refund.v1"
SCRIPT = Path(sys.executable).with_name("simpleworkflow")

APP_MODULE = """
from simpleworkflow.app import App
from simpleworkflow.worker import IntentPoller

app = App()

@app.workflow("billing.invoice.v1")
def invoice(payload):
    return {"total": payload["amount"] * 2}

@app.workflow("billing.refund.v1")
async def refund(payload, ctx):
    return {"refunded": payload["amount"], "attempt": ctx.attempt}

poller = IntentPoller(app, type_prefixes=["billing.invoice.v1"], concurrency=3)
not_an_app = 42
"""


def run_cli(store: Store, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["-d", store.url, "--schema", store.schema, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def registry_json(store: Store, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run_cli(store, capsys, "registry", "list", "--json")
    assert code == 0, err
    return {entry["workflow_name"]: entry for entry in json.loads(out)["registry"]}


# -- registry -----------------------------------------------------------------------------


def test_registry_set_list_pause_resume(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(store, capsys, "registry", "list")
    assert (code, out) == (0, "no registered types; a worker registers its types when it starts\n")

    code, out, _ = run_cli(
        store, capsys, "registry", "set", INVOICE, "--runtime", "go", "--description", "Go one"
    )
    assert (code, out) == (0, f"{INVOICE}: runs on go (enabled)\n")
    entry = registry_json(store, capsys)[INVOICE]
    assert (entry["runtime"], entry["is_enabled"], entry["description"]) == ("go", True, "Go one")

    # Moving it back keeps the description when none is given.
    assert run_cli(store, capsys, "registry", "set", INVOICE, "--runtime", "python")[0] == 0
    assert registry_json(store, capsys)[INVOICE]["description"] == "Go one"

    code, out, _ = run_cli(store, capsys, "registry", "pause", INVOICE)
    assert code == 0 and "paused" in out
    assert registry_json(store, capsys)[INVOICE]["is_enabled"] is False
    code, out, _ = run_cli(store, capsys, "registry", "list")
    assert out.splitlines()[1].split()[:3] == [INVOICE, "python", "paused"]

    code, out, _ = run_cli(store, capsys, "registry", "resume", INVOICE, "--json")
    assert code == 0 and json.loads(out)["is_enabled"] is True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("pause", REFUND), f"{REFUND} is not in the registry"),
        (("resume", REFUND), f"{REFUND} is not in the registry"),
        (("pause", "Billing"), "invalid workflow type 'Billing'"),
        (("set", "billing.v1", "--runtime", "go"), "invalid workflow type 'billing.v1'"),
        (("set", INVOICE, "--runtime", "Go"), "invalid runtime 'Go'"),
        (("set", INVOICE, "--runtime", "go lang"), "invalid runtime 'go lang'"),
    ],
)
def test_registry_errors_are_one_line_and_exit_2(
    store: Store, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, out, err = run_cli(store, capsys, "registry", *argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"simpleworkflow: error: {message}")
    assert err.count("\n") == 1
    assert registry_json(store, capsys) == {}


# -- worker: loading the app --------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A project directory, made current, holding an app module under a fresh name."""
    name = f"jobs_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP_MODULE)
    (tmp_path / "broken.py").write_text("def oops(:\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    return name


def parse(*argv: str) -> Any:
    return cli.build_parser().parse_args(["worker", *argv])


def test_worker_builds_a_poller_from_an_app_with_the_options_given(project: str) -> None:
    args = parse(f"{project}:app", "--prefix", "billing.%", "--concurrency", "4", "--lease", "1m")
    poller = worker_command.build_poller(worker_command.load_target(args.target), args)
    assert poller.types == [INVOICE, REFUND]
    assert (poller.concurrency, poller.lease_duration, poller.heartbeat_events) == (4, 60.0, True)
    assert poller.worker_id  # host-pid by default


def test_worker_options_override_those_of_a_poller(project: str) -> None:
    args = parse(f"{project}:poller", "--grace", "5s", "--no-heartbeat-events")
    poller = worker_command.build_poller(worker_command.load_target(args.target), args)
    assert poller.types == [INVOICE]  # the poller's own prefix still applies
    assert (poller.concurrency, poller.shutdown_grace, poller.heartbeat_events) == (3, 5.0, False)


@pytest.mark.parametrize(
    ("target", "extra", "message"),
    [
        ("no_such_module:app", (), "cannot import module 'no_such_module': ModuleNotFoundError"),
        ("{project}.py:app", (), "'{project}.py' is a file path, but MODULE is a module name"),
        ("{project}:missing", (), "module '{project}' has no attribute 'missing'"),
        ("{project}:not_an_app", (), "{project}:not_an_app is not an App or an IntentPoller"),
        ("{project}:app", ("--prefix", "content.%"), "no handler matches the prefixes content.%"),
        ("{project}:app", ("--prefix", "Content"), "invalid type prefix 'Content'"),
        ("{project}:app", ("--lease", "soon"), "cannot read --lease 'soon'"),
        ("{project}:app-1", (), "cannot read '{project}:app-1': write MODULE:APP"),
    ],
)
def test_worker_refuses_a_bad_target_in_one_line(
    project: str,
    capsys: pytest.CaptureFixture[str],
    target: str,
    extra: tuple[str, ...],
    message: str,
) -> None:
    code = cli.main(["worker", target.format(project=project), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"simpleworkflow: error: {message.format(project=project)}")
    assert err.count("\n") == 1


def worker_in(directory: Path, target: str) -> subprocess.CompletedProcess[str]:
    """``simpleworkflow worker TARGET`` as a shell in ``directory`` runs it."""
    return subprocess.run(
        [str(SCRIPT), "worker", target],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_missing_module_fails_in_a_real_shell_without_traceback(tmp_path: Path) -> None:
    done = worker_in(tmp_path, "nowhere:app")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(
        "simpleworkflow: error: cannot import module 'nowhere': "
        "ModuleNotFoundError: No module named 'nowhere'; "
    )
    assert f"working directory ({tmp_path})" in done.stderr
    assert "PYTHONPATH" in done.stderr


@pytest.mark.parametrize("target", ["jobs.py:app", "./jobs.py:app"])
def test_a_file_path_is_told_to_drop_the_py(tmp_path: Path, target: str) -> None:
    (tmp_path / "jobs.py").write_text(APP_MODULE)
    done = worker_in(tmp_path, target)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert f"{target.split(':')[0]!r} is a file path" in done.stderr
    assert "write jobs:app (drop '.py'" in done.stderr


BROKEN_MODULES = {
    "a name error": ("import os\n\n\ndef total():\n    return undefined\n\n\ntotal()\n", 5),
    "a syntax error": ("import os\n\ndef oops(:\n    pass\n", 3),
    "a missing dependency": ("import os\nimport no_such_dependency_xyz\n", 2),
}


@pytest.mark.parametrize("source,line", BROKEN_MODULES.values(), ids=BROKEN_MODULES.keys())
def test_a_module_that_raises_shows_its_traceback(tmp_path: Path, source: str, line: int) -> None:
    package = tmp_path / "shop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "workers.py").write_text(source)
    done = worker_in(tmp_path, "shop.workers:app")
    assert done.returncode == 2
    *trace, last = done.stderr.splitlines()
    # The module's own traceback, without the frames of the import machinery ...
    assert f'File "{package / "workers.py"}", line {line}' in "\n".join(trace)
    assert "importlib" not in done.stderr
    # ... then one line that names the error, the file and the line, and what to do.
    assert last.startswith("simpleworkflow: error: cannot import module 'shop.workers': ")
    assert f"(shop/workers.py, line {line})" in last
    if "dependency" in source:
        assert "imports 'no_such_dependency_xyz'" in last and "install it" in last
    else:
        assert "the traceback above shows where" in last


# -- worker: a real process ---------------------------------------------------------------


def wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_worker_drains_runs_then_stops_on_sigterm(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "jobs.py").write_text(APP_MODULE)
    with store.client() as client:
        invoices = [client.start(INVOICE, {"amount": n}) for n in range(3)]
        refund = client.start(REFUND, {"amount": 5})
    # A paused type is never claimed: its run must still be pending at the end.
    run_cli(store, capsys, "registry", "set", REFUND, "--runtime", "python")
    run_cli(store, capsys, "registry", "pause", REFUND)

    options = ["--poll-interval", "0.1", "--watch-interval", "10ms", "--grace", "5s"]
    options += ["--worker-id", "cli-test-1"]
    worker = subprocess.Popen(
        [str(SCRIPT), "-d", store.url, "--schema", store.schema, "worker", "jobs:app", *options],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with store.client() as client:
            wait_for(lambda: all(client.get(r.id).status == "succeeded" for r in invoices))
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=20) == 0
            assert [client.get(r.id).result for r in invoices] == [
                {"total": n * 2} for n in range(3)
            ]
            assert client.get(refund.id).status == "pending"
    finally:
        worker.kill()
        stderr = worker.communicate()[1]
    assert "INFO simpleworkflow.worker: worker cli-test-1 claiming" in stderr
    assert (
        "SIGTERM: finishing running handlers, then stopping (a second Ctrl-C or SIGTERM "
        "exits at once)" in stderr
    )
    assert "worker cli-test-1 stopped" in stderr
    assert "Traceback" not in stderr
    assert succeeded_in_log(stderr) == {INVOICE: 3}


def succeeded_in_log(log: str) -> dict[str, int]:
    """The successes a worker's INFO lines report, by type: a run named alone, or a count."""
    counts: dict[str, int] = {}
    for line in log.splitlines():
        if " INFO simpleworkflow.worker: " not in line:
            continue
        alone = re.search(r": run \S+ \((\S+)\) succeeded on attempt \d+$", line)
        if alone:
            counts[alone[1]] = counts.get(alone[1], 0) + 1
        summed = re.search(r": (\d+) runs succeeded \((.*)\)$", line)
        if summed:
            parts = dict(part.split(": ") for part in summed[2].split(", "))
            assert sum(map(int, parts.values())) == int(summed[1]) > 1, line
            for type_name, n in parts.items():
                counts[type_name] = counts.get(type_name, 0) + int(n)
    return counts


def test_worker_stopped_as_soon_as_it_starts_always_exits(store: Store, tmp_path: Path) -> None:
    """SIGTERM at the worker's first breath, while its side tasks open their first
    connections: a task that swallowed that cancellation once kept the process alive
    for ever (about one start in eight on Postgres, seen). Each try must exit promptly."""
    (tmp_path / "jobs.py").write_text(APP_MODULE)
    command = [str(SCRIPT), "-d", store.url, "--schema", store.schema, "worker", "jobs:app"]
    for attempt in range(20):
        worker = subprocess.Popen(
            [*command, "--worker-id", f"quick-{attempt}"],
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert worker.stderr is not None
            for line in worker.stderr:
                if " claiming " in line:
                    break
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=20) == 0, f"try {attempt}: still running 20 s after SIGTERM"
        finally:
            worker.kill()
            worker.communicate()
