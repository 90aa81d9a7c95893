"""A worker's settings: one options object, checked in one place, given either way."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from simpleworkflow import App, IntentPoller, cli, errors
from simpleworkflow.cli import worker as worker_command
from simpleworkflow.worker import Loop, WorkerOptions, WorkerSettings, options

URL = "sqlite:///:memory:"


def test_every_option_is_a_keyword_of_the_poller_and_back() -> None:
    fields = {f.name for f in dataclasses.fields(WorkerOptions)}
    assert set(typing.get_type_hints(WorkerSettings)) == fields


def test_the_seeds_keywords_build_the_options() -> None:
    poller = IntentPoller(
        type_prefixes=["billing.%"], lease_duration="2m", worker_id="w1", database_url=URL
    )
    assert poller.options == WorkerOptions(
        type_prefixes=("billing.%",), lease_duration=120.0, worker_id="w1", database_url=URL
    )
    assert (poller.type_prefixes, poller.lease_duration, poller.worker_id) == (
        ["billing.%"],
        120.0,
        "w1",
    )


def test_options_given_whole_and_keywords_over_them() -> None:
    options = WorkerOptions(concurrency=3, shutdown_grace="5s", worker_id="w1")
    poller = IntentPoller(App(URL), options=options, worker_id="w2")
    assert (poller.concurrency, poller.shutdown_grace, poller.worker_id) == (3, 5.0, "w2")
    assert options.worker_id == "w1"  # frozen: the poller made a copy


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"lease_duration": 0.5}, "lease_duration must be at least one second"),
        ({"concurrency": 0}, "concurrency must be a positive integer"),
        ({"concurrency": True}, "concurrency must be a positive integer"),
        ({"claim_batch": 0}, "claim_batch must be a positive integer, not 0"),
        ({"claim_batch": "100"}, "claim_batch must be a positive integer, not '100'"),
        ({"poll_interval": "soon"}, "cannot read poll_interval 'soon'"),
        ({"lease_duration": "999999999d"}, "lease_duration must be at most 100 years"),
        ({"shutdown_grace": 1e300}, "shutdown_grace must be at most 100 years"),
        ({"type_prefixes": ["Billing"]}, "invalid type prefix 'Billing'"),
        ({"services": [object()]}, "a service needs a name and an async run"),
        ({"synchronous_claims": "yes"}, "synchronous_claims must be True or False"),
    ],
)
def test_bad_settings_are_refused_by_the_options_themselves(
    settings: dict[str, typing.Any], message: str
) -> None:
    with pytest.raises(errors.InvalidArgument, match=message):
        WorkerOptions(**settings)
    with pytest.raises(errors.InvalidArgument, match=message):
        IntentPoller(App(URL), **settings)


def test_the_worker_command_keeps_the_services_of_a_poller_it_is_given() -> None:
    async def idle() -> None:
        pass

    service = Loop("sweeper", idle)
    app = App(URL)
    app.register("billing.invoice.v1", lambda payload: None)
    target = IntentPoller(app, services=[service], concurrency=3)
    args = cli.build_parser().parse_args(["worker", "module:poller", "--grace", "5s"])
    poller = worker_command.build_poller(target, args)
    assert poller.options.services == (service,)
    assert (poller.concurrency, poller.shutdown_grace) == (3, 5.0)


@pytest.mark.parametrize(
    ("given", "env", "expected"),
    [
        (None, None, False),  # claims and heartbeats do not wait for the disk by default
        (None, "on", True),
        (None, " TRUE ", True),
        (None, "off", False),
        (False, "on", False),  # the option over the environment
        (True, "off", True),
    ],
)
def test_synchronous_claims_come_from_the_option_else_the_environment(
    monkeypatch: pytest.MonkeyPatch, given: bool | None, env: str | None, expected: bool
) -> None:
    if env is None:
        monkeypatch.delenv(options.SYNCHRONOUS_CLAIMS_ENV, raising=False)
    else:
        monkeypatch.setenv(options.SYNCHRONOUS_CLAIMS_ENV, env)
    assert WorkerOptions(synchronous_claims=given).synchronous_claims is expected


def test_a_synchronous_claims_environment_that_is_not_on_or_off_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(options.SYNCHRONOUS_CLAIMS_ENV, "sometimes")
    with pytest.raises(errors.ConfigurationError, match="SYNCHRONOUS_CLAIMS must be on or off"):
        WorkerOptions()
