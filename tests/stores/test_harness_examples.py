"""The project's own examples under the test harness: their real waits (minutes, hours, days)
skipped, their services stood in for by step doubles, without a line of theirs changed."""

from __future__ import annotations

import functools
import importlib.util
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from simpleworkflow.models import RunStatus
from simpleworkflow.testing import Environment

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@functools.cache
def example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"harness_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def onboarding(tmp_path: Path) -> Any:
    module = example("onboarding")
    with Environment(module.app, directory=tmp_path) as env:
        yield module, env


def test_onboarding_nudges_after_its_three_real_days(onboarding: Any) -> None:
    module, env = onboarding
    email = f"{uuid.uuid4().hex[:6]}@example.com"
    began = env.now()
    run = env.start(module.ONBOARD, {"email": email})  # the 10 minutes and 3 days as written

    done = env.run_until_done(run.id)

    assert done.status is RunStatus.SUCCEEDED
    assert done.result["verified"] is False and done.result["nudged"] is True
    journal = env.journal(run.id)
    assert [e.step_name for e in journal] == [
        "create-user",
        "welcome-delay",
        "send-welcome",
        "email-verified",
        "nudge",
    ]
    assert journal[2].attempts == 2  # the mail provider was busy once: retried a second later
    assert (email, "verify-reminder") in module.mailer.sent
    assert (env.now() - began).days >= 3


def test_onboarding_ends_when_the_user_clicks(onboarding: Any) -> None:
    module, env = onboarding
    run = env.start(module.ONBOARD, {"email": f"{uuid.uuid4().hex[:6]}@example.com"})
    waiting = env.run_until_waiting(run.id, "signal")  # past the 10 minutes, not the 3 days
    user_id = waiting.waiting_for["match"]["user_id"]

    env.signal(run.id, module.VERIFIED, {"user_id": user_id, "via": "link"})

    done = env.run_until_done(run.id)
    assert done.result == {"user_id": user_id, "verified": True, "nudged": False}


def test_order_saga_ships_through_a_stubbed_carrier(tmp_path: Path) -> None:
    module = example("order_saga")
    with Environment(module.app, directory=tmp_path) as env:
        env.stub_step("ship", {"tracking": "trk_test"})  # the carrier serves no "AQ"
        order = {"order_id": "o_t1", "items": ["lamp"], "amount": 4900, "country": "AQ"}
        run = env.start(module.PLACE_ORDER, order)

        done = env.run_until_done(run.id)

        assert done.status is RunStatus.SUCCEEDED
        assert done.result == {"status": "shipped", "tracking": "trk_test"}


def test_order_saga_rolls_back_when_the_card_keeps_failing(tmp_path: Path) -> None:
    module = example("order_saga")
    with Environment(module.app, directory=tmp_path) as env:
        env.fail_step("charge-card", times=4, error=lambda: TimeoutError("card network"))
        order = {"order_id": "o_t2", "items": ["mug"], "amount": 1200, "country": "NL"}
        run = env.start(module.PLACE_ORDER, order)

        done = env.run_until_done(run.id)

        assert done.status is RunStatus.FAILED and "card network" in (done.last_error or "")
        names = [e.step_name for e in env.journal(run.id)]
        assert "rollback/release-stock" in names and "rollback/refund-card" not in names
        assert "o_t2" not in module.inventory.reserved


def test_partner_poller_polls_hourly_through_its_chain_of_runs(tmp_path: Path) -> None:
    """Five hourly polls, two per run: three runs chained by continue-as-new, four real
    hours of durable sleeps skipped."""
    module = example("partner_poller")
    module.inbox.clear()
    with Environment(module.app, directory=tmp_path) as env:
        began = env.now()
        first = env.start(module.POLL, {"partner": "acme", "cursor": 0, "polls_per_run": 2})

        last = env.run_until_done(first.id)

        assert last.status is RunStatus.SUCCEEDED
        assert last.result == {"partner": "acme", "cursor": 10}
        chain = [env.client.get(first.id)]
        while chain[-1].continued_as is not None:
            chain.append(env.client.get(chain[-1].continued_as))
        assert [run.payload["cursor"] for run in chain] == [0, 4, 8]
        assert chain[-1].id == last.id
        assert module.inbox == [f"acme:{n}" for n in range(1, 11)]
        assert (env.now() - began).total_seconds() >= 4 * 3600


def test_batch_processor_keeps_its_journal_small(tmp_path: Path) -> None:
    module = example("batch_processor")
    module.catalog.indexed.clear()
    with Environment(module.app, directory=tmp_path) as env:
        run = env.start(module.PROCESS, {"page_size": 25})

        done = env.run_until_done(run.id)

        assert done.status is RunStatus.SUCCEEDED and done.result == {"processed": 1000}
        assert module.catalog.indexed == module.catalog.items
        # 41 iterations of two steps, trimmed to the last 10 or so (and the loop's state)
        assert len(env.journal(run.id)) <= 2 * 12 + 2


def test_token_stream_writes_every_token_then_closes(tmp_path: Path) -> None:
    module = example("token_stream")
    with Environment(module.app, directory=tmp_path) as env:
        run = env.start(module.ANSWER, {"question": "Why?"})

        done = env.run_until_done(run.id)

        assert done.status is RunStatus.SUCCEEDED
        tokens = env.stream(run.id, "tokens")
        assert "".join(tokens).strip() == done.result["answer"]
        assert done.result["answer"].startswith("You asked: Why?")
        assert env.stream(run.id, "status") == ["thinking", "done"]
