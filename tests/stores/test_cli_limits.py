"""Flow control from the shell: ``registry set-concurrency``, ``start --concurrency-key``
and ``limits``, on every store, in-process as tests/test_cli.py runs the others."""

from __future__ import annotations

import json

import pytest
from conftest import Store
from test_cli import run_cli

TYPE = "limits.cli.v1"


def test_concurrency_limits_are_set_listed_and_cleared(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    made = run_cli(store, capsys, "registry", "set", TYPE, "--runtime", "python",
                   "--concurrency", "4")  # fmt: skip
    assert made.code == 0, made.err
    shown = run_cli(store, capsys, "registry", "set-concurrency", TYPE, "--concurrency", "4",
                    "--key-concurrency", "1")  # fmt: skip
    assert shown.out == f"{TYPE}: 4 leased at most, 1 per key\n"
    listed = run_cli(store, capsys, "registry", "list")
    assert "CONCURRENCY" in listed.out and "4 leased at most, 1 per key" in listed.out
    cleared = run_cli(store, capsys, "registry", "set-concurrency", TYPE, "--json")
    assert json.loads(cleared.out)["key_concurrency"] is None
    started = run_cli(store, capsys, "start", TYPE, "--concurrency-key", "c1", "--json")
    assert json.loads(started.out)["concurrency_key"] == "c1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "--concurrency must be an integer from 1"),
        (["--key-concurrency", "many"], "--key-concurrency must be a whole number"),
    ],
)
def test_a_bad_concurrency_limit_is_one_clear_error(
    store: Store, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    run_cli(store, capsys, "registry", "set", TYPE, "--runtime", "python")
    result = run_cli(store, capsys, "registry", "set-concurrency", TYPE, *args)
    assert result.code == 2 and message in result.err and result.out == ""


def test_rate_limits_are_set_used_listed_and_deleted(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cli(store, capsys, "registry", "set", TYPE, "--runtime", "python")
    assert run_cli(store, capsys, "limits", "set", "partner-api", "10/s").out == (
        "partner-api: 10/s\n"
    )
    assert run_cli(store, capsys, "limits", "set", "per-customer", "5/10s", "--per-key").out == (
        "per-customer: 5/10s, per key\n"
    )
    used = run_cli(store, capsys, "limits", "use", TYPE, "partner-api")
    assert used.out == f"{TYPE}: obeys rate limit partner-api\n"
    listed = json.loads(run_cli(store, capsys, "limits", "list", "--json").out)
    assert [(x["name"], x["max_runs"], x["period"]) for x in listed["limits"]] == [
        ("partner-api", 10, 1.0),
        ("per-customer", 5, 10.0),
    ]
    assert run_cli(store, capsys, "limits", "delete", "per-customer").out == (
        "per-customer: deleted\n"
    )
    assert run_cli(store, capsys, "limits", "use", TYPE, "none").code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["set", "partner-api", "10"], "a rate is 'N/period'"),
        (["set", "Partner", "10/s"], "a rate limit's name must be"),
        (["use", TYPE, "missing"], "no rate limit named 'missing'"),
    ],
)
def test_a_bad_rate_limit_is_one_clear_error(
    store: Store, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    run_cli(store, capsys, "registry", "set", TYPE, "--runtime", "python")
    result = run_cli(store, capsys, "limits", *args)
    assert result.code == 2 and message in result.err and result.out == ""
