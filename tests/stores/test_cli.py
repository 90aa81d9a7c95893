"""The ``simpleworkflow`` command, driven in-process against every store, and once for real.

In-process runs call :func:`simpleworkflow.cli.main` with the store's URL and schema and
read what it printed; the subprocess tests check what an operator's shell sees: the
console script, ``python -m simpleworkflow``, and one-line errors without a traceback.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Store

from simpleworkflow import __version__, cli
from simpleworkflow.cli import migrate

THUMBNAIL = "content.thumbnail.v1"
ROOT = Path(__file__).resolve().parents[2]


class Result:
    """What one command printed and returned."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> Any:
        return json.loads(self.out)


def run_cli(store: Store, capsys: pytest.CaptureFixture[str], *argv: str) -> Result:
    code = cli.main(["-d", store.url, "--schema", store.schema, *argv])
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def start(store: Store, capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    result = run_cli(store, capsys, "start", THUMBNAIL, "--json", *argv)
    assert result.code == 0, result.err
    started: dict[str, Any] = result.json()
    return started


def finish(store: Store, run_id: str) -> None:
    """Mark a run succeeded the way a worker in any language would, with plain SQL."""
    if store.kind == "sqlite":
        with sqlite3.connect(store.url.removeprefix("sqlite:///")) as conn:
            conn.execute(
                "update workflow_run set status = 'succeeded', result = '{\"ok\":true}' "
                "where id = ?",
                (run_id,),
            )
        return
    with psycopg.connect(store.url) as conn:
        conn.execute(
            f"""update "{store.schema}".workflow_run set status = 'succeeded',
                result = '{{"ok":true}}' where id = %s""".encode(),
            (run_id,),
        )


def test_migrate_applies_once_then_reports_up_to_date(
    empty_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_cli(empty_store, capsys, "migrate")
    assert first.code == 0
    assert "applied migration 0001" in first.out
    again = run_cli(empty_store, capsys, "migrate", "--json")
    assert again.code == 0
    assert again.json()["applied"] == []
    assert again.json()["version"] >= 1


def test_migrate_sql_prints_the_script_and_touches_nothing(
    empty_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(empty_store, capsys, "migrate", "--sql")
    assert result.code == 0
    assert "create table" in result.out
    assert "idx_workflow_run_claim" in result.out
    if empty_store.kind == "postgres":
        assert f'"{empty_store.schema}".workflow_run' in result.out
    backend = empty_store.backend()
    try:
        assert backend.execute(backend.schema_version(), readonly=True) is None
    finally:
        backend.close()


def test_postgres_without_schema_says_to_migrate(
    empty_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(empty_store, capsys, "runs", "list")
    if empty_store.kind == "sqlite":  # no file: listing runs must not make one
        assert (result.code, result.out) == (2, "")
        assert "no database at" in result.err
        return
    assert result.code == 2
    assert "simpleworkflow migrate" in result.err
    assert result.err.count("\n") == 1


def test_start_prints_the_run_id(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(store, capsys, "start", THUMBNAIL, "--payload", '{"content_id": "c_1"}')
    assert result.code == 0
    run_id = result.out.split()[1]
    assert result.out == f"run {run_id} (pending)\n"
    with store.client() as client:
        assert client.get(run_id).payload == {"content_id": "c_1"}


def test_start_of_a_type_no_worker_registered_warns_and_still_writes_the_run(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(store, capsys, "start", "shop.unknown.thing.v1", "--json")
    assert result.code == 0
    assert result.err.startswith(
        "simpleworkflow: warning: no worker or runtime has registered shop.unknown.thing.v1"
    )
    assert result.err.count("\n") == 1
    with store.client() as client:
        assert client.get(result.json()["id"]).status.value == "pending"


def test_start_of_a_registered_type_is_quiet_and_of_a_paused_one_says_so(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(store, capsys, "registry", "set", THUMBNAIL, "--runtime", "go").code == 0
    quiet = run_cli(store, capsys, "start", THUMBNAIL)
    assert (quiet.code, quiet.err) == (0, "")
    assert run_cli(store, capsys, "registry", "pause", THUMBNAIL).code == 0
    paused = run_cli(store, capsys, "start", THUMBNAIL)
    assert paused.code == 0
    assert paused.err == (
        f"simpleworkflow: warning: {THUMBNAIL} is paused: the run waits as pending until "
        f"`simpleworkflow registry resume {THUMBNAIL}`\n"
    )
    assert store.count() == 2


def test_start_options_reach_the_run(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    run = start(store, capsys, "--priority", "7", "--delay", "5m", "--max-attempts", "9")
    assert (run["priority"], run["max_attempts"], run["payload"]) == (7, 9, {})
    assert run["run_at"] > run["created_at"]


def test_a_repeated_key_returns_the_first_run(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    first = start(store, capsys, "-k", "content:c_1", "-p", '{"v": 1}')
    second = start(store, capsys, "-k", "content:c_1", "-p", '{"v": 2}')
    assert second["id"] == first["id"]
    assert second["payload"] == {"v": 1}


def test_payload_from_a_file_and_from_stdin(
    store: Store,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    payload_file = tmp_path / "payload.json"
    payload_file.write_text('{"from": "file"}')
    assert start(store, capsys, "-p", f"@{payload_file}")["payload"] == {"from": "file"}
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"from": "stdin"}'))
    assert start(store, capsys, "-p", "-")["payload"] == {"from": "stdin"}


def test_list_filters_and_pages(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    ids = [start(store, capsys, "-p", json.dumps({"n": n}))["id"] for n in range(3)]
    other = run_cli(store, capsys, "start", "billing.invoice.v1", "--json").json()
    assert run_cli(store, capsys, "runs", "cancel", ids[0]).code == 0

    by_type = run_cli(store, capsys, "runs", "list", "--type", "billing", "--json").json()
    assert [r["id"] for r in by_type["runs"]] == [other["id"]]
    cancelled = run_cli(store, capsys, "runs", "list", "-s", "cancelled", "--json").json()
    assert [r["id"] for r in cancelled["runs"]] == [ids[0]]

    seen: list[str] = []
    cursor: list[str] = []
    while True:
        page = run_cli(store, capsys, "runs", "list", "-n", "3", "--json", *cursor).json()
        seen += [r["id"] for r in page["runs"]]
        if page["next_cursor"] is None:
            break
        cursor = ["--cursor", page["next_cursor"]]
    assert sorted(seen) == sorted([*ids, other["id"]])


def test_list_filters_on_payload_content_and_creation_time(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    first = start(store, capsys, "-p", '{"customer": "c_1", "tags": ["red"]}')
    second = start(store, capsys, "-p", '{"customer": "c_2"}')

    def ids(*flags: str) -> list[str]:
        result = run_cli(store, capsys, "runs", "list", "--json", *flags)
        assert result.code == 0, result.err
        return [run["id"] for run in result.json()["runs"]]

    assert ids("--payload-contains", '{"customer": "c_1"}') == [first["id"]]
    assert ids("--payload-contains", '{"tags": ["red"]}') == [first["id"]]
    assert ids("--created-since", second["created_at"]) == [second["id"]]
    assert ids("--created-until", second["created_at"]) == [first["id"]]
    for flags, says in [
        (("--payload-contains", "{customer"), "not JSON"),
        (("--created-since", "yesterday"), "--created-since must be a time"),
        (("--created-until", "2030-01-01T00:00:00"), "--created-until must be a time"),
    ]:
        result = run_cli(store, capsys, "runs", "list", *flags)
        assert result.code == 2 and says in result.err, result.err


def test_list_table_is_aligned(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    start(store, capsys)
    run_cli(store, capsys, "start", "billing.invoice.send.v2")
    lines = run_cli(store, capsys, "runs", "list").out.splitlines()
    assert lines[0].split()[:3] == ["ID", "TYPE", "STATUS"]
    column = lines[0].index("STATUS")
    assert all(line[column:].startswith("pending") for line in lines[1:])
    assert run_cli(store, capsys, "runs", "list", "-s", "failed").out == "no runs\n"


def test_list_tells_how_to_get_the_next_page(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    for _ in range(2):
        start(store, capsys)
    out = run_cli(store, capsys, "runs", "list", "-n", "1").out
    assert "more runs: add --cursor " in out


def test_show_has_fields_and_audit_trail(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = start(store, capsys, "-p", '{"content_id": "c_9"}')["id"]
    run_cli(store, capsys, "runs", "cancel", run_id, "--reason", "not needed")

    shown = run_cli(store, capsys, "runs", "show", run_id, "--json").json()
    assert shown["run"]["status"] == "cancelled"
    assert [e["event_type"] for e in shown["events"]] == ["created", "cancelled"]
    assert shown["events"][1]["data"] == {"reason": "not needed"}

    text = run_cli(store, capsys, "runs", "show", run_id.upper()).out
    assert f"id               {run_id}" in text
    assert '{"content_id":"c_9"}' in text
    assert 'cancelled  {"reason":"not needed"}' in text


def test_cancel_says_whether_it_took_effect(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = start(store, capsys)["id"]
    first = run_cli(store, capsys, "runs", "cancel", run_id)
    assert (first.code, first.out) == (0, f"run {run_id} cancelled\n")
    again = run_cli(store, capsys, "runs", "cancel", run_id, "--json")
    assert again.code == 0
    assert again.json() == {"id": run_id, "cancelled": False, "status": "cancelled"}


def test_delete_hides_the_run_from_listings(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = start(store, capsys)["id"]
    assert run_cli(store, capsys, "runs", "delete", run_id, "--json").json()["deleted"] is True
    assert "already deleted" in run_cli(store, capsys, "runs", "delete", run_id).out
    assert run_cli(store, capsys, "runs", "list", "--json").json()["runs"] == []
    listed = run_cli(store, capsys, "runs", "list", "--all").out
    assert "pending (deleted)" in listed


def test_wait_exit_status_follows_the_outcome(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    done, cancelled, pending = (start(store, capsys)["id"] for _ in range(3))
    finish(store, done)
    succeeded = run_cli(store, capsys, "runs", "wait", done, "--json")
    assert (succeeded.code, succeeded.json()["result"]) == (0, {"ok": True})
    run_cli(store, capsys, "runs", "cancel", cancelled)
    assert run_cli(store, capsys, "runs", "wait", cancelled).code == 1
    timed_out = run_cli(store, capsys, "runs", "wait", pending, "--timeout", "50ms")
    assert timed_out.code == 2
    assert "did not finish within 50ms" in timed_out.err


UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"
BAD_INPUT = {
    "bad type name": (["start", "Content.Thumbnail"], "invalid workflow type"),
    "type without version": (["start", "content.thumbnail"], "invalid workflow type"),
    "payload not JSON": (["start", THUMBNAIL, "-p", "{oops"], "payload is not JSON"),
    "NUL in payload": (["start", THUMBNAIL, "-p", '{"a": "x\\u0000"}'], "NUL character"),
    "NaN payload": (["start", THUMBNAIL, "-p", '{"a": NaN}'], "NaN"),
    # found by tests/test_properties_cli.py: a ValueError and its traceback
    "5000-digit payload": (["start", THUMBNAIL, "-p", "9" * 5000], "4300 digits"),
    "5000-digit filter": (["runs", "list", "--payload-contains", "9" * 5000], "4300 digits"),
    "missing payload file": (["start", THUMBNAIL, "-p", "@/nonexistent.json"], "cannot read"),
    "bad delay": (["start", THUMBNAIL, "--delay", "5 parsecs"], "cannot read delay"),
    "negative priority too big": (["start", THUMBNAIL, "--priority", "-9999999999"], "priority"),
    "bad key": (["start", THUMBNAIL, "-k", ""], "idempotency_key"),
    "unknown run id": (["runs", "show", UNKNOWN_ID], "no workflow run"),
    "malformed run id": (["runs", "show", "run-42"], "not a run id"),
    "cancel unknown": (["runs", "cancel", UNKNOWN_ID], "no workflow run"),
    "delete unknown": (["runs", "delete", UNKNOWN_ID], "no workflow run"),
    "wait malformed": (["runs", "wait", "x"], "not a run id"),
    "bad cursor": (["runs", "list", "--cursor", "nonsense"], "invalid cursor"),
    "bad prefix": (["runs", "list", "--type", "Billing"], "invalid type prefix"),
    "bad limit": (["runs", "list", "--limit", "0"], "limit"),
    "bad wait timeout": (["runs", "wait", UNKNOWN_ID, "--timeout", "soon"], "timeout"),
}


@pytest.mark.parametrize("argv,message", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_is_one_line_and_exit_2(
    store: Store, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    result = run_cli(store, capsys, *argv)
    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith("simpleworkflow: error: ")
    assert result.err.count("\n") == 1
    assert message in result.err


def test_unknown_database_url_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["-d", "mysql://localhost/db", "runs", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simpleworkflow: error: unknown database URL")
    assert err.count("\n") == 1


def test_the_environment_chooses_store_and_schema(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIMPLEWORKFLOW_DATABASE_URL", store.url)
    monkeypatch.setenv("SIMPLEWORKFLOW_SCHEMA", store.schema)
    assert cli.main(["start", THUMBNAIL, "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["id"]
    with store.client() as client:
        assert client.get(run_id).type == THUMBNAIL


def test_store_options_may_follow_the_command(
    store: Store, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    where = ["-d", store.url, "--schema", store.schema]
    assert cli.main(["start", THUMBNAIL, "--json", *where]) == 0
    run_id = json.loads(capsys.readouterr().out)["id"]
    # Given on both sides of the command, the later value wins.
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    assert cli.main(["-d", elsewhere, "runs", "list", "--json", *where]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)["runs"]] == [run_id]


@pytest.mark.parametrize(
    "url,shown",
    [
        ("postgresql://app:s3cret@db:5432/prod", "postgresql://app:***@db:5432/prod schema jobs"),
        ("postgresql://app@db/prod", "postgresql://app@db/prod schema jobs"),
        ("postgresql://app:@db/prod", "postgresql://app:@db/prod schema jobs"),
    ],
)
def test_passwords_stay_out_of_messages(url: str, shown: str) -> None:
    args = cli.build_parser().parse_args(["-d", url, "--schema", "jobs", "migrate"])
    assert migrate.describe_target(args) == shown


def _console(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("simpleworkflow")
    return subprocess.run(
        [str(script), *argv], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def _module(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simpleworkflow", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_console_script_and_module_in_a_real_shell(store: Store) -> None:
    started = _console("start", THUMBNAIL, "-p", '{"content_id": "c_1"}', "--json", env=store.env)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["id"]
    listed = _module("runs", "list", "--json", env=store.env)
    assert listed.returncode == 0, listed.stderr
    assert [r["id"] for r in json.loads(listed.stdout)["runs"]] == [run_id]


def test_a_real_shell_sees_no_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "SIMPLEWORKFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    bad = _console("start", THUMBNAIL, "-p", "{not json", env=env)
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr.startswith("simpleworkflow: error: payload is not JSON")
    assert bad.stderr.count("\n") == 1


def test_help_lists_every_command() -> None:
    help_text = cli.build_parser().format_help()
    for command in ("migrate", "start", "runs"):
        assert command in help_text


def _leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str | None]]:
    """Every command and sub-command: its words, its parser, its line in its parent's help."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), sub, helps.get(name)
                yield from _leaves(sub, (*path, name))


def test_every_command_says_what_it_does() -> None:
    for words, parser, line in _leaves(cli.build_parser()):
        assert line and "\n" not in line, words  # its line in the list of commands
        assert parser.description, words  # and at the top of its own --help


def test_every_command_takes_json_but_demo_worker_and_serve() -> None:
    without = {
        " ".join(words)
        for words, parser, _ in _leaves(cli.build_parser())
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
        and "--json" not in parser._option_string_actions
    }
    assert without == {"demo", "worker", "serve"}  # they run until stopped, logging
    for doc in (ROOT / "docs" / "cli.md", ROOT / "README.md"):
        assert "Every command but `demo`, `worker` and `serve`" in " ".join(doc.read_text().split())


def test_version_and_bare_commands_in_a_real_shell() -> None:
    env = dict(os.environ)
    version = _console("--version", env=env)
    assert (version.returncode, version.stdout) == (0, f"simpleworkflow {__version__}\n")
    bare = _console(env=env)
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout.startswith("usage: simpleworkflow ")
    assert all(command in bare.stdout for command in ("demo", "migrate", "replay-check"))
    runs = _console("runs", env=env)
    assert runs.returncode == 0
    assert runs.stdout.startswith("usage: simpleworkflow runs ")
    assert "signal" in runs.stdout


def _documented_command_lines() -> list[str]:
    """Every ``$ simpleworkflow ...`` line quoted in the README and docs, continuations joined."""
    lines: list[str] = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            if line.startswith("$ simpleworkflow ") or " | simpleworkflow " in line:
                command = line[line.index("simpleworkflow ") :]
                lines.append(command.split(";")[0].split(" | ")[0])
    return lines


@pytest.mark.parametrize("line", _documented_command_lines())
def test_documented_commands_parse(line: str) -> None:
    argv = shlex.split(line)[1:]
    args = cli.build_parser().parse_args(argv)
    assert callable(args.handler)
