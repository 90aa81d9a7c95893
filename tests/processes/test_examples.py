"""Every file in ``examples/`` runs here, on every store, with its outcome and audit trail
checked; and the snippets ``docs/durable.md`` quotes must be the examples' code verbatim.

The examples are loaded from their files (they are not a package), each once per session:
their workflows are registered on a module-level app, as in any user's code.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import importlib.util
import inspect
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import Store

from simpleworkflow import demo_app
from simpleworkflow.models import Event, RunStatus

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs"
#: Events of the worker's bookkeeping, left out to compare what the workflow did.
BOOKKEEPING = {"created", "leased", "started", "heartbeat"}


@functools.cache
def example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    return module


def trail(events: list[Event]) -> list[tuple[str, str]]:
    """Each event that says what the workflow did, with the step or signal it concerns."""
    return [
        (e.event_type, str(e.data.get("step") or e.data.get("event") or ""))
        for e in events
        if e.event_type not in BOOKKEEPING
    ]


def unique(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:6]}"


def test_every_example_has_a_test() -> None:
    tested = {
        "onboarding",
        "order_saga",
        "batch_processor",
        "partner_poller",
        "token_stream",
        "fastapi_service",  # tested in tests/http/test_fastapi.py
    }
    assert {path.stem for path in EXAMPLES.glob("*.py")} == tested


# -- onboarding ---------------------------------------------------------------------------


def run_onboarding(store: Store, *, verify: bool) -> tuple[Any, list[Event], str]:
    onboarding = example("onboarding")
    email = f"{unique(store.kind)}@example.com"
    run, events = asyncio.run(
        onboarding.run_onboarding(store.url, store.schema, email=email, verify=verify)
    )
    return run, events, email


def test_onboarding_with_the_user_verifying(store: Store) -> None:
    run, events, email = run_onboarding(store, verify=True)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result["verified"] is True and run.result["nudged"] is False
    assert run.attempt == 0, "a step's retry is not a failed attempt of the run"
    assert trail(events) == [
        ("step_started", "create-user"),
        ("step_completed", "create-user"),
        ("sleeping", "welcome-delay"),
        ("resumed", "welcome-delay"),
        ("step_failed", "send-welcome"),  # the mail provider was busy: retried later
        ("resumed", "send-welcome"),
        ("step_started", "send-welcome"),
        ("step_completed", "send-welcome"),
        ("waiting", "email-verified"),
        ("signal_received", "user.verified"),
        ("resumed", "email-verified"),
        ("succeeded", ""),
    ]
    with store.client() as client:
        journal = client.steps(run.id)
    assert [(s.step_name, s.kind, s.attempts) for s in journal] == [
        ("create-user", "step", 1),
        ("welcome-delay", "sleep", 1),
        ("send-welcome", "step", 2),
        ("email-verified", "wait", 1),
    ]
    assert journal[3].output["signal"] == {"user_id": run.result["user_id"], "via": "link"}
    assert example("onboarding").mailer.sent.count((email, "welcome")) == 1


def test_onboarding_nudges_a_user_who_does_not_verify(store: Store) -> None:
    run, events, email = run_onboarding(store, verify=False)

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result["verified"] is False and run.result["nudged"] is True
    assert trail(events)[-7:] == [
        ("waiting", "email-verified"),
        ("resumed", "email-verified"),  # at the timeout, with no signal
        ("step_failed", "nudge"),
        ("resumed", "nudge"),
        ("step_started", "nudge"),
        ("step_completed", "nudge"),
        ("succeeded", ""),
    ]
    with store.client() as client:
        waited = next(s for s in client.steps(run.id) if s.step_name == "email-verified")
    assert waited.output == {"timeout": True}
    assert (email, "verify-reminder") in example("onboarding").mailer.sent


# -- order saga ---------------------------------------------------------------------------


def test_order_saga_ships_or_compensates_in_reverse_order(store: Store) -> None:
    saga = example("order_saga")
    shipped_id, stranded_id = unique("o"), unique("o")
    orders = [
        {"order_id": shipped_id, "items": ["mug"], "amount": 1200, "country": "NL"},
        {"order_id": stranded_id, "items": ["lamp"], "amount": 4900, "country": "AQ"},
    ]
    (shipped, shipped_events), (stranded, stranded_events) = asyncio.run(
        saga.place_orders(store.url, store.schema, orders=orders)
    )

    assert shipped.status is RunStatus.SUCCEEDED
    assert shipped.result == {"status": "shipped", "tracking": f"trk_{shipped_id}"}
    assert [step for event, step in trail(shipped_events) if event == "step_completed"] == [
        "reserve-stock",
        "charge-card",
        "ship",
    ]

    assert stranded.status is RunStatus.FAILED
    assert "no carrier delivers to AQ" in (stranded.last_error or "")
    assert trail(stranded_events)[4:] == [
        ("step_failed", "ship"),  # a PermanentError: no retry of the step, nor of the run
        ("rolling_back", ""),
        ("step_failed", "rollback/refund-card"),  # timed out once: retried after a suspension
        ("resumed", "rollback/refund-card"),
        ("step_started", "rollback/refund-card"),
        ("step_completed", "rollback/refund-card"),
        ("step_started", "rollback/release-stock"),
        ("step_completed", "rollback/release-stock"),
        ("failed", ""),
    ]
    failed = next(e for e in stranded_events if e.event_type == "failed")
    assert [(o["step"], o["outcome"]) for o in failed.data["rollback"]] == [
        ("rollback/refund-card", "completed"),
        ("rollback/release-stock", "completed"),
    ]
    assert saga.payments.refunded[stranded_id] == 4900
    assert stranded_id not in saga.inventory.reserved
    assert shipped_id in saga.inventory.reserved


# -- batch processor ----------------------------------------------------------------------


def test_batch_processor_indexes_every_item_with_a_trimmed_journal(store: Store) -> None:
    batch = example("batch_processor")
    before = len(batch.catalog.indexed)
    run, journal = asyncio.run(batch.run_batch(store.url, store.schema, page_size=25))

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert run.result == {"processed": 1000}
    assert batch.catalog.indexed[before:] == batch.catalog.items  # each page once, in order
    # 40 pages and an empty fetch: the last trim (after iteration 39) kept iterations 30
    # to 40 (their steps, the states committed before 30, 35 and 40) and the result.
    names = [entry.step_name for entry in journal]
    assert len(names) == 25 and names[0] == "process-items/~30" and names[-1] == "process-items"
    assert {e.kind for e in journal} == {"loop_state", "step", "loop"}
    assert not any(name.startswith(f"process-items/~{n}/") for n in range(30) for name in names)


# -- the demo's copy ----------------------------------------------------------------------


def durable_calls(fn: Any) -> list[tuple[str, str]]:
    """The ``ctx.<call>("name", ...)`` calls of a function, in source order."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "ctx"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]
    calls.sort(key=lambda node: (node.lineno, node.col_offset))
    return [(node.func.attr, node.args[0].value) for node in calls]  # type: ignore[attr-defined]


# -- partner poller (continue-as-new) -------------------------------------------------------


def test_partner_poller_continues_as_new_with_the_cursor_and_a_fresh_journal(
    store: Store,
) -> None:
    poller = example("partner_poller")
    partner = unique(store.kind)
    chain = asyncio.run(poller.run_poller(store.url, store.schema, partner=partner))

    # Two polls of two items per run, ten items: three runs, the last one closed.
    assert [run.payload["cursor"] for run in chain] == [0, 4, 8]
    assert [run.status for run in chain] == [RunStatus.SUCCEEDED] * 3
    assert [run.result for run in chain[:-1]] == [{"continued_as": r.id} for r in chain[1:]]
    assert chain[-1].result == {"partner": partner, "cursor": 10}
    assert [run.continued_from for run in chain] == [None, chain[0].id, chain[1].id]
    assert [item for item in poller.inbox if item.startswith(f"{partner}:")] == [
        f"{partner}:{n}" for n in range(1, 11)
    ]
    # Each run journals its own polls only: the journal starts empty in every run.
    two_polls = {"fetch", "store", "next-poll", "fetch#2", "store#2", "next-poll#2"}
    for run, expected in zip(chain, [two_polls, two_polls, {"fetch", "store"}], strict=True):
        steps = store.sql("select step_name from workflow_step where run_id = ?", run.id)
        assert {name for (name,) in steps} == expected


# -- token stream (streams) -------------------------------------------------------------------


def test_token_stream_reads_the_answer_live_and_each_token_once(store: Store) -> None:
    tokens = example("token_stream")
    run, got = asyncio.run(tokens.ask(store.url, store.schema, question="Why?"))

    assert run.status is RunStatus.SUCCEEDED, run.last_error
    assert "".join(got).strip() == run.result["answer"]
    assert got[:2] == ["You ", "asked: "]
    with store.client() as client:
        assert [(s.key, s.closed) for s in client.streams(run.id)] == [
            ("status", False),
            ("tokens", True),
        ]
        assert [i.value for i in client.read_stream(run.id, "status")] == ["thinking", "done"]


def test_the_demo_runs_the_onboarding_example_s_steps() -> None:
    """``simpleworkflow demo`` cannot import examples/ once installed, so it has a short
    copy of the onboarding workflow: it must make the same durable calls."""
    example_calls = durable_calls(example("onboarding").onboard)
    assert example_calls == durable_calls(demo_app.onboard)
    assert [name for _, name in example_calls] == [
        "create-user",
        "welcome-delay",
        "send-welcome",
        "email-verified",
        "nudge",
    ]


# -- as scripts, and as quoted in the docs ------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "onboarding",
        "order_saga",
        "batch_processor",
        "partner_poller",
        "token_stream",
        "fastapi_service",
    ],
)
def test_example_runs_as_a_script(name: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "succeeded" in done.stdout
    assert list(tmp_path.iterdir()) == [], "the default database is a throw-away file"


QUOTE = re.compile(r"<!-- quote: (\S+) (\S+) -->\n```python\n(.*?)```\n", re.S)


def region(path: Path, name: str) -> str:
    """The lines between ``# [start NAME]`` and ``# [end NAME]`` of an example, dedented."""
    text = path.read_text(encoding="utf-8")
    marks = rf"^[ ]*# \[start {name}\]\n(.*?)^[ ]*# \[end {name}\]\n"
    found = re.search(marks, text, re.S | re.M)
    assert found, f"{path.name} has no region {name!r}"
    return textwrap.dedent(found.group(1)).rstrip("\n") + "\n"


def test_docs_quote_the_examples_verbatim() -> None:
    quotes = QUOTE.findall((DOCS / "durable.md").read_text(encoding="utf-8"))
    assert len(quotes) >= 3
    framed = QUOTE.findall((DOCS / "frameworks.md").read_text(encoding="utf-8"))
    assert len(framed) >= 1
    quotes += framed
    for source, name, quoted in quotes:
        assert quoted == region(ROOT / source, name), f"{source} [{name}] is quoted stale"
