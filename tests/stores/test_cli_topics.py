"""``simpleworkflow subscriptions`` and ``simpleworkflow publish``, on every store,
in-process as tests/test_cli.py runs the other commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Store
from test_cli import run_cli
from test_cli_admin import one_line_error

INVOICE = "billing.invoice.v1"
LABEL = "shipping.label.v1"


def test_subscriptions_add_list_and_remove(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(store, capsys, "subscriptions", "list").out == (
        "no subscriptions; add one with `simpleworkflow subscriptions add PATTERN TYPE`\n"
    )
    added = run_cli(store, capsys, "subscriptions", "add", "orders.*", INVOICE, "--priority", "5")
    assert (added.code, added.out) == (
        0,
        f"{INVOICE} subscribed to orders.*: each event published on a matching topic starts "
        "a run (priority 5, 3 attempts)\n",
    )
    run_cli(store, capsys, "subscriptions", "add", "orders.#", LABEL, "--max-attempts", "9")

    header, deep, star = run_cli(store, capsys, "subscriptions", "list").out.splitlines()
    assert header.split("  ")[0] == "PATTERN" and "MAX ATTEMPTS" in header
    assert deep.split()[:4] == ["orders.#", LABEL, "100", "9"]
    assert star.split()[:4] == ["orders.*", INVOICE, "5", "3"]
    shown = run_cli(store, capsys, "subscriptions", "list", "--topic", "orders.eu.created")
    assert [line.split()[0] for line in shown.out.splitlines()] == ["PATTERN", "orders.#"]
    by_type = run_cli(store, capsys, "subscriptions", "list", "--type", INVOICE, "--json").json()
    assert [(s["pattern"], s["priority"]) for s in by_type["subscriptions"]] == [("orders.*", 5)]
    nothing = run_cli(store, capsys, "subscriptions", "list", "--topic", "users.created")
    assert nothing.out == (
        "no subscription matches topic 'users.created': an event published on it starts nothing\n"
    )

    removed = run_cli(store, capsys, "subscriptions", "remove", "orders.*", INVOICE)
    assert removed.out == f"{INVOICE} unsubscribed from orders.*; runs already started go on\n"
    again = run_cli(store, capsys, "subscriptions", "remove", "orders.*", INVOICE, "--json")
    assert (again.code, again.json()) == (
        0,
        {"pattern": "orders.*", "type": INVOICE, "removed": False},
    )
    listed = run_cli(store, capsys, "subscriptions", "list", "--json").json()["subscriptions"]
    assert [(s["pattern"], s["workflow_type"], s["max_attempts"]) for s in listed] == [
        ("orders.#", LABEL, 9)
    ]


def test_publish_starts_runs_once_per_event(
    store: Store, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_cli(store, capsys, "subscriptions", "add", "orders.*", INVOICE)
    run_cli(store, capsys, "subscriptions", "add", "orders.#", LABEL)
    payload = tmp_path / "order.json"
    payload.write_text('{"order_id": 7}')

    first = run_cli(store, capsys, "publish", "orders.created", f"@{payload}", "-e", "o-7")
    assert first.code == 0, first.err
    summary, invoice, label = first.out.splitlines()
    assert summary == "orders.created (event o-7): 2 runs started"
    assert invoice.split()[0] == INVOICE and invoice.endswith("  started")
    assert label.split()[0] == LABEL

    again = run_cli(store, capsys, "publish", "orders.created", "{}", "--event-id", "o-7", "--json")
    document = again.json()
    assert (document["topic"], document["event_id"], document["started"]) == (
        "orders.created",
        "o-7",
        0,
    )
    assert [run["id"] for run in document["runs"]] == [invoice.split()[2], label.split()[2]]
    assert [(run["created"], run["payload"]) for run in document["runs"]] == [
        (False, {"order_id": 7}),
        (False, {"order_id": 7}),
    ]
    text = run_cli(store, capsys, "publish", "orders.created", "-e", "o-7").out
    assert (
        text.splitlines()[0] == "orders.created (event o-7): published before; nothing new started"
    )
    assert text.splitlines()[1].endswith("  already started")

    run_cli(store, capsys, "subscriptions", "add", "*.created", "audit.record.v1")
    mixed = run_cli(store, capsys, "publish", "orders.created", "-e", "o-7").out.splitlines()
    assert mixed[0] == (
        "orders.created (event o-7): 1 run started, 2 already started for this event before"
    )
    assert store.count() == 3


def test_publish_with_no_subscription_says_so_and_succeeds(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = run_cli(store, capsys, "publish", "orders.created", '{"order_id": 7}', "-e", "e1")
    assert (shown.code, shown.out) == (
        0,
        "orders.created (event e1): no subscription matches the topic; nothing started\n",
    )
    document = run_cli(store, capsys, "publish", "orders.created", "--json").json()
    assert (document["runs"], document["started"]) == ([], 0)
    assert len(document["event_id"]) == 36  # a new event, with a new id
    assert store.count() == 0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["publish", "orders.*"], "invalid topic 'orders.*': wildcards belong in subscription"),
        (["publish", "Orders"], "invalid topic 'Orders': it has upper-case letters"),
        (["publish", "orders", "{bad"], "payload is not JSON"),
        (["publish", "orders", "-e", ""], "an event id must be 1 to 100 characters"),
        (["subscriptions", "add", "orders.>", INVOICE], "invalid topic pattern 'orders.>'"),
        (["subscriptions", "add", "orders.*.#", INVOICE], "cannot be combined with '*'"),
        (["subscriptions", "add", "orders.*", "billing"], "invalid workflow type 'billing'"),
        (["subscriptions", "add", "orders.*", INVOICE, "--max-attempts", "0"], "max_attempts"),
        (["subscriptions", "remove", "order*", INVOICE], "a wildcard must be a whole segment"),
        (["subscriptions", "list", "--topic", "a..b"], "invalid topic 'a..b'"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    store: Store, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    assert says in one_line_error(run_cli(store, capsys, *argv))
    assert store.count() == 0 and store.count("workflow_subscription") == 0


def test_publish_refuses_a_sqlite_file_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simpleworkflow import cli

    code = cli.main(["-d", f"sqlite:///{tmp_path / 'typo.db'}", "publish", "orders.created"])
    assert code == 2 and "no database at" in capsys.readouterr().err
    assert not (tmp_path / "typo.db").exists()
