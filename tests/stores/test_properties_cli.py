"""Properties of the ``simpleworkflow`` command, driven in-process on both stores over
generated arguments (tests/property_strategies.py): every command either exits 0 having
done what it says (a run started reads back with the payload given), or exits non-zero
with a message and nothing stored; never a traceback, and never output a UTF-8 terminal
could not print."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import property_strategies as gen
import pytest
from conftest import Store
from hypothesis import event, given
from hypothesis import strategies as st
from test_properties_start import same_json

from simpleworkflow import Client, cli

TYPE = "prop.cli.v1"


class Outcome:
    """What one command returned and printed."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


def run_cli(store: Store, capsys: pytest.CaptureFixture[str], argv: list[str]) -> Outcome:
    """``simpleworkflow ARGV`` on the store; an exception that escapes ``main`` (a
    traceback in a shell) fails the test, as does output that is not UTF-8."""
    capsys.readouterr()
    try:
        code = cli.main(["-d", store.url, "--schema", store.schema, *argv])
    except SystemExit as exc:  # argparse refused the arguments: usage and exit 2
        code = exc.code if isinstance(exc.code, int) else 2
    captured = capsys.readouterr()
    for stream in (captured.out, captured.err):
        stream.encode("utf-8")  # a terminal's stdout would raise UnicodeEncodeError
    return Outcome(code, captured.out, captured.err)


def refused(outcome: Outcome) -> bool:
    """Whether the command failed as a command should: non-zero, one message, no traceback."""
    if outcome.code == 0:
        return False
    assert outcome.code == 2, (outcome.code, outcome.err)
    assert "Traceback" not in outcome.err
    assert "error:" in outcome.err, outcome.err
    return True


@pytest.fixture
def client(store: Store) -> Iterator[Client]:
    with store.client() as client:
        yield client


def flag(name: str, values: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    """``[name, value]``, or nothing."""
    return st.one_of(st.just([]), values.map(lambda value: [name, value]))


def payload_texts() -> st.SearchStrategy[str]:
    def written(value: Any) -> str:
        try:
            return json.dumps(value, allow_nan=True, ensure_ascii=False)
        except (ValueError, RecursionError):
            return "{}"

    return st.one_of(gen.json_values.map(written), gen.odd_text)


integer_texts = st.one_of(st.integers().map(str), gen.odd_text, st.sampled_from(["1e3", "0x10"]))


def written(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


start_arguments = st.tuples(
    gen.mostly(st.just(TYPE), gen.type_names),
    flag("--payload", gen.mostly(gen.plausible_payloads.map(written), payload_texts())),
    flag("--idempotency-key", gen.mostly(gen.plain_text, gen.odd_text)),
    flag("--priority", gen.mostly(st.integers(-(2**31) + 1, 2**31 - 1).map(str), integer_texts)),
    flag("--delay", gen.mostly(st.sampled_from(["0", "30s", "1.5"]), gen.duration_texts)),
    flag("--max-attempts", gen.mostly(st.integers(1, 10_000).map(str), integer_texts)),
    flag("--deadline", gen.mostly(st.just("1h"), st.one_of(gen.duration_texts, gen.time_texts))),
    flag("--retention", gen.mostly(st.just("30d"), gen.duration_texts)),
    flag("--concurrency-key", gen.mostly(gen.plain_text, gen.odd_text)),
    gen.mostly(
        st.just([]),
        st.tuples(
            gen.mostly(gen.plain_text, gen.odd_text),
            gen.mostly(st.just("30s"), gen.duration_texts),
            flag("--debounce-max-wait", gen.duration_texts),
        ).map(lambda kw: ["--debounce", kw[0], kw[1], *kw[2]]),
    ),
    gen.mostly(st.just([]), flag("--debounce-max-wait", gen.duration_texts)),  # alone: refused
).map(lambda parts: ["start", parts[0], *(arg for part in parts[1:] for arg in part), "--json"])


@gen.bounded(30)
@given(argv=start_arguments)
def test_start_exits_with_a_message_or_stores_the_payload_given(
    store: Store, client: Client, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    before = store.count()
    outcome = run_cli(store, capsys, argv)
    if refused(outcome):
        assert store.count() == before
        event("refused")
        return
    event("started")
    started = json.loads(outcome.out)
    given_payload = argv[argv.index("--payload") + 1] if "--payload" in argv else "{}"
    stored = client.get(started["id"])
    assert same_json(stored.payload, started["payload"])
    if started["created"] or "--debounce" in argv:
        assert same_json(stored.payload, gen.as_read_back(json.loads(given_payload)))
    shown = run_cli(store, capsys, ["runs", "show", started["id"], "--json"])
    assert shown.code == 0
    assert same_json(json.loads(shown.out)["run"]["payload"], stored.payload)


list_arguments = st.tuples(
    st.lists(
        gen.mostly(st.sampled_from(["pending", "sleeping"]), gen.odd_text).map(
            lambda s: ["--status", s]
        ),
        max_size=2,
    ).map(lambda flags: [arg for pair in flags for arg in pair]),
    flag("--type", gen.mostly(st.just("prop.%"), gen.odd_text)),
    flag("--limit", gen.mostly(st.integers(1, 1000).map(str), integer_texts)),
    flag("--payload-contains", gen.mostly(st.just('{"n": 1}'), payload_texts())),
    flag("--created-since", gen.mostly(st.just("2020-01-01T00:00:00Z"), gen.time_texts)),
    flag("--created-until", gen.mostly(st.just("2200-01-01T00:00:00+14:00"), gen.time_texts)),
    flag("--cursor", gen.odd_text),
    st.sampled_from([[], ["--all"]]),
).map(lambda parts: ["runs", "list", *(arg for part in parts for arg in part), "--json"])


@gen.bounded(25)
@given(argv=list_arguments)
def test_runs_list_prints_a_page_or_a_message(
    store: Store, client: Client, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    if store.count() == 0:
        client.start(TYPE, {"n": 1})
    outcome = run_cli(store, capsys, argv)
    if refused(outcome):
        event("refused")
        return
    event("page")
    assert isinstance(json.loads(outcome.out)["runs"], list)


@gen.bounded(20)
@given(
    run_id=gen.mostly(st.none(), gen.odd_text),
    event_name=gen.mostly(st.from_regex(r"\A[a-z][a-z.:_-]{0,20}\Z"), gen.odd_text),
    payload=gen.mostly(st.none(), payload_texts()),
)
def test_runs_signal_stores_the_signal_or_exits_with_a_message(
    store: Store,
    client: Client,
    capsys: pytest.CaptureFixture[str],
    run_id: str | None,
    event_name: str,
    payload: str | None,
) -> None:
    target = client.start(TYPE, {}).id if run_id is None else run_id
    before = store.count("workflow_signal")
    argv = ["runs", "signal", target, event_name, "--json"]
    outcome = run_cli(store, capsys, argv if payload is None else [*argv, "--payload", payload])
    if refused(outcome):
        assert store.count("workflow_signal") == before
        event("refused")
        return
    event("stored")
    signals = client.signals(target)
    assert [s.event for s in signals] == [event_name]
    sent = {} if payload is None else gen.as_read_back(json.loads(payload))  # null: {}
    assert same_json(signals[0].payload, sent)


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


#: Arguments at the edges, each tried on every run.
EDGE_ARGUMENTS: list[list[str]] = [
    ["start", TYPE, "--run-at", "x"],
    ["start", TYPE, "--deadline", "0001-01-01T00:00:00+14:00"],
    ["start", TYPE, "--deadline", "999999999d"],
    ["start", TYPE, "--delay", "99999999999999w"],
    ["start", TYPE, "--payload", "[" * 100_000 + "]" * 100_000],
    ["start", TYPE, "--payload", "9" * 5000],
    ["start", TYPE, "--payload", '"\\ud800"'],
    ["start", TYPE, "--idempotency-key", "\udcff"],
    ["start", TYPE, "--debounce", "k", "999999999d"],
    ["runs", "list", "--cursor", b64("[" * 5000)],
    ["runs", "list", "--cursor", b64("[" * 20000 + "]" * 20000)],
    ["runs", "list", "--cursor", b64('[["2030-01-01"], "x"]')],
    ["runs", "list", "--created-since", "0001-01-01T00:00:00+14:00"],
    ["runs", "list", "--payload-contains", json.dumps(list(range(3000)))],
    ["runs", "list", "--type", "\udcff"],
    ["runs", "show", "\udcff"],
]


def test_arguments_at_the_edges_exit_with_a_message_or_do_their_work(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = []
    for argv in EDGE_ARGUMENTS:
        before = store.count()
        try:
            outcome = run_cli(store, capsys, [*argv, "--json"])
            if refused(outcome):
                assert store.count() == before, "refused, but a run was stored"
        except Exception as exc:  # a traceback in a shell
            broken.append(f"{str(argv)[:80]}: {type(exc).__name__}: {str(exc)[:200]}")
    assert not broken, "\n".join(broken)
