"""Properties of what a worker does with generated input, on both stores, one in-process
worker per test (tests/property_strategies.py): a run stored with any payload and start
options is claimed and its handler sees the payload as stored; a durable call given any
arguments either fails its run at once with a typed error, or is journaled under the name
given and does what it says (a step's value, a sleep until the time asked, a wait woken
by its signal). A worker never crashes on any of them."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import property_strategies as gen
import pytest
from conftest import Store, poller_thread
from hypothesis import event, example, given
from hypothesis import strategies as st
from test_properties_start import same_json

from simpleworkflow import App, Client, Context, RunStatus, durations, errors, names
from simpleworkflow.models import Run
from simpleworkflow.retry import RetryPolicy
from simpleworkflow.worker import IntentPoller

ECHO = "prop.worker.echo.v1"
DURABLE = "prop.worker.durable.v1"
#: How long a run may take to be claimed and finish (or suspend) on a loaded machine.
PATIENCE = 10.0

_tokens = itertools.count()


class Witness:
    """What the handlers saw, by run id, and the durable calls they are to make, by token:
    kept outside the engine, so that what a handler got is checked against what it got."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.payloads: dict[str, Any] = {}
        self.calls: dict[str, dict[str, Any]] = {}
        self.failures: dict[str, int] = {}

    def call(self, **call: Any) -> dict[str, Any]:
        token = f"t{next(_tokens)}"
        with self.lock:
            self.calls[token] = call
        return {"token": token}

    def fail_once(self, token: str, value: Any) -> Any:
        """A step body that fails its first attempt and returns ``value`` after."""
        with self.lock:
            self.failures[token] = self.failures.get(token, 0) + 1
            first = self.failures[token] == 1
        if first:
            raise RuntimeError("the first attempt fails")
        return value


@pytest.fixture
def witness() -> Witness:
    return Witness()


@pytest.fixture
def worker(store: Store, witness: Witness) -> Iterator[IntentPoller]:
    """A worker for the ``prop.worker.`` types: an echo of the payload, and a workflow that
    makes the durable call its payload's token names."""
    app = App(store.url, schema=store.schema)

    @app.workflow(ECHO)
    def echo(payload: Any, ctx: Context) -> Any:
        with witness.lock:
            witness.payloads[ctx.run_id] = payload
        return payload

    @app.workflow(DURABLE)
    def durable(payload: Any, ctx: Context) -> Any:
        token = payload["token"]
        call = witness.calls[token]
        if call["kind"] == "step":
            fn = (lambda: witness.fail_once(token, call["value"])) if call["fail"] else None
            return ctx.step(call["name"], fn or (lambda: call["value"]), retry=call["policy"])
        if call["kind"] == "sleep":
            ctx.sleep(call["name"], call["duration"])
            return "slept"
        return {
            "signal": ctx.wait_for_event(
                call["name"], event=call["event"], match=call["match"], timeout=call["timeout"]
            )
        }

    with poller_thread(app, type_prefixes=["prop.worker.%"], poll_interval=0.05) as poller:
        yield poller


def settled(client: Client, run_id: str, ready: Any = None) -> Run:
    """The run once it finished, or waits for more than a moment (a long sleep, a signal,
    a retry later on); fails the test if a worker never got to it."""
    deadline = time.monotonic() + PATIENCE
    while True:
        run = client.get(run_id)
        waits_long = run.status is RunStatus.PENDING and run.run_at > datetime.now(UTC) + (
            timedelta(seconds=1)
        )
        waits_signal = run.status is RunStatus.PENDING and "waiting-signal" in run.waiting_states
        if ready(run) if ready else run.is_terminal or waits_long or waits_signal:
            return run
        assert time.monotonic() < deadline, (
            f"run {run_id} not settled after {PATIENCE}s: {run.status} {run.waiting_for} "
            f"attempt {run.attempt}, last error {run.last_error}"
        )
        time.sleep(0.05)


# -- the payload a handler sees ------------------------------------------------------------

due_now_options = st.fixed_dictionaries(
    {},
    optional={
        "priority": st.integers(-(2**31) + 1, 2**31 - 1),
        "max_attempts": st.integers(1, 10_000),
        "deadline": st.one_of(st.sampled_from(["1h", 3600, timedelta(days=3000)])),
        "retention": st.one_of(gen.plausible_durations),
        "concurrency_key": gen.plain_text,
    },
)


@gen.bounded(15)
@given(payload=gen.plausible_payloads, options=due_now_options)
@example(payload={"f": [1e16, 1e300, 5e-324], "n": 10**4000}, options={})
@example(payload=gen.nested(900, "dict"), options={})
def test_a_worker_hands_the_handler_the_payload_as_stored(
    client: Client, worker: IntentPoller, witness: Witness, payload: Any, options: dict[str, Any]
) -> None:
    event(handled_property(client, witness, payload, options))


def handled_property(client: Client, witness: Witness, payload: Any, options: Any) -> str:
    try:
        run = client.start(ECHO, payload, **options)
    except errors.InvalidInput:
        return "refused"
    done = settled(client, run.id)
    assert done.status is RunStatus.SUCCEEDED, done.last_error
    with witness.lock:
        seen = witness.payloads[run.id]
    assert same_json(seen, gen.as_read_back(payload))
    assert same_json(done.result, seen)
    return "handled"


# -- durable calls -------------------------------------------------------------------------


def valid(check: Any, *args: Any, **kwargs: Any) -> bool:
    try:
        check(*args, **kwargs)
    except errors.InvalidInput:
        return False
    return True


def refused_at_once(run: Run) -> bool:
    """Whether the run failed on its first attempt with a typed error of its arguments."""
    return (
        run.status is RunStatus.FAILED
        and run.attempts_made <= 1
        and any(name in (run.last_error or "") for name in ("InvalidArgument", "InvalidPayload"))
    )


def check_refusal(run: Run) -> str:
    assert refused_at_once(run), (
        f"an argument error should fail the run at once; it is {run.status} after "
        f"{run.attempts_made} attempts: {run.last_error}"
    )
    return "refused"


#: Step names, valid three times in four: a durable call with a bad one ends at once, and
#: the calls that go on are the ones with more to check.
names_of_calls = st.integers(0, 3).flatmap(lambda n: gen.plain_text if n else gen.step_names)

quick_policies = st.fixed_dictionaries(
    {"backoff": st.just("fixed"), "base": gen.small_durations, "jitter": st.just(0.0)},
    optional={"max_attempts": st.integers(2, 3)},
)


@gen.bounded(20)
@given(
    name=names_of_calls,
    value=gen.plausible_payloads,
    policy=st.one_of(quick_policies, gen.retry_policies),
    fail=st.booleans(),
)
def test_a_step_is_journaled_under_its_name_or_fails_the_run_at_once(
    client: Client,
    worker: IntentPoller,
    witness: Witness,
    name: Any,
    value: Any,
    policy: dict[str, Any],
    fail: bool,
) -> None:
    event(step_property(client, witness, name, value, policy, fail))


def step_property(
    client: Client, witness: Witness, name: Any, value: Any, policy: dict[str, Any], fail: bool
) -> str:
    try:
        retry = RetryPolicy(**policy)
    except errors.InvalidInput:
        return "policy refused"
    call = witness.call(kind="step", name=name, value=value, policy=retry, fail=fail)
    run = settled(client, client.start(DURABLE, call).id)
    if not valid(names.validate_step_name, name):
        return check_refusal(run)
    steps = client.steps(run.id)
    assert [step.step_name for step in steps] == [name], run.last_error
    if run.status is RunStatus.SUCCEEDED:
        assert same_json(run.result, json.loads(json.dumps(value)))
        return "stepped"
    assert run.status is RunStatus.PENDING, (run.status, run.last_error)
    cap = durations.to_seconds(retry.cap)
    waited = (run.run_at - run.updated_at).total_seconds()
    assert waited <= cap * (1 + retry.jitter) + 1, (waited, retry)
    return "retrying later"


@gen.bounded(15)
@given(name=names_of_calls, duration=st.one_of(gen.small_durations, gen.durations))
def test_a_sleep_is_journaled_until_the_time_asked_or_fails_the_run_at_once(
    client: Client, worker: IntentPoller, witness: Witness, name: Any, duration: Any
) -> None:
    event(sleep_property(client, witness, name, duration))


def sleep_property(client: Client, witness: Witness, name: Any, duration: Any) -> str:
    run = settled(
        client, client.start(DURABLE, witness.call(kind="sleep", name=name, duration=duration)).id
    )
    if not (
        valid(names.validate_step_name, name)
        and valid(durations.to_seconds, duration, what="sleep duration")
    ):
        return check_refusal(run)
    seconds = durations.to_seconds(duration)
    assert [step.step_name for step in client.steps(run.id)] == [name], run.last_error
    if run.status is RunStatus.SUCCEEDED:
        assert run.result == "slept"
        return "slept"
    assert run.status is RunStatus.PENDING and run.waiting_states == ["sleeping"], run
    asked = run.updated_at + timedelta(seconds=seconds)
    assert abs((run.run_at - asked).total_seconds()) < 5, (run.run_at, asked)
    return "sleeping"


matches = st.one_of(
    st.none(),
    st.dictionaries(gen.plain_text, gen.plausible_payloads, max_size=2),
    st.dictionaries(gen.plain_text, gen.plain_text, max_size=2),
    gen.json_values,
)


@gen.bounded(15)
@given(
    name=names_of_calls,
    event_name=st.integers(0, 3).flatmap(
        lambda n: st.from_regex(r"\A[a-z][a-z.:_-]{0,20}\Z") if n else gen.event_names
    ),
    match=matches,
    timeout=st.one_of(st.none(), st.just("1h"), st.just(0.05), gen.durations),
)
def test_a_wait_for_an_event_is_woken_by_its_signal_or_fails_the_run_at_once(
    client: Client,
    worker: IntentPoller,
    witness: Witness,
    name: Any,
    event_name: Any,
    match: Any,
    timeout: Any,
) -> None:
    event(wait_property(client, witness, name, event_name, match, timeout))


def wait_property(
    client: Client, witness: Witness, name: Any, event_name: Any, match: Any, timeout: Any
) -> str:
    call = witness.call(kind="wait", name=name, event=event_name, match=match, timeout=timeout)
    run = settled(client, client.start(DURABLE, call).id)
    arguments_valid = (
        valid(names.validate_step_name, name)
        and valid(names.validate_event, event_name)
        and (match is None or valid(gen.encoded, match))
        and (timeout is None or valid(durations.to_seconds, timeout, what="timeout"))
    )
    if not arguments_valid:
        return check_refusal(run)
    assert [step.step_name for step in client.steps(run.id)] == [name], run.last_error
    if run.status is RunStatus.SUCCEEDED:  # a timeout that ended before anything was sent
        assert run.result == {"signal": None}
        return "timed out"
    assert run.waiting_states == ["waiting-signal"], (run.status, run.waiting_for)
    signal = match if isinstance(match, dict) else {"any": 1}
    if match is not None and not isinstance(match, dict):
        return "waiting for a non-object match"
    client.signal(run.id, event_name, signal)
    done = settled(client, run.id, ready=lambda r: r.is_terminal)
    assert done.status is RunStatus.SUCCEEDED, done.last_error
    assert same_json(done.result["signal"], gen.as_read_back(signal)) or done.result == {
        "signal": None
    }
    return "woken"


#: Durable calls at the edges the generated ones reach only by luck, each tried on every
#: run: argument errors (which must fail the run at once) and durations past any calendar.
EDGE_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("start", {"payload": {}, "options": {"deadline": "999999999d"}}),
    ("start", {"payload": {}, "options": {"deadline": timedelta.max}}),
    ("start", {"payload": {}, "options": {"retention": "999999999d"}}),
    ("start", {"payload": {}, "options": {"run_at": datetime(2, 1, 1, tzinfo=UTC)}}),
    ("start", {"payload": {}, "options": {"run_at": gen.EARLIEST}}),
    ("step", {"name": "a\x00b", "value": 1, "policy": {}, "fail": False}),
    ("step", {"name": "\ud800", "value": 1, "policy": {}, "fail": False}),
    ("step", {"name": "x" * 201, "value": 1, "policy": {}, "fail": False}),
    ("step", {"name": "ok", "value": 1, "policy": {"base": "999999999d"}, "fail": True}),
    ("step", {"name": "ok", "value": 1, "policy": {"cap": 1e300, "base": 1e300}, "fail": True}),
    ("step", {"name": "ok", "value": 1, "policy": {"factor": float("nan")}, "fail": True}),
    ("step", {"name": "ok", "value": 1, "policy": {"factor": float("inf")}, "fail": True}),
    ("step", {"name": "ok", "value": {"f": 1e300}, "policy": {}, "fail": False}),
    ("sleep", {"name": "nap", "duration": "999999999d"}),
    ("sleep", {"name": "nap", "duration": 1e300}),
    ("sleep", {"name": "nap", "duration": timedelta.max}),
    ("sleep", {"name": "nap\x00", "duration": 0}),
    ("sleep", {"name": "nap", "duration": float("nan")}),
    ("wait", {"name": "w", "event_name": "go", "match": None, "timeout": "999999999d"}),
    ("wait", {"name": "w", "event_name": "go", "match": None, "timeout": -1}),
    ("wait", {"name": "w", "event_name": "go\x00", "match": None, "timeout": None}),
    ("wait", {"name": "w", "event_name": "go", "match": {"n": float("nan")}, "timeout": None}),
    ("wait", {"name": "w", "event_name": "go", "match": {"f": 1e300}, "timeout": None}),
]
PROPERTIES = {
    "start": handled_property,
    "step": step_property,
    "sleep": sleep_property,
    "wait": wait_property,
}


def test_durable_calls_at_the_edges_are_journaled_or_fail_the_run_at_once(
    client: Client, worker: IntentPoller, witness: Witness
) -> None:
    """Every edge is tried, and every one that breaks its property is named."""
    broken = []
    for number, (kind, arguments) in enumerate(EDGE_CALLS):
        try:
            PROPERTIES[kind](client, witness, **arguments)  # type: ignore[operator]
        except Exception as exc:
            text = f"#{number} {kind} {str(arguments)[:70]}: {type(exc).__name__}: {exc}"
            broken.append(" ".join(text.split())[:400])
            if "not settled" in str(exc):  # the worker claims nothing more: stop here
                broken.append(f"the worker ran nothing after #{number}; later edges not tried")
                break
    assert not broken, "\n".join(broken)
